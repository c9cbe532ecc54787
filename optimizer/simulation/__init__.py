"""Stage 7, simulation: a plan replayed request by request against its targets.

In: a plan (its JSON document) and requests: a trace, or synthetic arrivals (:mod:`..traffic`).
Out: per product the simulated latencies and whether the targets hold (:mod:`.simulate_plan`, the
discrete-event engine in :mod:`.simulate`), and the replay-before-return check (:mod:`.verify`).
Reads plans, never makes them: imports :mod:`..explanation` and the stages before it.
"""

"""Stage 5, explanation: a solved plan read, checked and explained; separate from the solver.

In: solved plans (:mod:`..mip`, :mod:`..decomposition`) and their problem.
Out: reasons per product (:mod:`.explain`), runner-up plans (:mod:`.runner_ups`), the value of binding
limits (:mod:`.binding`), the budget check (:mod:`.budget`), first-come baselines (:mod:`.baselines`),
percentile TTFT (:mod:`.tail`), invariants recomputed from the plan (:mod:`.invariants`), the plan's
JSON (:mod:`.results`, :mod:`.mix_results`) and that JSON read back (:mod:`.plan_file`).
Never plans: :func:`fleetplan.optimizer.plan.make_plan` calls it, not the reverse.
"""

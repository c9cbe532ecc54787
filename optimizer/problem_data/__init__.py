"""Stage 2, the problem as data: what could serve the traffic, and at what price.

In: a scenario (:mod:`..traffic`), the catalog and the performance models (:mod:`fleetplan.models`).
Out: a :class:`~fleetplan.optimizer.problem_data.problem.Problem`: per product the feasible candidate
configurations (GPU x layout x precision x batch), request-mix buckets, hourly demand, hosted-API
prices, pricing tiers and horizon, with dominated candidates removed by exact reductions.
Builds no solver model: imports :mod:`..traffic`, :mod:`..runtime` and :mod:`..common` only.
"""

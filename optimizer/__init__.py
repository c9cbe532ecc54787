"""Optimisation: scenario -> problem -> Pyomo MIP -> HiGHS / OR-Tools -> explained plan.

One package per stage, in pipeline order; a module imports only from its own stage or an earlier one:

- :mod:`fleetplan.optimizer.common` and :mod:`fleetplan.optimizer.runtime`: vocabulary and run machinery;
- :mod:`fleetplan.optimizer.traffic`: the scenario, traces and demand;
- :mod:`fleetplan.optimizer.problem_data`: candidate configurations and the problem as plain data;
- :mod:`fleetplan.optimizer.mip`: the MIP, one ``define_*`` function per business rule, and its solvers;
- :mod:`fleetplan.optimizer.decomposition`: problems split into pieces the MIP proves optimal;
- :mod:`fleetplan.optimizer.explanation`: a solved plan read, checked, explained and written as JSON;
- :mod:`fleetplan.optimizer.plan`: :func:`~fleetplan.optimizer.plan.make_plan`, the stages above in order;
- :mod:`fleetplan.optimizer.decisions`: many plans compared (build vs buy, sensitivities, sweeps);
- :mod:`fleetplan.optimizer.simulation`: a plan replayed request by request against its targets.

The packages and what flows between them: docs/architecture.md.
"""

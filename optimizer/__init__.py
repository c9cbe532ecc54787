"""Optimisation: candidates -> Pyomo MIP -> HiGHS / OR-Tools -> explained plan.

- :mod:`fleetplan.optimizer.traffic.scenario`: the scenario file schema;
- :mod:`fleetplan.optimizer.problem_data.candidates`: feasible replica configurations, dominated ones pruned;
- :mod:`fleetplan.optimizer.mip.formulation`: the MIP, one ``define_*`` function per business rule;
- :mod:`fleetplan.optimizer.mip.linear`: export to a solver-neutral linear problem;
- :mod:`fleetplan.optimizer.mip.solvers`: HiGHS and OR-Tools behind one call;
- :mod:`fleetplan.optimizer.plan`: the pipeline; :mod:`fleetplan.optimizer.explanation.results`: reading a plan.

Each module owns one stage of the pipeline (see the README's Layout); none reaches into another's job.
"""

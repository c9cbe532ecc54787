"""Stage 3, the MIP: one formulation, two solvers, a typed solution.

In: a :class:`~fleetplan.optimizer.problem_data.problem.Problem` (or one coupled group of it).
Out: a Pyomo model with one ``define_*`` function per business rule (:mod:`.formulation`), its
solver-neutral linear export (:mod:`.linear`), the HiGHS / OR-Tools solve (:mod:`.solvers`) and the
solved plan as :class:`~fleetplan.optimizer.mip.solution.Plan` (:mod:`.solution`).
Decides nothing about how the problem is split: imports :mod:`..problem_data` and the stages before it.
"""

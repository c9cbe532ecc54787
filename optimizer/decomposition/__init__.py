"""Stage 4, decomposition: a problem split into pieces the MIP proves optimal, and put back together.

In: a :class:`~fleetplan.optimizer.problem_data.problem.Problem`.
Out: solved plans per coupled group (:mod:`.components`), per product by configuration
(:mod:`.search`, with solver-free :mod:`.bounds` and :mod:`.product_optimum`), per hour for request
mixes (:mod:`.mix_hours`), and for groups too large for one MIP (:mod:`.portfolio`).
Explains nothing: imports :mod:`..mip` and the stages before it.
"""

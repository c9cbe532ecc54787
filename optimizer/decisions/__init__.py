"""Stage 6, decisions: many plans compared to answer a question about one.

In: a scenario and :func:`fleetplan.optimizer.plan.make_plan`.
Out: build vs buy as volume scales (:mod:`.breakeven`), cost sensitivities (:mod:`.sensitivity`),
what-if grids and Monte-Carlo sweeps (:mod:`.sweep`, edits by :mod:`.whatif`) and binding-limit
re-plans started ahead of time (:mod:`.ahead`).
The only package of :mod:`fleetplan.optimizer` that calls :mod:`fleetplan.optimizer.plan`.
"""

"""Binding-limit re-plans started before the plan is known, in a worker process.

The value of a binding limit is the cost of a re-plan with that limit raised by one step
(:mod:`.binding`). That re-plan does not need the plan itself, only the scenario, so it can run
in a worker while the plan is solved here: every limit of the scenario is raised and planned,
the smallest limits first (the likeliest to bind). Once the plan says which limits bind, their
costs are taken from the worker and the other re-plans are dropped, unstarted or stopped.

Each value is what :func:`~fleetplan.optimizer.plan.relaxed_cost` gives for the relaxed
scenario, wherever it ran (the worker, or here for a limit the worker was not given), so the
values do not depend on the scheduling. Owns which re-plans go to the worker; it plans nothing
itself."""

from __future__ import annotations

from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from fleetplan.catalogs.loader import Catalog
from fleetplan.models.presets import Preset
from fleetplan.optimizer.binding import every_relaxation
from fleetplan.optimizer.deadline import Deadline
from fleetplan.optimizer.plan import relaxed_cost
from fleetplan.optimizer.scenario import Scenario
from fleetplan.optimizer.solvers import Solver


def _key(scenario: Scenario) -> str:
    """What tells the relaxed variants of one scenario apart: their limits."""
    return scenario.limits.model_dump_json()


class LimitsAhead:
    """The re-plans of every relaxed limit of ``scenario``, submitted to ``pool`` at once, each
    within ``seconds``; :meth:`resolve` is the re-plan
    :func:`~fleetplan.optimizer.binding.binding_limits` values each binding limit with."""

    def __init__(self, pool: ProcessPoolExecutor, scenario: Scenario, catalog: Catalog, solver: Solver,
                 preset: Preset, folder: Path | None, seconds: float | None) -> None:
        self.args = (catalog, solver, preset, folder)
        relaxations = sorted(every_relaxation(scenario), key=lambda r: r.relaxed_to - r.step_gpus)
        self.futures: dict[str, Future[tuple[float, bool] | None]] = {
            _key(r.scenario): pool.submit(relaxed_cost, r.scenario, *self.args, seconds) for r in relaxations}

    def resolve(self, variant: Scenario, within: Deadline) -> tuple[float, bool] | None:
        """The cost of ``variant`` (a relaxed limit): from the worker when it was given it, waiting
        at most until ``within``, else planned here; None without a plan by then."""
        future = self.futures.get(_key(variant))
        if future is None:
            return relaxed_cost(variant, *self.args, within.left())
        try:
            return future.result(timeout=within.left())
        except FutureTimeout:
            return None

"""Binding-limit re-plans started before the plan is known, in a worker process.

The value of a binding limit is the cost of a re-plan with that limit raised by one step
(:mod:`fleetplan.optimizer.explanation.binding`). That re-plan does not need the plan itself, only the scenario, so it can run
in a worker while the plan is solved here: the smallest limit (the likeliest to bind) is raised
and planned at once. Once the plan says which limits bind, the others that bind follow it in
the worker, or, when the guess binds nothing, the worker is stopped.

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
from fleetplan.optimizer.explanation.binding import Relaxation, every_relaxation
from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.plan import relaxed_cost
from fleetplan.optimizer.traffic.scenario import Scenario
from fleetplan.optimizer.mip.solvers import Solver
from fleetplan.optimizer.runtime.workers import stop


def _key(scenario: Scenario) -> str:
    """What tells the relaxed variants of one scenario apart: their limits."""
    return scenario.limits.model_dump_json()


class LimitsAhead:
    """The re-plan of the smallest limit of ``scenario`` raised, submitted to ``pool`` (one
    worker) at once, before the plan is known; once it is, :meth:`keep` submits the other limits
    the plan binds. Each re-plan runs within ``seconds``; :meth:`resolve` is the re-plan
    :func:`~fleetplan.optimizer.explanation.binding.binding_limits` values each binding limit with."""

    def __init__(self, pool: ProcessPoolExecutor, scenario: Scenario, catalog: Catalog, solver: Solver,
                 preset: Preset, folder: Path | None, seconds: float | None) -> None:
        self.pool, self.seconds = pool, seconds
        self.args = (catalog, solver, preset, folder)
        self.futures: dict[str, Future[tuple[float, bool] | None]] = {}
        relaxations = sorted(every_relaxation(scenario), key=lambda r: r.relaxed_to - r.step_gpus)
        if relaxations:
            self._submit(relaxations[0])

    def _submit(self, r: Relaxation) -> None:
        """Plan ``r``'s relaxed scenario in the worker."""
        self.futures[_key(r.scenario)] = self.pool.submit(relaxed_cost, r.scenario, *self.args, self.seconds)

    def keep(self, wanted: list[Relaxation]) -> None:
        """The plan binds ``wanted``: their re-plans go to the worker, after the one it has. When
        that one is of a limit the plan does not bind, the worker is stopped instead and every
        wanted limit is planned here (see :meth:`resolve`)."""
        keys = {_key(r.scenario) for r in wanted}
        if any(k not in keys and not f.done() for k, f in self.futures.items()):
            stop(self.pool)
            self.futures = {}
            return
        for r in wanted:
            if _key(r.scenario) not in self.futures:
                self._submit(r)

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

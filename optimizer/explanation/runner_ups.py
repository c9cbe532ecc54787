"""What the plan is compared with, per product: the cheapest plan on each other GPU type and the
cost of each prefill mode, each a search restricted to those configurations (in turn, or at once
in worker processes); for a request mix also the best single-configuration plan (every bucket on
one configuration), whose cost less the mix's is the mix's saving.

Owns these comparisons; it never changes the chosen plan."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from fleetplan.optimizer.problem_data.candidates import Candidate
from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.common.defaults import EXPLANATION_GAP, RUNNER_UP_SEARCH_SIZE, RUNNER_UP_SHARE, RUNNER_UP_TYPES
from fleetplan.optimizer.common.enums import Alternatives, LeftOut, PrefillMode
from fleetplan.optimizer.common.errors import SolverError
from fleetplan.optimizer.mip.linear import LinearProblem
from fleetplan.optimizer.problem_data.problem import FleetProblem
from fleetplan.optimizer.decomposition.search import solve_by_configuration
from fleetplan.optimizer.mip.solution import ProductPlan, extract
from fleetplan.optimizer.mip.solvers import Solver
from fleetplan.optimizer.runtime.workers import fork_available, jobs, map_in_copies, shared
from fleetplan.optimizer.decomposition.mix_hours import HOUR_RUNS_FROM, gpu_type_bounds


def runs_only(pp: ProductPlan, keep: Callable[[Candidate], bool]) -> bool:
    """Whether every decode configuration the plan ``pp`` runs satisfies ``keep``: then the plan is
    a plan of the search restricted to those configurations, and when it is proven optimal it is
    that search's optimum too (a restriction never costs less)."""
    running = [f.part for f in pp.fleets if isinstance(f.part, Candidate) and f.peak]
    return bool(running) and all(keep(c) for c in running)


Comparison = tuple[str, str]  # ("gpu", a GPU type) or ("mode", a prefill mode): a search restricted to it


@dataclass(frozen=True)
class Compared:
    """What the comparisons of one product search over: its problem, its plan (costing ``base``,
    ``proven`` optimal or not), the solver and the exported model of the plan's search."""

    prob: FleetProblem
    pp: ProductPlan
    base: float
    solver: Solver
    base_lp: LinearProblem | None = None
    proven: bool = False

    def gpus(self) -> list[Comparison]:
        """The runner-up searches: the product's decode on each other GPU type (for a request mix,
        on each GPU type, its own included)."""
        if self.pp.candidate is None:
            return []
        # a mix may run several GPU types: its runner-ups are the mix kept to each type in turn
        own = set() if self.pp.mix is not None else {self.pp.candidate.gpu}
        return [("gpu", g) for g in sorted({c.gpu for c in self.prob.products[self.pp.product.name].candidates} - own)]

    def modes(self) -> list[Comparison]:
        """The prefill-mode searches: each mode the product may use, none when only one is possible."""
        modes = sorted({c.mode for c in self.prob.products[self.pp.product.name].candidates})
        return [("mode", m) for m in modes] if len(modes) > 1 else []

    def bounds(self, tasks: list[Comparison]) -> dict[str, float]:
        """A lower bound on each GPU type's runner-up of a request mix over a long horizon
        (:func:`~fleetplan.optimizer.decomposition.mix_hours.gpu_type_bounds`, at least :data:`~fleetplan.optimizer.decomposition.mix_hours.HOUR_RUNS_FROM` hours);
        empty where there is none (then every type is searched)."""
        if self.pp.mix is None or self.prob.hours < HOUR_RUNS_FROM or not tasks:
            return {}
        pd = self.prob.products[self.pp.product.name]
        return gpu_type_bounds(self.prob, pd, [g for _, g in tasks], self.solver) or {}

    def large(self) -> bool:
        """Whether the product's search is large: its distinct hours times its configurations
        (decode and pool) at least :data:`~fleetplan.optimizer.common.defaults.RUNNER_UP_SEARCH_SIZE`."""
        pd = self.prob.products[self.pp.product.name]
        return self.prob.hours * (len(pd.candidates) + len(pd.pool)) >= RUNNER_UP_SEARCH_SIZE

    def size(self, task: Comparison) -> int:
        """How large the search ``task`` is: the decode configurations it keeps, and the pool
        configurations when some of them run in pool mode."""
        pd = self.prob.products[self.pp.product.name]
        kept = [c for c in pd.candidates if _keep(task)(c)]
        return len(kept) + (len(pd.pool) if any(c.mode == PrefillMode.POOL for c in kept) else 0)

    def known(self, task: Comparison) -> Any:
        """The outcome of ``task`` without a search, or :data:`UNKNOWN`: with the plan proven
        optimal, a restriction every configuration of the plan satisfies costs what the plan costs
        (for a GPU type, only a mix's own plan is a runner-up)."""
        if not self.proven or not runs_only(self.pp, _keep(task)):
            return UNKNOWN
        if task[0] == "mode":
            return round(self.base, 2)
        return _entry(self.pp, 0.0, True) if self.pp.mix is not None else UNKNOWN

    def search(self, task: Comparison, deadline: Deadline) -> Any:
        """The outcome of ``task``: a runner-up entry (None: no plan on that GPU type) or a mode's
        monthly cost (None: no plan in that mode)."""
        kind, key = task
        name = self.pp.product.name
        try:
            found = solve_by_configuration(self.prob, name, self.solver, keep=_keep(task), deadline=deadline,
                                           mip_rel_gap=EXPLANATION_GAP, base_lp=self.base_lp,
                                           stage=f"runner-up on {key}" if kind == "gpu" else f"cost of prefill mode {key}")
        except SolverError:
            return None
        if found is None:
            return None
        res, fixed, sub = found
        if kind == "mode":
            return round(float(res.objective or 0.0), 2)
        alt = extract(fixed, res, sub, [self.pp.product])[0]
        if alt.candidate is None:
            return None
        c = alt.candidate
        if alt.mix is not None:
            return _entry(alt, float(res.objective or 0.0) - self.base, res.optimal)
        return {
            "gpu": c.gpu, "tp": c.tp, "layout": c.layout.label(), "batch": c.batch, "precision": c.precision, "prefill": c.mode,
            "replicas": alt.replicas, "gpus": alt.gpus, "monthly_cost_usd": round(alt.monthly_cost_usd, 2),
            "cost_difference_usd": round(float(res.objective or 0.0) - self.base, 2),
            "proven_optimal": res.optimal,
        }


UNKNOWN = object()  # a comparison's outcome not known without a search
_STOPPED = {"gpu": "runner-ups on other GPU types", "mode": "cost of each prefill mode"}  # as the deadline notes them


def _keep(task: Comparison) -> Callable[[Candidate], bool]:
    """The decode configurations the search ``task`` is restricted to."""
    kind, key = task
    return (lambda c: c.gpu == key) if kind == "gpu" else (lambda c: c.mode == key)


def _in_turn(cmp: Compared, tasks: list[Comparison], deadline: Deadline) -> dict[Comparison, Any]:
    """Outcomes of ``tasks`` one after another, each with an equal share of the time left; those
    not reached before the deadline are left out, and the deadline notes it."""
    out: dict[Comparison, Any] = {}
    for i, task in enumerate(tasks):
        known = cmp.known(task)
        if known is not UNKNOWN:
            out[task] = known
            continue
        if deadline.expired:
            deadline.note(f"{cmp.pp.product.name}: {_STOPPED[task[0]]}")
            break
        out[task] = cmp.search(task, deadline.share(1.0 / (len(tasks) - i)))
    return out


def _search_in_worker(task: Comparison, at: float | None, seconds: float | None) -> tuple[bool, Any, list[str]]:
    """Worker: (reached, outcome, what the deadline cut short) of ``task`` with ``seconds`` of its
    own, ending by ``at`` at the latest (both None: no limit); not reached when the time was up
    before it started."""
    deadline = Deadline.after(seconds)
    if at is not None and (deadline.at is None or deadline.at > at):
        deadline = Deadline(at=at)
    if deadline.expired:
        return False, None, []
    return True, shared().search(task, deadline), deadline.stopped


def _in_workers(cmp: Compared, tasks: list[Comparison], deadline: Deadline, jobs: int) -> dict[Comparison, Any]:
    """Outcomes of ``tasks`` in ``jobs`` copies of this process, largest first, each search with
    the share of the time left that it would get in turn with ``jobs`` at once (a fixed share: one
    long search cannot hold up the rest); the same outcomes as :func:`_in_turn` when the deadline
    cuts nothing short, and what the deadline cut short in a worker is noted here."""
    out = {t: cmp.known(t) for t in tasks}
    todo = sorted((t for t in tasks if out[t] is UNKNOWN), key=lambda t: (-cmp.size(t), t))  # largest first
    left = deadline.left()
    each = None if left is None else left * min(jobs, len(todo)) / len(todo)
    found = map_in_copies(_search_in_worker, cmp, [(t, deadline.at, each) for t in todo], jobs,
                          lambda done, total: deadline.progress.update("comparisons", done, total))
    for t, (reached, outcome, stopped) in zip(todo, found):
        for what in stopped:
            deadline.note(what)
        if reached:
            out[t] = outcome
        else:
            deadline.note(f"{cmp.pp.product.name}: {_STOPPED[t[0]]}")
    return {t: v for t, v in out.items() if v is not UNKNOWN}


def _kth_cost(found: list[float]) -> float:
    """The :data:`~fleetplan.optimizer.common.defaults.RUNNER_UP_TYPES`-th least of the costs ``found`` (inf with fewer)."""
    return sorted(found)[RUNNER_UP_TYPES - 1] if len(found) >= RUNNER_UP_TYPES else math.inf


def _by_bound(cmp: Compared, tasks: list[Comparison], bounds: dict[str, float], deadline: Deadline, workers: int
              ) -> tuple[dict[Comparison, Any], list[dict[str, Any]]]:
    """The runner-ups ``tasks`` of a mix searched from the least lower bound up, in waves of
    ``workers`` at once, and those left out: a type is searched and listed only when its bound is
    below the :data:`~fleetplan.optimizer.common.defaults.RUNNER_UP_TYPES`-th least cost of the types listed before it (in
    bound order), so no type left out can be among the cheapest that many. The decision is made
    in bound order whatever the wave, so the outcomes do not depend on ``workers``: a type searched
    at once with an earlier one that rules it out is not listed. Returns the outcomes and the
    types left out, each with its bound (``monthly_cost_at_least_usd``)."""
    order = sorted(tasks, key=lambda t: (bounds[t[1]], t))
    out: dict[Comparison, Any] = {}
    costs: list[float] = []
    i = 0
    while i < len(order) and bounds[order[i][1]] < _kth_cost(costs):
        wave = order[i:i + max(1, workers)]
        share = deadline.share(min(1.0, len(wave) / (len(order) - i)))
        found = _in_workers(cmp, wave, share, workers) if len(wave) > 1 else _in_turn(cmp, wave, share)
        for t in wave:
            if bounds[t[1]] >= _kth_cost(costs):
                break
            if t not in found:  # the deadline cut it short (and noted it): the rest are not known
                deadline.note(f"{cmp.pp.product.name}: {_STOPPED['gpu']}")
                return out, []
            out[t] = found[t]
            if found[t] is not None:
                costs.append(float(found[t]["monthly_cost_usd"]))
            i += 1
    left = [_left_out(cmp, t[1], bounds[t[1]], LeftOut.OUTRANKED)
            for t in order[i:] if math.isfinite(bounds[t[1]]) and bounds[t[1]] >= _kth_cost(costs)]
    return out, left


def _left_out(cmp: Compared, gpu: str, bound: float, reason: LeftOut) -> dict[str, Any]:
    """A GPU type of a long mix listed by a lower bound on the mix kept to it: its LP bound, and
    at least the plan's own cost when the plan is proven optimal (a restriction never costs less)."""
    least = max(bound, cmp.base) if cmp.proven else bound
    return {"gpu": gpu, "monthly_cost_at_least_usd": round(least, 2),
            "cost_difference_at_least_usd": round(least - cmp.base, 2), "reason": reason}


def comparisons(cmp: Compared, deadline: Deadline, alternatives: Alternatives = Alternatives.DEFAULT
                ) -> tuple[list[dict[str, Any]], dict[str, float | None], list[dict[str, Any]]]:
    """The product's runner-ups (unless ``alternatives`` is ``none``; cheapest first) and the cost of
    each prefill mode (None where a mode has no plan; for a request mix, the mix kept to that mode,
    only with runner-ups), searched within ``deadline``: in turn, the runner-ups
    with :data:`~fleetplan.optimizer.common.defaults.RUNNER_UP_SHARE` of the time and the modes with the rest, or with
    several worker processes allowed (:func:`~fleetplan.optimizer.runtime.workers.jobs`) all at once in them when
    at least two searches per worker are left to run. The same outcomes either way, unless the
    deadline cuts a search short. A request mix over a long horizon searches its GPU types from
    the least lower bound up and leaves out those that cannot be among the cheapest
    :data:`~fleetplan.optimizer.common.defaults.RUNNER_UP_TYPES` (:func:`_by_bound`), returned third with their bounds;
    when that mix is large (:meth:`Compared.large`), with ``alternatives`` ``default`` it searches
    none of them (each is as long a search as the plan's own) and returns every type with its
    bound, and no mode costs."""
    searching = alternatives != Alternatives.NONE
    gpus = cmp.gpus() if searching else []
    # a request mix may run each bucket in its own mode: its mode costs are the mix kept to one
    # mode, alternatives like its runner-ups (over a long horizon as costly to search)
    modes = cmp.modes() if searching or cmp.pp.mix is None else []
    bounds = cmp.bounds(gpus)
    if bounds and alternatives == Alternatives.DEFAULT and cmp.large():
        listed = [_left_out(cmp, g, b, LeftOut.NOT_SEARCHED) for g, b in bounds.items() if math.isfinite(b)]
        return [], {}, sorted(listed, key=lambda a: (a["monthly_cost_at_least_usd"], a["gpu"]))
    searches = [t for t in gpus + modes if cmp.known(t) is UNKNOWN]
    # workers take whole searches when there are enough to keep them busy; with fewer (a plan's two
    # prefill modes) the searches go in turn and each may use the workers for its hours
    workers = jobs()
    left: list[dict[str, Any]] = []
    if bounds:
        out, left = _by_bound(cmp, gpus, bounds, deadline.share(RUNNER_UP_SHARE),
                              workers if workers > 1 and fork_available() else 1)
        out.update(_in_turn(cmp, modes, deadline))
    elif workers > 1 and len(searches) >= 2 * workers and fork_available():
        out = _in_workers(cmp, gpus + modes, deadline, workers)
    else:
        out = _in_turn(cmp, gpus, deadline.share(RUNNER_UP_SHARE))
        out.update(_in_turn(cmp, modes, deadline))
    alts = [v for t, v in out.items() if t[0] == "gpu" and v is not None]
    alts.sort(key=lambda a: (a["cost_difference_usd"], a["gpu"]))
    return alts, {key: v for (kind, key), v in out.items() if kind == "mode"}, left


def _entry(alt: ProductPlan, difference: float, optimal: bool) -> dict[str, Any]:
    """A runner-up of a request mix: its largest configuration, all its GPUs and configurations."""
    c, mix = alt.candidate, alt.mix
    assert c is not None and mix is not None
    return {
        "gpu": c.gpu, "tp": c.tp, "layout": c.layout.label(), "batch": c.batch, "precision": c.precision,
        "prefill": c.mode, "replicas": alt.replicas, "gpus": sum(f.gpus for f in mix.fleets) + alt.prefill_pool.gpus,
        "configurations": len(mix.fleets), "monthly_cost_usd": round(alt.monthly_cost_usd, 2),
        "cost_difference_usd": round(difference, 2), "proven_optimal": optimal,
    }


def single_configuration(prob: FleetProblem, pp: ProductPlan, base: float, solver: Solver, deadline: Deadline,
                         mip_rel_gap: float) -> dict[str, Any] | None:
    """The cheapest plan of a request mix with every bucket on ONE configuration (one eligible for
    every bucket, with its pool in pool mode), as a runner-up with ``single_configuration`` set;
    None when no configuration serves every bucket or none was found before the deadline. The mix's
    own plan may use that configuration alone, so it never costs more (up to the solver's gap)."""
    name = pp.product.name
    pd = prob.products[name]
    eligible = tuple(c for c in pd.candidates if all(c.key in b.capacity for b in pd.buckets))
    if not eligible:
        return None
    keys = {c.key for c in eligible}
    buckets = tuple(replace(b, capacity={k: u for k, u in b.capacity.items() if k in keys}) for b in pd.buckets)
    single = replace(pd, single=True, candidates=eligible, buckets=buckets)
    sub = prob.derive(products={**prob.products, name: single})
    try:
        found = solve_by_configuration(sub, name, solver, deadline=deadline, mip_rel_gap=mip_rel_gap,
                                       stage="best single-configuration plan")
    except SolverError:
        return None
    if found is None:
        return None
    res, fixed, whole = found
    alt = extract(fixed, res, whole, [pp.product])[0]
    if alt.candidate is None:
        return None
    return {**_entry(alt, float(res.objective or 0.0) - base, res.optimal), "single_configuration": True}

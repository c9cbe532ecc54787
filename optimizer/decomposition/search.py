"""The per-product search: branch on the configuration first (:func:`solve_by_configuration`),
best first by bound, each choice fixed by column bounds of one exported model.

Owns which MIPs are solved for one product and in what order; it does not build the
problem's data (:mod:`fleetplan.optimizer.problem_data.problem`) nor read plans out of solutions (:mod:`fleetplan.optimizer.mip.solution`)."""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from typing import Callable

from fleetplan.optimizer.common.defaults import ABS_GAP_USD, FIRST_ROUND_CHOICES, MIP_MAX_TRIES, MIP_SLICE_NODES
from fleetplan.optimizer.decomposition.bounds import by_quick_bound, on_demand_cost
from fleetplan.optimizer.problem_data.candidates import (
    Candidate,
    PoolCandidate,
)
from fleetplan.optimizer.runtime.deadline import Deadline, no_plan_in_time
from fleetplan.optimizer.common.enums import PrefillMode, Status, Tier
from fleetplan.optimizer.common.errors import SolverError
from fleetplan.optimizer.mip.formulation import build_model
from fleetplan.optimizer.mip.linear import LinearProblem, to_linear_problem
from fleetplan.optimizer.decomposition.mix_hours import cheapest_single_choice, separable, solve_mix_by_hour
from fleetplan.optimizer.problem_data.problem import FleetProblem, ProductData
from fleetplan.optimizer.problem_data.reductions import reduced
from fleetplan.optimizer.mip.solvers import Session, Solver, SolveResult, solve_restricted

Choice = tuple[Candidate | None, PoolCandidate | None]  # a decode configuration and its pool, or none (all-API)
Found = tuple[SolveResult, LinearProblem, FleetProblem]  # a plan, the model it solves and its problem


def owned_columns(lp: LinearProblem) -> dict[str, list[int]]:
    """Columns of ``lp`` per configuration key they belong to (``use``, ``reserved``,
    ``on_demand`` per hour, ``api_for`` per hour, pool columns alike), or per product or GPU type
    for the columns indexed by those; built once per problem."""
    owned = lp.__dict__.get("_owned")
    if owned is None:
        owned = {}
        for j, (_, index) in enumerate(lp.col_keys):
            owned.setdefault(str(index[0]), []).append(j)
        lp.__dict__["_owned"] = owned
    return owned


def fixing(lp: LinearProblem, pd: ProductData, choice: Choice,
           allowed: set[str] | None = None) -> tuple[list[float], list[float]]:
    """Column bounds of ``lp`` that fix product ``pd`` to one decode (and pool) configuration, or to
    none (all-API): every column of another configuration is fixed at zero. With ``allowed``,
    the decode configurations outside it are switched off and the choice among the rest is left
    to the solver; a pool-mode configuration chosen without a pool leaves the pool to the solver."""
    lower, upper = list(lp.col_lower), list(lp.col_upper)
    owned = owned_columns(lp)
    c, k = choice
    pool_free = k is None and c is not None and c.mode == PrefillMode.POOL  # the pool is left to the solver

    def choose(family: str, key: str, chosen: bool) -> None:
        if chosen:
            lower[lp.col_of[family, (key,)]] = 1.0
            return
        for j in owned.get(key, ()):
            lower[j] = upper[j] = 0.0

    for d in pd.candidates:
        if allowed is None:
            choose("use", d.key, c is not None and d.key == c.key)
        elif d.key not in allowed:
            choose("use", d.key, False)
    if allowed is None and not pool_free:
        for q in pd.pool:
            choose("pool_use", q.key, k is not None and q.key == k.key)
    if pd.has_api and (allowed is None or allowed):
        j = lp.col_of["self_host", (pd.name,)]
        lower[j] = upper[j] = 0.0 if (allowed is None and c is None) else 1.0
    return lower, upper


def instances_off(lp: LinearProblem, choice: Choice,
                  bounds: tuple[list[float], list[float]]) -> tuple[list[float], list[float]]:
    """``bounds`` with the whole-instance columns of every GPU type the choice does not run on
    fixed at zero, for a model of one product: such instances would only be idle GPUs."""
    used = {x.gpu for x in choice if x is not None}
    lower, upper = bounds
    for (gpu, _), j in lp.family_columns("instances"):
        if gpu not in used:
            lower[j] = upper[j] = 0.0
    return lower, upper


def _fallback(lp: LinearProblem, prob: FleetProblem, pd: ProductData,
              choice: Choice) -> tuple[SolveResult, list[float], list[float]] | None:
    """The on-demand plan of ``choice`` (the cheapest pool for a pool-mode choice left open), as a
    search result, or None when it is not feasible."""
    c, k = choice
    pairs = [(c, q) for q in pd.pool] if c is not None and c.mode == PrefillMode.POOL and k is None else [choice]
    for pair in sorted(pairs, key=lambda ch: on_demand_cost(prob, pd, ch) if ch[0] is not None else math.inf):
        found = on_demand_plan(lp, prob, pd, pair)
        if found is not None:
            return (found, *fixing(lp, pd, pair))
    return None


def on_demand_plan(lp: LinearProblem, prob: FleetProblem, pd: ProductData,
                    choice: Choice) -> SolveResult | None:
    """A feasible plan for one choice without a solver: in every hour the fewest on-demand replicas
    (and pool replicas) that alone meet demand, nothing sent to the API, whole instances rounded
    up. None when the rows do not hold (no on-demand tier, an API minimum share, a limit)."""
    c, k = choice
    if c is None or Tier.ON_DEMAND not in prob.tiers:
        return None
    x = [lo if lo > 0 else 0.0 for lo in fixing(lp, pd, choice)[0]]
    gpus: dict[tuple[str, int], int] = {}
    for h in range(prob.hours):
        parts = [(Tier.ON_DEMAND, c, pd.replica_bound(c, h))]
        if k is not None:
            parts.append(("pool_on_demand", k, pd.pool_bound(k, h)))
        for family, part, n in parts:
            x[lp.col_of[family, (part.key, h)]] = n
            gpus[part.gpu, h] = gpus.get((part.gpu, h), 0) + n * part.gpus_per_replica
    for (gpu, h), n in gpus.items():
        j = lp.find("instances", gpu, h)
        if j is not None:
            x[j] = math.ceil(n / prob.instance_gpus[gpu])
    for a, lo, hi in zip(lp.row_activity(x).tolist(), lp.row_lower, lp.row_upper):
        if a < lo - 1e-6 * max(1.0, abs(lo)) or a > hi + 1e-6 * max(1.0, abs(hi)):
            return None
    if any(not (lo - 1e-9 <= v <= hi + 1e-9) for v, lo, hi in zip(x, lp.col_lower, lp.col_upper)):
        return None
    cost = lp.objective_constant + sum(a * v for a, v in zip(lp.objective, x))
    return SolveResult(solver="none", status=Status.TIME_LIMIT, termination="time limit reached before any MIP",
                       objective=cost, values=x, mip_gap=None)


def solve_by_configuration(
    prob: FleetProblem, product: str, solver: Solver, *, keep: Callable[[Candidate], bool] | None = None,
    deadline: Deadline | None = None, mip_rel_gap: float = 1e-6, base_lp: LinearProblem | None = None,
    stage: str = "configuration search", incumbent_usd: float = math.inf,
) -> Found | None:
    """Solve the MIP of one product by branching on its configuration first.

    Exactly one decode configuration runs (with one prefill-pool configuration in pool mode), or
    none when the product may go all-API, so the optimum is the best of the MIPs with each such
    choice fixed. The product's model is built and loaded into the solver once; each choice is
    fixed by column bounds (:func:`_search_choices`). ``keep`` limits the configurations
    (runner-up reports). Returns the best solution with the model and problem it solves, or
    None if no choice is feasible.

    Over several hours the model is built only for the choices that can matter: first for the
    few with the lowest bound computed without a solver (:func:`quick_bound`), which gives a
    plan; then for every choice whose bound is below that plan, searched with it as the
    incumbent. ``base_lp``, if given, is the exported model of ``reduced(prob)`` and is searched
    whole instead. One-hour problems are small: the whole model is solved once, with the
    configurations ``keep`` rejects switched off. So is a request mix (:mod:`fleetplan.optimizer.problem_data.mix`), which runs
    several configurations at once, so that branching on one of them would not be exact; a mix
    over several hours that only its pool links is solved hour by hour (:mod:`.mix_hours`), and
    one kept to one configuration is cut to its cheapest choice priced hour by hour where that is
    exact (:func:`.mix_hours.cheapest_single_choice`).

    At the ``deadline`` the best plan found so far is returned with status ``time_limit`` and a
    gap measured against the weakest bound left open. Over several hours, ``incumbent_usd`` (the
    cost of a plan known already) prunes from the start: then None also means that no plan
    costs less than it by more than ``mip_rel_gap``.
    """
    deadline = deadline or Deadline(at=None)
    prob = reduced(prob)
    pd = prob.products[product]
    decode = [c for c in pd.candidates if keep is None or keep(c)]
    api_alone = pd.has_api and pd.api_max_fraction >= 1.0 and keep is None
    if separable(prob, pd) and base_lp is None:
        return _solve_mix_by_hour(prob, pd, decode, solver, deadline, mip_rel_gap)
    if base_lp is None and (choice := cheapest_single_choice(prob, pd, decode)) is not None:
        # a mix kept to one configuration over separable hours: the cheapest choice priced hour
        # by hour, its model solved alone
        c, k = choice
        pd = replace(pd, candidates=(c,), pool=() if k is None else (k,))
        prob, decode = prob.derive(products={**prob.products, product: pd}), [c]
    if prob.hours == 1 or pd.is_mix:
        return _solve_one_hour(prob, pd, decode, api_alone, solver, deadline, mip_rel_gap, base_lp)
    best, open_bounds = _search_rounds(prob, product, by_quick_bound(prob, pd, _choices(pd, decode, api_alone)),
                                       solver, deadline, mip_rel_gap, base_lp, incumbent_usd)
    if best is None:
        if open_bounds:
            deadline.note(f"{product}: {stage}")
            raise SolverError(f"{solver} found no plan for {product} before the time limit",
                              lower_bound=min(open_bounds))
        return None
    res, lp, whole = best
    res = _search_verdict(res, open_bounds, mip_rel_gap, lambda: deadline.note(f"{product}: {stage}"))
    return res, lp, whole


def _choices(pd: ProductData, decode: list[Candidate], api_alone: bool) -> list[Choice]:
    """Every choice the search fixes in turn: each decode configuration (with each pool
    configuration in pool mode), and all-API when ``api_alone``."""
    choices: list[Choice] = []
    for c in decode:
        choices.extend([(c, k) for k in pd.pool] if c.mode == PrefillMode.POOL else [(c, None)])
    if api_alone:
        choices.append((None, None))
    return choices


def _search_verdict(res: SolveResult, open_bounds: list[float], mip_rel_gap: float, cut: Callable[[], None]
                    ) -> SolveResult:
    """The best plan's result after the search: every choice not left open was pruned against
    it, so its gap is against the weakest bound left open at the deadline (``time_limit`` beyond
    ``mip_rel_gap``, and ``cut()`` is called), or none (optimal)."""
    value = float(res.objective or 0.0)
    lower_bound = min(open_bounds) if open_bounds else value
    gap = max(0.0, (value - lower_bound) / abs(value)) if value else 0.0
    if gap > mip_rel_gap and value - lower_bound > mip_rel_gap * abs(value) + ABS_GAP_USD:
        cut()
        return replace(res, status=Status.TIME_LIMIT, termination=f"time limit reached (gap {gap:.3%})", mip_gap=gap)
    if not res.optimal or res.solver == "none":
        return replace(res, status=Status.OPTIMAL, termination="optimal (no configuration can do better)", mip_gap=gap)
    return res


def _solve_mix_by_hour(prob: FleetProblem, pd: ProductData, decode: list[Candidate], solver: Solver,
                       deadline: Deadline, mip_rel_gap: float) -> Found | None:
    """A mix whose hours nothing but its pool links (:func:`.mix_hours.separable`), over the
    configurations ``decode``, solved hour by hour (:func:`.mix_hours.solve_mix_by_hour`)."""
    keys = {c.key for c in decode}
    if not all(keys.intersection(b.capacity) for b in pd.buckets):  # a bucket nothing kept serves
        return None
    if len(decode) < len(pd.candidates):
        pd = replace(pd, candidates=tuple(decode))
        prob = prob.derive(products={pd.name: pd})
    found = solve_mix_by_hour(prob, pd, solver, deadline, mip_rel_gap)
    if found is None:
        return None
    res, lp, cut = found
    if not res.optimal:
        deadline.note(f"{pd.name}: hour-by-hour mix")
    return res, lp, cut


def _solve_one_hour(prob: FleetProblem, pd: ProductData, decode: list[Candidate], api_alone: bool, solver: Solver,
                    deadline: Deadline, mip_rel_gap: float, base_lp: LinearProblem | None) -> Found | None:
    """A one-hour problem is small: its whole model solved once, with the decode configurations
    outside ``decode`` switched off (and all-API allowed when ``api_alone``)."""
    if not decode and not api_alone:
        return None
    lp = base_lp if base_lp is not None else to_linear_problem(build_model(prob))
    lower, upper = fixing(lp, pd, (None, None), allowed={c.key for c in decode})
    if pd.has_api and api_alone:
        j = lp.col_of["self_host", (pd.name,)]
        lower[j], upper[j] = lp.col_lower[j], lp.col_upper[j]
    res = Session(lp, solver).solve(lower, upper, time_limit_s=deadline.solver_limit(), mip_rel_gap=mip_rel_gap)
    if res.status == Status.INFEASIBLE or not res.values:
        if res.status == Status.TIME_LIMIT:
            raise no_plan_in_time(str(solver), f"products[{pd.name}]")
        if res.status not in (Status.INFEASIBLE, Status.OPTIMAL):
            raise SolverError(f"{solver} returned no plan for {pd.name}: {res.termination}")
        return None
    return res, lp.with_bounds(lower, upper), prob


def _search_rounds(prob: FleetProblem, product: str, ordered: list[tuple[float, Choice]], solver: Solver,
                   deadline: Deadline, mip_rel_gap: float, base_lp: LinearProblem | None, incumbent_usd: float
                   ) -> tuple[Found | None, list[float]]:
    """Search ``ordered`` (choices with their quick bound, lowest first) in rounds of 8, 32, 128, ...
    choices: a round's model is built only if a choice of it can still beat the best plan of the
    rounds before (``base_lp``, the whole model, is searched in one round). Returns the best plan
    and the bounds left open at the deadline."""
    if base_lp is not None:
        rounds: list[tuple[LinearProblem | None, list[tuple[float, Choice]]]] = [(base_lp, ordered)]
    else:
        rounds, start, size = [], 0, FIRST_ROUND_CHOICES
        while start < len(ordered):
            rounds.append((None, ordered[start:start + size]))
            start, size = start + size, size * 4
    best: Found | None = None
    open_bounds: list[float] = []
    for lp, these in rounds:
        value = float(best[0].objective or 0.0) if best is not None else incumbent_usd
        these = [(q, ch) for q, ch in these if q < value * (1 - mip_rel_gap) - 1e-7]
        if not these:
            continue
        if deadline.expired and (best is not None or not math.isinf(incumbent_usd)):
            open_bounds.append(these[0][0])  # not searched: its quick bound is all that is known
            break
        whole = prob if lp is not None else with_choices(prob, product, [ch for _, ch in these])
        lp = lp if lp is not None else to_linear_problem(build_model(whole))  # a model of these choices only
        found, left_open = _search_choices(lp, whole, product, these, solver, deadline, mip_rel_gap, value)
        open_bounds += left_open
        best = found if found is not None else best
    return best, open_bounds


def with_choices(prob: FleetProblem, product: str, choices: list[Choice]) -> FleetProblem:
    """``prob`` with the product's configurations cut to those of ``choices``."""
    pd = prob.products[product]
    keys = {x.key for ch in choices for x in ch if x is not None}
    cut = replace(pd, candidates=tuple(c for c in pd.candidates if c.key in keys),
                  pool=tuple(k for k in pd.pool if k.key in keys))
    return prob.derive(products={**prob.products, product: cut})


def _search_choices(lp: LinearProblem, prob: FleetProblem, product: str, ordered: list[tuple[float, Choice]],
                    solver: Solver, deadline: Deadline, mip_rel_gap: float, incumbent_value: float
                    ) -> tuple[Found | None, list[float]]:
    """Best first over ``ordered`` (choices with their quick bound, lowest first) on the model
    ``lp`` of ``prob`` (:class:`_BestFirst`). Returns the best plan found below
    ``incumbent_value`` (or None) and the bounds left open at the deadline."""
    search = _BestFirst(lp, prob, prob.products[product], solver, deadline, mip_rel_gap, incumbent_value)
    search.run(ordered)
    if search.best is None:
        return None, search.open_bounds
    res, lower, upper = search.best
    return (res, lp.with_bounds(lower, upper), prob), search.open_bounds


class _BestFirst:
    """The open choice with the lowest bound is taken next; a choice known only by its quick bound
    gets its LP bound and goes back, one with an LP bound gets its MIP, which only looks for plans
    cheaper than the best so far (``incumbent_value`` to start with). Each LP and MIP holds only
    the columns of its own choice. A MIP gets a slice of nodes that grows each time it comes back,
    so one hard choice cannot hold up the others."""

    def __init__(self, lp: LinearProblem, prob: FleetProblem, pd: ProductData, solver: Solver, deadline: Deadline,
                 mip_rel_gap: float, incumbent_value: float) -> None:
        self.lp, self.prob, self.pd, self.solver = lp, prob, pd, solver
        self.deadline, self.gap, self.start = deadline, mip_rel_gap, incumbent_value
        self.best: tuple[SolveResult, list[float], list[float]] | None = None
        self.open_bounds: list[float] = []

    def incumbent(self) -> float:
        """Cost of the best plan so far (the incumbent given at the start until one is found)."""
        return float(self.best[0].objective or 0.0) if self.best is not None else self.start

    def fix(self, choice: Choice) -> tuple[list[float], list[float]]:
        """Column bounds that fix ``choice`` (idle instance types off for a model of one product)."""
        bounds = fixing(self.lp, self.pd, choice)
        return instances_off(self.lp, choice, bounds) if len(self.prob.products) == 1 else bounds

    def relaxed(self, choice: Choice, floor: float) -> float | None:
        """The LP bound of ``choice`` (at least ``floor``), None when it has no solution."""
        r = solve_restricted(self.lp, *self.fix(choice), self.solver, relax=True,
                             time_limit_s=self.deadline.solver_limit())
        if r.status == Status.INFEASIBLE:
            return None
        return max(floor, float(r.objective or 0.0)) if r.status == Status.OPTIMAL else floor

    def run(self, ordered: list[tuple[float, Choice]]) -> None:
        """Search until every open choice's bound reaches the best plan, or the deadline."""
        if math.isinf(self.start):
            # a first plan without a solver (every hour on demand) prunes choices whose bound exceeds it
            for _, choice in ordered[:5]:
                self.best = self.best or _fallback(self.lp, self.prob, self.pd, choice)
        heap = [(quick, n, 0, choice) for n, (quick, choice) in enumerate(ordered)]  # already in heap order
        searched = 0
        while heap:
            bound, n, tries, choice = heap[0]
            target = self.incumbent() * (1 - self.gap)
            if bound >= target - ABS_GAP_USD:
                if bound < target - 1e-7:
                    self.open_bounds.append(bound)  # within ABS_GAP_USD of the target: the gap reports it
                break  # every open choice has a bound at least as high
            if self.deadline.expired and (self.best is not None or not math.isinf(self.start)):
                self.open_bounds.append(bound)  # the lowest open bound: every other one is at least as high
                break  # (without any plan yet, the search goes on to its first one)
            heapq.heappop(heap)
            if tries == 0:
                lp_bound = self.relaxed(choice, bound)
                if lp_bound is not None:
                    heapq.heappush(heap, (lp_bound, n, 1, choice))
                continue
            searched += 1
            self.deadline.progress.update(f"{self.pd.name}: searching configurations", searched, len(ordered),
                                          best=self.incumbent(), bound=bound)
            again = self.mip(choice, bound, tries)
            if again is not None:
                heapq.heappush(heap, (again, n, tries + 1, choice))

    def mip(self, choice: Choice, bound: float, tries: int) -> float | None:
        """Solve the MIP of ``choice`` in its slice of nodes, keeping a cheaper plan; returns the bound
        to queue it again with when the slice ran out, else None (done, pruned or left open)."""
        lower, upper = self.fix(choice)
        incumbent = self.incumbent()
        cutoff = incumbent * (1 - self.gap) if not math.isinf(incumbent) else None
        res = solve_restricted(self.lp, lower, upper, self.solver, time_limit_s=self.deadline.solver_limit(),
                               mip_rel_gap=self.gap, cutoff=cutoff, node_limit=MIP_SLICE_NODES * 4 ** (tries - 1))
        if res.status in (Status.INFEASIBLE, Status.CUTOFF):
            return None
        if res.values and float(res.objective or 0.0) < incumbent - 1e-7:
            self.best = (res, lower, upper)
        proved = max(bound, float(res.objective or 0.0) * (1 - (res.mip_gap or 0.0))) if res.values else bound
        if res.status == Status.TIME_LIMIT and tries < MIP_MAX_TRIES:
            return proved  # not finished in its slice: back in the queue with the bound its search proved
        if not res.optimal:  # the solver gave up on this choice: what it proved stays open
            self.open_bounds.append(proved)
        return None

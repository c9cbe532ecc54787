"""The per-product search: branch on the configuration first (:func:`solve_by_configuration`),
best first by bound, each choice fixed by column bounds of one exported model.

Owns which MIPs are solved for one product and in what order; it does not build the
problem's data (:mod:`.problem`) nor read plans out of solutions (:mod:`.solution`)."""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from typing import Callable

from fleetplan.optimizer.bounds import by_quick_bound, on_demand_cost
from fleetplan.optimizer.candidates import (
    Candidate,
    PoolCandidate,
)
from fleetplan.optimizer.deadline import Deadline
from fleetplan.optimizer.errors import SolverError
from fleetplan.optimizer.formulation import build_model
from fleetplan.optimizer.linear import LinearProblem, to_linear_problem
from fleetplan.optimizer.reductions import reduced
from fleetplan.optimizer.problem import FleetProblem, ProductData
from fleetplan.optimizer.solvers import Session, SolveResult, solve_restricted


def owned_columns(lp: LinearProblem) -> dict[str, list[int]]:
    """Columns of ``lp`` per configuration key they belong to (``use[k]``, ``reserved[k]``,
    ``on_demand[k/h]``, ``api_for[k/h]``, pool columns alike); built once per problem."""
    owned = lp.__dict__.get("_owned")
    if owned is None:
        owned = {}
        for j, name in enumerate(lp.col_names):
            entity = name[name.index("[") + 1:-1]
            head, _, tail = entity.rpartition("/")
            key = head if tail.isdigit() and head else entity
            owned.setdefault(key, []).append(j)
        lp.__dict__["_owned"] = owned
    return owned


def fixing(lp: LinearProblem, pd: ProductData, choice: tuple[Candidate | None, PoolCandidate | None],
            allowed: set[str] | None = None) -> tuple[list[float], list[float]]:
    """Column bounds of ``lp`` that fix product ``pd`` to one decode (and pool) configuration, or to
    none (all-API): every column of another configuration is fixed at zero. With ``allowed``,
    the decode configurations outside it are switched off and the choice among the rest is left
    to the solver; a pool-mode configuration chosen without a pool leaves the pool to the solver."""
    lower, upper = list(lp.col_lower), list(lp.col_upper)
    col = lp.col_index
    owned = owned_columns(lp)
    c, k = choice
    pool_free = k is None and c is not None and c.mode == "pool"  # the pool is left to the solver

    def off(key: str) -> None:
        for j in owned.get(key, ()):
            lower[j] = upper[j] = 0.0

    for d in pd.candidates:
        if allowed is not None:
            if d.key not in allowed:
                off(d.key)
        elif c is not None and d.key == c.key:
            lower[col[f"use[{d.key}]"]] = 1.0
        else:
            off(d.key)
    if allowed is None and not pool_free:
        for q in pd.pool:
            if k is not None and q.key == k.key:
                lower[col[f"pool_use[{q.key}]"]] = 1.0
            else:
                off(q.key)
    if pd.has_api and (allowed is None or allowed):
        j = col[f"self_host[{pd.name}]"]
        lower[j] = upper[j] = 0.0 if (allowed is None and c is None) else 1.0
    return lower, upper


def instances_off(lp: LinearProblem, choice: tuple[Candidate | None, PoolCandidate | None],
                   bounds: tuple[list[float], list[float]]) -> tuple[list[float], list[float]]:
    """``bounds`` with the whole-instance columns of every GPU type the choice does not run on
    fixed at zero, for a model of one product: such instances would only be idle GPUs."""
    per_gpu = lp.__dict__.get("_instance_cols")
    if per_gpu is None:
        per_gpu = {}
        for j, name in enumerate(lp.col_names):
            if name.startswith("instances["):
                per_gpu.setdefault(name[len("instances["):-1].rpartition("/")[0], []).append(j)
        lp.__dict__["_instance_cols"] = per_gpu
    used = {x.gpu for x in choice if x is not None}
    lower, upper = bounds
    for gpu, cols in per_gpu.items():
        if gpu not in used:
            for j in cols:
                lower[j] = upper[j] = 0.0
    return lower, upper


def _fallback(lp: LinearProblem, prob: FleetProblem, pd: ProductData,
              choice: tuple[Candidate | None, PoolCandidate | None]) -> tuple[SolveResult, list[float], list[float]] | None:
    """The on-demand plan of ``choice`` (the cheapest pool for a pool-mode choice left open), as a
    search result, or None when it is not feasible."""
    c, k = choice
    pairs = [(c, q) for q in pd.pool] if c is not None and c.mode == "pool" and k is None else [choice]
    for pair in sorted(pairs, key=lambda ch: on_demand_cost(prob, pd, ch) if ch[0] is not None else math.inf):
        found = on_demand_plan(lp, prob, pd, pair)
        if found is not None:
            return (found, *fixing(lp, pd, pair))
    return None


def on_demand_plan(lp: LinearProblem, prob: FleetProblem, pd: ProductData,
                    choice: tuple[Candidate | None, PoolCandidate | None]) -> SolveResult | None:
    """A feasible plan for one choice without a solver: in every hour the fewest on-demand replicas
    (and pool replicas) that alone meet demand, nothing sent to the API, whole instances rounded
    up. None when the rows do not hold (no on-demand tier, an API minimum share, a limit)."""
    c, k = choice
    if c is None or "on_demand" not in prob.tiers:
        return None
    x = [lo if lo > 0 else 0.0 for lo in fixing(lp, pd, choice)[0]]
    col = lp.col_index
    gpus: dict[tuple[str, int], int] = {}
    for h in range(prob.hours):
        n = pd.replica_bound(c, h)
        x[col[f"on_demand[{c.key}/{h}]"]] = n
        gpus[c.gpu, h] = gpus.get((c.gpu, h), 0) + n * c.tp
        if k is not None:
            m = pd.pool_bound(k, h)
            x[col[f"pool_on_demand[{k.key}/{h}]"]] = m
            gpus[k.gpu, h] = gpus.get((k.gpu, h), 0) + m * k.tp
    for (gpu, h), n in gpus.items():
        j = col.get(f"instances[{gpu}/{h}]")
        if j is not None:
            x[j] = math.ceil(n / prob.instance_gpus[gpu])
    for a, lo, hi in zip(lp.row_activity(x).tolist(), lp.row_lower, lp.row_upper):
        if a < lo - 1e-6 * max(1.0, abs(lo)) or a > hi + 1e-6 * max(1.0, abs(hi)):
            return None
    if any(not (lo - 1e-9 <= v <= hi + 1e-9) for v, lo, hi in zip(x, lp.col_lower, lp.col_upper)):
        return None
    cost = lp.objective_constant + sum(a * v for a, v in zip(lp.objective, x))
    return SolveResult(solver="none", status="time_limit", termination="time limit reached before any MIP",
                       objective=cost, values=x, mip_gap=None)


# First time slice of one configuration's MIP in a multi-hour search (s); a MIP not finished in
# its slice goes back in the queue and gets four times as long when it comes round again.
MIP_SLICE_S = 1.0


# Slices a MIP gets at most (1 + 4 + ... + 4^5 s = 22.75 min without a deadline) before its bound is left open.
MIP_MAX_TRIES = 6


def solve_by_configuration(
    prob: FleetProblem,
    product: str,
    solver: str,
    *,
    keep: Callable[[Candidate], bool] | None = None,
    deadline: Deadline | None = None,
    mip_rel_gap: float = 1e-6,
    base_lp: LinearProblem | None = None,
    stage: str = "configuration search",
) -> tuple[SolveResult, LinearProblem, FleetProblem] | None:
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
    configurations ``keep`` rejects switched off.

    At the ``deadline`` the best plan found so far is returned with status ``time_limit`` and a
    gap measured against the weakest bound left open.
    """
    deadline = deadline or Deadline(at=None)
    prob = reduced(prob)
    pd = prob.products[product]
    decode = [c for c in pd.candidates if keep is None or keep(c)]
    api_alone = pd.has_api and pd.api_max_fraction >= 1.0 and keep is None
    if prob.hours == 1:
        lp = base_lp if base_lp is not None else to_linear_problem(build_model(prob))
        session = Session(lp, solver)
        if not decode and not api_alone:
            return None
        lower, upper = fixing(lp, pd, (None, None), allowed={c.key for c in decode})
        if pd.has_api and api_alone:
            j = lp.col_index[f"self_host[{product}]"]
            lower[j], upper[j] = lp.col_lower[j], lp.col_upper[j]
        res = session.solve(lower, upper, time_limit_s=deadline.solver_limit(), mip_rel_gap=mip_rel_gap)
        if res.status == "infeasible" or not res.values:
            if res.status not in ("infeasible", "optimal") and not res.values:
                raise SolverError(f"{solver} returned no plan for {product}: {res.termination}")
            return None
        return res, lp.with_bounds(lower, upper), prob
    choices: list[tuple[Candidate | None, PoolCandidate | None]] = []
    for c in decode:
        choices.extend([(c, k) for k in pd.pool] if c.mode == "pool" else [(c, None)])
    if api_alone:
        choices.append((None, None))
    ordered = by_quick_bound(prob, pd, choices)
    if base_lp is not None:
        rounds = [(base_lp, prob, ordered)]
    else:
        # rounds of 8, 32, 128, ... choices: a round's model is built only if a choice of it can
        # still beat the best plan of the rounds before
        rounds, start, size = [], 0, FIRST_ROUND_CHOICES
        while start < len(ordered):
            rounds.append((None, prob, ordered[start:start + size]))
            start, size = start + size, size * 4
    best: tuple[SolveResult, LinearProblem, FleetProblem] | None = None
    open_bounds: list[float] = []
    for lp, whole, these in rounds:
        value = float(best[0].objective or 0.0) if best is not None else math.inf
        these = [(q, ch) for q, ch in these if q < value * (1 - mip_rel_gap) - 1e-7]
        if not these:
            continue
        if deadline.expired and best is not None:
            open_bounds.append(these[0][0])  # not searched: its quick bound is all that is known
            break
        if lp is None:  # a model of these choices only
            whole = _with_choices(prob, product, [ch for _, ch in these])
            lp = to_linear_problem(build_model(whole))
        found, left_open = _search_choices(lp, whole, product, these, solver, deadline, mip_rel_gap, value)
        open_bounds += left_open
        if found is not None:
            best = found
    if best is None:
        if open_bounds:
            deadline.note(f"{product}: {stage}")
            raise SolverError(f"{solver} found no plan for {product} before the time limit")
        return None
    res, lp, whole = best
    # every choice not left open was pruned against the best plan: the gap is against the weakest
    # bound left open at the deadline, or none
    value = float(res.objective or 0.0)
    lower_bound = min(open_bounds) if open_bounds else value
    gap = max(0.0, (value - lower_bound) / abs(value)) if value else 0.0
    if gap > mip_rel_gap:
        deadline.note(f"{product}: {stage}")
        res = replace(res, status="time_limit", termination=f"time limit reached (gap {gap:.3%})", mip_gap=gap)
    elif not res.optimal or res.solver == "none":
        res = replace(res, status="optimal", termination="optimal (no configuration can do better)", mip_gap=gap)
    return res, lp, whole


# Choices whose model is built first in a multi-hour search (those with the lowest quick bound):
# their best plan prunes the rest before the rest's model is built (in rounds four times larger).
FIRST_ROUND_CHOICES = 8


def _with_choices(prob: FleetProblem, product: str, choices: list[tuple[Candidate | None, PoolCandidate | None]]
                  ) -> FleetProblem:
    """``prob`` with the product's configurations cut to those of ``choices``."""
    pd = prob.products[product]
    keys = {x.key for ch in choices for x in ch if x is not None}
    cut = replace(pd, candidates=tuple(c for c in pd.candidates if c.key in keys),
                  pool=tuple(k for k in pd.pool if k.key in keys))
    return prob.derive(products={**prob.products, product: cut})


def _search_choices(
    lp: LinearProblem, prob: FleetProblem, product: str,
    ordered: list[tuple[float, tuple[Candidate | None, PoolCandidate | None]]], solver: str, deadline: Deadline,
    mip_rel_gap: float, incumbent_value: float,
) -> tuple[tuple[SolveResult, LinearProblem, FleetProblem] | None, list[float]]:
    """Best first over ``ordered`` (choices with their quick bound, lowest first) on the model
    ``lp`` of ``prob``: the open choice with the lowest bound is taken next; a choice known only
    by its quick bound gets its LP bound and goes back, one with an LP bound gets its MIP, which
    only looks for plans cheaper than the best so far (``incumbent_value`` to start with). Each
    LP and MIP holds only the columns of its own choice. Returns the best plan found below
    ``incumbent_value`` (or None) and the bounds left open at the deadline."""
    pd = prob.products[product]
    best: tuple[SolveResult, list[float], list[float]] | None = None
    open_bounds: list[float] = []

    def incumbent() -> float:
        return float(best[0].objective or 0.0) if best is not None else incumbent_value

    def beaten(bound: float) -> bool:
        return bound >= incumbent() * (1 - mip_rel_gap) - 1e-7

    def fix(choice: tuple[Candidate | None, PoolCandidate | None]) -> tuple[list[float], list[float]]:
        bounds = fixing(lp, pd, choice)
        return instances_off(lp, choice, bounds) if len(prob.products) == 1 else bounds

    def relaxed(choice: tuple[Candidate | None, PoolCandidate | None], floor: float) -> float | None:
        r = solve_restricted(lp, *fix(choice), solver, relax=True, time_limit_s=deadline.solver_limit())
        if r.status == "infeasible":
            return None
        return max(floor, float(r.objective or 0.0)) if r.status == "optimal" else floor

    if math.isinf(incumbent_value):
        # a first plan without a solver (every hour on demand) prunes choices whose bound exceeds it
        for _, choice in ordered[:5]:
            best = best or _fallback(lp, prob, pd, choice)
    heap: list[tuple[float, int, int, tuple[Candidate | None, PoolCandidate | None]]] = [
        (quick, n, 0, choice) for n, (quick, choice) in enumerate(ordered)]  # already in heap order
    searched = 0
    while heap:
        bound, n, tries, choice = heap[0]
        if beaten(bound):
            break  # every open choice has a bound at least as high
        if deadline.expired and (best is not None or not math.isinf(incumbent_value)):
            open_bounds.append(bound)  # the lowest open bound: every other one is at least as high
            break  # (without any plan yet, the search goes on to its first one)
        heapq.heappop(heap)
        if tries == 0:
            lp_bound = relaxed(choice, bound)
            if lp_bound is not None:
                heapq.heappush(heap, (lp_bound, n, 1, choice))
            continue
        searched += 1
        deadline.progress.update(f"{product}: searching configurations", searched, len(ordered), best=incumbent(),
                                 bound=bound)
        lower, upper = fix(choice)
        # only a plan cheaper than the best one matters: the solver proves fast that none exists;
        # a MIP gets a time slice that grows each time it comes back, so one hard choice cannot
        # hold up the others
        cutoff = incumbent() * (1 - mip_rel_gap) if not math.isinf(incumbent()) else None
        limit = MIP_SLICE_S * 4 ** (tries - 1)
        left = deadline.solver_limit()
        res = solve_restricted(lp, lower, upper, solver, time_limit_s=limit if left is None else min(limit, left),
                               mip_rel_gap=mip_rel_gap, cutoff=cutoff)
        if res.status in ("infeasible", "cutoff"):
            continue
        if res.values and float(res.objective or 0.0) < incumbent() - 1e-7:
            best = (res, lower, upper)
        if res.status == "time_limit" and tries < MIP_MAX_TRIES:
            # not finished in its slice: back in the queue with the bound its search proved
            proved = float(res.objective or 0.0) * (1 - (res.mip_gap or 0.0)) if res.values else bound
            heapq.heappush(heap, (max(bound, proved), n, tries + 1, choice))
        elif not res.optimal:  # the solver gave up on this choice: what it proved stays open
            open_bounds.append(max(bound, float(res.objective or 0.0) * (1 - (res.mip_gap or 0.0)))
                               if res.values else bound)
    if best is None:
        return None, open_bounds
    res, lower, upper = best
    return (res, lp.with_bounds(lower, upper), prob), open_bounds

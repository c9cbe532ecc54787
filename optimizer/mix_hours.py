"""A request mix over many hours solved hour by hour, exactly.

A mix's MIP over the horizon links its hours only through what is bought or chosen for the whole
horizon: reserved replicas, a spot or API share capped over the horizon, a fixed self-hosting
cost or the API's self-hosting switch, the one-configuration rule of a mix kept to one
configuration (``single``), shared limits with other products, and the mix's one prefill-pool
configuration (``mix_pool_one``). Without the
others (:func:`separable`), the optimum is the cheapest over the pool options (no pool, or one
pool configuration) of the sum over the hours of each hour's optimum with that option; each
distinct hour (hours of the same demand are merged first by :func:`~.reductions.merged`) is a
small one-hour MIP.

The hours are first solved with every pool allowed: the sum of those optima is a lower bound,
and it is the optimum when the hours agree on one pool configuration (or none). Otherwise each
pool option is priced by re-solving, with that option imposed, the hours that chose another,
largest first, dropped as soon as its running sum reaches the best total found. The plan is then
read from the whole model of the horizon with every integer decision fixed to the hours'
choices (an LP in the buckets' shares), so it is a solution of that model and its cost is theirs.

Owns this decomposition only; the whole-model search is :mod:`.search`."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from fleetplan.optimizer.deadline import Deadline
from fleetplan.optimizer.enums import PrefillMode, Status, Tier
from fleetplan.optimizer.errors import SolverError
from fleetplan.optimizer.formulation import build_model
from fleetplan.optimizer.linear import LinearProblem, to_linear_problem
from fleetplan.optimizer.problem import FleetProblem, ProductData
from fleetplan.optimizer.reductions import hours_separable, mix_without_dominated, on_hours
from fleetplan.optimizer.solvers import SolveResult, Solver, solve

NO_POOL = ""  # the pool option of an hour served without a prefill pool
# seconds each hour's MIP gets at least: enough for HiGHS to find a plan of a one-hour mix over
# the whole catalog (0.2-1.1 s to prove one here). Past the deadline no hour is solved any more
# (see :func:`_free_hours`): the plan covers every hour and its gap says what is unproven.
HOUR_MIN_S = 1.0
Values = dict[tuple[str, tuple[object, ...]], float]


@dataclass(frozen=True)
class HourPlan:
    """The optimum of one hour under one pool option: its cost as if the hour lasted all month
    (USD per month), a proven lower bound on it, the integer decisions by column key (hour 0),
    and the pool configuration it runs (:data:`NO_POOL` for none)."""

    usd_per_month: float
    lower_bound_usd: float
    values: Values
    pool: str


def separable(prob: FleetProblem, pd: ProductData) -> bool:
    """Whether the mix ``pd``'s hours are linked by nothing but its prefill-pool configuration:
    it is the problem's only product, kept to no single configuration, without an API, with no
    reserved tier and no spot share capped over the horizon."""
    return (prob.hours > 1 and pd.is_mix and not pd.single and not pd.has_api and len(prob.products) == 1
            and Tier.RESERVED not in prob.tiers and hours_separable(prob))


def _hour_problem(prob: FleetProblem, pd: ProductData, h: int, pool: str | None) -> FleetProblem:
    """Hour ``h`` of ``prob`` alone, as a one-hour problem, with the pool option ``pool`` imposed
    (None: any pool; :data:`NO_POOL`: no pool-mode configuration)."""
    one = on_hours(pd, [h])
    if pool == NO_POOL:
        one = replace(one, pool=(), candidates=tuple(c for c in one.candidates if c.mode != PrefillMode.POOL))
    elif pool is not None:
        one = replace(one, pool=tuple(k for k in one.pool if k.key == pool))
    return prob.derive(products={pd.name: one}, hours=1, hour_counts=(), hour_of=(), full_demand={})


def _pool_of(lp: LinearProblem, values: list[float]) -> str:
    """The pool configuration a one-hour solution runs replicas of, or :data:`NO_POOL`."""
    for j, (family, index) in enumerate(lp.col_keys):
        if family.startswith("pool_") and family != "pool_use" and values[j] > 0.5:
            return str(index[0])
    return NO_POOL


def solve_hour(prob: FleetProblem, pd: ProductData, h: int, pool: str | None, solver: Solver,
               deadline: Deadline, gap: float) -> HourPlan | None:
    """The optimum of hour ``h`` under the pool option ``pool``, or None if it has no plan."""
    lp = to_linear_problem(build_model(_hour_problem(prob, pd, h, pool)))
    limit = deadline.solver_limit()
    res = solve(lp, solver, time_limit_s=None if limit is None else max(limit, HOUR_MIN_S), mip_rel_gap=gap)
    if res.status == Status.INFEASIBLE:
        return None
    if not res.values or res.objective is None:
        raise SolverError(f"{solver} returned no plan for {pd.name} in hour {h}: {res.termination}")
    cost = float(res.objective)
    bound = cost * (1.0 - (res.mip_gap or 0.0))
    values = {k: v for k, v, integer in zip(lp.col_keys, res.values, lp.col_integer) if integer}
    return HourPlan(cost, min(cost, bound), values, _pool_of(lp, res.values))


def _weights(prob: FleetProblem) -> list[float]:
    """The share of the month each modelled hour stands for."""
    return [prob.count(h) / prob.horizon_hours for h in range(prob.hours)]


def _cost(prob: FleetProblem, plans: list[HourPlan]) -> float:
    """Monthly cost of the hours' plans over the horizon."""
    return sum(w * p.usd_per_month for w, p in zip(_weights(prob), plans))


def _lower(prob: FleetProblem, plans: list[HourPlan]) -> float:
    """Proven lower bound on the monthly cost of the hours' plans' options."""
    return sum(w * p.lower_bound_usd for w, p in zip(_weights(prob), plans))


def _price_option(prob: FleetProblem, pd: ProductData, free: list[HourPlan], pool: str, best_usd: float,
                  solver: Solver, deadline: Deadline, gap: float) -> tuple[list[HourPlan] | None, float]:
    """The hours' plans with the pool configuration ``pool`` imposed on every hour that chose
    another, largest first: (plans, their lower bound), or (None, lower bound reached) when the
    option cannot beat ``best_usd`` by more than ``gap``, has no plan (bound inf) or the
    deadline cut it short (bound finite, below ``best_usd``)."""
    weights = _weights(prob)
    plans = list(free)
    lower = _lower(prob, plans)
    clash = sorted((h for h, p in enumerate(free) if p.pool not in (NO_POOL, pool)),
                   key=lambda h: (-weights[h] * free[h].usd_per_month, h))
    for h in clash:
        if lower >= best_usd * (1.0 - gap):
            return None, math.inf
        if deadline.expired:
            return None, lower
        found = solve_hour(prob, pd, h, pool, solver, deadline, gap)
        if found is None:
            return None, math.inf
        lower += weights[h] * (found.lower_bound_usd - free[h].lower_bound_usd)
        plans[h] = found
    return plans, lower


def bisection_order(n: int) -> list[int]:
    """Positions 0..n-1 in the order that brackets every position soonest: both ends, then the
    middle of the widest open interval, and so on (breadth first)."""
    if n <= 2:
        return list(range(n))
    order, queue = [0, n - 1], [(0, n - 1)]
    while queue:
        lo, hi = queue.pop(0)
        if hi - lo < 2:
            continue
        mid = (lo + hi) // 2
        order.append(mid)
        queue += [(lo, mid), (mid, hi)]
    return order


def _free_hours(prob: FleetProblem, pd: ProductData, solver: Solver, deadline: Deadline, gap: float
                ) -> list[HourPlan] | None:
    """Each hour's optimum with any pool; None if some hour has no plan.

    Every bucket of a mix scales with its hour's demand, so a busier hour's plan (its replicas
    within the quieter hour's bounds) serves a quieter hour, and an hour's optimum is at least a
    quieter hour's. Hours are solved busiest, quietest, then in the middle of the widest gap of
    demand left (:func:`bisection_order`); once the deadline has passed, an hour not yet solved
    runs the plan of the nearest busier hour solved, with the lower bound of the nearest quieter
    one (0 if none), and the plan's gap says what is unproven."""
    by_demand = sorted(range(prob.hours), key=lambda h: (-pd.demand_tokens_per_s[h], h))
    solved: dict[int, HourPlan] = {}  # by position in by_demand
    for i in bisection_order(len(by_demand)):
        if solved and deadline.expired:
            break
        found = solve_hour(prob, pd, by_demand[i], None, solver, deadline, gap)
        if found is None:
            return None
        solved[i] = found
    free: dict[int, HourPlan] = {}
    for i, h in enumerate(by_demand):
        if i in solved:
            free[h] = solved[i]
            continue
        busier = solved[max(j for j in solved if j < i)]
        quieter = [j for j in solved if j > i]
        bound = solved[min(quieter)].lower_bound_usd if quieter else 0.0
        free[h] = replace(busier, lower_bound_usd=min(bound, busier.usd_per_month))
    if len(solved) < len(by_demand):
        deadline.note(f"{pd.name}: hours past the deadline run a busier hour's plan")
    return [free[h] for h in range(prob.hours)]


def best_hour_plans(prob: FleetProblem, pd: ProductData, solver: Solver, deadline: Deadline, gap: float
                    ) -> tuple[list[HourPlan], float] | None:
    """The cheapest hours' plans sharing one pool option, with a proven lower bound on the
    horizon's optimum; None if some hour has no plan."""
    free = _free_hours(prob, pd, solver, deadline, gap)
    if free is None:
        return None
    chosen = {p.pool for p in free} - {NO_POOL}
    if len(chosen) <= 1:
        return free, _lower(prob, free)
    weights = _weights(prob)
    # an option with a pool allows no pool as well, so only the pool configurations are options
    votes = {k.key: sum(w for w, p in zip(weights, free) if p.pool == k.key) for k in pd.pool}
    best: list[HourPlan] | None = None
    best_usd, open_bounds = math.inf, []
    for key in sorted(votes, key=lambda k: (-votes[k], k)):
        plans, lower = _price_option(prob, pd, free, key, best_usd, solver, deadline, gap)
        if plans is not None and _cost(prob, plans) < best_usd:
            best, best_usd = plans, _cost(prob, plans)
        elif plans is None and lower < best_usd * (1.0 - gap):
            open_bounds.append(lower)
    if best is None and open_bounds:  # the deadline cut every option short: finish the likeliest
        best, _ = _price_option(prob, pd, free, max(votes, key=lambda k: (votes[k], k)), math.inf, solver,
                                Deadline(at=None), gap)
    if best is None:
        return None
    return best, min([_lower(prob, best), *open_bounds])


def _running(plans: list[HourPlan]) -> set[str]:
    """Keys of the configurations (decode and pool) with replicas in some hour."""
    return {str(index[0]) for p in plans for (family, index), v in p.values.items()
            if family not in ("use", "pool_use", "instances") and v > 0.5}


def _fixed_bounds(lp: LinearProblem, plans: list[HourPlan]) -> tuple[list[float], list[float]]:
    """Column bounds of the horizon's model with every hourly integer decision fixed to the
    hours' plans (within the column's bound), and a configuration chosen exactly when it runs in some hour (a pool left to
    the solver when pool-mode replicas run without pool replicas)."""
    lower, upper = list(lp.col_lower), list(lp.col_upper)
    running = _running(plans)
    pools = any(k.startswith("pool_") for (k, _), v in ((key, v) for p in plans for key, v in p.values.items())
                if v > 0.5 and k != "pool_use")
    for j, (family, index) in enumerate(lp.col_keys):
        if not lp.col_integer[j]:
            continue
        if index and isinstance(index[-1], int):
            # at most what alone meets the hour (the column's bound): a busier hour's plan run in a
            # quieter one keeps its shares, and those replicas still hold them
            value = float(round(plans[index[-1]].values.get((family, (*index[:-1], 0)), 0.0)))
            lower[j] = upper[j] = min(value, upper[j])
        elif family == "use" or (family == "pool_use" and pools):
            lower[j] = upper[j] = float(str(index[0]) in running)
    return lower, upper


def solve_mix_by_hour(prob: FleetProblem, pd: ProductData, solver: Solver, deadline: Deadline, gap: float
                      ) -> tuple[SolveResult, LinearProblem, FleetProblem] | None:
    """The horizon's plan of the separable mix ``pd`` (:func:`separable`) from its hours' optima:
    the solution of the model of the configurations they run (:func:`running_problem`, returned
    with it) with the hours' decisions fixed, its status ``optimal`` when
    proven within ``gap`` and ``time_limit`` (with the gap) when the deadline left pool options
    open; None if the mix has no plan."""
    pd = mix_without_dominated(prob, pd)
    prob = prob.derive(products={pd.name: pd})
    found = best_hour_plans(prob, pd, solver, deadline, gap)
    if found is None:
        return None
    plans, lower_usd = found
    prob = running_problem(prob, pd, plans)
    lp = to_linear_problem(build_model(prob))
    lower, upper = _fixed_bounds(lp, plans)
    res = solve(lp.with_bounds(lower, upper), solver, mip_rel_gap=gap)
    if res.objective is None or not res.values:
        return None
    value = float(res.objective)
    proven = max(0.0, (value - lower_usd) / value) if value else 0.0
    status, why = ((Status.OPTIMAL, f"optimal (hour by hour: {prob.hours} hours)") if proven <= gap else
                   (Status.TIME_LIMIT, f"time limit reached (gap {proven:.3%})"))
    return replace(res, status=status, termination=why, mip_gap=proven), lp, prob


def running_problem(prob: FleetProblem, pd: ProductData, plans: list[HourPlan]) -> FleetProblem:
    """``prob`` with the mix cut to the configurations its hours' plans run (all its pools when
    pool-mode replicas run without pool replicas): the model the plan is read from, a fraction
    of the whole (over a week of a catalog's configurations, seconds to build)."""
    running = _running(plans)
    pools = tuple(k for k in pd.pool if k.key in running)
    if not pools and any(c.mode == PrefillMode.POOL and c.key in running for c in pd.candidates):
        pools = pd.pool
    cut = replace(pd, candidates=tuple(c for c in pd.candidates if c.key in running), pool=pools)
    return prob.derive(products={pd.name: cut})

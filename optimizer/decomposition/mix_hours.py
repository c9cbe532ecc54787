"""A request mix over many hours solved hour by hour, exactly.

A mix's MIP over the horizon links its hours only through what is bought or chosen for the whole
horizon: reserved replicas, a spot or API share capped over the horizon, a fixed self-hosting
cost or the API's self-hosting switch, the one-configuration rule of a mix kept to one
configuration (``single``), shared limits with other products, and the mix's one prefill-pool
configuration (``mix_pool_one``). Without the
others (:func:`separable`), the optimum is the cheapest over the pool options (no pool, or one
pool configuration) of the sum over the hours of each hour's optimum with that option; each
distinct hour (hours of the same demand are merged first by :func:`~fleetplan.optimizer.problem_data.reductions.merged`) is a
small one-hour MIP. An hour's optimum never costs less than a quieter hour's, so a MIP is solved
only where it steps up: an hour whose demand the quieter hour's plan still serves takes that plan
as its optimum (:func:`solve_hours`). The one-hour models are built once and rescaled to each
hour's demand (:class:`HourModels`).

The hours are first solved with every pool allowed: the sum of those optima is a lower bound,
and it is the optimum when the hours agree on one pool configuration (or none). Otherwise each
pool option is priced by re-solving, with that option imposed, the hours that chose another:
the option most hours chose first, whole; each other one (in worker processes at once when
allowed) dropped as soon as its running sum reaches that first total. The plan is then
read from the whole model of the horizon with every integer decision fixed to the hours'
choices (an LP in the buckets' shares), so it is a solution of that model and its cost is theirs.

Owns this decomposition only; the whole-model search is :mod:`.search`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from fleetplan.optimizer.common.defaults import HOUR_MIN_S, HOUR_RUNS, HOUR_RUNS_FROM
from fleetplan.optimizer.problem_data.candidates import Candidate, PoolCandidate
from fleetplan.optimizer.runtime.deadline import Deadline, no_plan_in_time
from fleetplan.optimizer.common.enums import PrefillMode, Status, Tier
from fleetplan.optimizer.common.errors import SolverError
from fleetplan.optimizer.mip.formulation import build_model
from fleetplan.optimizer.mip.linear import LinearProblem, to_linear_problem
from fleetplan.optimizer.problem_data.problem import PETA, FleetProblem, ProductData
from fleetplan.optimizer.problem_data.reductions import hours_separable, mix_prices_only, mix_without_dominated, on_hours
from fleetplan.optimizer.mip.solvers import SolveResult, Solver, SolverOptions, solve
from fleetplan.optimizer.runtime.workers import jobs, map_in_copies, shared

NO_POOL = ""  # the pool option of an hour served without a prefill pool
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


class HourModels:
    """The one-hour models of a mix, exported once per pool option and rescaled for each hour.

    A one-hour model of a mix differs from hour to hour only in numbers that scale with the
    hour's demand: each bucket's terms in the capacity and prefill-pool rows (its demand over a
    replica's capacity, its prefill FLOPs), and each configuration's replica bound (the column's
    upper bound and its coefficient in the row tying it to the configuration's choice). So the
    model of the busiest hour is built once per pool option and every other hour gets a copy with
    those numbers rewritten, instead of a Pyomo model of its own. An hour where some bucket asks
    nothing has rows of its own and is built afresh."""

    def __init__(self, prob: FleetProblem, pd: ProductData) -> None:
        self.prob, self.pd = prob, pd
        self.ref = max(range(prob.hours), key=lambda h: (pd.demand_tokens_per_s[h], -h))
        self._built: dict[str | None, LinearProblem] = {}

    def _scales(self, h: int) -> list[float] | None:
        """Each bucket's demand in hour ``h`` over its demand in the reference hour, or None when a
        bucket asks nothing in either."""
        ratios = []
        for b in self.pd.buckets:
            d, ref = b.demand_tokens_per_s[h], b.demand_tokens_per_s[self.ref]
            if d <= 0 or ref <= 0:
                return None
            ratios.append(d / ref)
        return ratios

    def _bound(self, family: str, key: str, h: int) -> float:
        """Replicas of ``key`` that alone meet hour ``h`` (the column's upper bound)."""
        if family.startswith("pool_"):
            return float(self.pd.pool_bound(self.prob.pools[key], h))
        return float(self.pd.replica_bound(self.prob.cand[key], h))

    def lp(self, h: int, pool: str | None) -> LinearProblem:
        """The exported one-hour model of hour ``h`` under the pool option ``pool``."""
        ratios = self._scales(h)
        if ratios is None or self._scales(self.ref) is None:
            return to_linear_problem(build_model(_hour_problem(self.prob, self.pd, h, pool)))
        if pool not in self._built:
            self._built[pool] = to_linear_problem(build_model(_hour_problem(self.prob, self.pd, self.ref, pool)))
        ref = self._built[pool]
        if h == self.ref:
            return ref
        return self._rescaled(ref, h, ratios)

    def _rescaled(self, ref: LinearProblem, h: int, ratios: list[float]) -> LinearProblem:
        """``ref`` with its demand-scaled coefficients and replica bounds rewritten for hour ``h``."""
        replicas = {t for t in self.prob.hourly_tiers} | {f"pool_{t}" for t in self.prob.hourly_tiers}
        upper = list(ref.col_upper)
        scale = [1.0] * ref.num_cols  # what a column's coefficients in demand-scaled rows are multiplied by
        for j, (family, index) in enumerate(ref.col_keys):
            if family in replicas:
                upper[j] = self._bound(family, str(index[0]), h)
                scale[j] = upper[j] / ref.col_upper[j] if ref.col_upper[j] > 0 else 1.0
            elif family == "serve":
                scale[j] = ratios[int(index[1])]  # type: ignore[call-overload]
        values = list(ref.row_value)
        for i, family in enumerate(ref.row_families):
            if family in ("capacity_consumed", "mix_prefill_pool_meets_demand"):
                values[i] = [v * scale[j] if ref.col_keys[j][0] == "serve" else v
                             for j, v in zip(ref.row_index[i], ref.row_value[i])]
            elif family.endswith("needs_configuration"):
                # replicas - bound x use <= 0: the choice's coefficient is the replica bound
                factor = next(scale[j] for j in ref.row_index[i] if ref.col_keys[j][0] in replicas)
                values[i] = [v if ref.col_keys[j][0] in replicas else v * factor
                             for j, v in zip(ref.row_index[i], ref.row_value[i])]
        out = ref.with_bounds(list(ref.col_lower), upper)
        out.row_value = values
        return out


def hour_solver(solver: Solver) -> Solver:
    """``solver`` for a one-hour MIP: HiGHS without presolve unless one was asked for. A one-hour
    mix has a few hundred columns and little for presolve to remove; without it HiGHS proves the
    trace week's hours in 40% less time (3.1 s instead of 5.3 s over ten of them)."""
    options = SolverOptions.of(solver)
    return replace(options, presolve="off") if options.name == "highs" and options.presolve == "choose" else solver


def solve_hour(prob: FleetProblem, pd: ProductData, h: int, pool: str | None, solver: Solver,
               deadline: Deadline, gap: float, models: HourModels | None = None) -> HourPlan | None:
    """The optimum of hour ``h`` under the pool option ``pool``, or None if it has no plan
    (``models``: the mix's one-hour models, reused across hours)."""
    lp = models.lp(h, pool) if models else to_linear_problem(build_model(_hour_problem(prob, pd, h, pool)))
    limit = deadline.solver_limit()
    res = solve(lp, hour_solver(solver), time_limit_s=None if limit is None else max(limit, HOUR_MIN_S), mip_rel_gap=gap)
    if res.status == Status.INFEASIBLE:
        return None
    if (not res.values or res.objective is None) and res.status == Status.TIME_LIMIT:
        raise no_plan_in_time(str(solver), f"products[{pd.name}] in hour {h}")
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
                  solver: Solver, deadline: Deadline, gap: float, models: HourModels
                  ) -> tuple[list[HourPlan] | None, float]:
    """The hours' plans with the pool configuration ``pool`` imposed on every hour that chose
    another (:func:`hour_optima`), its running lower bound raised by each hour solved for every
    busier hour: (plans, their lower bound), or (None, lower bound reached) when the
    option cannot beat ``best_usd`` by more than ``gap``, has no plan (bound inf) or the
    deadline cut it short (bound finite, below ``best_usd``). While no option has a plan
    (``best_usd`` inf) the deadline does not cut it short: its hours past the deadline get
    :data:`HOUR_MIN_S` each, so that the mix has a plan."""
    weights = _weights(prob)
    plans = list(free)
    lower = _lower(prob, plans)
    left = {h for h, p in enumerate(free) if p.pool not in (NO_POOL, pool)}
    if left and lower >= best_usd * (1.0 - gap):
        return None, math.inf
    if left and best_usd == math.inf:
        # no option has a plan yet: every hour is wanted, whatever the deadline, so the hours go in
        # runs (:func:`solve_hours`, in worker processes when allowed)
        found = solve_hours(prob, pd, sorted(left), pool, solver, deadline, gap, models, complete=True)
        if found is None:
            return None, math.inf
        plans = [found.get(h, p) for h, p in enumerate(plans)]
        return plans, _lower(prob, plans)
    bound = {h: free[h].lower_bound_usd for h in left}  # each hour's bound under the option
    for found, taken in hour_optima(prob, pd, sorted(left), pool, solver, deadline, gap, models):
        if found is None:
            return None, math.inf
        for h in taken:
            plans[h] = found
        left.difference_update(taken)
        # an hour asking at least as much of every bucket costs at least as much under the option
        for h in [*taken, *(g for g in left if _at_least(pd, g, taken[0]))]:
            if found.lower_bound_usd > bound[h]:
                lower += weights[h] * (found.lower_bound_usd - bound[h])
                bound[h] = found.lower_bound_usd
        if lower >= best_usd * (1.0 - gap):
            return None, math.inf
        if left and deadline.expired and best_usd < math.inf:
            return None, lower
    return plans, lower


def _replicas(prob: FleetProblem, plan: HourPlan, prefix: str) -> dict[str, float]:
    """Replicas of each configuration (decode, or pool with ``prefix`` ``pool_``) a plan runs."""
    out: dict[str, float] = {}
    for tier in prob.hourly_tiers:
        for (family, index), v in plan.values.items():
            if family == f"{prefix}{tier}" and v > 0.5:
                out[str(index[0])] = out.get(str(index[0]), 0.0) + round(v)
    return out


def serves(prob: FleetProblem, pd: ProductData, plan: HourPlan, h: int, solver: Solver) -> bool:
    """Whether the replicas of ``plan`` serve hour ``h`` of the mix ``pd``: some split of every
    bucket's demand over them keeps each configuration's load within its replicas and the
    pool-mode prefill within the pool (an LP without integers, a thousandth of a MIP's time)."""
    decode, pool = _replicas(prob, plan, ""), _replicas(prob, plan, "pool_")
    lp = LinearProblem()
    share: dict[tuple[int, str], int] = {}
    for b in pd.buckets:
        if b.demand_tokens_per_s[h] <= 0:
            continue
        keys = [k for k in pd.eligible(b) if k in decode]
        if not keys:
            return False
        for k in keys:
            share[b.index, k] = len(lp.col_keys)
            lp.col_keys.append(("serve", (b.index, k)))
        # a hair above the whole demand, so the plan holds within any solver's tolerance later
        _row(lp, [share[b.index, k] for k in keys], [1.0] * len(keys), 1.0 + 1e-6, math.inf)
    for k, n in decode.items():
        terms = [(j, pd.buckets[i].demand_tokens_per_s[h] / pd.buckets[i].capacity[k])
                 for (i, key), j in share.items() if key == k]
        if terms:
            _row(lp, [j for j, _ in terms], [a for _, a in terms], -math.inf, n)
    prefill = [(j, pd.buckets[i].prefill_flops_per_output_token / PETA * pd.buckets[i].demand_tokens_per_s[h])
               for (i, k), j in share.items() if prob.cand[k].mode == PrefillMode.POOL]
    if prefill:
        flops = sum(prob.pools[k].usable_flops_per_s / PETA * n for k, n in pool.items())
        _row(lp, [j for j, _ in prefill], [a for _, a in prefill], -math.inf, flops)
    n = len(lp.col_keys)
    lp.col_names = [str(j) for j in range(n)]
    lp.col_lower, lp.col_upper = [0.0] * n, [math.inf] * n
    lp.col_integer, lp.objective = [False] * n, [0.0] * n
    return solve(lp, solver).status == Status.OPTIMAL


def _row(lp: LinearProblem, index: list[int], value: list[float], lower: float, upper: float) -> None:
    """Append the row ``lower <= sum value x[index] <= upper`` to ``lp``."""
    lp.row_names.append(str(len(lp.row_names)))
    lp.row_families.append("serves")
    lp.row_index.append(index)
    lp.row_value.append(value)
    lp.row_lower.append(lower)
    lp.row_upper.append(upper)


def _at_least(pd: ProductData, busier: int, quieter: int) -> bool:
    """Whether hour ``busier`` asks at least as much of every bucket as hour ``quieter``."""
    return all(b.demand_tokens_per_s[busier] >= b.demand_tokens_per_s[quieter] for b in pd.buckets)


def _carry(prob: FleetProblem, pd: ProductData, plan: HourPlan, hour: int, busier: list[int], solver: Solver
           ) -> list[int]:
    """The hours of ``busier`` (quietest first) that take ``plan``, solved for ``hour``, as their
    own optimum: each asks at least as much of every bucket as ``hour`` (so its optimum costs at
    least ``hour``'s) and ``plan``'s replicas serve it (so it costs no more). Stops at the first
    that does not."""
    taken = []
    for h in busier:
        if not (_at_least(pd, h, hour) and serves(prob, pd, plan, h, solver)):
            break
        taken.append(h)
    return taken


def hour_optima(prob: FleetProblem, pd: ProductData, hours: list[int], pool: str | None, solver: Solver,
                deadline: Deadline, gap: float, models: HourModels, busiest_first: bool = True
                ) -> Iterator[tuple[HourPlan | None, list[int]]]:
    """The optima of ``hours`` under the pool option ``pool``, one MIP at a time, as (plan, the
    hours it is the optimum of), or (None, [hour]) for an hour without a plan: the busiest first
    (a plan every hour can run; unless ``busiest_first`` is False), then from the quietest up,
    each solved hour's plan taken by the busier hours next to it that it serves (:func:`_carry`),
    so that a MIP is solved only where the optimum steps up. The next MIP is solved only when
    asked for."""
    order = sorted(hours, key=lambda h: (pd.demand_tokens_per_s[h], h))
    done: set[int] = set()
    first = [order[-1]] + order[:-1] if order and busiest_first else order
    for i, h in enumerate(first):
        if h in done:
            continue
        found = solve_hour(prob, pd, h, pool, solver, deadline, gap, models)
        if found is None:
            yield None, [h]
            return
        carries = i or not busiest_first
        rest = [g for g in order[order.index(h) + 1:] if g not in done and g != h] if carries else []
        taken = [h, *_carry(prob, pd, found, h, rest, solver)]
        done.update(taken)
        yield found, taken


def _runs(order: list[int]) -> list[list[int]]:
    """``order`` (hours by rising demand) cut into :data:`HOUR_RUNS` runs of about equal length,
    or one run when it is shorter than :data:`HOUR_RUNS_FROM`."""
    n = len(order)
    k = HOUR_RUNS if n >= HOUR_RUNS_FROM else 1
    return [order[i * n // k:(i + 1) * n // k] for i in range(k)]


def _run(prob: FleetProblem, pd: ProductData, hours: list[int], pool: str | None, solver: Solver,
         deadline: Deadline, gap: float, models: HourModels, complete: bool = False) -> dict[int, HourPlan] | None:
    """The optima of one run of ``hours``, from its quietest up (:func:`hour_optima`), as far as the
    deadline allows (every one with ``complete``); None if an hour has no plan."""
    solved: dict[int, HourPlan] = {}
    if deadline.expired and not complete:
        return solved
    for found, taken in hour_optima(prob, pd, hours, pool, solver, deadline, gap, models, busiest_first=False):
        if found is None:
            return None
        solved.update((h, found) for h in taken)
        if deadline.expired and not complete:
            break
    return solved


def _run_in_worker(hours: list[int], at: float | None, complete: bool) -> dict[int, HourPlan] | None:
    """Worker: :func:`_run` of ``hours`` on the parent's mix (its :func:`~fleetplan.optimizer.runtime.workers.shared` context),
    ending by ``at``."""
    prob, pd, pool, solver, gap, models = shared()
    return _run(prob, pd, hours, pool, solver, Deadline(at=at), gap, models, complete)


def solve_hours(prob: FleetProblem, pd: ProductData, hours: list[int], pool: str | None, solver: Solver,
                deadline: Deadline, gap: float, models: HourModels, complete: bool = False
                ) -> dict[int, HourPlan] | None:
    """The optima of ``hours`` under the pool option ``pool``, as far as the deadline allows (at
    least one hour; every one with ``complete``); None if an hour has no plan. The busiest hour is solved first (a plan every
    hour can run), then the others in runs of rising demand (:func:`_runs`), each from its
    quietest hour up (:func:`hour_optima`): in turn, or in worker processes at once when the
    command allows several (:func:`~fleetplan.optimizer.runtime.workers.jobs`); the same optima either way."""
    order = sorted(hours, key=lambda h: (pd.demand_tokens_per_s[h], h))
    if not order:
        return {}
    top = solve_hour(prob, pd, order[-1], pool, solver, deadline, gap, models)
    if top is None:
        return None
    solved = {order[-1]: top}
    runs = [r for r in _runs(order[:-1]) if r]
    if (deadline.expired and not complete) or not runs:
        return solved
    outcomes = map_in_copies(_run_in_worker, (prob, pd, pool, solver, gap, models),
                             [(r, deadline.at, complete) for r in runs], jobs(),
                             lambda done, total: deadline.progress.update("hours of the mix", done, total),
                             stop=lambda found: found is None)
    for found in outcomes:
        if found is None:
            return None
        solved.update(found)
    return solved


def _free_hours(prob: FleetProblem, pd: ProductData, solver: Solver, deadline: Deadline, gap: float,
                models: HourModels) -> list[HourPlan] | None:
    """Each hour's optimum with any pool; None if some hour has no plan.

    Every bucket of a mix scales with its hour's demand, so a busier hour's plan (its replicas
    within the quieter hour's bounds) serves a quieter hour, and an hour's optimum is at least a
    quieter hour's. Hours are solved by :func:`solve_hours`; once the deadline has passed, an
    hour not yet solved runs the plan of the nearest busier hour solved, with the lower bound of
    the nearest quieter one (0 if none), and the plan's gap says what is unproven."""
    by_demand = sorted(range(prob.hours), key=lambda h: (-pd.demand_tokens_per_s[h], h))
    found = solve_hours(prob, pd, by_demand, None, solver, deadline, gap, models)
    if found is None:
        return None
    solved = {i: found[h] for i, h in enumerate(by_demand) if h in found}  # by position in by_demand
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
    models = HourModels(prob, pd)
    free = _free_hours(prob, pd, solver, deadline, gap, models)
    if free is None:
        return None
    chosen = {p.pool for p in free} - {NO_POOL}
    if len(chosen) <= 1:
        return free, _lower(prob, free)
    weights = _weights(prob)
    # an option with a pool allows no pool as well, so only the pool configurations are options
    votes = {k.key: sum(w for w, p in zip(weights, free) if p.pool == k.key) for k in pd.pool}
    order = sorted(votes, key=lambda k: (-votes[k], k))
    best: list[HourPlan] | None = None
    best_usd = math.inf
    while order and best is None:  # until one option has a plan, each is priced whole, in turn
        plans, _ = _price_option(prob, pd, free, order.pop(0), best_usd, solver, deadline, gap, models)
        if plans is not None:
            best, best_usd = plans, _cost(prob, plans)
    if best is None:
        return None
    # the others are priced against that plan's cost (the same cutoff in turn and in workers)
    cutoff, open_bounds = best_usd, []
    for plans, lower in _price_options(prob, pd, free, order, cutoff, solver, deadline, gap, models):
        if plans is not None and _cost(prob, plans) < best_usd:
            best, best_usd = plans, _cost(prob, plans)
        elif plans is None:
            open_bounds.append(lower)
    open_bounds = [b for b in open_bounds if b < best_usd * (1.0 - gap)]
    return best, min([_lower(prob, best), *open_bounds])


def _price_in_worker(pool: str, cutoff: float, at: float | None) -> tuple[list[HourPlan] | None, float]:
    """Worker: :func:`_price_option` of ``pool`` on the parent's mix (its :func:`~fleetplan.optimizer.runtime.workers.shared`
    context)."""
    prob, pd, free, solver, gap, models = shared()
    return _price_option(prob, pd, free, pool, cutoff, solver, Deadline(at=at), gap, models)


def _price_options(prob: FleetProblem, pd: ProductData, free: list[HourPlan], pools: list[str], cutoff: float,
                   solver: Solver, deadline: Deadline, gap: float, models: HourModels
                   ) -> list[tuple[list[HourPlan] | None, float]]:
    """:func:`_price_option` of each of ``pools`` against ``cutoff``, in worker processes at once
    when the command allows several (:func:`~fleetplan.optimizer.runtime.workers.jobs`), else in turn."""
    return map_in_copies(_price_in_worker, (prob, pd, free, solver, gap, models),
                         [(k, cutoff, deadline.at) for k in pools], jobs(),
                         lambda done, total: deadline.progress.update("pool options", done, total))


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


def cheapest_single_choice(prob: FleetProblem, pd: ProductData, decode: list[Candidate]
                           ) -> tuple[Candidate, PoolCandidate | None] | None:
    """The cheapest configuration of ``decode`` (with its pool configuration in pool mode) for the
    mix ``pd`` kept to one configuration, priced without a solver, when that is exact: no API,
    hours linked by nothing else and configurations told apart by price alone
    (:func:`~fleetplan.optimizer.problem_data.reductions.mix_without_dominated`'s condition). One configuration serves every
    bucket, so each hour needs the replicas that alone meet its demand (and the pool the replicas
    that alone meet its prefill): the cost of a choice is a sum over the hours. None when no
    choice serves every bucket or the rule does not apply."""
    if not (pd.is_mix and pd.single and len(pd.buckets) > 1 and not pd.has_api and prob.hours > 1
            and len(prob.products) == 1 and hours_separable(prob) and mix_prices_only(prob)):
        return None
    tier = prob.tiers[0]
    hours = range(prob.hours)

    def usd(part: Candidate | PoolCandidate, bound: Callable[[int], int]) -> float:
        return part.usd_per_replica_hour_in(tier) * sum(prob.weight(h) * bound(h) for h in hours)

    pools = sorted((usd(k, lambda h, k=k: pd.pool_bound(k, h)), k.key, k) for k in pd.pool)
    best: tuple[float, str, Candidate, PoolCandidate | None] | None = None
    for c in decode:
        if not all(c.key in b.capacity for b in pd.buckets) or (c.mode == PrefillMode.POOL and not pools):
            continue
        cost = usd(c, lambda h, c=c: pd.replica_bound(c, h))
        pool = pools[0] if c.mode == PrefillMode.POOL else None
        total = cost + (pool[0] if pool else 0.0)
        if best is None or (total, c.key) < best[:2]:
            best = (total, c.key, c, pool[2] if pool else None)
    return None if best is None else (best[2], best[3])


def gpu_type_bounds(prob: FleetProblem, pd: ProductData, gpus: list[str], solver: Solver
                    ) -> dict[str, float] | None:
    """A lower bound (USD per month) on the mix ``pd`` kept to each GPU type of ``gpus`` (its
    decode configurations on that type, any pool), without a MIP: the LP relaxation of the
    busiest hour's model restricted to the type (fractional replicas), times each hour's demand
    over the busiest's, weighted over the horizon. The relaxation's optimum scales with the
    demand when every bucket scales alike, so this holds only for a separable mix
    (:func:`separable`) whose buckets keep their shares in every hour: None otherwise. A type
    without a plan in that hour is bounded by infinity."""
    if not separable(prob, pd):
        return None
    models = HourModels(prob, pd)
    ratios = []
    for h in range(prob.hours):
        scales = models._scales(h)
        if scales is None or max(scales) - min(scales) > 1e-9 * max(scales):
            return None
        ratios.append(scales[0])
    lp = models.lp(models.ref, None)
    decode = {c.key: c.gpu for c in pd.candidates}
    owner = [next((decode[x] for x in index if isinstance(x, str) and x in decode), None) for _, index in lp.col_keys]
    weight = sum(w * r for w, r in zip(_weights(prob), ratios))
    out: dict[str, float] = {}
    for g in gpus:
        upper = [0.0 if o is not None and o != g else u for o, u in zip(owner, lp.col_upper)]
        res = solve(lp.with_bounds(list(lp.col_lower), upper).relaxed(), solver)
        out[g] = weight * float(res.objective) if res.optimal and res.objective is not None else math.inf
    return out

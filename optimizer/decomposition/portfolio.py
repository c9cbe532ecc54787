"""Coupled groups too large for one MIP: GPU types chosen together, products planned on them,
and a lower bound that prices whole instances.

A group of products coupled by whole instances or scarce GPUs whose joint MIP is too large
(:data:`fleetplan.optimizer.decomposition.components.JOINT_MAX_COLUMNS`) is planned by :func:`plan_group`:

1. every product gets a plan without a solver on every decode GPU type
   (:func:`rule_plans_by_type`: each hour's fewest replicas, split by tier);
2. a product without an API has its optimum proven without a solver
   (:mod:`.product_optimum`); each other product's own configuration search starts from its
   cheapest such plan; the proven optimum or lower bound is the product's share of the group's
   bound;
3. a local search (:class:`TypeChoice`) picks one plan per product so that the plans plus the
   whole instances they need per GPU type and hour cost least within availability; products
   whose chosen plan came without a solver are searched on that type, and the choice is made
   again;
4. idle instance GPUs run spot replicas where that is cheaper (:func:`fill_idle_gpus`).

The group's bound is the larger of the products' own bounds and :func:`instance_bound`, a master
MIP (:func:`build_master`) that prices instance rounding.

This module plans and bounds such a group; it does not read scenarios, report plans or change
the formulation (the master is a Pyomo model of its own, solved like every other model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from pyomo.core import Binary, ConcreteModel, Constraint, NonNegativeIntegers, Objective, Var, minimize

from fleetplan.optimizer.common.defaults import (
    BEST_RESPONSE_SAVING_USD,
    BOUND_SHARE,
    FINAL_CHOICE_S,
    IMPROVEMENT_USD,
    MASTER_GAP,
    MAX_SWEEPS,
    OVER_AVAILABILITY_USD,
    OWN_SHARE,
    PORTFOLIO_ROUNDS,
    PRODUCT_GAP,
)
from fleetplan.optimizer.problem_data.candidates import Candidate, GPUPriceChoice, PoolCandidate
from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.problem_data.problem import SECONDS_PER_HOUR, FleetProblem, ProductData
from fleetplan.optimizer.mip.linear import LinearProblem, to_linear_problem
from fleetplan.optimizer.mip.solvers import SolveResult, solve
from fleetplan.optimizer.decomposition.bounds import by_quick_bound
from fleetplan.optimizer.decomposition.product_optimum import best_pool, exact_by_rule, optima_by_types, own_optimum
from fleetplan.optimizer.common.errors import SolverError
from fleetplan.optimizer.decomposition.search import solve_by_configuration, with_choices

Choice = tuple[Candidate | None, PoolCandidate | None]
# A product plan of a search: (result, the model it solves, the problem to read it from)
Found = tuple[SolveResult, LinearProblem, FleetProblem]

# The all-API option of a product in a master problem (no GPU type).
API_ONLY = "api"


@dataclass(frozen=True)
class GroupBound:
    """What planning a group product by product proves, USD per month: a lower bound on the group's
    joint optimum, and the products' cheapest plans found alone, summed (what the group would cost
    if whole instances cost nothing)."""

    lower_usd: float
    alone_usd: float
    own_usd: dict[str, float] = field(default_factory=dict)  # each product's proven lower bound on its own


@dataclass(frozen=True)
class Option:
    """One way a product can run in a master problem: its decode GPU type (``API_ONLY`` for
    none), a cost in USD per month and the GPUs it runs per GPU type in each hour of the horizon."""

    product: str
    gpu: str
    cost_usd: float
    gpus: tuple[tuple[str, tuple[int, ...]], ...] = ()


def plain_prices(prob: FleetProblem) -> dict[str, float]:
    """The plain GPU-hour price of each GPU type, as :func:`formulation.stranded_gpu_cost` charges
    an idle GPU of an instance (the first configuration on that type sets it)."""
    price: dict[str, float] = {}
    for x in [*prob.all_candidates(), *prob.all_pool()]:
        price.setdefault(x.gpu, x.price.usd_per_gpu_hour)
    return price


def floor_prices(prob: FleetProblem) -> dict[str, float]:
    """Per GPU type, the least a GPU-hour can cost in this problem, in use or idle: the cheapest
    price of any tier in play on any configuration of that type, and never above the plain
    price an idle instance GPU is charged."""
    plain = plain_prices(prob)
    floor = dict(plain)
    for x in [*prob.all_candidates(), *prob.all_pool()]:
        floor[x.gpu] = min(floor[x.gpu], *(x.price.tier(t) for t in prob.tiers))
    return {g: max(0.0, v) for g, v in floor.items()}


def _lowered(price: GPUPriceChoice, by: float) -> GPUPriceChoice:
    return replace(price, usd_per_gpu_hour=price.usd_per_gpu_hour - by,
                   tier_usd_per_gpu_hour=tuple((t, v - by) for t, v in price.tier_usd_per_gpu_hour))


def lowered(prob: FleetProblem, by: dict[str, float]) -> FleetProblem:
    """``prob`` with every GPU-hour price (every tier, decode and pools) lowered by ``by[gpu]``.

    A plan of a product costs, in the lowered problem, its cost less ``by[gpu]`` for each GPU-hour
    it runs; with ``by`` at most :func:`floor_prices` every price stays at or above zero."""
    products = {}
    for name, pd in prob.products.items():
        products[name] = replace(
            pd, candidates=tuple(replace(c, price=_lowered(c.price, by.get(c.gpu, 0.0))) for c in pd.candidates),
            pool=tuple(replace(k, price=_lowered(k.price, by.get(k.gpu, 0.0))) for k in pd.pool))
    return prob.derive(products=products)


def plan_gpus(found: Found, name: str) -> dict[str, tuple[int, ...]]:
    """GPUs per GPU type in each hour of the horizon (merged hours expanded) that product
    ``name`` runs in a search's plan: decode and pool replicas of every tier, times their TP."""
    res, lp, sub = found
    pd = sub.products[name]
    values = res.values
    tiers = sub.hourly_tiers
    out: dict[str, list[int]] = {}
    for prefix, x in [("", c) for c in pd.candidates] + [("pool_", k) for k in pd.pool]:
        j = lp.find(f"{prefix}use", x.key)
        if j is None or values[j] < 0.5:
            continue
        held = lp.find(f"{prefix}reserved", x.key)
        base = round(values[held]) if held is not None else 0
        cols = [[lp.find(f"{prefix}{t}", x.key, h) for t in tiers] for h in range(sub.hours)]
        row = out.setdefault(x.gpu, [0] * sub.hours)
        for h, js in enumerate(cols):
            row[h] += x.gpus_per_replica * (base + sum(round(values[i]) for i in js if i is not None))
    of = sub.hour_of or tuple(range(sub.hours))
    return {g: tuple(row[i] for i in of) for g, row in sorted(out.items())}


def plan_gpu_type(found: Found, name: str) -> str:
    """The decode GPU type of a search's plan for ``name`` (``API_ONLY`` when it self-hosts nothing)."""
    decode, _ = running(found, name)
    return decode[0].gpu if decode else API_ONLY


def running(found: Found, name: str) -> tuple[tuple[Candidate, ...], tuple[PoolCandidate, ...]]:
    """The decode and pool configurations product ``name`` runs in a search's plan."""
    res, lp, sub = found
    pd = sub.products[name]
    return (tuple(c for c in pd.candidates if (j := lp.find("use", c.key)) is not None and res.values[j] > 0.5),
            tuple(k for k in pd.pool if (j := lp.find("pool_use", k.key)) is not None and res.values[j] > 0.5))


def fewest_gpus(prob: FleetProblem, pd: ProductData, gpu: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """GPUs of type ``gpu`` any plan running the product's decode on it uses in each hour: the
    fewest over its configurations on that type of TP x the replicas that alone meet the hour's
    demand. With an API every hour may go to the API, so none are certain."""
    if pd.has_api:
        return ()
    cands = [c for c in pd.candidates if c.gpu == gpu]
    row = tuple(min(c.gpus_per_replica * pd.replica_bound(c, h) for c in cands) for h in range(prob.hours))
    return ((gpu, row),)


def type_choices(pd: ProductData) -> list[Choice]:
    """One choice per decode configuration, its pool (in pool mode) left open, and all-API when
    the API may take every token: the quick bound of a choice with its pool open is at most that
    of the choice with any one pool (the pool is priced per token at its cheapest rate)."""
    out: list[Choice] = [(c, None) for c in pd.candidates]
    if pd.has_api and pd.api_max_fraction >= 1.0:
        out.append((None, None))
    return out


def cheapest_pool(prob: FleetProblem, pd: ProductData) -> PoolCandidate | None:
    """The product's pool configuration with the lowest price per FLOP/s in any tier (first by key
    among equals), or None without pools."""
    pools = sorted(pd.pool, key=lambda k: (min(k.usd_per_replica_hour_in(t) for t in prob.tiers) / k.usable_flops_per_s,
                                           k.key))
    return pools[0] if pools else None


def cheapest_by_type(prob: FleetProblem, name: str) -> dict[str, tuple[float, Choice]]:
    """Per decode GPU type (``API_ONLY`` for all-API) the lowest quick bound of the product's
    :func:`type_choices` on it (:func:`~fleetplan.optimizer.decomposition.bounds.quick_bound`), with the choice (first by key among
    equals); in pool mode the choice takes :func:`cheapest_pool`."""
    best: dict[str, tuple[float, Choice]] = {}
    pd = prob.products[name]
    pool = cheapest_pool(prob, pd)
    for bound, (c, _) in by_quick_bound(prob, pd, type_choices(pd)):
        gpu = c.gpu if c is not None else API_ONLY
        if gpu not in best:
            best[gpu] = (bound, (c, pool if c is not None and c.mode == "pool" else None))
    return best


def build_master(prob: FleetProblem, options: list[Option], idle_usd_per_gpu_hour: dict[str, float]) -> ConcreteModel:
    """The master problem over ``options`` (Pyomo), in USD per month:

    minimise   sum_o cost[o] x[o] + sum_{g,h} idle[g] x weight[h] x n_g x instances[g,h]
    subject to sum_{o of p} x[o] = 1                                   for every product p
               n_g x instances[g,h] >= sum_o gpus[o,g,h] x[o]          (whole instances of n_g GPUs)
               sum_o gpus[o,g,h] x[o] <= availability[g]               (scarce GPU types)

    with x binary and instances integer. Every GPU of an instance is priced at ``idle[g]`` here,
    so an option's cost carries only what its GPUs cost beyond that (see :func:`choose_types`
    and :func:`instance_bound`)."""
    m = ConcreteModel(name="fleetplan-master")
    index = list(range(len(options)))
    hours = range(prob.hours)
    m.choose = Var(index, domain=Binary)
    products = list(dict.fromkeys(o.product for o in options))
    m.one_option_per_product = Constraint(
        products, rule=lambda m, p: sum(m.choose[i] for i in index if options[i].product == p) == 1)
    users: dict[str, list[tuple[int, tuple[int, ...]]]] = {}
    for i, o in enumerate(options):
        for g, row in o.gpus:
            users.setdefault(g, []).append((i, row))

    def used(m: ConcreteModel, g: str, h: int) -> Any:
        return sum(row[h] * m.choose[i] for i, row in users[g] if row[h])

    types = sorted(g for g in users if g in prob.instance_gpus)
    m.instances = Var([(g, h) for g in types for h in hours], domain=NonNegativeIntegers)
    m.whole_instances = Constraint(
        [(g, h) for g in types for h in hours],
        rule=lambda m, g, h: prob.instance_gpus[g] * m.instances[g, h] >= used(m, g, h)
        if any(row[h] for _, row in users[g]) else Constraint.Skip)
    scarce = sorted(g for g in users if g in prob.gpu_availability)
    m.gpu_availability = Constraint(
        [(g, h) for g in scarce for h in hours],
        rule=lambda m, g, h: used(m, g, h) <= prob.gpu_availability[g]
        if sum(row[h] for _, row in users[g]) > prob.gpu_availability[g] else Constraint.Skip)  # else it never binds
    m.monthly_cost_usd = Objective(sense=minimize, expr=sum(o.cost_usd * m.choose[i] for i, o in enumerate(options)) + sum(
        idle_usd_per_gpu_hour[g] * prob.weight(h) * prob.instance_gpus[g] * m.instances[g, h]
        for g in types for h in hours))
    return m


def solve_master(prob: FleetProblem, options: list[Option], idle_usd_per_gpu_hour: dict[str, float], solver: str,
                 deadline: Deadline, gap: float) -> tuple[list[Option] | None, float]:
    """Solve :func:`build_master`: the chosen option of every product (None when the solver found
    none in time) and the master's proven lower bound (0 without one)."""
    lp = to_linear_problem(build_master(prob, options, idle_usd_per_gpu_hour))
    res = solve(lp, solver, time_limit_s=deadline.solver_limit(), mip_rel_gap=gap)
    if not res.values:
        return None, 0.0
    value = float(res.objective or 0.0)
    bound = value if res.optimal and res.mip_gap is None else value - abs(value) * (res.mip_gap or 0.0)
    chosen = [o for i, o in enumerate(options) if res.values[lp.col_of["choose", (i,)]] > 0.5]
    return chosen, bound


def stranded_usd(prob: FleetProblem, usage: list[dict[str, tuple[int, ...]]],
                 price: dict[str, float] | None = None) -> float:
    """USD per month of idle instance GPUs when products run ``usage`` (GPUs per type and hour,
    one dict per product), priced as :func:`formulation.stranded_gpu_cost` prices them (``price``:
    :func:`plain_prices` of ``prob``, when known)."""
    price = price if price is not None else plain_prices(prob)
    total = 0.0
    for g in sorted(prob.instance_gpus):
        rows = [u[g] for u in usage if g in u]
        if rows and g in price:
            total += prob.idle_instance_usd(g, price[g], [sum(col) for col in zip(*rows)])
    return total


def within_availability(prob: FleetProblem, usage: list[dict[str, tuple[int, ...]]]) -> bool:
    """Whether products running ``usage`` stay within every GPU type's availability in every hour."""
    for g, limit in prob.gpu_availability.items():
        rows = [u[g] for u in usage if g in u]
        if rows and max(sum(col) for col in zip(*rows)) > limit:
            return False
    return True


def _credited(prob: FleetProblem, cost_usd: float, gpus: tuple[tuple[str, tuple[int, ...]], ...],
              per_gpu_hour: dict[str, float]) -> float:
    """``cost_usd`` less ``per_gpu_hour[g]`` for each GPU-hour on an instance type: the master
    prices those GPUs through its instances."""
    counts = prob.hour_counts
    for g, row in gpus:
        if g in prob.instance_gpus:
            gpu_hours = sum(row) if not counts else sum(c * n for c, n in zip(counts, row))
            cost_usd -= per_gpu_hour[g] * prob.hour_weight * gpu_hours
    return cost_usd


def exact_option(prob: FleetProblem, name: str, found: Found, idle: dict[str, float],
                 seen: dict[int, tuple[tuple[str, tuple[int, ...]], ...]] | None = None) -> Option:
    """A product plan as an option of :class:`TypeChoice` whose instance GPUs cost ``idle`` each:
    its cost and GPUs exactly (``seen`` keeps the GPUs of plans read before, by identity)."""
    seen = {} if seen is None else seen
    if id(found[0]) not in seen:
        seen[id(found[0])] = tuple(plan_gpus(found, name).items())
    gpus = seen[id(found[0])]
    cost = float(found[0].objective or 0.0)
    return Option(name, plan_gpu_type(found, name), _credited(prob, cost, gpus, idle), gpus)


def bound_options(prob: FleetProblem, name: str, floor: dict[str, float]) -> list[Option]:
    """A product's options for :func:`instance_bound`, one per decode GPU type, each a lower bound
    on its cost less ``floor`` per GPU-hour it runs (every GPU-hour price lowered by ``floor``)
    with the GPUs it runs there for certain. Where the rule plans are exact: the least proven
    optimum of the lowered problem over the pool types
    (:func:`~fleetplan.optimizer.decomposition.product_optimum.optima_by_types`; lowered prices stay >= 0, so
    no plan there costs less) and the fewest decode GPUs of any configuration there (the pool's
    type is left open: one option per pair of types made a master too large to solve in time).
    Otherwise the lowest quick bound of its choices there, and the decode GPUs it runs for
    certain (:func:`fewest_gpus`)."""
    low = lowered(prob.restrict([name], limits=False), floor)
    pd = prob.products[name]
    if exact_by_rule(low, low.products[name]):
        cost: dict[str, float] = {}
        rows: dict[str, Any] = {}
        for o in optima_by_types(low, name):  # decode GPUs alone: the pool's type is left open
            cost[o.decode_gpu] = min(cost.get(o.decode_gpu, math.inf), o.cost_usd)
            row = np.asarray(o.decode_gpus)
            rows[o.decode_gpu] = np.minimum(rows[o.decode_gpu], row) if o.decode_gpu in rows else row
        return [Option(name, g, cost[g], ((g, tuple(int(v) for v in rows[g])),)) for g in sorted(cost)]
    return [Option(name, gpu, bound, fewest_gpus(prob, pd, gpu) if gpu != API_ONLY else ())
            for gpu, (bound, _) in sorted(cheapest_by_type(low, name).items())]


def instance_bound(prob: FleetProblem, names: list[str], solver: str, deadline: Deadline, gap: float) -> float:
    """A lower bound on the joint optimum of products ``names`` that prices instance rounding.

    Let f_g be :func:`floor_prices`: no GPU-hour on type g costs less, in use (any tier) or idle
    (the plain price). A joint plan costs sum_p own_p + sum_{g,h} plain_g w_h (n_g I_gh - G_gh),
    own_p being product p's replicas, API and fixed cost, G_gh the GPUs in use and I_gh the
    instances. As plain_g >= f_g and n_g I_gh >= G_gh, that is at least
    sum_p (own_p - sum_g f_g GPUh_pg) + sum_{g,h} f_g w_h n_g I_gh.
    The first term of each product is its cost with every GPU-hour price lowered by f_g, at
    least the quick bound of its choice in the lowered problem (prices stay >= 0, so the bound
    holds): replicas beyond the fewest (filling idle GPUs), API shares and tier mixes are all
    inside it. Instances are whole and cover at least the GPUs a product runs for certain on
    its decode type (:func:`fewest_gpus`), within availability. The least of this over every
    choice of decode type per product is the master of :func:`build_master` with those
    options and idle price f_g; its proven lower bound is returned, or, if larger, the same
    bound with instances taken as fractional (each product's cheapest option plus f_g for
    each GPU-hour it runs for certain)."""
    floor = {g: f for g, f in floor_prices(prob).items() if g in prob.instance_gpus}  # lowered where instances are
    options = [o for n in names for o in bound_options(prob, n, floor)]
    _, bound = solve_master(prob, options, floor, solver, deadline, gap)
    # without whole instances (n_g I_gh >= the GPUs, fractional), each product alone
    alone = sum(min(o.cost_usd + _credited(prob, 0.0, o.gpus, {g: -f for g, f in floor.items()})
                    for o in options if o.product == n) for n in names)
    return max(bound, alone)


def _own_plans(whole: FleetProblem, known: dict[str, dict[str, Found]], solver: str, deadline: Deadline,
               gap: float) -> dict[str, float]:
    """Each product's cheapest plan on its own (shared limits left out), with a lower bound on its
    own cost; a plan found is added to ``known``. Where the rule plans are exact
    (:func:`~fleetplan.optimizer.decomposition.product_optimum.own_optimum`) the optimum is proven without a
    solver; the other products are searched in order, each with its share of ``deadline`` and the
    cheapest plan in ``known`` as the plan to beat (see :func:`_searched_bound`)."""
    out: dict[str, float] = {}
    searched = []
    for name in known:
        alone = whole.restrict([name], limits=False)
        best = own_optimum(alone, name)
        if best is None:
            searched.append(name)
            continue
        plan = rule_plan(alone, alone.products[name], best.choice)
        assert plan is not None  # the optimum is a rule plan's cost
        _keep(known[name], rule_found(whole, plan), name)
        out[name] = best.cost_usd
    for i, name in enumerate(searched):
        deadline.progress.update("searching products with an API", i, len(searched))
        out[name] = _searched_bound(whole, known, name, solver, deadline.share(1.0 / (len(searched) - i)), gap)
    return out


def _searched_bound(whole: FleetProblem, known: dict[str, dict[str, Found]], name: str, solver: str,
                    deadline: Deadline, gap: float) -> float:
    """Search the product's cheapest plan on its own within ``deadline``, the cheapest plan in
    ``known`` as the plan to beat (a plan found is added); returns a lower bound on its own cost:
    the search's, the plan to beat less the gap when nothing beats it, else the least quick bound
    of its choices."""
    alone = whole.restrict([name], limits=False)
    best = min((float(f[0].objective or 0.0) for f in known[name].values()), default=math.inf)
    try:
        found = solve_by_configuration(alone, name, solver, deadline=deadline, mip_rel_gap=gap, incumbent_usd=best)
    except SolverError as err:  # nothing cheaper found in time: what the search proved
        if err.lower_bound is not None:
            return min(err.lower_bound, best * (1 - gap))
        return min((b for b, _ in cheapest_by_type(alone, name).values()), default=0.0)
    if found is None:
        return best * (1 - gap) if not math.isinf(best) else math.inf
    _keep(known[name], found, name)
    return _lower_bound(found[0])


def _lower_bound(res: SolveResult) -> float:
    """The proven lower bound of a search result (its cost less its gap)."""
    value = float(res.objective or 0.0)
    return value - abs(value) * (res.mip_gap or 0.0)


def _on_type(whole: FleetProblem, name: str, gpu: str, solver: str, deadline: Deadline, gap: float) -> Found | None:
    """The product's cheapest plan with its decode on ``gpu`` (None if none was found in time)."""
    try:
        return solve_by_configuration(whole.restrict([name], limits=False), name, solver,
                                      keep=lambda c: c.gpu == gpu, deadline=deadline, mip_rel_gap=gap,
                                      stage=f"planned again on {gpu}")
    except SolverError:
        return None


def group_cost(whole: FleetProblem, plans: dict[str, Found]) -> float:
    """USD per month of a group's product plans together: each plan's own cost plus the idle GPUs
    of the whole instances they need."""
    usage = [plan_gpus(f, n) for n, f in plans.items()]
    return sum(float(f[0].objective or 0.0) for f in plans.values()) + stranded_usd(whole, usage)


def choose_types(options: dict[str, list[Option]], whole: FleetProblem, idle: dict[str, float]) -> dict[str, str]:
    """The decode GPU type of each product: a local search (:meth:`TypeChoice.improve`) over
    ``options``, from each product's first option, every instance GPU at ``idle``."""
    state = TypeChoice(whole, options, idle)
    state.improve()
    return {n: options[n][i].gpu for n, i in state.chosen.items()}


def plan_group(whole: FleetProblem, names: list[str], solver: str, deadline: Deadline, gap: float
               ) -> tuple[list[Any], GroupBound]:
    """Plan a coupled group too large for one MIP (see the module's docstring): returns each
    product's :func:`~fleetplan.optimizer.decomposition.components.solve_component` outcome, in order, and a
    :class:`GroupBound`: a lower bound on the group's joint optimum (the larger of the sum of each
    product's own lower bound and :func:`instance_bound`) and what the plan's cost is made of.

    Every product first gets a plan without a solver on every decode GPU type
    (:func:`rule_plans_by_type`), so a plan exists whatever the deadline leaves; each product's own
    search (:func:`_own_plans`) and the searches on the types chosen together
    (:func:`_plans_on_chosen_types`) add better ones. A product without any plan (no
    configuration, or none found in time) is returned without one for the caller to report."""
    product_gap = max(gap, PRODUCT_GAP)
    known: dict[str, dict[str, Found]] = {
        n: {g: rule_found(whole, p) for g, p in rule_plans_by_type(whole, n).items()} for n in names}
    own = _own_plans(whole, known, solver, deadline.share(OWN_SHARE), product_gap)
    alone = {n: whole.restrict([n], limits=False) for n in names}
    if any(not known[n] for n in names):
        return [(alone[n], None, None, None, None) for n in names], GroupBound(0.0, 0.0)
    bound = max(sum(own.values()), instance_bound(whole, names, solver, deadline.share(BOUND_SHARE), MASTER_GAP))
    plans = _plans_on_chosen_types(whole, known, solver, deadline, product_gap)
    alone_usd = sum(min(_cost(f) for f in known[n].values()) for n in names)
    return [(alone[n], plans[n][1], None, plans[n][0], plans[n][2]) for n in names], GroupBound(bound, alone_usd, own)


def _cost(found: Found) -> float:
    """USD per month of a product plan (its search's objective)."""
    return float(found[0].objective or 0.0)


def _keep(known: dict[str, Found], found: Found, name: str) -> None:
    """Record ``found`` as the product's plan on its decode type if it is the cheapest there."""
    gpu = plan_gpu_type(found, name)
    if gpu not in known or float(found[0].objective or 0.0) < float(known[gpu][0].objective or 0.0) - 1e-6:
        known[gpu] = found


def _choose(whole: FleetProblem, known: dict[str, dict[str, Found]], start: dict[str, str],
            idle: dict[str, float], seen: dict[int, Any]) -> dict[str, str]:
    """:func:`choose_types` over the plans in ``known``, from the types in ``start``."""
    options = {n: [exact_option(whole, n, plans[start[n]], idle, seen)] +
               [exact_option(whole, n, f, idle, seen) for g, f in sorted(plans.items()) if g != start[n]]
               for n, plans in known.items()}
    return choose_types(options, whole, idle)


def idle_prices(whole: FleetProblem) -> list[dict[str, float]]:
    """What an idle instance GPU may end up costing, per GPU type, as the type search prices it: the
    plain price (left idle), the cheapest tier (running a spot replica, :func:`fill_idle_gpus`)
    and half-way; the search runs with each and the cheapest plan after filling is kept."""
    plain, floor = plain_prices(whole), floor_prices(whole)
    return [plain, {g: (plain[g] + floor[g]) / 2 for g in plain}, floor]


def _cheapest_choice(whole: FleetProblem, known: dict[str, dict[str, Found]], start: dict[str, str],
                     seen: dict[int, Any]) -> dict[str, Found]:
    """The plans :func:`_choose` picks with each of :func:`idle_prices`, and each product's own
    cheapest plan, idle GPUs filled: the cheapest of those within availability (the first among
    equals), so the group never costs more than its products planned alone."""
    best: tuple[bool, float, dict[str, Found]] | None = None
    own = {n: min(plans, key=lambda g: (_cost(plans[g]), g)) for n, plans in known.items()}
    for idle in [None, *idle_prices(whole)]:  # None: each product's cheapest plan, as planned alone
        types = own if idle is None else _choose(whole, known, start, idle, seen)
        plans = fill_idle_gpus(whole, {n: known[n][types[n]] for n in known})
        key = (not within_availability(whole, [plan_gpus(f, n) for n, f in plans.items()]), group_cost(whole, plans))
        if best is None or key < best[:2]:
            best = (*key, plans)
    assert best is not None
    return best[2]


def _plans_on_chosen_types(whole: FleetProblem, known: dict[str, dict[str, Found]], solver: str,
                           deadline: Deadline, gap: float) -> dict[str, Found]:
    """GPU types chosen together over the plans in ``known`` (from each product's cheapest), then
    each product whose chosen plan came without a solver is searched on its type, cheapest
    first, and the types are chosen again; at most :data:`PORTFOLIO_ROUNDS` rounds, or to the deadline.
    A product whose rule plans are exact is never searched: its rule plan on a decode type is its
    optimum there (the cheapest decode split on that type with the cheapest pool split).
    Last, each product is planned again with the others' GPUs in its instances
    (:func:`best_responses`)."""
    start = {n: min(plans, key=lambda g: (float(plans[g][0].objective or 0.0), g)) for n, plans in known.items()}
    idle, seen = idle_prices(whole)[1], {}
    types = _choose(whole, known, start, idle, seen)
    left, outer = deadline.left(), deadline
    # the searches stop in time for the final choice
    deadline = deadline.share(max(0.0, 1.0 - FINAL_CHOICE_S / left)) if left else deadline
    searched = {(n, g) for n in known if exact_by_rule(whole, whole.products[n]) for g in known[n]}
    for _ in range(PORTFOLIO_ROUNDS):
        todo = [n for n in known if known[n][types[n]][0].solver == "none" and (n, types[n]) not in searched]
        for i, name in enumerate(todo):
            if deadline.expired:
                deadline.note("products planned again on the GPU types chosen together")
                break
            deadline.progress.update("planning products on the GPU types chosen together", i, len(todo))
            searched.add((name, types[name]))
            found = _on_type(whole, name, types[name], solver, deadline.share(1.0 / (len(todo) - i)), gap)
            if found is not None:
                _keep(known[name], found, name)
        if not todo or deadline.expired:
            break
        types = _choose(whole, known, types, idle, seen)
    chosen = _cheapest_choice(whole, known, types, seen)
    return best_responses(whole, known, chosen, solver, outer, gap)


# Rounds of :func:`best_responses`, each product once per round: False keeps it to the
# configurations it runs (one MIP, fast), True widens to every configuration on its decode GPU type.
BEST_RESPONSE_ROUNDS = (False, True, False)


def best_responses(whole: FleetProblem, known: dict[str, dict[str, Found]], plans: dict[str, Found], solver: str,
                   deadline: Deadline, gap: float) -> dict[str, Found]:
    """``plans`` with each product in turn planned again, the others fixed: its configuration
    search (:func:`~fleetplan.optimizer.decomposition.search.solve_by_configuration`) runs on the product with
    whole instances, availability and the GPUs the other products run in each hour
    (``FleetProblem.gpus_elsewhere``), so its objective is its own cost plus every idle instance
    GPU of the group. A plan that lowers the group's cost replaces the product's (it may fill
    idle GPUs, serve its API share on them, or move to a GPU type whose instances have room).
    The group never costs more than ``plans``. Products in order, :data:`BEST_RESPONSE_ROUNDS`
    rounds, each product's search a share of ``deadline``; skipped where GPUs are limited per
    tier (the others' tiers are not tracked) or hours were merged. A plan found is also kept in
    ``known`` at its own cost (a plan of the product alone)."""
    if not whole.instance_gpus or whole.tier_availability or any(f[2].hour_of for f in plans.values()):
        return plans
    plain = plain_prices(whole)
    plans = dict(plans)
    names = list(plans)
    usage = {n: plan_gpus(f, n) for n, f in plans.items()}
    for widen in BEST_RESPONSE_ROUNDS:
        changed = False
        for i, name in enumerate(names):
            if deadline.expired:
                deadline.note("products planned again with the others' GPUs in their instances")
                return plans
            deadline.progress.update("planning products again with the others' instances", i, len(names))
            others_usd = sum(_cost(f) for n, f in plans.items() if n != name)
            before = others_usd + _cost(plans[name]) + stranded_usd(whole, list(usage.values()), plain)
            elsewhere: dict[str, Any] = {}
            for n, rows in usage.items():
                for g, row in rows.items():
                    if n != name and g in whole.instance_gpus:
                        elsewhere[g] = elsewhere.get(g, np.zeros(whole.hours)) + np.asarray(row)
            sub = _on_its_configuration(whole, plans[name], name, widen).derive(
                gpus_elsewhere={g: (plain[g], tuple(int(v) for v in row)) for g, row in sorted(elsewhere.items())})
            try:
                found = solve_by_configuration(sub, name, solver, deadline=deadline.share(1.0 / (len(names) - i)),
                                               mip_rel_gap=gap, incumbent_usd=before - others_usd,
                                               stage="planned again with the others' instances")
            except SolverError:
                continue
            if found is None:
                continue
            # the search's objective is the product's cost plus every idle instance GPU of the group
            trial = {**usage, name: plan_gpus(found, name)}
            if others_usd + _cost(found) < before - BEST_RESPONSE_SAVING_USD and within_availability(
                    whole, list(trial.values())):
                idle = stranded_usd(whole, list(trial.values()), plain)
                plans[name] = (replace(found[0], objective=_cost(found) - idle), found[1], found[2])
                usage, changed = trial, True
                _keep(known[name], plans[name], name)
        if not changed and widen:  # a fixed round that changes nothing is followed by a wider one
            break
    return plans


def _on_its_configuration(whole: FleetProblem, found: Found, name: str, widen: bool) -> FleetProblem:
    """The product alone with the shared limits, kept to the decode and pool configurations its
    plan ``found`` runs, or with ``widen`` to every configuration on its decode GPU type (with every
    pool); all of them when it runs none (the product is all-API)."""
    decode, pool = running(found, name)
    alone = whole.restrict([name])
    if not decode:
        return alone
    mine = alone.products[name]
    if widen:
        decode, pool = tuple(c for c in mine.candidates if c.gpu == decode[0].gpu), mine.pool
    return alone.derive(products={name: replace(mine, candidates=decode, pool=pool)})


class TypeChoice:
    """One option per product (:class:`Option`) with what it costs together: the options' costs
    plus every GPU-hour of the whole instances their GPUs need at ``idle`` per GPU type (the
    costs of :func:`exact_option` are credited for their own GPU-hours at the same price), plus
    a penalty per GPU over availability. :meth:`improve` moves products between options while that lowers the total."""

    def __init__(self, prob: FleetProblem, options: dict[str, list[Option]], idle: dict[str, float]) -> None:
        self.options = options
        types = sorted({g for opts in options.values() for o in opts for g, _ in o.gpus})
        row = {g: i for i, g in enumerate(types)}
        self.types = types
        self.weight = np.array([prob.weight(h) for h in range(prob.hours)])
        self.size = np.array([[prob.instance_gpus.get(g, 1)] for g in types], dtype=float)
        self.price = np.array([[idle.get(g, 0.0) if g in prob.instance_gpus else 0.0] for g in types])
        self.limit = np.array([[prob.gpu_availability.get(g, np.inf)] for g in types])
        # per option: the rows of the GPU types it runs and its GPUs there in each hour
        self.use = {n: [([row[g] for g, _ in o.gpus], np.array([r for _, r in o.gpus], dtype=float).reshape(-1, prob.hours))
                        for o in opts] for n, opts in options.items()}
        self.chosen = {n: 0 for n in options}  # the product's own plan comes first
        self.used = np.zeros((len(types), prob.hours))
        for n in options:
            rows, gpus = self.use[n][0]
            self.used[rows] += gpus

    def _cost(self, rows: list[int], used: Any) -> float:
        """USD per month of whole instances (and the availability penalty) of GPU types ``rows``
        running ``used`` GPUs in each hour."""
        size = self.size[rows]
        bought = np.ceil(used / size - 1e-9) * size
        over = np.clip(used - self.limit[rows], 0.0, None)
        return float(np.sum((self.price[rows] * bought) @ self.weight) + OVER_AVAILABILITY_USD * over.sum())

    def _move_gain(self, name: str, to: int) -> float:
        """USD per month saved by moving ``name`` to its option ``to`` (negative: it costs more)."""
        i = self.chosen[name]
        (old_rows, old), (new_rows, new) = self.use[name][i], self.use[name][to]
        rows = sorted(set(old_rows) | set(new_rows))
        at = {r: k for k, r in enumerate(rows)}
        before = self.used[rows]
        after = before.copy()
        for k, r in enumerate(old_rows):
            after[at[r]] -= old[k]
        for k, r in enumerate(new_rows):
            after[at[r]] += new[k]
        cost_old, cost_new = self.options[name][i].cost_usd, self.options[name][to].cost_usd
        return self._cost(rows, before) + cost_old - self._cost(rows, after) - cost_new

    def move(self, name: str, to: int) -> None:
        """Run ``name`` on its option ``to``."""
        rows, gpus = self.use[name][self.chosen[name]]
        self.used[rows] -= gpus
        rows, gpus = self.use[name][to]
        self.used[rows] += gpus
        self.chosen[name] = to

    def total(self) -> float:
        """USD per month of the chosen options with their instances (and availability penalty)."""
        rows = list(range(len(self.types)))
        return sum(self.options[n][i].cost_usd for n, i in self.chosen.items()) + self._cost(rows, self.used)

    def _best_move(self, name: str, avoid: str | None = None) -> tuple[float, int]:
        """The largest saving of moving ``name`` to another option (not on ``avoid``), and that
        option (first among equals)."""
        best = (-math.inf, self.chosen[name])
        for i, o in enumerate(self.options[name]):
            if i != self.chosen[name] and o.gpu != avoid:
                gain = self._move_gain(name, i)
                if gain > best[0]:
                    best = (gain, i)
        return best

    def _empty(self, gpu: str) -> bool:
        """Move every product whose decode runs on ``gpu`` to its best other option, one after
        another; keep the moves if together they save money, else undo them."""
        on = [n for n, i in self.chosen.items() if self.options[n][i].gpu == gpu]
        was, saved = dict(self.chosen), 0.0
        for name in on:
            gain, to = self._best_move(name, avoid=gpu)
            if math.isinf(gain):
                saved = -math.inf
                break
            saved += gain
            self.move(name, to)
        if on and saved >= IMPROVEMENT_USD:
            return True
        for name, i in was.items():
            if self.chosen[name] != i:
                self.move(name, i)
        return False

    def improve(self) -> None:
        """Local search: move single products while a move saves money, and empty whole GPU
        types (every product on it moved) while that saves money; a fixed order, so the result is
        the same every run. Stops when no move saves :data:`IMPROVEMENT_USD` or more."""
        for _ in range(MAX_SWEEPS):
            changed = False
            for name in self.options:
                gain, to = self._best_move(name)
                if gain >= IMPROVEMENT_USD:
                    self.move(name, to)
                    changed = True
            for gpu in self.types:
                changed |= self._empty(gpu)
            if not changed:
                return


# ---- plans without a solver: each hour's fewest replicas, held reserved up to a level, the rest
# on spot (within its share) and on demand


@dataclass(frozen=True)
class TierSplit:
    """Replicas of one configuration by pricing tier: ``held`` reserved all month, and in each hour
    ``on_demand`` and ``spot`` replicas; with their cost in USD per month."""

    held: int
    on_demand: tuple[int, ...]
    spot: tuple[int, ...]
    cost_usd: float

    def running(self, h: int) -> int:
        """Replicas running in hour ``h``."""
        return self.held + self.on_demand[h] + self.spot[h]


def level_costs(need: Any, prices: dict[str, float], hours_per_month: float, hour_weight: float,
                spot_share: float | None) -> tuple[Any, Any, Any]:
    """For every reserved level R from 0 to the peak of ``need`` (only 0 without a reserved tier):
    the levels, the cost in USD per month of holding R reserved all month and running each hour's
    excess over R on spot (up to ``spot_share`` of all replica-hours, None: uncapped, when spot is
    the cheaper) and on demand (inf where no tier takes the excess), and the spot replica-hours
    taken (NumPy arrays, one entry per level). :func:`split_by_tier` keeps the cheapest."""
    peak = int(need.max()) if need.size else 0
    levels = np.arange(peak + 1) if "reserved" in prices else np.zeros(1, dtype=int)
    excess = np.clip(need[None, :] - levels[:, None], 0, None).sum(axis=1).astype(float)
    in_use = np.maximum(need[None, :], levels[:, None]).sum(axis=1).astype(float)
    spot = np.zeros_like(excess)
    if "spot" in prices and ("on_demand" not in prices or prices["spot"] < prices["on_demand"]):
        spot = excess if spot_share is None else np.minimum(excess, np.floor(spot_share * in_use + 1e-9))
    rest = excess - spot
    cost = levels * prices.get("reserved", 0.0) * hours_per_month + hour_weight * spot * prices.get("spot", 0.0)
    cost = cost + hour_weight * rest * prices["on_demand"] if "on_demand" in prices else np.where(rest > 0, np.inf, cost)
    return levels, cost, spot


def split_by_tier(need: Any, prices: dict[str, float], hours_per_month: float, hour_weight: float,
                  spot_share: float | None) -> TierSplit | None:
    """The cheapest :class:`TierSplit` that runs at least ``need`` replicas each hour (hours of equal
    weight) when a reserved level R is held and each hour's excess over R runs on spot, up to
    ``spot_share`` of all replica-hours (None: uncapped) when spot is the cheaper, and on demand
    otherwise; None when no level is feasible. ``prices``: USD per replica-hour of each tier in play."""
    levels, cost, spot = level_costs(need, prices, hours_per_month, hour_weight, spot_share)
    best = int(np.argmin(cost))  # the lowest level among equals
    if math.isinf(cost[best]):
        return None
    held, left = int(levels[best]), int(spot[best])
    on_demand, spots = [], []
    for n in need.tolist():  # spot in hour order up to its total
        over = max(0, int(n) - held)
        take = min(over, left)
        left -= take
        spots.append(take)
        on_demand.append(over - take)
    return TierSplit(held, tuple(on_demand), tuple(spots), float(cost[best]))


@dataclass(frozen=True)
class RulePlan:
    """A plan of one product without a solver: one choice, each hour the fewest replicas (and pool
    replicas) that alone meet its demand, split by tier (:func:`split_by_tier`); with an API,
    some hours' last on-demand replica handed to the API (:func:`_remainders_to_api`)."""

    name: str
    choice: Choice
    decode: TierSplit
    pool: TierSplit | None
    cost_usd: float
    api_tokens_per_s: tuple[float, ...] = ()

    def gpus(self, hours: int) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """GPUs per type in each hour."""
        out: dict[str, list[int]] = {}
        for x, split in zip(self.choice, (self.decode, self.pool)):
            if x is not None and split is not None:
                row = out.setdefault(x.gpu, [0] * hours)
                for h in range(hours):
                    row[h] += x.gpus_per_replica * split.running(h)
        return tuple((g, tuple(r)) for g, r in sorted(out.items()))


def rule_plan(prob: FleetProblem, pd: ProductData, choice: Choice) -> RulePlan | None:
    """The :class:`RulePlan` of ``choice`` (pool mode needs its pool), or None when the rule does not
    apply: merged hours, an API minimum share, or no tier mix that meets demand."""
    c, k = choice
    if c is None or prob.hour_counts or pd.api_min_fraction > 0 or (c.mode == "pool") != (k is not None):
        return None
    cap = prob.spot_max_share if prob.spot_max_share < 1.0 else None
    hours = range(prob.hours)
    decode = split_by_tier(np.array([pd.replica_bound(c, h) for h in hours]),
                           {t: c.usd_per_replica_hour_in(t) for t in prob.tiers}, prob.hours_per_month,
                           prob.hour_weight, cap)
    pool = None
    if k is not None:
        pool = split_by_tier(np.array([pd.pool_bound(k, h) for h in hours]),
                             {t: k.usd_per_replica_hour_in(t) for t in prob.tiers}, prob.hours_per_month,
                             prob.hour_weight, None)
        if pool is None:
            return None
    if decode is None:
        return None
    cost = decode.cost_usd + (pool.cost_usd if pool is not None else 0.0) + pd.fixed_monthly_usd
    plan = RulePlan(pd.name, choice, decode, pool, cost)
    return _remainders_to_api(prob, pd, plan) if pd.has_api else plan


def _remainders_to_api(prob: FleetProblem, pd: ProductData, plan: RulePlan) -> RulePlan:
    """``plan`` with, in the hours where that saves most per token, the hour's last replica above
    the reserved ones dropped (on demand first, else spot) and the demand above the remaining
    replicas sent to the API, while the API stays within its share of the horizon's tokens and
    decode spot within its share."""
    c = plan.choice[0]
    assert c is not None and pd.api is not None
    u, d, split = c.usable_tokens_per_s, pd.demand_tokens_per_s, plan.decode
    price = {t: c.usd_per_replica_hour_in(t) * prob.hour_weight for t in ("on_demand", "spot")}
    per_token = pd.api.usd_per_output_token * SECONDS_PER_HOUR * prob.hour_weight
    moves = []  # (saving per token, hour, tier, tokens)
    for h in range(prob.hours):
        tier = "on_demand" if split.on_demand[h] else "spot" if split.spot[h] else None
        tokens = d[h] - (split.running(h) - 1) * u
        if tier is not None and 0 < tokens <= u and price[tier] > tokens * per_token:
            moves.append(((price[tier] - tokens * per_token) / tokens, h, tier, tokens))
    left = pd.api_max_fraction * sum(d)
    spot, running = sum(split.spot), sum(split.running(h) for h in range(prob.hours))
    rows = {"on_demand": list(split.on_demand), "spot": list(split.spot)}
    api, dropped, saved = [0.0] * prob.hours, 0.0, 0.0
    for _, h, tier, tokens in sorted(moves, key=lambda m: (-m[0], m[1])):
        after = spot - (tier == "spot")
        if tokens > left or (prob.spot_max_share < 1.0 and after > prob.spot_max_share * (running - 1) + 1e-9):
            continue
        left, running, spot = left - tokens, running - 1, after
        rows[tier][h] -= 1
        api[h] = tokens
        dropped += price[tier]
        saved += price[tier] - tokens * per_token
    if not saved:
        return plan
    decode = replace(split, on_demand=tuple(rows["on_demand"]), spot=tuple(rows["spot"]), cost_usd=split.cost_usd - dropped)
    return replace(plan, decode=decode, cost_usd=plan.cost_usd - saved, api_tokens_per_s=tuple(api))


def rule_plans_by_type(prob: FleetProblem, name: str) -> dict[str, RulePlan]:
    """Per decode GPU type, the cheapest :class:`RulePlan` of the product's configurations there
    (in pool mode with the pool of the cheapest split,
    :func:`~fleetplan.optimizer.decomposition.product_optimum.best_pool`; first by key among equals)."""
    pd = prob.products[name]
    pool = best_pool(prob, pd)
    best: dict[str, RulePlan] = {}
    for c in sorted(pd.candidates, key=lambda c: c.key):
        plan = rule_plan(prob, pd, (c, pool if c.mode == "pool" else None))
        if plan is not None and (c.gpu not in best or plan.cost_usd < best[c.gpu].cost_usd):
            best[c.gpu] = plan
    return best


def rule_found(prob: FleetProblem, plan: RulePlan) -> Found:
    """A :class:`RulePlan` as a search result: its columns keyed as the formulation keys them (the
    others read as zero), on a problem of the product with only that choice."""
    keys: list[tuple[str, tuple[Any, ...]]] = []
    values: list[float] = []
    for prefix, x, split in (("", plan.choice[0], plan.decode), ("pool_", plan.choice[1], plan.pool)):
        if x is None or split is None:
            continue
        keys += [(f"{prefix}use", (x.key,)), (f"{prefix}reserved", (x.key,))]
        values += [1.0, float(split.held)]
        for h in range(prob.hours):
            keys += [(f"{prefix}on_demand", (x.key, h)), (f"{prefix}spot", (x.key, h))]
            values += [float(split.on_demand[h]), float(split.spot[h])]
    if prob.products[plan.name].has_api:
        keys.append(("self_host", (plan.name,)))
        values.append(1.0)
        c = plan.choice[0]
        assert c is not None
        for h, tokens in enumerate(plan.api_tokens_per_s):
            keys += [("api", (plan.name, h)), ("api_for", (c.key, h))]
            values += [tokens, tokens]
    names = [f"{family}[{'/'.join(str(i) for i in index)}]" for family, index in keys]
    lp = LinearProblem(col_names=names, col_keys=keys, col_lower=[0.0] * len(names),
                       col_upper=[math.inf] * len(names), col_integer=[True] * len(names),
                       objective=[0.0] * len(names), objective_constant=plan.cost_usd)
    res = SolveResult(solver="none", status="time_limit", termination="planned without a solver",
                      objective=plan.cost_usd, values=values, mip_gap=None)
    sub = with_choices(prob.restrict([plan.name], limits=False), plan.name, [plan.choice])
    return res, lp, sub


# ---- idle instance GPUs put to work


def _spot_slots(whole: FleetProblem, name: str, found: Found) -> list[tuple[str, Any, bool]]:
    """The parts of a product's plan that can take more spot replicas: (column prefix, the
    configuration, whether the spot share cap applies), decode first."""
    decode, pool = running(found, name)
    return [("", c, True) for c in decode] + [("pool_", k, False) for k in pool]


class _SpotShare:
    """Each product's decode spot replica-hours and all its decode replica-hours, to keep the spot
    share cap while spot replicas are added."""

    def __init__(self, whole: FleetProblem, plans: dict[str, Found], values: dict[str, list[float]]) -> None:
        self.cap = whole.spot_max_share
        self.spot: dict[str, float] = {}
        self.total: dict[str, float] = {}
        for name, (_, lp, sub) in plans.items():
            spot = total = 0.0
            for prefix, c, capped in _spot_slots(whole, name, plans[name]):
                if not capped:
                    continue
                held = values[name][j] if (j := lp.find("reserved", c.key)) is not None else 0.0
                for h in range(sub.hours):
                    row = {t: values[name][j] for t in sub.hourly_tiers
                           if (j := lp.find(t, c.key, h)) is not None}
                    spot += row.get("spot", 0.0)
                    total += held + sum(row.values())
            self.spot[name], self.total[name] = spot, total

    def allows(self, name: str) -> bool:
        """Whether one more decode spot replica-hour keeps the product within the cap."""
        return self.spot[name] + 1 <= self.cap * (self.total[name] + 1) + 1e-9

    def add(self, name: str) -> None:
        """Count one more decode spot replica-hour."""
        self.spot[name] += 1
        self.total[name] += 1


def _room(whole: FleetProblem, gpu: str, used: float, tp: int) -> bool:
    """Whether ``tp`` more GPUs of ``gpu`` fit in the idle GPUs of the instances bought for ``used``
    and within its availability (a GPU type with a spot limit of its own is left alone)."""
    size = whole.instance_gpus.get(gpu)
    if not size or (gpu, "spot") in whole.tier_availability:
        return False
    return math.ceil(used / size - 1e-9) * size - used >= tp and used + tp <= whole.gpu_availability.get(gpu, math.inf)


def fill_idle_gpus(whole: FleetProblem, plans: dict[str, Found]) -> dict[str, Found]:
    """``plans`` with idle GPUs of whole instances running spot replicas where spot costs less
    than the plain price an idle GPU is charged: hour by hour, the products' decode (within their
    spot share and each hour's replica bound) and pool replicas (within the bound) take a spot
    replica while one fits in the idle GPUs of their type and its availability; products in
    order. Each replica added saves (plain - spot) x TP x hour weight."""
    if "spot" not in whole.tiers or not whole.instance_gpus or any(f[2].hour_of for f in plans.values()):
        return plans
    plain = plain_prices(whole)
    values = {n: list(f[0].values) for n, f in plans.items()}
    usage: dict[str, Any] = {}
    for n, f in plans.items():
        for g, row in plan_gpus(f, n).items():
            usage[g] = usage.get(g, np.zeros(whole.hours)) + np.asarray(row, dtype=float)
    share = _SpotShare(whole, plans, values)
    added = {n: 0.0 for n in plans}
    slots = [(n, *s) for n, f in plans.items() for s in _spot_slots(whole, n, f)
             if s[1].usd_per_replica_hour_in("spot") < s[1].gpus_per_replica * plain[s[1].gpu]]
    for h in range(whole.hours):
        for name, prefix, x, capped in slots:
            j = plans[name][1].find(f"{prefix}spot", x.key, h)
            pd = whole.products[name]
            bound = pd.replica_bound(x, h) if capped else pd.pool_bound(x, h)
            while (j is not None and values[name][j] + 1 <= bound and _room(whole, x.gpu, usage[x.gpu][h], x.gpus_per_replica)
                   and (not capped or share.allows(name))):
                values[name][j] += 1
                usage[x.gpu][h] += x.gpus_per_replica
                if capped:
                    share.add(name)
                added[name] += x.usd_per_replica_hour_in("spot") * whole.weight(h)
    return {n: (replace(f[0], values=values[n], objective=float(f[0].objective or 0.0) + added[n]), f[1], f[2])
            if added[n] else f for n, f in plans.items()}

"""A Lagrangian bound on a coupled group planned product by product: the rows that couple the
products priced with multipliers, each product then bounded on its own (dual decomposition by
product).

The joint problem of a group is

    min  sum_p own_p(x_p) + sum_{g,h} plain_g w_h (n_g I_gh - G_gh)
    s.t. G_gh = sum_p G_pgh(x_p) <= A_g        (GPU availability, scarce types g)
         n_g I_gh >= G_gh, I_gh integer         (whole instances)

with own_p a product's replicas, API and fixed cost, G_pgh its GPUs of type g in hour h and w_h
the hour's weight. Moving the availability rows into the objective with prices nu_gh >= 0 (USD
per month per GPU in hour h) gives, for every nu,

    L(nu) = sum_p min_{x_p} [own_p(x_p) + sum_{g,h} nu_gh G_pgh(x_p)] - sum_{g,h} nu_gh A_g,

a lower bound on the joint optimum (weak duality; idle instance GPUs cost >= 0 and are dropped).
Each product's term is its own problem with a GPU-hour surcharge: for a product without an API
(:func:`~fleetplan.optimizer.decomposition.product_optimum.exact_by_rule`) its exact optimum,
found without a solver (:func:`priced_optimum`: per configuration, each reserved level's tier
split plus the surcharges of the replicas it runs); for any other product its proven lower bound
on its own (surcharges >= 0 only add to its cost). At nu = 0 the bound is the sum of the products'
own bounds. The multipliers move by projected subgradient steps (Polyak's step towards the
plan's cost, halved when the bound stalls); the best bound over the iterations is the result.

Why the whole-instance rows are not priced: with a multiplier lambda_gh >= 0 on
n_g I_gh - G_gh >= 0 the instances' term is (plain_g w_h - lambda_gh) n_g I_gh, which is
unbounded below unless lambda_gh <= plain_g w_h, and then least at I = 0; the products' terms
get a credit (plain_g w_h - lambda_gh) per GPU-hour, which can only lower them. The best such
multiplier is lambda = plain x w, where the bound is again the sum of the products' own bounds:
a Lagrangian relaxation cannot see instance rounding, since the relaxed instances are as good as
fractional (the bound of a relaxation is at most the joint LP over the products' convex hulls,
whose instances are fractional). Instance rounding is priced by
:func:`~fleetplan.optimizer.decomposition.portfolio.instance_bound` instead.

This module bounds; it does not plan, search or solve a MIP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fleetplan.optimizer.common.enums import PrefillMode
from fleetplan.optimizer.decomposition.portfolio import level_costs
from fleetplan.optimizer.decomposition.product_optimum import exact_by_rule, needs
from fleetplan.optimizer.problem_data.problem import FleetProblem, ProductData
from fleetplan.optimizer.runtime.deadline import Deadline

# Subgradient iterations at most, the Polyak step's first factor, and how many iterations
# without a better bound halve it; it stops when the factor falls below the last figure.
MAX_ITERATIONS = 200
FIRST_STEP = 1.0
STALL_ITERATIONS = 5
SMALLEST_STEP = 1e-3


@dataclass(frozen=True)
class Part:
    """One decode or prefill-pool configuration of a product without an API, ready to be priced:
    its GPU type and GPUs per replica, the fewest replicas that alone meet each hour's demand,
    and per reserved level (0 up to the peak) the cost in USD per month of its cheapest tier
    split at that level (:func:`~fleetplan.optimizer.decomposition.portfolio.level_costs`)."""

    gpu: str
    gpus_per_replica: int
    pool_mode: bool
    need: Any
    levels: Any
    cost_usd: Any

    def priced(self, surcharge: Any) -> tuple[float, Any]:
        """Its cheapest cost with ``surcharge`` (USD per month per GPU in each hour, None: none)
        added for every GPU it runs, and the GPUs it runs in each hour at that level (a level R
        held runs max(need, R) replicas in every hour)."""
        running = self.gpus_per_replica * _running(self.need, self.levels)
        total = self.cost_usd if surcharge is None else self.cost_usd + running @ surcharge
        best = int(total.argmin())  # the lowest level among equals
        return float(total[best]), running[best]


def _running(need: Any, levels: Any) -> Any:
    """Replicas running in each hour (columns) at each reserved level (rows)."""
    import numpy as np

    return np.maximum(need[None, :], levels[:, None])


@dataclass(frozen=True)
class RuleProduct:
    """A product without an API as the dual function prices it: its fixed cost, its decode
    configurations (colocated and pool mode) and its pool configurations."""

    name: str
    fixed_usd: float
    decode: tuple[Part, ...]
    pools: tuple[Part, ...]


def rule_product(prob: FleetProblem, pd: ProductData) -> RuleProduct:
    """The :class:`RuleProduct` of ``pd`` (only where the rule plans are exact)."""
    def parts(items: list[Any], pool: bool) -> tuple[Part, ...]:
        if not items:
            return ()
        need = needs(pd, items, pool=pool)
        cap = prob.spot_max_share if not pool and prob.spot_max_share < 1.0 else None
        out = []
        for x, row in zip(items, need):
            levels, cost, _ = level_costs(row, {t: x.usd_per_replica_hour_in(t) for t in prob.tiers},
                                          prob.hours_per_month, prob.hour_weight, cap)
            if math.isfinite(float(cost.min())):
                out.append(Part(x.gpu, x.gpus_per_replica, not pool and x.mode == PrefillMode.POOL, row, levels, cost))
        return tuple(out)

    return RuleProduct(pd.name, pd.fixed_monthly_usd, parts(list(pd.candidates), False), parts(list(pd.pool), True))


def priced_optimum(product: RuleProduct, surcharge: dict[str, Any], hours: int) -> tuple[float, dict[str, Any]]:
    """The exact optimum of a product without an API when every GPU of type g it runs in hour h
    costs ``surcharge[g][h]`` more (USD per month; types not listed: nothing), and its GPUs per
    type and hour there. Decode and pool are independent (no API), so it is the cheapest
    colocated decode, or the cheapest pool-mode decode plus the cheapest pool."""
    import numpy as np

    def best(parts: tuple[Part, ...]) -> tuple[float, str, Any] | None:
        found = None
        for part in parts:
            cost, gpus = part.priced(surcharge.get(part.gpu))
            if found is None or cost < found[0]:
                found = (cost, part.gpu, gpus)
        return found

    options = []
    colocated = best(tuple(p for p in product.decode if not p.pool_mode))
    if colocated is not None:
        options.append((colocated[0], [colocated[1:]]))
    in_pool, pool = best(tuple(p for p in product.decode if p.pool_mode)), best(product.pools)
    if in_pool is not None and pool is not None:
        options.append((in_pool[0] + pool[0], [in_pool[1:], pool[1:]]))
    if not options:
        return math.inf, {}
    cost, rows = min(options, key=lambda o: o[0])
    used: dict[str, Any] = {}
    for gpu, row in rows:
        used[gpu] = used.get(gpu, np.zeros(hours)) + row
    return product.fixed_usd + cost, used


@dataclass
class LagrangianBound:
    """The best bound found (USD per month), the multipliers that gave it (USD per month per GPU,
    per scarce GPU type and hour), the bound at zero multipliers and the iterations run."""

    bound_usd: float
    at_zero_usd: float
    iterations: int
    multipliers: dict[str, Any] = field(default_factory=dict)


def dual_value(products: list[RuleProduct], fixed_usd: float, prices: dict[str, Any], availability: dict[str, int],
               hours: int) -> tuple[float, dict[str, Any]]:
    """L(nu) for the multipliers ``prices`` on the availability rows of ``availability``: the
    products' priced optima plus ``fixed_usd`` (the other products' own bounds), less nu x A; and
    its subgradient, the GPUs the priced optima run per scarce type and hour less A."""
    import numpy as np

    total = fixed_usd - sum(float(prices[g].sum()) * a for g, a in availability.items())
    used = {g: np.zeros(hours) for g in availability}
    for product in products:
        cost, gpus = priced_optimum(product, prices, hours)
        total += cost
        for g in availability:
            if g in gpus:
                used[g] += gpus[g]
    return total, {g: used[g] - a for g, a in availability.items()}


def lagrangian_bound(prob: FleetProblem, names: list[str], own_usd: dict[str, float], upper_usd: float,
                     deadline: Deadline) -> LagrangianBound:
    """The Lagrangian bound of products ``names`` of ``prob`` with its availability rows priced
    (see the module docstring): ``own_usd`` is each product's proven lower bound on its own (used
    as is for products whose rule plans are not exact), ``upper_usd`` the cost of a plan of the
    group (the target of Polyak's step). Iterates until the multipliers stop moving, the step
    factor is spent, :data:`MAX_ITERATIONS` or ``deadline``; the result never falls below the
    bound at zero multipliers."""
    import numpy as np

    hours = prob.hours
    scarce = {g: a for g, a in sorted(prob.gpu_availability.items())}
    rule = [rule_product(prob, prob.products[n]) for n in names if exact_by_rule(prob, prob.products[n])]
    fixed = sum(own_usd[n] for n in names if not exact_by_rule(prob, prob.products[n]))
    prices = {g: np.zeros(hours) for g in scarce}
    value, sub = dual_value(rule, fixed, prices, scarce, hours)
    result = LagrangianBound(value, value, 1, {g: p.copy() for g, p in prices.items()})
    factor, stall = FIRST_STEP, 0
    while result.iterations < MAX_ITERATIONS and factor >= SMALLEST_STEP and not deadline.expired:
        # the projected subgradient: a row whose price is zero and that holds cannot move
        step = {g: np.where((prices[g] > 0) | (sub[g] > 0), sub[g], 0.0) for g in scarce}
        norm = sum(float(s @ s) for s in step.values())
        if norm == 0.0 or upper_usd <= value:
            break  # every priced row holds with equality or is unpriced and slack: L is at its maximum
        t = factor * (upper_usd - value) / norm
        prices = {g: np.maximum(0.0, prices[g] + t * step[g]) for g in scarce}
        value, sub = dual_value(rule, fixed, prices, scarce, hours)
        result.iterations += 1
        if value > result.bound_usd + 1e-6:
            result.bound_usd, result.multipliers, stall = value, {g: p.copy() for g, p in prices.items()}, 0
        else:
            stall += 1
            if stall >= STALL_ITERATIONS:
                factor, stall = factor / 2, 0
    return result

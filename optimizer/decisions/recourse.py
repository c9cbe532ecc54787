"""An outcome's recourse cost for every commitment, solved product by product and hour by hour.

Once the GPUs committed per type are fixed, an outcome's fleet MIP
(:mod:`fleetplan.optimizer.mip.formulation`) falls apart when its products share nothing but the
commitment (no GPU availability, whole instances, site power, prefill pools or request mixes):

- **by product**: each product runs one configuration c with r reserved replicas (free, already
  paid) and buys the rest hour by hour; its cost Q_c(r) depends on nothing else, and the outcome's
  cost with commitment R is the best split of R between the products
  (V(R) = min sum_p Q_{c_p}(r_p) with sum over products on type g of GPUs(c_p) x r_p <= R_g),
  found by dynamic programming over the products on the grid of commitments;
- **by hour**: given (c, r), hour h needs n_h = ceil((D_h - u r) / u) more replicas (u: a
  replica's usable tokens/s), or fewer with the API taking the rest. Taking one replica fewer in
  an hour is a *move*; the first move of an hour hands the API the fraction of a replica its
  demand needed (tau_h tokens/s), every further move a whole replica (u). What links the hours is
  two horizon sums: the API's share cap (tokens moved <= A) and the spot share cap (spot
  replica-hours <= s x all replica-hours). Both depend only on how many moves M are taken and the
  tokens they move, and for a given M the fewest tokens are moved by the M smallest moves. So
  Q_c(r) = min over M of [replica cost of N0 - M replica-hours, spot filling its cap] + [API
  cost of the M smallest moves], over the M whose tokens fit the cap: exact, in a sort and a scan.

Hours merged by :func:`~fleetplan.optimizer.problem_data.reductions.merged` (only when no cap can
bind) are priced one by one with their weights.

Owns these costs, the grid of an outcome's cost over commitments and the plan behind any point of
it (:func:`recourse_plan`, :func:`plan_columns`: the plan as a column vector of the outcome's
fleet MIP, which a caller checks against that MIP's rows); it prints nothing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fleetplan.optimizer.common.defaults import CEILING_TOLERANCE
from fleetplan.optimizer.common.enums import Tier
from fleetplan.optimizer.problem_data.candidates import Candidate
from fleetplan.optimizer.problem_data.problem import SECONDS_PER_HOUR, FleetProblem, ProductData
from fleetplan.optimizer.traffic.uncertainty import Overrides

# objective families an outcome scales by its price overrides, and the override that scales each
PRICE_SCALED = {"on_demand": "on_demand_price_scale", "pool_on_demand": "on_demand_price_scale",
                "spot": "spot_price_scale", "pool_spot": "spot_price_scale", "api": "api_price_scale"}
CAP_TOLERANCE = 1e-9  # relative slack on the horizon caps (the MIP's rows hold to the solver's tolerance)
MAX_GRID_POINTS = 2_000_000  # commitments an outcome's grid may hold before the split is left to the MIP


def not_separable(prob: FleetProblem) -> str | None:
    """Why ``prob``'s products share more than the commitment (the reason, one phrase), or None."""
    if prob.gpu_availability or prob.tier_availability:
        return "GPU availability limits are shared by the products"
    if prob.instance_gpus or prob.gpus_elsewhere:
        return "whole instances are shared by the products"
    if prob.site_power:
        return "site power limits are shared by the products"
    if Tier.RESERVED not in prob.tiers:
        return "no reserved tier"
    for p in prob.products.values():
        if p.is_mix or p.pool or p.members:
            return f"product {p.name} is a request mix, a pooled group or has a prefill pool"
        if any(c.mode == "pool" for c in p.candidates):
            return f"product {p.name} may run a prefill pool"
        if p.has_api and p.api_min_fraction > 0:
            return f"product {p.name} has a least API share"
    if prob.hour_counts and _capped(prob):
        return "merged hours under a horizon cap"
    return None


def _capped(prob: FleetProblem) -> bool:
    """Whether a horizon sum can bind: a spot share cap below 1 or an API share cap below 1."""
    spot = Tier.SPOT in prob.tiers and prob.spot_max_share < 1.0
    return spot or any(p.has_api and p.api_max_fraction < 1.0 for p in prob.products.values())


@dataclass(frozen=True)
class Prices:
    """What one configuration pays in one outcome: USD per replica-hour on demand and on spot (None
    when the tier is not offered), USD per API token/s held for an hour, and the month's hours per
    modelled hour."""

    on_demand: float | None
    spot: float | None
    api: float
    hour_weight: float


def prices_of(prob: FleetProblem, pd: ProductData, c: Candidate, ov: Overrides) -> Prices:
    """The prices of configuration ``c`` of ``pd`` in ``prob`` under the outcome's overrides."""
    def tier(t: Tier) -> float | None:
        if t not in prob.tiers:
            return None
        return c.usd_per_replica_hour_in(t) * float(getattr(ov, PRICE_SCALED[str(t)]))

    api = 0.0
    if pd.has_api:
        assert pd.api is not None
        api = pd.api.usd_per_output_token * SECONDS_PER_HOUR * float(getattr(ov, PRICE_SCALED["api"]))
    spot = tier(Tier.SPOT)
    if spot is not None and ov.spot_preemption > 0.0:  # the lost share served on demand (as recourse_objective)
        spot += ov.spot_preemption * ov.on_demand_price_scale * c.usd_per_replica_hour_in(Tier.ON_DEMAND)
    return Prices(tier(Tier.ON_DEMAND), spot, api, prob.hour_weight)


@dataclass(frozen=True)
class Hours:
    """One (configuration, reserved replicas) over the horizon: replicas each hour needs beyond the
    reserved ones (``need``), the tokens/s its first move hands the API (``first``), the API's
    token cap over the horizon and the spot share cap."""

    need: Any  # int array, one entry per modelled hour
    first: Any  # float array: tokens/s of the hour's first move (0 where nothing is needed)
    usable: float
    api_cap: float
    spot_share: float
    reserved_hours: Any  # float, or an array with a row per count of reserved replicas (:func:`_hours_rows`)


def hours_of(prob: FleetProblem, pd: ProductData, c: Candidate, r: int) -> Hours:
    """What ``r`` reserved replicas of ``c`` leave to buy hour by hour."""
    return _hours_from(np.asarray(pd.demand_tokens_per_s, dtype=float), _counts(prob), prob, pd, c, r)


def _hours_from(d: Any, counts: Any, prob: FleetProblem, pd: ProductData, c: Candidate, r: int) -> Hours:
    """:func:`hours_of` with the demand ``d`` and the hours' counts given as arrays."""
    return _row(_hours_rows(d, counts, prob, pd, c, np.array([r])), 0)


def replica_cost(n: Any, hours: Hours, p: Prices) -> tuple[Any, Any]:
    """(USD per month, spot replica-hours) of ``n`` replica-hours bought hour by hour (an array),
    spot filling its share cap first when cheaper; infinite where the tiers offered cannot buy them."""
    n = np.asarray(n, dtype=float)
    cap = np.floor(hours.spot_share * (hours.reserved_hours + n) + 1e-9) if p.spot is not None else np.zeros_like(n)
    spot_n = np.minimum(n, cap)
    if p.on_demand is None:
        cost = np.where(spot_n >= n, p.hour_weight * (p.spot or 0.0) * n, math.inf)
        return cost, spot_n
    if p.spot is None or p.spot >= p.on_demand:
        return p.hour_weight * p.on_demand * n, np.zeros_like(n)
    return p.hour_weight * (p.on_demand * n - (p.on_demand - p.spot) * spot_n), spot_n


def moves(hours: Hours) -> tuple[Any, Any]:
    """(M, tokens/s moved to the API by the M smallest moves) for M = 0 .. all moves."""
    first = np.sort(hours.first[hours.need > 0])
    whole = int(hours.need.sum()) - len(first)
    tokens = np.concatenate(([0.0], np.cumsum(first), first.sum() + hours.usable * np.arange(1, whole + 1)))
    return np.arange(len(tokens)), tokens


def best_moves(hours: Hours, p: Prices, api: bool) -> tuple[int, float]:
    """(moves taken, USD per month) of the cheapest way to buy what ``hours`` leaves (see the
    module docstring): a scan over the number of moves whose tokens fit the API's cap."""
    n0 = int(hours.need.sum())
    if not api:
        cost, _ = replica_cost(np.asarray([n0]), hours, p)
        return 0, float(cost[0])
    m, tokens = moves(hours)
    cost, _ = replica_cost(n0 - m, hours, p)
    total = cost + p.hour_weight * p.api * tokens
    total = np.where(tokens <= hours.api_cap * (1 + CAP_TOLERANCE) + CAP_TOLERANCE, total, math.inf)
    k = int(np.argmin(total))
    return k, float(total[k])


def merged_hours_cost(prob: FleetProblem, hours: Hours, p: Prices, api: bool) -> tuple[Any, float]:
    """(moves per modelled hour, USD per month) when no cap binds (merged hours): each hour
    takes its first move when the API's share of a replica is cheaper than the replica, and every
    move when a whole replica's tokens are."""
    offered = [x for x in (p.on_demand, p.spot) if x is not None]
    per = min(offered) if offered else math.inf
    take = np.zeros_like(hours.need)
    if api:
        first = (hours.need > 0) & (p.api * hours.first < per)
        take = np.where(first, np.where(p.api * hours.usable < per, hours.need, 1), 0)
    tokens = np.where(take > 0, hours.first + hours.usable * (take - 1), 0.0)
    weights = prob.hour_weight * _counts(prob)
    left = hours.need - take
    cost = float(np.dot(weights, np.where(left > 0, per * left, 0.0) + p.api * tokens))
    return take, cost


def config_costs(prob: FleetProblem, pd: ProductData, c: Candidate, ov: Overrides) -> tuple[float, ...]:
    """Q_c(r) for r = 0 .. the replicas of ``c`` that alone meet the peak: the USD per month of
    running ``pd`` on ``c`` with r reserved replicas (free) and the rest bought hour by hour."""
    p = prices_of(prob, pd, c, ov)
    fixed = pd.fixed_monthly_usd if pd.has_api else 0.0
    d, counts = np.asarray(pd.demand_tokens_per_s, dtype=float), _counts(prob)
    rows = _hours_rows(d, counts, prob, pd, c, np.arange(pd.replica_bound(c) + 1))
    if not prob.hour_counts and not pd.has_api:  # no move to take: every r at once, as best_moves prices one
        costs, _ = replica_cost(rows.need.sum(axis=1), rows, p)
        return tuple(float(x + fixed) for x in costs)
    out = []
    for r in range(len(rows.need)):
        hours = _row(rows, r)
        if prob.hour_counts:
            _, cost = merged_hours_cost(prob, hours, p, pd.has_api)
        else:
            _, cost = best_moves(hours, p, pd.has_api)
        out.append(cost + fixed)
    return tuple(float(x) for x in out)


def _hours_rows(d: Any, counts: Any, prob: FleetProblem, pd: ProductData, c: Candidate, r: Any) -> Hours:
    """What each count of reserved replicas in the array ``r`` leaves to buy hour by hour, at once:
    ``need`` and ``first`` with a row per count, ``reserved_hours`` an array (one row: :func:`_row`)."""
    u = c.usable_tokens_per_s
    e = d[None, :] - u * r[:, None]
    need = np.maximum(0, np.ceil(e / u - CEILING_TOLERANCE)).astype(np.int64)
    first = np.where(need > 0, e - u * (need - 1), 0.0)
    cap = pd.api_max_fraction * float(np.dot(counts, d)) if pd.has_api else 0.0
    spot = prob.spot_max_share if Tier.SPOT in prob.tiers else 0.0
    return Hours(need, first, u, cap, spot, r * counts.sum())


def _row(rows: Hours, i: int) -> Hours:
    """Row ``i`` of :func:`_hours_rows`' answer, as :func:`hours_of` gives it for one count."""
    return Hours(rows.need[i], rows.first[i], rows.usable, rows.api_cap, rows.spot_share,
                 float(rows.reserved_hours[i]))


@dataclass(frozen=True)
class Option:
    """One configuration a product may run in an outcome: its GPU type, GPUs per replica and the
    cost (USD per month) with r = 0, 1, ... reserved replicas."""

    key: str
    gpu: str
    gpus_per_replica: int
    cost_usd: tuple[float, ...]


@dataclass(frozen=True)
class ProductRecourse:
    """A product's options in an outcome, and the cost of sending it all to the API (infinite
    when it may not)."""

    name: str
    options: tuple[Option, ...]
    api_only_usd: float


@dataclass(frozen=True)
class OutcomeRecourse:
    """Every product's options in one outcome, plus what is paid whatever they do (USD per month)."""

    products: tuple[ProductRecourse, ...]
    constant_usd: float


def outcome_recourse(prob: FleetProblem, ov: Overrides) -> OutcomeRecourse:
    """The options of every product of ``prob`` under the outcome's overrides ``ov``."""
    products = []
    constant = 0.0
    for pd in prob.products.values():
        options = tuple(Option(c.key, c.gpu, c.gpus_per_replica, config_costs(prob, pd, c, ov)) for c in pd.candidates)
        api_only = math.inf
        if pd.has_api and pd.api_max_fraction >= 1.0:
            p = prices_of(prob, pd, pd.candidates[0], ov) if pd.candidates else None
            per = p.api if p is not None else pd.api.usd_per_output_token * SECONDS_PER_HOUR * float(  # type: ignore[union-attr]
                getattr(ov, PRICE_SCALED["api"]))
            api_only = per * sum(prob.weight(h) * d for h, d in enumerate(pd.demand_tokens_per_s))
        if not pd.has_api:
            constant += pd.fixed_monthly_usd
        products.append(ProductRecourse(pd.name, options, api_only))
    return OutcomeRecourse(tuple(products), constant)


# ----------------------------------------------------------------------------- the grid over commitments


def most_gpus(rec: OutcomeRecourse, gpu: str) -> int:
    """The most GPUs of type ``gpu`` the outcome's products could hold reserved (beyond it, more
    commitment changes nothing)."""
    return sum(max((o.gpus_per_replica * (len(o.cost_usd) - 1) for o in p.options if o.gpu == gpu), default=0)
               for p in rec.products)


def _steps(p: ProductRecourse, gpu: str) -> list[tuple[int, float, str, int]]:
    """(GPUs, USD per month, option key, reserved replicas) of the product's cheapest use of each
    number of reserved GPUs of type ``gpu``, only where the cost falls."""
    best: dict[int, tuple[float, str, int]] = {}
    for o in p.options:
        if o.gpu != gpu:
            continue
        for r, q in enumerate(o.cost_usd):
            y = o.gpus_per_replica * r
            if y not in best or q < best[y][0]:
                best[y] = (q, o.key, r)
    out: list[tuple[int, float, str, int]] = []
    for y in sorted(best):
        q, key, r = best[y]
        if not out or q < out[-1][1]:
            out.append((y, q, key, r))
    return out


def _unreserved(p: ProductRecourse, gpus: Sequence[str]) -> tuple[float, str, int]:
    """The product's cheapest choice holding no committed GPU: all to the API, or an option on a
    type without a commitment term (no reserved replica)."""
    best = (p.api_only_usd, "", 0)
    for o in p.options:
        if o.gpu not in gpus and o.cost_usd[0] < best[0]:
            best = (o.cost_usd[0], o.key, 0)
    return best


def _shifted(v: Any, axis: int, y: int) -> Any:
    """``v`` moved ``y`` places up ``axis`` (index i reads i - y), as a view of its valid part."""
    index = [slice(None)] * v.ndim
    index[axis] = slice(0, v.shape[axis] - y)
    return v[tuple(index)]


def _tail(v: Any, axis: int, y: int) -> tuple[slice, ...]:
    index = [slice(None)] * v.ndim
    index[axis] = slice(y, None)
    return tuple(index)


def add_product(v: Any, p: ProductRecourse, gpus: Sequence[str]) -> Any:
    """The grid ``v`` (best cost of the products so far for each commitment) with product ``p``
    added: for each commitment, the cheapest of its choices on what the others leave."""
    out = v + _unreserved(p, gpus)[0]
    for axis, gpu in enumerate(gpus):
        for y, q, _, _ in _steps(p, gpu):
            if y >= v.shape[axis]:
                break
            tail = _tail(out, axis, y)
            out[tail] = np.minimum(out[tail], q + _shifted(v, axis, y))
    return out


def recourse_grid(rec: OutcomeRecourse, gpus: Sequence[str]) -> list[Any]:
    """The outcome's recourse cost (USD per month) for every commitment ``R`` (GPUs of each type of
    ``gpus``, from 0 to :func:`most_gpus`), as the grids after each product in turn; the last is
    V(R). Beyond the grid V stays as at its edge."""
    shape = tuple(most_gpus(rec, g) + 1 for g in gpus)
    grids = [np.full(shape, rec.constant_usd)]
    for p in rec.products:
        grids.append(add_product(grids[-1], p, gpus))
    return grids


def grid_points(rec: OutcomeRecourse, gpus: Sequence[str]) -> int:
    """Commitments in the outcome's grid."""
    return math.prod(most_gpus(rec, g) + 1 for g in gpus)


@dataclass(frozen=True)
class Choice:
    """A product's choice in an outcome: its option (``""``: all to the API) and reserved replicas."""

    product: str
    key: str
    reserved: int


def split(rec: OutcomeRecourse, gpus: Sequence[str], commit: Sequence[int]) -> list[Choice]:
    """The products' choices behind V(commit): the grids walked back from the last product."""
    grids = recourse_grid(rec, gpus)
    at = [min(x, grids[0].shape[i] - 1) for i, x in enumerate(commit)]
    out: list[Choice] = []
    for k in range(len(rec.products), 0, -1):
        p, before, value = rec.products[k - 1], grids[k - 1], grids[k][tuple(at)]
        q, key, _ = _unreserved(p, gpus)
        found = None
        if q + before[tuple(at)] <= value:
            found = Choice(p.name, key, 0)
        for axis, gpu in enumerate(gpus):
            for y, q, key, r in _steps(p, gpu):
                if found is None and y <= at[axis]:
                    back = list(at)
                    back[axis] -= y
                    if q + before[tuple(back)] <= value:
                        found, at = Choice(p.name, key, r), back
        assert found is not None, "the grid holds a value no choice reaches"
        out.append(found)
    return out[::-1]


# ----------------------------------------------------------------------------- the plan behind a point


@dataclass(frozen=True)
class HourPlan:
    """A product's hourly purchases in an outcome (one entry per modelled hour)."""

    choice: Choice
    on_demand: tuple[int, ...]
    spot: tuple[int, ...]
    api_tokens_per_s: tuple[float, ...]


def recourse_plan(prob: FleetProblem, ov: Overrides, choice: Choice) -> HourPlan:
    """The purchases behind a product's choice: the moves :func:`best_moves` takes (the smallest
    first), the API taking what they leave, spot filling its cap hour by hour from the first."""
    pd = prob.products[choice.product]
    if not choice.key:
        zeros = (0,) * prob.hours
        return HourPlan(choice, zeros, zeros, tuple(float(d) for d in pd.demand_tokens_per_s))
    c = prob.cand[choice.key]
    p, hours = prices_of(prob, pd, c, ov), hours_of(prob, pd, c, choice.reserved)
    if prob.hour_counts:
        take, _ = merged_hours_cost(prob, hours, p, pd.has_api)
    else:
        k, _ = best_moves(hours, p, pd.has_api)
        take = np.zeros_like(hours.need)
        order = sorted((float(hours.first[h]), h) for h in range(prob.hours) if hours.need[h] > 0)
        for _, h in order[:k]:
            take[h] = 1
        left = k - min(k, len(order))
        for h in range(prob.hours):
            extra = min(left, int(hours.need[h]) - int(take[h]))
            take[h] += extra
            left -= extra
    n = hours.need - take
    api = np.where(take > 0, hours.first + hours.usable * (take - 1), 0.0)
    _, spot_total = replica_cost(np.asarray([float(np.dot(_counts(prob), n))]), hours, p)
    spot = _fill(n, _counts(prob), int(spot_total[0]))
    return HourPlan(choice, tuple(int(x - s) for x, s in zip(n, spot)), tuple(spot), tuple(float(a) for a in api))


def _counts(prob: FleetProblem) -> Any:
    """Real hours each modelled hour stands for, as an array."""
    return np.asarray(prob.hour_counts, dtype=float) if prob.hour_counts else np.ones(prob.hours)


def _fill(n: Any, counts: Any, total: int) -> list[int]:
    """Spot replicas per hour: hours from the first take what they run until ``total`` replica-hours."""
    out = []
    for x, w in zip(n, counts):
        s = min(int(x), int(total // w))
        out.append(s)
        total -= int(s * w)
    return out


def plan_columns(lp: Any, prob: FleetProblem, plans: Sequence[HourPlan], commit_cols: dict[int, float]) -> list[float]:
    """The plans as a column vector of the outcome's fleet MIP ``lp`` (a
    :class:`~fleetplan.optimizer.mip.linear.LinearProblem` with the commitment's columns): what a
    caller checks against its rows and prices with its objective."""
    x = [0.0] * lp.num_cols
    for j, v in commit_cols.items():
        x[j] = float(v)

    def put(family: str, *index: Any, value: float) -> None:
        j = lp.find(family, *index)
        if j is not None:
            x[j] = float(value)

    for plan in plans:
        pd = prob.products[plan.choice.product]
        put("self_host", pd.name, value=1.0 if plan.choice.key else 0.0)
        key = plan.choice.key
        if key:
            put("use", key, value=1.0)
            put("reserved", key, value=plan.choice.reserved)
        for h in range(prob.hours):
            put("api", pd.name, h, value=plan.api_tokens_per_s[h])
            if key:
                put("on_demand", key, h, value=plan.on_demand[h])
                put("spot", key, h, value=plan.spot[h])
                put("api_for", key, h, value=plan.api_tokens_per_s[h])
    return x


def violations(lp: Any, x: Sequence[float], tolerance: float = 1e-6) -> list[str]:
    """Names of the rows and columns of ``lp`` that ``x`` breaks (beyond ``tolerance``, relative
    to the bound), and of integer columns it leaves fractional."""
    act = lp.row_activity(list(x))
    out = []
    for i, a in enumerate(act):
        lo, hi = lp.row_lower[i], lp.row_upper[i]
        if a < lo - tolerance * max(1.0, abs(lo)) or a > hi + tolerance * max(1.0, abs(hi)):
            out.append(lp.row_names[i])
    for j, v in enumerate(x):
        if v < lp.col_lower[j] - tolerance or v > lp.col_upper[j] + tolerance or (
                lp.col_integer[j] and abs(v - round(v)) > tolerance):
            out.append(lp.col_names[j])
    return out

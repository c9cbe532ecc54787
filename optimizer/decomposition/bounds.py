"""Solver-free bounds of one product's choice of configuration: the lower bound that orders and
prunes the search (:func:`quick_bound`) and the cost of an all-on-demand plan used to rank
fallbacks. Owns no solver call and no model."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fleetplan.optimizer.problem_data.candidates import (
    Candidate,
    PoolCandidate,
)
from fleetplan.optimizer.common.defaults import CEILING_TOLERANCE
from fleetplan.optimizer.common.enums import Tier
from fleetplan.optimizer.problem_data.problem import SECONDS_PER_HOUR, FleetProblem, ProductData
from fleetplan.optimizer.decomposition.product_optimum import needs


def quick_bound(prob: FleetProblem, pd: ProductData, choice: tuple[Candidate | None, PoolCandidate | None],
                 hours: tuple[Any, Any, Any] | None = None) -> float:
    """A lower bound on the monthly cost of one choice, without a solver.

    Every replica-hour is priced at the cheapest rate the tiers allow (a reserved replica's
    monthly price spread over the hours it serves is its hourly rate; spot only up to the spot
    share cap), and each hour runs the fewest whole decode replicas that meet its demand (and, with
    a pool of its own, the fewest whole pool replicas). With an API, tokens move from replicas to
    the API where that saves money, up to the API's share cap, counted as the LP of that choice
    (the fractional remainder of an hour first, then whole replicas), and the pool is priced per
    token. Idle instance GPUs, reserved replicas idle in quiet hours and the API floor only add
    to a plan's cost, so the bound is valid."""
    import numpy as np

    c, k = choice
    api = pd.api.usd_per_output_token * SECONDS_PER_HOUR if pd.has_api and pd.api is not None else math.inf
    w, n_h, d = hours if hours is not None else hour_arrays(prob, pd)
    if c is None:
        return float(np.sum(w * d)) * api
    rate = replica_hour_rate(prob, c)
    u = c.usable_tokens_per_s
    # prefill pool: per token (continuous) unless its own pool is fixed and no API is involved
    pool_token = 0.0
    pool_cost = 0.0
    if c.mode == "pool":
        pools = [k] if k is not None else list(pd.pool)
        if not pools:
            return math.inf
        f = pd.prefill_flops_per_output_token
        if f <= 0:  # every prompt token is cached: the pool has nothing to do
            pass
        elif k is not None and not pd.has_api:
            need = np.maximum(0.0, np.ceil(d * f / k.usable_flops_per_s - CEILING_TOLERANCE))
            pool_cost = float(np.sum(w * need)) * min(k.usd_per_replica_hour_in(t) for t in prob.tiers)
        else:
            pool_token = min(min(q.usd_per_replica_hour_in(t) for t in prob.tiers) * f / q.usable_flops_per_s
                             for q in pools)
    whole = np.maximum(0.0, np.ceil(d / u - CEILING_TOLERANCE))
    cost = pd.fixed_monthly_usd + pool_cost + rate * float(np.sum(w * whole)) + pool_token * float(np.sum(w * d))
    if not pd.has_api:
        return cost
    return cost - _api_saving(pd, w, n_h, d, u, rate, pool_token, api)


def _api_saving(pd: ProductData, w: Any, n_h: Any, d: Any, u: float, rate: float, pool_token: float,
                api: float) -> float:
    """The most that moving tokens to the API can save on a plan of whole replicas: per hour the
    remainder above whole replicas (saves one replica), then the whole replicas (each saves one),
    taken greedily by saving per token within the API's token cap (the LP of that choice)."""
    import numpy as np

    whole = np.maximum(0.0, np.ceil(d / u - CEILING_TOLERANCE))
    floor = np.floor(d / u + CEILING_TOLERANCE)
    rem = np.clip(d - floor * u, 0.0, None)
    rem = np.where(whole > floor, rem, 0.0)
    tokens = np.concatenate([rem, floor * u])
    saves = np.concatenate([np.where(rem > 0, rate + (pool_token - api) * rem, 0.0),
                            floor * (rate + (pool_token - api) * u)])
    ww = np.concatenate([w, w])
    counts = np.concatenate([n_h, n_h])
    useful = (saves > 0) & (tokens > 0)
    if not useful.any():
        return 0.0
    tokens, saves, ww, counts = tokens[useful], saves[useful], ww[useful], counts[useful]
    order = np.argsort(-(saves / tokens), kind="stable")
    left, saved = pd.api_max_fraction * float(np.sum(n_h * d)), 0.0
    for i in order.tolist():
        take = min(1.0, left / (counts[i] * tokens[i])) if tokens[i] > 0 else 1.0
        saved += take * ww[i] * saves[i]
        left -= take * counts[i] * tokens[i]
        if left <= 0:
            break
    return saved


def replica_hour_rate(prob: FleetProblem, c: Candidate) -> float:
    """The cheapest average price of one decode replica-hour of ``c`` the tiers allow: spot at most
    its share cap of the replica-hours, the rest at the cheaper of reserved and on-demand."""
    other = [c.usd_per_replica_hour_in(t) for t in prob.tiers if t != Tier.SPOT]
    if Tier.SPOT not in prob.tiers:
        return min(other)
    spot = c.usd_per_replica_hour_in(Tier.SPOT)
    if not other:
        return spot
    rest = min(other)
    share = prob.spot_max_share
    return min(rest, share * spot + (1 - share) * rest)


def hour_arrays(prob: FleetProblem, pd: ProductData) -> tuple[Any, Any, Any]:
    """Per modelled hour: its weight in real hours of the month, the hours it stands for, and the
    product's demand in token/s (NumPy arrays)."""
    import numpy as np

    hours = range(prob.hours)
    return (np.array([prob.weight(h) for h in hours]), np.array([float(prob.count(h)) for h in hours]),
            np.asarray(pd.demand_tokens_per_s, dtype=float))


def by_quick_bound(prob: FleetProblem, pd: ProductData, choices: list[tuple[Candidate | None, PoolCandidate | None]]
                    ) -> list[tuple[float, tuple[Candidate | None, PoolCandidate | None]]]:
    """Choices with their :func:`quick_bound`, lowest first (ties by key, so the order is fixed)."""
    hours = hour_arrays(prob, pd)
    parts = _parts_of(prob, pd, choices) if pd.has_api else None
    keyed = [(max(quick_bound(prob, pd, ch, hours), choice_bound(pd, parts, ch)),
              "/".join(x.key for x in ch if x is not None), ch) for ch in choices]
    keyed.sort(key=lambda t: (t[0], t[1]))
    return [(b, ch) for b, _, ch in keyed if not math.isinf(b) or ch[0] is None]


def _parts_of(prob: FleetProblem, pd: ProductData, choices: list[tuple[Candidate | None, PoolCandidate | None]]
              ) -> tuple[dict[str, float], dict[str, float]] | None:
    """:func:`part_bounds` of the decode configurations of ``choices`` and of every pool."""
    decode = list({c.key: c for c, _ in choices if c is not None}.values())
    return part_bounds(prob, pd, decode, list(pd.pool))


def choice_bound(pd: ProductData, parts: tuple[dict[str, float], dict[str, float]] | None,
                 choice: tuple[Candidate | None, PoolCandidate | None]) -> float:
    """A lower bound on the cost of ``choice`` from :func:`part_bounds` (``-inf`` where they give
    none); a pool-mode choice with its pool left open takes the least pool bound."""
    c, k = choice
    if parts is None or c is None or c.key not in parts[0]:
        return -math.inf
    pool = 0.0
    if c.mode == "pool":
        values = [parts[1][k.key]] if k is not None and k.key in parts[1] else [] if k is not None else list(parts[1].values())
        if not values:
            return -math.inf
        pool = min(values)
    return pd.fixed_monthly_usd + parts[0][c.key] + pool


def on_demand_cost(prob: FleetProblem, pd: ProductData, choice: tuple[Candidate | None, PoolCandidate | None]) -> float:
    """Monthly cost of :func:`on_demand_plan` for ``choice`` (without instances), for ranking."""
    c, k = choice
    assert c is not None
    total = 0.0
    for h in range(prob.hours):
        total += prob.weight(h) * pd.replica_bound(c, h) * c.usd_per_replica_hour_in(Tier.ON_DEMAND)
        if k is not None:
            total += prob.weight(h) * pd.pool_bound(k, h) * k.usd_per_replica_hour_in(Tier.ON_DEMAND)
    return total


# ---- with an API: each part's tier split with the API's share priced by Lagrange multipliers


# Multipliers tried on the API's token share (times the API's price per token) and on the spot
# share (times the on-demand less spot price): every pair gives a valid bound, the best is kept.
API_MULTIPLIERS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)
SPOT_MULTIPLIERS = (0.0, 0.5, 1.0)


@dataclass(frozen=True)
class PartPrices:
    """What one part (decode or pool) of a product with an API pays: USD per replica of the
    reserved tier per month (None when not in play), per replica-hour on demand and on spot
    (None when not in play), the spot share cap (None: uncapped), and per token/s-hour sent to
    the API (its share of the API's price)."""

    reserved_month: float | None
    on_demand: float | None
    spot: float | None
    spot_share: float | None
    api: float


def lagrangian_part_bound(need: Any, per_item: float, demand: Any, prices: PartPrices, hours_per_month: float,
                          hour_weight: float, budget: float) -> float:
    """A lower bound on what one part costs, its API tokens included, over every plan whose API
    tokens/s t_h (0 <= t_h <= demand_h) stay within sum_h t_h <= ``budget`` and whose replicas in
    hour h are at least ceil((demand_h - t_h) / per_item): the best over the multipliers of the
    Lagrangian dual with the API budget (lambda) and the spot share (mu) moved to the objective.

    For fixed lambda, mu >= 0 and a reserved level R the hours are independent: hour h runs n >= R
    replicas, the n - R above the level at the cheaper of on-demand (less mu x share) and spot
    (plus mu x (1 - share)), and the API takes demand_h - n per_item at its price plus lambda. Cost
    is linear in n between R and the last replica, so n is R, need_h - 1 or need_h. A reserved
    replica costs its monthly price less mu x share for each hour it runs. The minimum over R,
    less lambda x budget, is at most the cost of every such plan (weak duality)."""
    import numpy as np

    levels = np.arange(int(need.max()) + 1 if prices.reserved_month is not None and need.size else 1)
    cand = np.stack([np.broadcast_to(levels[:, None], (levels.size, need.size)),
                     np.maximum(levels[:, None], need[None, :] - 1), np.maximum(levels[:, None], need[None, :])])
    rest = np.maximum(0.0, demand[None, None, :] - cand * per_item) * hour_weight
    above = (cand - levels[None, :, None]) * hour_weight
    lams = np.asarray(API_MULTIPLIERS)[:, None, None, None] * prices.api  # every lambda at once
    best = -math.inf
    gap = (prices.on_demand - prices.spot) if prices.on_demand is not None and prices.spot is not None else 0.0
    for mu in (SPOT_MULTIPLIERS if prices.spot_share is not None and gap > 0 else (0.0,)):
        m, share = mu * gap, prices.spot_share or 0.0
        excess = min(p for p in ((prices.on_demand - m * share) if prices.on_demand is not None else None,
                                 (prices.spot + m * (1 - share)) if prices.spot is not None else None)
                     if p is not None)
        hourly = (above[None] * excess + rest[None] * (prices.api + lams)).min(axis=1).sum(axis=2)  # (lambda, R)
        held = levels * ((prices.reserved_month or 0.0) - m * share * need.size * hour_weight)
        dual = (held[None, :] + hourly).min(axis=1) - lams[:, 0, 0, 0] * hour_weight * budget
        best = max(best, float(dual.max()))
    return best


def part_bounds(prob: FleetProblem, pd: ProductData, decode: list[Candidate], pools: list[PoolCandidate]
                ) -> tuple[dict[str, float], dict[str, float]] | None:
    """Lower bounds of a product with an API by part, such that a plan running decode c with pool k
    costs at least its fixed cost + decode[c] + pool[k] (colocated: + decode[c] alone); None where
    the argument does not apply (hours merged, or no hourly tier).

    A plan's cost is its decode cost, its pool cost and the API's; the API's price is shared
    between the parts (alpha to decode, the rest to the pool, :func:`_api_share_of_decode`), and
    each part with its share is bounded on its own (:func:`lagrangian_part_bound`): the replicas
    of each part meet the demand the API leaves, and the API's tokens stay within its share."""
    import numpy as np

    if prob.hour_counts or pd.api is None or not prob.hourly_tiers:
        return None
    d = np.asarray(pd.demand_tokens_per_s, dtype=float)
    budget = pd.api_max_fraction * float(d.sum())
    api = pd.api.usd_per_output_token * SECONDS_PER_HOUR
    f = pd.prefill_flops_per_output_token
    alpha = _api_share_of_decode(pd, decode, pools)
    out: list[dict[str, float]] = []
    for parts, pool in ((decode, False), (pools, True)):
        need = needs(pd, parts, pool=pool) if parts else np.zeros((0, prob.hours), dtype=int)
        bounds = {}
        for x, row in zip(parts, need):
            if pool and f <= 0:  # every prompt token cached: the pool has nothing to do
                bounds[x.key] = 0.0
                continue
            share = (1.0 - alpha) if pool else (alpha if x.mode == "pool" else 1.0)
            bounds[x.key] = lagrangian_part_bound(row, x.usable_flops_per_s / f if pool else x.usable_tokens_per_s, d,
                                                  _part_prices(prob, x, share * api, capped=not pool),
                                                  prob.hours_per_month, prob.hour_weight, budget)
        out.append(bounds)
    return out[0], out[1]


def _part_prices(prob: FleetProblem, x: Any, api: float, capped: bool) -> PartPrices:
    """:class:`PartPrices` of configuration ``x`` in the problem's tiers."""
    def price(t: Tier) -> float | None:
        return x.usd_per_replica_hour_in(t) if t in prob.tiers else None

    reserved = price(Tier.RESERVED)
    share = prob.spot_max_share if capped and Tier.SPOT in prob.tiers and prob.spot_max_share < 1.0 else None
    return PartPrices(reserved * prob.hours_per_month if reserved is not None else None, price(Tier.ON_DEMAND),
                      price(Tier.SPOT), share, api)


def _api_share_of_decode(pd: ProductData, decode: list[Candidate], pools: list[PoolCandidate]) -> float:
    """Share of the API's cost charged to the decode part in pool mode: the cheapest on-demand
    cost per token of pool-mode decode over that of decode and pool together (any share in
    [0, 1] keeps :func:`part_bounds` valid; this one splits it as the parts' costs do)."""
    dec = [c.usd_per_replica_hour_in(Tier.ON_DEMAND) / c.usable_tokens_per_s for c in decode if c.mode == "pool"]
    f = pd.prefill_flops_per_output_token
    pool = [k.usd_per_replica_hour_in(Tier.ON_DEMAND) * f / k.usable_flops_per_s for k in pools]
    if not dec or not pool or f <= 0:
        return 1.0
    return min(dec) / (min(dec) + min(pool))

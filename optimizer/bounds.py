"""Solver-free bounds of one product's choice of configuration: the lower bound that orders and
prunes the search (:func:`quick_bound`) and the cost of an all-on-demand plan used to rank
fallbacks. Owns no solver call and no model."""

from __future__ import annotations

import math
from typing import Any

from fleetplan.optimizer.candidates import (
    Candidate,
    PoolCandidate,
)
from fleetplan.optimizer.defaults import CEILING_TOLERANCE
from fleetplan.optimizer.enums import Tier
from fleetplan.optimizer.problem import SECONDS_PER_HOUR, FleetProblem, ProductData


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
    keyed = [(quick_bound(prob, pd, ch, hours), "/".join(x.key for x in ch if x is not None), ch)
             for ch in choices]
    keyed.sort(key=lambda t: (t[0], t[1]))
    return [(b, ch) for b, _, ch in keyed if not math.isinf(b) or ch[0] is None]


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

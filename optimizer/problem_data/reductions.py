"""Exact reductions of a problem before it is built: dominated decode configurations dropped,
hours that ask the same of every product merged into one weighted hour, a request mix's
configurations beaten across GPU types dropped. Each returns a problem
with the same optimum, or the problem itself when the reduction would not be exact; a problem
built with ``reductions=False`` (benchmarks measure what they save) is never reduced.

Owns only these rewrites of :class:`~fleetplan.optimizer.problem_data.problem.FleetProblem`."""

from __future__ import annotations

from dataclasses import replace

from fleetplan.optimizer.problem_data.candidates import Candidate, PoolCandidate
from fleetplan.optimizer.common.enums import PrefillMode, Tier
from fleetplan.optimizer.problem_data.problem import FleetProblem, ProductData


def hours_separable(prob: FleetProblem) -> bool:
    """Whether nothing but the configuration and reserved replicas links one hour to another:
    no spot share cap over the horizon and no API share limit that can bind. Then hours with
    the same demand for every product have the same best decisions, and merging them is exact."""
    if Tier.SPOT in prob.tiers and prob.spot_max_share < 1.0:
        return False
    return not any(p.has_api and (p.api_max_fraction < 1.0 or p.api_min_fraction > 0.0)
                   for p in prob.products.values())


def without_dominated(prob: FleetProblem) -> FleetProblem:
    """The same problem without decode configurations that another configuration of the
    product beats in every hour, when that is exact: the product has no API, capacity is
    bought hour by hour (no reserved tier, no spot share cap), and c' is dropped for c on the
    same GPU type, prefill mode and hourly prices when c needs no more GPUs than c' in any hour
    (tp x fewest replicas). Then c' can be swapped for c in any plan without raising its cost,
    its GPUs in any hour, or its instances (idle instance GPUs cost no more than used ones)."""
    if Tier.RESERVED in prob.tiers or (Tier.SPOT in prob.tiers and prob.spot_max_share < 1.0):
        return prob
    hourly = prob.hourly_tiers
    if prob.tier_availability and len(hourly) > 1:  # a TP group cannot be split across tiers
        return prob
    changed = False
    products = {}
    for name, pd in prob.products.items():
        if pd.has_api or pd.is_mix or len(pd.candidates) < 2:
            products[name] = pd
            continue
        gpus = {c.key: [c.gpus_per_replica * pd.replica_bound(c, h) for h in range(prob.hours)] for c in pd.candidates}

        def key(c: Candidate) -> tuple[object, ...]:
            return (c.gpu, c.mode, tuple(c.price.tier(t) for t in hourly))

        def priced_up(c: Candidate) -> bool:
            return all(c.price.tier(t) >= c.price.usd_per_gpu_hour for t in hourly)

        kept = []
        for i, c in enumerate(pd.candidates):
            beaten = priced_up(c) and any(
                key(d) == key(c) and all(x <= y for x, y in zip(gpus[d.key], gpus[c.key]))
                and (gpus[d.key] != gpus[c.key] or j < i)
                for j, d in enumerate(pd.candidates) if j != i
            )
            if not beaten:
                kept.append(c)
        changed |= len(kept) < len(pd.candidates)
        products[name] = replace(pd, candidates=tuple(kept))
    return prob.derive(products=products) if changed else prob


def merged(prob: FleetProblem) -> FleetProblem:
    """The same problem with hours that ask the same of every product (:meth:`ProductData.hour_signature`)
    merged into one weighted hour, when that is exact (:attr:`hours_separable`) and saves hours;
    else itself. A daily profile tiled over a week, for one, leaves at most 24 distinct hours;
    small products whose replica counts change only a few times a day leave fewer."""
    if prob.hour_of or prob.hours == 1 or not hours_separable(prob) or prob.gpus_elsewhere:
        return prob
    classes: dict[tuple[float, ...], int] = {}  # numbered in order of first appearance
    rep_hours: list[int] = []
    hour_of: list[int] = []
    for h in range(prob.hours):
        key = tuple(x for p in prob.products.values() for x in p.hour_signature(h))
        if key not in classes:
            classes[key] = len(rep_hours)
            rep_hours.append(h)
        hour_of.append(classes[key])
    if len(rep_hours) == prob.hours:
        return prob
    counts = [0] * len(rep_hours)
    for i in hour_of:
        counts[i] += 1
    products = {n: on_hours(p, rep_hours) for n, p in prob.products.items()}
    return prob.derive(
        products=products, hours=len(rep_hours), hour_counts=tuple(counts), hour_of=tuple(hour_of),
        full_demand={n: p.demand_tokens_per_s for n, p in prob.products.items()},
    )


def on_hours(pd: ProductData, hours: list[int]) -> ProductData:
    """``pd`` with its demand (and its buckets' demand) at ``hours`` only, in that order."""
    buckets = tuple(replace(b, demand_tokens_per_s=tuple(b.demand_tokens_per_s[h] for h in hours))
                    for b in pd.buckets)
    return replace(pd, demand_tokens_per_s=tuple(pd.demand_tokens_per_s[h] for h in hours), buckets=buckets)


def reduced(prob: FleetProblem) -> FleetProblem:
    """:meth:`without_dominated`, then :meth:`merged`: the smaller problem with the same optimum
    (one-hour problems are left as they are: their candidates are already pruned)."""
    if prob.hours == 1 or not prob.reductions:
        return prob
    return merged(without_dominated(prob))


def mix_prices_only(prob: FleetProblem) -> bool:
    """Whether a mix's configurations differ in the MIP by nothing but their price, capacities and
    prefill mode: one hourly tier, no reserved replicas, no GPU limits and no whole instances."""
    return (len(prob.tiers) == 1 and Tier.RESERVED not in prob.tiers and not prob.gpu_availability
            and not prob.tier_availability and not prob.instance_gpus)


def _mix_beats(by: Candidate, c: Candidate, price: dict[str, float], caps: list[dict[str, float]]) -> bool:
    """Whether ``by`` serves every bucket ``c`` serves at least as fast, at no higher price per
    replica hour, and without a prefill pool where ``c`` runs without one."""
    return ((by.mode == c.mode or by.mode != PrefillMode.POOL) and price[by.key] <= price[c.key]
            and all(by.key in cap and cap[by.key] >= cap[c.key] for cap in caps if c.key in cap))


def mix_without_dominated(prob: FleetProblem, pd: ProductData) -> ProductData:
    """The mix ``pd`` without configurations another one beats whatever the GPU type, when that is
    exact (:func:`mix_prices_only`): a decode configuration ``c`` is dropped for ``by`` that
    serves every bucket ``c`` serves at least as fast, costs no more per replica hour and needs no
    prefill pool where ``c`` needs none (replacing ``c``'s replicas one for one by ``by``'s keeps
    every bucket served, the cost, and the pool's prefill load no higher); a pool configuration is
    dropped for one no dearer with at least its usable FLOP/s. Ties keep the first by key."""
    if not pd.is_mix or pd.single or not mix_prices_only(prob):
        return pd
    tier = prob.tiers[0]
    caps = [b.capacity for b in pd.buckets]
    price = {c.key: c.usd_per_replica_hour_in(tier) for c in pd.candidates}
    kept: list[Candidate] = []
    for c in sorted(pd.candidates, key=lambda c: (price[c.key], c.mode == PrefillMode.POOL, c.key)):
        if not any(_mix_beats(by, c, price, caps) for by in kept):
            kept.append(c)
    pools: list[PoolCandidate] = []
    for k in sorted(pd.pool, key=lambda k: (k.usd_per_replica_hour_in(tier), -k.usable_flops_per_s, k.key)):
        if not any(o.usd_per_replica_hour_in(tier) <= k.usd_per_replica_hour_in(tier)
                   and o.usable_flops_per_s >= k.usable_flops_per_s for o in pools):
            pools.append(k)
    if not any(c.mode == PrefillMode.POOL for c in kept):
        pools = []
    return replace(pd, candidates=tuple(sorted(kept, key=lambda c: c.key)),
                   pool=tuple(sorted(pools, key=lambda k: k.key)))

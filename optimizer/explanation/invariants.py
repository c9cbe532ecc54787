"""What a plan promises, checked again from its primitive values: replicas per tier and hour,
GPUs per replica, prices per GPU-hour, hours, API tokens. Each ``check_*`` recomputes one rule
from those values, never through the formula it checks (the MIP's rows, the plan's cost
methods), and returns the broken promises in words; :func:`check_invariants` runs them all.

Owns the checks only: it never changes a plan."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from fleetplan.catalogs.power import power_catalog
from fleetplan.optimizer.common.enums import Tier
from fleetplan.optimizer.problem_data.problem import SECONDS_PER_HOUR, fits_instances
from fleetplan.optimizer.traffic.sites import site_of
from fleetplan.optimizer.mip.solution import Fleet, Plan, ProductPlan

REL = 1e-6  # relative tolerance of money and token comparisons
ABS_TOKENS = 1e-6  # tokens/s
ABS_FLOPS = 1e3  # FLOP/s: prefill demand is of order 1e15


def _replicas(pp: ProductPlan, pool: bool, h: int) -> dict[Tier, int]:
    """Replicas of the product's decode (or pool) configuration in hour ``h``, per tier: the
    plan's own counts (:meth:`Fleet.by_tier`), no formula."""
    return (pp.prefill_pool if pool else pp.decode).by_tier(h)


def _fleets(pp: ProductPlan) -> list[Fleet]:
    """The product's fleets with a configuration: its decode (each configuration of a mix) and its pool."""
    return [f for f in (*pp.fleets, pp.prefill_pool) if f.part is not None]


def _gpus(plan: Plan) -> dict[tuple[str, Tier, int], int]:
    """GPUs in use per (GPU type, tier, hour), summed over products from replicas x TP."""
    out: dict[tuple[str, Tier, int], int] = {}
    for pp in plan.products:
        for fleet in _fleets(pp):
            part = fleet.part
            assert part is not None
            for h in range(len(pp.on_demand)):
                for tier, n in fleet.by_tier(h).items():
                    out[part.gpu, tier, h] = out.get((part.gpu, tier, h), 0) + n * part.gpus_per_replica
    return out


def _by_type(plan: Plan) -> dict[tuple[str, int], int]:
    """GPUs in use per (GPU type, hour), all tiers."""
    out: dict[tuple[str, int], int] = {}
    for (gpu, _, h), n in _gpus(plan).items():
        out[gpu, h] = out.get((gpu, h), 0) + n
    return out


def check_configuration(plan: Plan) -> Iterator[str]:
    """The chosen configuration fits in memory and keeps every user at the target speed."""
    for pp in plan.products:
        c = pp.candidate
        if c is None or pp.mix is not None:  # a mix: see check_mix_eligible
            continue
        e = c.estimate
        if e.memory_needed_bytes > e.memory_usable_bytes:
            yield f"{pp.product.name}: memory {e.memory_needed_bytes:.3e} B > usable {e.memory_usable_bytes:.3e} B"
        if e.per_user_tokens_per_s < pp.product.min_tokens_per_s_per_user - 1e-9:
            yield f"{pp.product.name}: per-user speed below target"


def check_whole_replicas(plan: Plan) -> Iterator[str]:
    """Replica counts are non-negative whole numbers."""
    for pp in plan.products:
        counts = [pp.reserved, pp.pool_reserved, *pp.on_demand, *pp.spot, *pp.pool_on_demand, *pp.pool_spot]
        if any(n < 0 or n != int(n) for n in counts):
            yield f"{pp.product.name}: replicas not whole and non-negative"


def check_demand_met(plan: Plan) -> Iterator[str]:
    """Every hour, usable decode throughput plus API tokens cover the demand."""
    for pp in plan.products:
        if pp.mix is not None:
            yield from _mix_demand_met(pp)
            continue
        usable = pp.candidate.usable_tokens_per_s if pp.candidate else 0.0
        for h, d in enumerate(pp.data.demand_tokens_per_s):
            cap = sum(_replicas(pp, False, h).values()) * usable + pp.api_tokens_per_s[h]
            if cap < d * (1 - 1e-9) - ABS_TOKENS:
                yield f"{pp.product.name}: hour {h}: capacity {cap:.1f} < demand {d:.1f}"


def _mix_demand_met(pp: ProductPlan) -> Iterator[str]:
    """A mix, every hour: each bucket's shares (configurations and API) cover it, the API's tokens
    are the buckets' shares sent there, and each configuration's replicas hold the capacity its
    buckets consume (demand / capacity per replica x share, summed)."""
    mix = pp.mix
    assert mix is not None
    replicas = {f.part.key: f for f in mix.fleets if f.part is not None}
    for h in range(len(pp.on_demand)):
        used: dict[str, float] = {}
        for b in mix.buckets:
            shares = {k: row[h] for (i, k), row in mix.serve.items() if i == b.index}
            if b.demand_tokens_per_s[h] > 0 and sum(shares.values()) + mix.api_share[b.index][h] < 1 - 1e-6:
                yield f"{pp.product.name}: hour {h}: bucket {b.label} not covered"
            for k, x in shares.items():
                used[k] = used.get(k, 0.0) + b.demand_tokens_per_s[h] / b.capacity[k] * x
        api = sum(b.demand_tokens_per_s[h] * mix.api_share[b.index][h] for b in mix.buckets)
        if abs(api - pp.api_tokens_per_s[h]) > 1e-6 * max(1.0, api) + ABS_TOKENS:
            yield f"{pp.product.name}: hour {h}: API tokens {pp.api_tokens_per_s[h]:.1f} are not the buckets' {api:.1f}"
        for k, u in sorted(used.items()):
            n = replicas[k].in_hour(h) if k in replicas else 0
            if u > n * (1 + 1e-6) + 1e-6:
                yield f"{pp.product.name}: hour {h}: {k} consumes {u:.4f} replicas of capacity, has {n}"


def check_mix_eligible(plan: Plan) -> Iterator[str]:
    """A mix's buckets run only on configurations they are eligible on (fit in memory at its
    batch, meet the speed and TTFT targets: a capacity was computed), each fitting in memory."""
    for pp in plan.products:
        if pp.mix is None:
            continue
        for (i, k), row in sorted(pp.mix.serve.items()):
            if any(x > 1e-9 for x in row) and k not in pp.mix.buckets[i].capacity:
                yield f"{pp.product.name}: bucket {pp.mix.buckets[i].label} runs on {k}, where it is not eligible"
        for f in pp.mix.fleets:
            e = f.part.estimate  # type: ignore[union-attr]
            if e.memory_needed_bytes > e.memory_usable_bytes:
                yield f"{pp.product.name}: {f.part.key}: memory {e.memory_needed_bytes:.3e} B > usable"  # type: ignore[union-attr]


def check_prefill_pool(plan: Plan) -> Iterator[str]:
    """Every hour, a prefill pool's usable FLOP/s cover the prefill of the self-hosted requests."""
    for pp in plan.products:
        if pp.pool is None:
            continue
        for h, d in enumerate(pp.data.demand_tokens_per_s):
            need = pp.data.prefill_flops_per_output_token * (d - pp.api_tokens_per_s[h])
            modes = {c.key: c.mode for c in pp.data.candidates}
            if pp.mix is not None:  # the buckets' shares served in pool mode
                need = sum(b.prefill_flops_per_output_token * b.demand_tokens_per_s[h] * row[h]
                           for b in pp.mix.buckets for (i, k), row in pp.mix.serve.items()
                           if i == b.index and modes[k] == "pool")
            if sum(_replicas(pp, True, h).values()) * pp.pool.usable_flops_per_s < need * (1 - 1e-9) - ABS_FLOPS:
                yield f"{pp.product.name}: hour {h}: prefill pool below demand"


def check_ttft(plan: Plan) -> Iterator[str]:
    """The modelled time to first token is within the product's target."""
    for pp in plan.products:
        ttft, target = pp.ttft_s, pp.product.max_ttft_ms
        if ttft is not None and target is not None and ttft * 1e3 > target * (1 + 1e-9):
            yield f"{pp.product.name}: TTFT {ttft * 1e3:.1f} ms above max_ttft_ms {target:g}"
        goals, got = pp.product.ttft_percentiles_ms, pp.ttft_percentiles_ms
        for name, value in (got or {}).items():
            budget = getattr(goals, name) if goals is not None else None
            if budget is not None and value > budget + 0.05:  # reported to 0.1 ms
                yield f"{pp.product.name}: TTFT {name} {value:.1f} ms above its target {budget:g} ms"


def check_shares(plan: Plan) -> Iterator[str]:
    """Spot replica-hours within the spot cap; the API's share of tokens within its limits."""
    for pp in plan.products:
        hours = range(len(pp.on_demand))
        replica_hours = sum(sum(_replicas(pp, False, h).values()) for h in hours)
        if sum(pp.spot) > plan.problem.spot_max_share * replica_hours + REL:
            yield f"{pp.product.name}: spot share above its cap"
        total = sum(pp.data.demand_tokens_per_s)
        if total:
            share = sum(pp.api_tokens_per_s) / total
            if share > pp.data.api_max_fraction + REL or share < pp.data.api_min_fraction - REL:
                yield f"{pp.product.name}: API share {share:.4f} outside its limits"


def product_cost(plan: Plan, pp: ProductPlan) -> float:
    """A product's monthly cost from replicas x TP x price per GPU-hour x hours, API tokens x
    seconds x price per token, the fixed cost and its share of idle instance GPUs."""
    prob = plan.problem
    weight = prob.hours_per_month / len(pp.on_demand)  # real hours each hour of the horizon stands for
    total = pp.stranded_usd
    for fleet in _fleets(pp):
        part = fleet.part
        assert part is not None
        total += fleet.by_tier(0)[Tier.RESERVED] * part.gpus_per_replica * part.price.tier(Tier.RESERVED) * prob.hours_per_month
        for h in range(len(pp.on_demand)):
            for tier in (Tier.ON_DEMAND, Tier.SPOT):
                total += fleet.by_tier(h)[tier] * part.gpus_per_replica * part.price.tier(tier) * weight
    if pp.data.api is not None:
        total += sum(pp.api_tokens_per_s) * SECONDS_PER_HOUR * weight * pp.data.api.usd_per_output_token
    return total + (pp.data.fixed_monthly_usd if pp.candidate is not None else 0.0)


def check_costs(plan: Plan) -> Iterator[str]:
    """Each product's cost is what its replicas, tokens and fixed cost come to; the plan's total
    is the solver's objective."""
    for pp in plan.products:
        expected = product_cost(plan, pp)
        if abs(expected - pp.monthly_cost_usd) > REL * max(1.0, expected):
            yield f"{pp.product.name}: cost {pp.monthly_cost_usd:.2f} is not replicas x GPUs x price x hours ({expected:.2f})"
    objective = plan.solve_result.objective or 0.0
    if abs(plan.monthly_cost_usd - objective) > 1e-4 * max(1.0, plan.monthly_cost_usd):
        yield f"total cost {plan.monthly_cost_usd:.2f} differs from the solver's objective {objective}"


def check_availability(plan: Plan) -> Iterator[str]:
    """GPUs in use stay within each GPU type's availability, in total and per tier, every hour."""
    prob = plan.problem
    for (gpu, h), n in sorted(_by_type(plan).items()):
        limit = prob.gpu_availability.get(gpu)
        if limit is not None and n > limit:
            yield f"{gpu}: hour {h}: {n} GPUs in use > {limit} available"
    for (gpu, tier, h), n in sorted(_gpus(plan).items()):
        limit = prob.tier_availability.get((gpu, tier))
        if limit is not None and n > limit:
            yield f"{gpu} {tier}: hour {h}: {n} GPUs in use > {limit} available in that tier"


def check_site_power(plan: Plan) -> Iterator[str]:
    """The GPUs standing on each site hold at most its power limit in every hour, at full load:
    GPUs x (busy W + node overhead W / GPUs per node) x PUE, from the power catalog's figures."""
    cat = power_catalog()
    sites = plan.scenario.sites
    for site in sites:
        pue = site.pue if site.pue is not None else cat.defaults.pue
        mw: dict[int, float] = {}
        for (gpu, tier, h), n in sorted(_gpus(plan).items()):
            if site_of(sites, gpu) is not site or not site.hosts_tier(tier) or (p := cat.gpu(gpu)) is None:
                continue
            mw[h] = mw.get(h, 0.0) + n * (p.busy_power_w + p.server_overhead_w_per_node / p.gpus_per_node) * pue / 1e6
        for h, x in sorted(mw.items()):
            if x > site.limit_mw * (1 + REL):
                yield f"site {site.name}: hour {h}: {x:.4f} MW at full load > its limit of {site.limit_mw:g} MW"


def check_instances(plan: Plan) -> Iterator[str]:
    """Every GPU type bought in whole instances: the instances reported hold the GPUs in use at
    the busiest hour, and the idle GPUs of every hour are charged to the products at the plain
    price (the products' stranded cost adds up to it)."""
    prob = plan.problem
    idle_usd = 0.0
    price = {f.part.gpu: f.part.price.usd_per_gpu_hour for pp in plan.products for f in _fleets(pp)
             if f.part is not None}
    for (gpu, _), n in sorted(_by_type(plan).items()):
        size = prob.instance_gpus.get(gpu)
        if size:
            idle_usd += (math.ceil(n / size) * size - n) * price[gpu] * prob.hour_weight
    for gpu, size in sorted(prob.instance_gpus.items()):
        peak = max((n for (g, _), n in _by_type(plan).items() if g == gpu), default=0)
        row = plan.instances.get(gpu)
        if row is not None and row["instances"] * size < peak:
            yield f"{gpu}: {row['instances']} instances of {size} do not hold the {peak} GPUs in use"
    stranded = sum(pp.stranded_usd for pp in plan.products)
    if abs(stranded - idle_usd) > REL * max(1.0, plan.monthly_cost_usd):
        yield f"idle instance GPUs cost {idle_usd:.2f}, but {stranded:.2f} is charged to products"


def check_layout(plan: Plan) -> Iterator[str]:
    """Every replica's layout is whole: ``ep`` divides the stage's ``tp x dp_attention`` GPUs, and
    with whole instances a replica sits in one instance or fills whole ones (its TP group in one)."""
    for pp in plan.products:
        for part in [f.part for f in _fleets(pp)]:
            if part is None:
                continue
            stage = part.tp * part.dp_attention
            if part.ep < 1 or stage % part.ep:
                yield f"{pp.product.name}: ep {part.ep} does not divide the stage's {stage} GPUs"
            size = plan.problem.instance_gpus.get(part.gpu)
            if not fits_instances(part.tp, part.gpus_per_replica, size):
                yield f"{pp.product.name}: a replica of {part.gpus_per_replica} GPUs does not fill whole instances of {size}"


def check_budget(plan: Plan) -> Iterator[str]:
    """The plan's total is within the monthly budget."""
    budget = plan.problem.monthly_budget_usd
    if budget is not None and plan.monthly_cost_usd > budget * (1 + 1e-9) + 0.01:
        yield f"monthly cost {plan.monthly_cost_usd:.2f} > budget {budget:.2f}"


CHECKS: tuple[Callable[[Plan], Iterator[str]], ...] = (
    check_configuration, check_mix_eligible, check_whole_replicas, check_demand_met, check_prefill_pool, check_ttft, check_shares,
    check_costs, check_availability, check_site_power, check_instances, check_layout, check_budget,
)


def check_invariants(plan: Plan) -> list[str]:
    """Every broken promise of ``plan`` (empty if none)."""
    return [problem for check in CHECKS for problem in check(plan)]

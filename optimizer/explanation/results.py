"""Read a solved plan: JSON-ready dicts and invariants recomputed from the plan itself.

Owns the JSON form of a plan; it computes no plan and checks none (see :mod:`.invariants`)."""

from __future__ import annotations

import math
from typing import Any

from fleetplan.optimizer.explanation.power import power_report, site_tiers, sites_report
from fleetplan.optimizer.problem_data.candidates import Candidate, CandidateSet, PoolCandidate
from fleetplan.optimizer.runtime.deadline import DEFAULT_TIME_LIMIT_S
from fleetplan.optimizer.common.enums import Tier
from fleetplan.optimizer.explanation.mix_results import counted_row, mix_fields
from fleetplan.optimizer.problem_data.problem import SECONDS_PER_HOUR
from fleetplan.optimizer.mip.solution import Plan, ProductPlan

LIMITERS = {
    "per_user_speed": "min_tokens_per_s_per_user",
    "memory": "memory",
    "batch_options": "options.batch",
    "max_ttft_ms": "max_ttft_ms",
    "rank_rounding": "rank_rounding",
}


def _r(x: float | None, nd: int = 4) -> float | None:
    """Round for output: enough digits to trace a number, few enough to be stable."""
    if x is None or math.isinf(x) or math.isnan(x):
        return None
    return float(round(x, nd))


def served_tokens(pp: ProductPlan) -> list[float]:
    """Self-hosted output tokens/s in each hour (demand less the API's share)."""
    return pp.served_tokens_per_s()


def pool_utilisation(pp: ProductPlan) -> float | None:
    """Highest hourly load of the prefill pool as a share of its FLOP/s."""
    return pp.pool_peak_utilisation


def ttft_s(pp: ProductPlan) -> float | None:
    """Modelled time to first token of the plan in its busiest hour, in every prefill mode."""
    return pp.ttft_s


def utilisation(pp: ProductPlan) -> float | None:
    """Average share of the self-hosted decode capacity (after headroom) that serves demand."""
    c = pp.candidate
    if c is None:
        return None
    cap = sum(pp.replicas_in_hour(h) * c.usable_tokens_per_s for h in range(len(pp.on_demand)))
    return sum(served_tokens(pp)) / cap if cap else None


def prices_paid(part: Candidate | PoolCandidate, tiers: list[str]) -> dict[str, dict[str, Any]]:
    """GPU-hour price and its source in each tier ``part``'s replicas run in."""
    return {t: {"usd_per_gpu_hour": _r(part.price.tier(t), 6), "source": part.price.tier_source(t)} for t in tiers}


def _sig(x: float, digits: int = 4) -> float:
    """``x`` rounded to ``digits`` significant digits (a small non-zero share stays non-zero)."""
    if x == 0 or math.isinf(x) or math.isnan(x):
        return float(x)
    return float(round(x, digits - 1 - math.floor(math.log10(abs(x)))))


def _ideal_cost_per_million(pp: ProductPlan, plan: Plan) -> float | None:
    """USD per million tokens of the fleet at 100% utilisation: decode replicas (and the pool) at
    the cheapest tier price used, fully busy; None without self-hosted tokens."""
    c, f = pp.candidate, pp.data.prefill_flops_per_output_token
    if c is None or not sum(served_tokens(pp)):
        return None
    cheapest = min(c.usd_per_replica_hour_in(t) for t in plan.problem.tiers)
    ideal = cheapest / (c.usable_tokens_per_s * SECONDS_PER_HOUR) * 1e6
    if pp.pool is not None and f > 0:  # f is zero when every prompt token is cached
        pool_cheapest = min(pp.pool.usd_per_replica_hour_in(t) for t in plan.problem.tiers)
        ideal += pool_cheapest / (pp.pool.flops_per_s / f * SECONDS_PER_HOUR) * 1e6
    return ideal


def layout_fields(c: Candidate | PoolCandidate | None) -> dict[str, Any]:
    """A replica's parallel layout: pipeline stages, expert and attention-DP degrees, GPUs and nodes."""
    if c is None:
        return {"pp": None, "ep": None, "dp_attention": None, "gpus_per_replica": None, "nodes_per_replica": None,
                "layout": None}
    return {"pp": c.pp, "ep": c.ep, "dp_attention": c.dp_attention, "gpus_per_replica": c.gpus_per_replica,
            "nodes_per_replica": c.nodes_per_replica, "layout": c.layout.label()}


def _configuration_fields(pp: ProductPlan) -> dict[str, Any]:
    """The decode configuration, its replicas and speed, memory and GPU price."""
    c = pp.candidate
    e = c.estimate if c else None
    return {
        "name": pp.product.name,
        "model": pp.product.model,
        "gpu": c.gpu if c else None,
        "tp": c.tp if c else None,
        **layout_fields(c),
        "batch": c.batch if c else None,
        "precision": c.precision if c else None,
        "kv_precision": e.kv_precision if e else None,
        "context_tokens": pp.product.input_tokens + pp.product.output_tokens,
        "input_tokens": pp.product.input_tokens,
        "output_tokens": pp.product.output_tokens,
        "min_tokens_per_s_per_user": pp.product.min_tokens_per_s_per_user,
        "max_ttft_ms": _ttft_target(pp),
        "arrival_scv": pp.product.arrival_scv,
        "replicas": pp.replicas,
        "gpus": pp.gpus,
        "per_user_tokens_per_s": _r(e.per_user_tokens_per_s) if e else None,
        "replica_tokens_per_s": _r(e.replica_tokens_per_s) if e else None,
        "usable_replica_tokens_per_s": _r(c.usable_tokens_per_s) if c else None,
        "capacity_tokens_per_s": _r(pp.capacity_tokens_per_s),
        "demand_tokens_per_s": _r(pp.demand_tokens_per_s),
        "sized_for_tokens_per_s": _r(max(pp.sized_for_tokens_per_s)) if pp.sized_for_tokens_per_s else None,
        "headroom": pp.product.effective_headroom,
        "step_time_ms": _r(e.step_time_s * 1e3) if e else None,
        "bound": e.bound if e else None,
        "memory_needed_bytes": _r(e.memory_needed_bytes, 0) if e else None,
        "memory_usable_bytes": _r(e.memory_usable_bytes, 0) if e else None,
        "usd_per_gpu_hour": c.price.usd_per_gpu_hour if c else None,
        "price_source": c.price.source if c else None,
        "prices_paid": prices_paid(c, pp.decode_tiers()) if c else {},
    }


def _cost_fields(pp: ProductPlan, plan: Plan) -> dict[str, Any]:
    """The monthly cost, its breakdown and per million tokens, utilisation and the API's share."""
    w = plan.problem.hour_weight
    tokens_month = sum(pp.data.demand_tokens_per_s) * SECONDS_PER_HOUR * w
    self_tokens_month = sum(served_tokens(pp)) * SECONDS_PER_HOUR * w
    api_month = sum(pp.api_tokens_per_s) * SECONDS_PER_HOUR * w
    breakdown = pp.cost_breakdown()
    fleet_cost = breakdown[Tier.RESERVED] + breakdown[Tier.ON_DEMAND] + breakdown[Tier.SPOT] + breakdown["stranded"]
    per_million = _r(pp.monthly_cost_usd / (tokens_month / 1e6), 4) if tokens_month else None
    api = pp.data.api
    return {
        "monthly_cost_usd": _r(pp.monthly_cost_usd, 2),
        "monthly_cost_breakdown_usd": {k: _r(v, 2) for k, v in breakdown.items()},
        "cost_per_million_output_tokens_usd": per_million,
        "cost_per_million_tokens_usd": per_million,
        "ideal_cost_per_million_tokens_usd": _r(_ideal_cost_per_million(pp, plan), 4),
        "self_hosted_cost_per_million_tokens_usd": _r(fleet_cost / (self_tokens_month / 1e6), 4) if self_tokens_month else None,
        "utilisation": _r(utilisation(pp)),
        "api_fraction": _sig(api_month / tokens_month if tokens_month else 0.0),
        "api": (
            {"id": api.price.id, "usd_per_million_output_tokens": _r(api.usd_per_million_output_tokens),
             "source": api.price.source, "as_of": api.price.as_of.isoformat()}
            if api else None
        ),
    }


def _prefill_fields(pp: ProductPlan) -> dict[str, Any]:
    """Where prefill runs: the mode, the pool's configuration, size, cost and load."""
    c, pool, f = pp.candidate, pp.pool, pp.data.prefill_flops_per_output_token
    return {
        "mode": c.mode if c else None,
        "gpu": pool.gpu if pool else None,
        "tp": pool.tp if pool else None,
        **layout_fields(pool),
        "precision": pool.precision if pool else None,
        "replicas": pp.prefill_pool.peak if pool else None,
        "gpus": pp.prefill_pool.gpus if pool else None,
        "pflops_per_s_needed": _r(max((f * s for s in served_tokens(pp)), default=0.0) / 1e15),
        "monthly_cost_usd": _r(pp.pool_cost_usd, 2),
        "prices_paid": prices_paid(pool, pp.pool_tiers()) if pool else {},
        "utilisation": _r(pool_utilisation(pp)),
        "prefix_cache_hit_rate": pp.product.prefix_cache_hit_rate,
        "kv_transfer": pp.kv_transfer,
    }


def _ttft_target(pp: ProductPlan) -> float | dict[str, float] | None:
    """The product's TTFT target as given: a number, or its percentile targets (ms by percentile)."""
    targets = pp.product.ttft_percentiles_ms
    if targets is None:
        return pp.product.max_ttft_ms
    return targets.model_dump(exclude_none=True)


def _hourly_fields(pp: ProductPlan, hours: int) -> list[dict[str, Any]]:
    """Each hour's demand, replicas per tier, pool replicas and API tokens."""
    return [
        {
            "hour": h,
            "demand_tokens_per_s": _r(pp.data.demand_tokens_per_s[h]),
            "reserved_replicas": pp.reserved,
            "on_demand_replicas": pp.on_demand[h],
            "spot_replicas": pp.spot[h],
            "pool_replicas": pp.prefill_pool.in_hour(h),
            "api_tokens_per_s": _r(pp.api_tokens_per_s[h]),
        }
        for h in range(hours)
    ]


def product_to_dict(pp: ProductPlan, plan: Plan) -> dict[str, Any]:
    """One product's plan as plain data (units in the keys)."""
    c = pp.candidate
    ttft = ttft_s(pp)
    slack = pp.capacity_tokens_per_s + max(pp.api_tokens_per_s, default=0.0) - pp.demand_tokens_per_s
    d: dict[str, Any] = {
        **_configuration_fields(pp),
        **_cost_fields(pp, plan),
        "binding_constraint": LIMITERS[c.batch_limited_by] if c else None,
        "demand_slack_tokens_per_s": _r(slack) if plan.hours == 1 else None,
        "prefill": _prefill_fields(pp),
        "prefill_check": pp.prefill_check,
        "ttft_ms": _r(ttft * 1e3 if ttft is not None else None, 1),
        "why": pp.why,
        "alternatives": pp.alternatives,
    }
    d.update(mix_fields(pp))
    if plan.hours > 1:
        d["hourly"] = _hourly_fields(pp, plan.hours)
    return d


BREAKDOWN_KEYS = (Tier.RESERVED, Tier.ON_DEMAND, Tier.SPOT, "api", "fixed", "stranded")


def split_cents(total_cents: int, weights: list[float]) -> list[int]:
    """``total_cents`` split in proportion to ``weights`` (largest remainder): whole cents that
    add up to ``total_cents`` exactly; ties go to the earlier entry."""
    if not weights:
        return []
    w = sum(weights)
    if w <= 0:
        weights, w = [1.0] * len(weights), float(len(weights))
    exact = [total_cents * x / w for x in weights]
    out = [math.floor(e) for e in exact]
    left = total_cents - sum(out)
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[:left]:
        out[i] += 1
    return out


def _cents(x: float) -> int:
    return int(round(x * 100))


def breakdown_cents(pp: ProductPlan) -> dict[str, int]:
    """The product's monthly cost per kind in whole cents (each kind rounded on its own)."""
    return {k: _cents(v) for k, v in pp.cost_breakdown().items()}


def _product_rows(plan: Plan) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The plan's product rows, its pools and the rows whose replicas and GPUs the totals count
    (products and pools; see :func:`plan_to_dict`)."""
    products: list[dict[str, Any]] = []
    pools: list[dict[str, Any]] = []
    counted: list[dict[str, Any]] = []  # the rows whose replicas and GPUs are the plan's (products and pools)
    for pp in plan.products:
        d = product_to_dict(pp, plan)
        cents = breakdown_cents(pp)
        if not pp.data.members:
            d["monthly_cost_breakdown_usd"] = {k: v / 100 for k, v in cents.items()}
            d["monthly_cost_usd"] = sum(cents.values()) / 100
            products.append(d)
            counted.append(counted_row(pp, d))
            continue
        rows, pool = _pooled(pp, d, cents, plan)
        products += rows
        pools.append(pool)
        counted.append({"replicas": pool["replicas"], "gpus": pool["gpus"],
                        "prefill": {"replicas": pool["prefill_replicas"], "gpus": pool["prefill_gpus"]}})
    return products, pools, counted


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The whole plan as plain data; identical scenarios give identical dicts.

    Money is rounded to cents per cost kind; a product's ``monthly_cost_usd`` is the sum of its
    rounded breakdown and the plan's totals are sums of the product rows, so every total equals
    the sum of the parts listed. A pooled group is listed once in ``pools`` with its replicas,
    GPUs and cost; each member's row points at it (``pooled_in``), carries its share of the
    cost (split by its share of output tokens, in whole cents) and lists 0 replicas and GPUs of
    its own (the pool's are in ``shared_replicas`` and ``shared_gpus``). ``totals`` counts every
    replica and GPU once: each product's (or pool's) busiest hour, summed.
    """
    res = plan.solve_result
    products, pools, counted = _product_rows(plan)
    total_cents = {k: sum(_cents(p["monthly_cost_breakdown_usd"][k]) for p in products) for k in BREAKDOWN_KEYS}
    power, product_power = power_report(plan)
    for d in products:
        d["power"] = product_power.get(d.get("pooled_in") or d["name"], product_power.get(d["name"]))
    out = {
        "status": res.status,
        "solver": res.solver,
        "termination": res.termination,
        "preset": plan.preset.name,
        "calibration": plan.preset.calibration,
        "hours": plan.hours,
        "tiers": list(plan.problem.tiers),
        "monthly_cost_usd": sum(total_cents.values()) / 100,
        "objective_usd": _r(res.objective or 0.0, 2),
        "mip_gap": _r(res.mip_gap, 8),
        "gap_breakdown_usd": ({k: _r(v, 2) for k, v in plan.gap_breakdown_usd.items()}
                              if plan.gap_breakdown_usd is not None else None),
        "time_limit_s": plan.scenario.options.time_limit_s or DEFAULT_TIME_LIMIT_S,
        "stopped_by_time_limit": list(plan.stopped),
        "monthly_cost_breakdown_usd": {k: v / 100 for k, v in total_cents.items()},
        "totals": _totals(counted, sum(total_cents.values())),
        "products": products,
        "candidates": {name: candidate_counts(cs) for name, cs in plan.candidate_sets.items()},
        "unpriced_gpus": sorted({g for cs in plan.candidate_sets.values() for g in cs.unpriced_gpus}),
        "model_size": {"variables": plan.model_size[0], "constraints": plan.model_size[1]},
        "pools": pools,
        "pooling": plan.pooling,
        "components": [[n for name in comp for n in ([m.name for m in plan.members.get(name, [])] or [name])]
                       for comp in plan.components],
        "gpu_usage": plan.instances,
        "first_come_monthly_cost_usd": _r(plan.first_come_monthly_cost_usd, 2),
        "binding_limits": plan.binding_limits,
        "verification": plan.verification,
        "power": power,
    }
    if plan.scenario.sites:
        out["tiers"] = site_tiers(plan.scenario, out["tiers"])
        out["sites"] = sites_report(plan)
    return out


def _totals(counted: list[dict[str, Any]], total_cents: int) -> dict[str, Any]:
    """Replicas and GPUs counted once (each product's or pool's busiest hour, summed) and the cost."""
    replicas = sum(r["replicas"] for r in counted)
    gpus = sum(r["gpus"] for r in counted)
    prefill_replicas = sum(r["prefill"]["replicas"] or 0 for r in counted)
    prefill_gpus = sum(r["prefill"]["gpus"] or 0 for r in counted)
    return {
        "replicas": replicas, "gpus": gpus, "prefill_replicas": prefill_replicas, "prefill_gpus": prefill_gpus,
        "all_gpus": gpus + prefill_gpus, "monthly_cost_usd": total_cents / 100,
    }


def _pooled(pp: ProductPlan, d: dict[str, Any], cents: dict[str, int], plan: Plan
            ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A pooled group's member rows (each with its share of the cost, in whole cents, and no
    replicas of its own) and the pool's own entry."""
    members = plan.members.get(pp.product.name, [])
    weights = [sum(m.demand_tokens_per_s) for m in pp.data.members]
    total = sum(weights) or 1.0
    member_cents = [dict.fromkeys(cents, 0) for _ in members]
    for k, v in cents.items():
        for i, c in enumerate(split_cents(v, weights)):
            member_cents[i][k] = c
    pool_cents = _cents(pp.pool_cost_usd)
    pool_member_cents = split_cents(pool_cents, weights)
    rows = []
    for i, (member, mdata) in enumerate(zip(members, pp.data.members)):
        mc = member_cents[i]
        row = dict(d)
        row.update({
            "name": member.name, "pooled_in": pp.product.name, "pool_share": _r(weights[i] / total, 6),
            "replicas": 0, "gpus": 0, "shared_replicas": d["replicas"], "shared_gpus": d["gpus"],
            "demand_tokens_per_s": _r(mdata.peak_demand_tokens_per_s),
            "monthly_cost_usd": sum(mc.values()) / 100,
            "monthly_cost_breakdown_usd": {k: v / 100 for k, v in mc.items()},
            "min_tokens_per_s_per_user": member.min_tokens_per_s_per_user,
            "prefill": {
                **d["prefill"],
                "replicas": 0 if d["prefill"]["gpu"] else None,
                "gpus": 0 if d["prefill"]["gpu"] else None,
                "monthly_cost_usd": pool_member_cents[i] / 100,
            },
        })
        row.pop("hourly", None)
        rows.append(row)
    sep = plan.separate.get(pp.product.name, {})
    pool = {
        "name": pp.product.name, "model": pp.product.model, "products": [m.name for m in members],
        "gpu": d["gpu"], "tp": d["tp"], "batch": d["batch"], "precision": d["precision"],
        "replicas": d["replicas"], "gpus": d["gpus"], "monthly_cost_usd": sum(cents.values()) / 100,
        "monthly_cost_breakdown_usd": {k: v / 100 for k, v in cents.items()},
        "prefill_mode": d["prefill"]["mode"],
        "prefill_gpu": d["prefill"]["gpu"], "prefill_replicas": d["prefill"]["replicas"],
        "prefill_gpus": d["prefill"]["gpus"], "prefill_monthly_cost_usd": pool_cents / 100,
        "member_monthly_cost_usd": {m.name: sum(mc.values()) / 100 for m, mc in zip(members, member_cents)},
        "per_user_tokens_per_s": d["per_user_tokens_per_s"],
        "separate_replicas": sep.get("replicas"), "separate_gpus": sep.get("gpus"),
        "separate_monthly_cost_usd": sep.get("monthly_cost_usd"),
        **({"hourly": d["hourly"]} if "hourly" in d else {}),
    }
    return rows, pool


def candidate_counts(cs: CandidateSet) -> dict[str, Any]:
    """How many configurations of one product were generated, feasible and kept for the solver.

    Decode (``generated``, ``invalid_shapes``, ``feasible``) counts configurations GPU x TP x
    precision x prefill mode x batch on priced GPUs; ``after_pruning`` counts the decode
    candidates the solver sees (one batch per shape, dominated ones dropped), so
    generated >= feasible >= after_pruning. ``pool_*`` count prefill-pool shapes GPU x TP x
    precision the same way.
    """
    return {
        "generated": cs.generated,
        "feasible": cs.feasible,
        "invalid_shapes": cs.invalid_shapes,
        "after_pruning": cs.after_pruning,
        "pool_generated": cs.pool_generated,
        "pool_feasible": cs.pool_feasible,
        "pool_after_pruning": cs.pool_after_pruning,
        "unpriced_gpus": cs.unpriced_gpus,
    }



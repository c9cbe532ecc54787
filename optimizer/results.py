"""Read a solved plan: JSON-ready dicts and invariants recomputed from the plan itself."""

from __future__ import annotations

from typing import Any

from fleetplan.optimizer.plan import Plan, ProductPlan

SECONDS_PER_HOUR = 3600.0


def _r(x: float, nd: int = 4) -> float:
    """Round for output: enough digits to trace a number, few enough to be stable."""
    return float(round(x, nd))


def product_to_dict(pp: ProductPlan, hours_per_month: float) -> dict[str, Any]:
    """One product's plan as plain data (units in the keys)."""
    c, e = pp.candidate, pp.candidate.estimate
    tokens_per_month = pp.demand_tokens_per_s * hours_per_month * SECONDS_PER_HOUR
    return {
        "name": pp.product.name,
        "model": pp.product.model,
        "gpu": c.gpu,
        "tp": c.tp,
        "batch": c.batch,
        "precision": c.precision,
        "kv_precision": e.kv_precision,
        "replicas": pp.replicas,
        "gpus": pp.gpus,
        "per_user_tokens_per_s": _r(e.per_user_tokens_per_s),
        "replica_tokens_per_s": _r(e.replica_tokens_per_s),
        "usable_replica_tokens_per_s": _r(c.usable_tokens_per_s),
        "capacity_tokens_per_s": _r(pp.capacity_tokens_per_s),
        "demand_tokens_per_s": _r(pp.demand_tokens_per_s),
        "headroom": pp.product.headroom,
        "step_time_ms": _r(e.step_time_s * 1e3),
        "bound": e.bound,
        "memory_needed_bytes": _r(e.memory_needed_bytes, 0),
        "memory_usable_bytes": _r(e.memory_usable_bytes, 0),
        "usd_per_gpu_hour": c.price.usd_per_gpu_hour,
        "price_source": c.price.source,
        "monthly_cost_usd": _r(pp.monthly_cost_usd, 2),
        "cost_per_million_output_tokens_usd": _r(pp.monthly_cost_usd / (tokens_per_month / 1e6), 4)
        if tokens_per_month
        else None,
        "binding_constraint": {
            "per_user_speed": "min_tokens_per_s_per_user",
            "memory": "memory",
            "batch_options": "options.batch",
        }[c.batch_limited_by],
        "demand_slack_tokens_per_s": _r(pp.capacity_tokens_per_s - pp.demand_tokens_per_s),
        "why": pp.why,
        "alternatives": pp.alternatives,
    }


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The whole plan as plain data; identical scenarios give identical dicts."""
    res = plan.solve_result
    return {
        "status": res.status,
        "solver": res.solver,
        "termination": res.termination,
        "preset": plan.preset.name,
        "calibration": plan.preset.calibration,
        "monthly_cost_usd": _r(plan.monthly_cost_usd, 2),
        "objective_usd": _r(res.objective or 0.0, 2),
        "products": [product_to_dict(pp, plan.preset.hours_per_month) for pp in plan.products],
        "candidates": {
            name: {
                "generated": cs.generated,
                "feasible": cs.feasible,
                "invalid_shapes": cs.invalid_shapes,
                "after_pruning": cs.after_pruning,
                "unpriced_gpus": cs.unpriced_gpus,
            }
            for name, cs in plan.candidate_sets.items()
        },
        "model_size": {"variables": plan.lp.num_cols, "constraints": plan.lp.num_rows},
    }


def check_invariants(plan: Plan) -> list[str]:
    """Recompute the plan's promises from its own numbers; return the broken ones (empty if none)."""
    problems: list[str] = []
    for pp in plan.products:
        c, e = pp.candidate, pp.candidate.estimate
        if e.memory_needed_bytes > e.memory_usable_bytes:
            problems.append(f"{pp.product.name}: memory {e.memory_needed_bytes:.3e} B > usable {e.memory_usable_bytes:.3e} B")
        if e.per_user_tokens_per_s < pp.product.min_tokens_per_s_per_user - 1e-9:
            problems.append(f"{pp.product.name}: per-user speed below target")
        if pp.capacity_tokens_per_s < pp.demand_tokens_per_s * (1 - 1e-9):
            problems.append(f"{pp.product.name}: capacity {pp.capacity_tokens_per_s} < demand {pp.demand_tokens_per_s}")
        expected = pp.replicas * c.tp * c.price.usd_per_gpu_hour * plan.preset.hours_per_month
        if abs(expected - pp.monthly_cost_usd) > 1e-6 * max(1.0, expected):
            problems.append(f"{pp.product.name}: cost is not GPUs x hours x price")
    if abs(plan.monthly_cost_usd - (plan.solve_result.objective or 0.0)) > 1e-4 * max(1.0, plan.monthly_cost_usd):
        problems.append("total cost differs from the solver's objective")
    return problems

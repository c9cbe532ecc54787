"""Baselines a joint plan is compared with: products planned first come, first served on scarce
GPUs, and a pooled group's products each with replicas of their own.

Owns these comparisons only; the plan itself is never changed by them."""

from __future__ import annotations

from typing import Any

from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.common.errors import SolverError
from fleetplan.optimizer.problem_data.problem import FleetProblem, ProductData
from fleetplan.optimizer.traffic.scenario import Product
from fleetplan.optimizer.decomposition.search import solve_by_configuration
from fleetplan.optimizer.mip.solution import ProductPlan, extract, gpu_hours, tier_gpu_hours
from fleetplan.optimizer.mip.solvers import Solver


def plan_alone(
    prob: FleetProblem, data: ProductData, product: Product, solver: Solver, opts: Any, availability: dict[str, int],
    tier_availability: dict[tuple[str, str], int] | None = None, deadline: Deadline | None = None,
) -> ProductPlan | None:
    """``product`` (whose MIP data is ``data``) planned on its own: instances kept, the budget
    and other products ignored."""
    sub = prob.derive(products={data.name: data}, gpu_availability=availability,
                      tier_availability=tier_availability or {}, monthly_budget_usd=None)
    found = solve_by_configuration(sub, data.name, solver, deadline=deadline, mip_rel_gap=opts.mip_rel_gap)
    if found is None:
        return None
    res, lp, sub_c = found
    pp = extract(lp, res, sub_c, [product])[0]
    pp.solve_objective = float(res.objective or 0.0)
    pp.solve_optimal = res.optimal
    return pp


def first_come_cost(prob: FleetProblem, order: list[Product], solver: Solver, opts: Any,
                    deadline: Deadline | None = None) -> float | None:
    """Cost of planning products one after another, each taking what it needs of the scarce GPUs
    first (the baseline a joint plan is compared with); None if a later product is left
    unservable, or if the deadline comes first (noted)."""
    deadline = deadline or Deadline(at=None)
    remaining = dict(prob.gpu_availability)
    remaining_tier = dict(prob.tier_availability)
    total = 0.0
    for i, product in enumerate(order):
        deadline.progress.update("first-come baseline", i, len(order))
        try:
            pp = (None if deadline.expired else
                  plan_alone(prob, prob.products[product.name], product, solver, opts, dict(remaining),
                             dict(remaining_tier), deadline.share(1.0 / (len(order) - i))))
        except SolverError:
            pp = None
        if pp is None or not pp.solve_optimal:
            if deadline.expired or (pp is not None and not pp.solve_optimal):
                deadline.note("first-come baseline")
            return None
        total += pp.solve_objective
        for gpu, row in gpu_hours([pp], prob.hours).items():
            if gpu in remaining:
                remaining[gpu] = max(0, remaining[gpu] - max(row))
        for key, row in tier_gpu_hours([pp], prob.hours).items():
            if key in remaining_tier:
                remaining_tier[key] = max(0, remaining_tier[key] - max(row))
    return total


def separate_cost(prob: FleetProblem, pooled: ProductData, members: list[Product], solver: Solver, opts: Any,
                  deadline: Deadline | None = None) -> dict[str, Any]:
    """Replicas and cost if a pooled group's products (``members``, in the order of
    ``pooled.members``) each had their own replicas (no shared limits)."""
    deadline = deadline or Deadline(at=None)
    replicas = gpus = 0
    cost = 0.0
    for i, (m, product) in enumerate(zip(pooled.members, members)):
        try:
            pp = None if deadline.expired else plan_alone(prob, m, product, solver, opts, {}, None,
                                                           deadline.share(1.0 / (len(pooled.members) - i)))
        except SolverError:
            pp = None
        if pp is None:
            return {"replicas": None, "gpus": None, "monthly_cost_usd": None}
        cost += pp.solve_objective
        replicas += pp.replicas
        gpus += pp.gpus + pp.prefill_pool.gpus
    return {"replicas": replicas, "gpus": gpus, "monthly_cost_usd": round(cost, 2)}

"""What the plan is compared with, per product: the cheapest plan on each other GPU type and the
cost of each prefill mode, each a search restricted to those configurations.

Owns these comparisons; it never changes the chosen plan."""

from __future__ import annotations

from typing import Any

from fleetplan.optimizer.deadline import Deadline
from fleetplan.optimizer.defaults import EXPLANATION_GAP
from fleetplan.optimizer.errors import SolverError
from fleetplan.optimizer.linear import LinearProblem
from fleetplan.optimizer.problem import FleetProblem
from fleetplan.optimizer.search import solve_by_configuration
from fleetplan.optimizer.solution import ProductPlan, extract
from fleetplan.optimizer.solvers import Solver


def runner_ups(prob: FleetProblem, pp: ProductPlan, base: float, solver: Solver, deadline: Deadline,
               base_lp: LinearProblem | None = None) -> list[dict[str, Any]]:
    """Cheapest plan with the product's decode forced onto each other GPU type (those not reached
    before the deadline are left out, and the deadline notes it)."""
    if pp.candidate is None:
        return []
    alts: list[dict[str, Any]] = []
    name = pp.product.name
    gpus = sorted({c.gpu for c in prob.products[name].candidates} - {pp.candidate.gpu})
    for i, gpu in enumerate(gpus):
        if deadline.expired:
            deadline.note(f"{name}: runner-ups on other GPU types")
            break
        each = deadline.share(1.0 / (len(gpus) - i))
        try:
            found = solve_by_configuration(prob, name, solver, keep=lambda c, gpu=gpu: c.gpu == gpu,
                                           deadline=each, mip_rel_gap=EXPLANATION_GAP, base_lp=base_lp,
                                           stage=f"runner-up on {gpu}")
        except SolverError:
            continue
        if found is None:
            continue
        res, fixed, sub = found
        alt = extract(fixed, res, sub, [pp.product])[0]
        if alt.candidate is None:
            continue
        c = alt.candidate
        alts.append({
            "gpu": c.gpu, "tp": c.tp, "layout": c.layout.label(), "batch": c.batch, "precision": c.precision, "prefill": c.mode,
            "replicas": alt.replicas, "gpus": alt.gpus, "monthly_cost_usd": round(alt.monthly_cost_usd, 2),
            "cost_difference_usd": round(float(res.objective or 0.0) - base, 2),
            "proven_optimal": res.optimal,
        })
    alts.sort(key=lambda a: (a["cost_difference_usd"], a["gpu"]))
    return alts


def mode_costs(prob: FleetProblem, pp: ProductPlan, solver: Solver, deadline: Deadline,
               base_lp: LinearProblem | None = None) -> dict[str, float | None]:
    """The cheapest plan's monthly cost with the product's prefill in each mode it may use (None
    where a mode has no plan); empty when only one mode is possible. Modes not reached before the
    deadline are left out, and the deadline notes it."""
    name = pp.product.name
    modes = sorted({c.mode for c in prob.products[name].candidates})
    costs: dict[str, float | None] = {}
    if len(modes) < 2:
        return costs
    for j, mode in enumerate(modes):
        if deadline.expired:
            deadline.note(f"{name}: cost of each prefill mode")
            break
        try:
            found = solve_by_configuration(prob, name, solver, keep=lambda c, mode=mode: c.mode == mode,
                                           deadline=deadline.share(1.0 / (len(modes) - j)), mip_rel_gap=EXPLANATION_GAP,
                                           base_lp=base_lp, stage=f"cost of prefill mode {mode}")
        except SolverError:
            found = None
        costs[mode] = None if found is None else round(float(found[0].objective or 0.0), 2)
    return costs

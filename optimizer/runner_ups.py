"""What the plan is compared with, per product: the cheapest plan on each other GPU type and the
cost of each prefill mode, each a search restricted to those configurations; for a request mix
also the best single-configuration plan (every bucket on one configuration), whose cost less the
mix's is the mix's saving.

Owns these comparisons; it never changes the chosen plan."""

from __future__ import annotations

from dataclasses import replace
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
    """Cheapest plan with the product's decode forced onto each other GPU type (for a request mix,
    onto each GPU type, its own included); those not reached before the deadline are left out,
    and the deadline notes it."""
    if pp.candidate is None:
        return []
    alts: list[dict[str, Any]] = []
    name = pp.product.name
    # a mix may run several GPU types: its runner-ups are the mix kept to each type in turn
    own = set() if pp.mix is not None else {pp.candidate.gpu}
    gpus = sorted({c.gpu for c in prob.products[name].candidates} - own)
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
        if alt.mix is not None:
            alts.append(_entry(alt, float(res.objective or 0.0) - base, res.optimal))
            continue
        alts.append({
            "gpu": c.gpu, "tp": c.tp, "layout": c.layout.label(), "batch": c.batch, "precision": c.precision, "prefill": c.mode,
            "replicas": alt.replicas, "gpus": alt.gpus, "monthly_cost_usd": round(alt.monthly_cost_usd, 2),
            "cost_difference_usd": round(float(res.objective or 0.0) - base, 2),
            "proven_optimal": res.optimal,
        })
    alts.sort(key=lambda a: (a["cost_difference_usd"], a["gpu"]))
    return alts


def _entry(alt: ProductPlan, difference: float, optimal: bool) -> dict[str, Any]:
    """A runner-up of a request mix: its largest configuration, all its GPUs and configurations."""
    c, mix = alt.candidate, alt.mix
    assert c is not None and mix is not None
    return {
        "gpu": c.gpu, "tp": c.tp, "layout": c.layout.label(), "batch": c.batch, "precision": c.precision,
        "prefill": c.mode, "replicas": alt.replicas, "gpus": sum(f.gpus for f in mix.fleets) + alt.prefill_pool.gpus,
        "configurations": len(mix.fleets), "monthly_cost_usd": round(alt.monthly_cost_usd, 2),
        "cost_difference_usd": round(difference, 2), "proven_optimal": optimal,
    }


def single_configuration(prob: FleetProblem, pp: ProductPlan, base: float, solver: Solver, deadline: Deadline,
                         mip_rel_gap: float) -> dict[str, Any] | None:
    """The cheapest plan of a request mix with every bucket on ONE configuration (one eligible for
    every bucket, with its pool in pool mode), as a runner-up with ``single_configuration`` set;
    None when no configuration serves every bucket or none was found before the deadline. The mix's
    own plan may use that configuration alone, so it never costs more (up to the solver's gap)."""
    name = pp.product.name
    pd = prob.products[name]
    eligible = tuple(c for c in pd.candidates if all(c.key in b.capacity for b in pd.buckets))
    if not eligible:
        return None
    keys = {c.key for c in eligible}
    buckets = tuple(replace(b, capacity={k: u for k, u in b.capacity.items() if k in keys}) for b in pd.buckets)
    single = replace(pd, single=True, candidates=eligible, buckets=buckets)
    sub = prob.derive(products={**prob.products, name: single})
    try:
        found = solve_by_configuration(sub, name, solver, deadline=deadline, mip_rel_gap=mip_rel_gap,
                                       stage="best single-configuration plan")
    except SolverError:
        return None
    if found is None:
        return None
    res, fixed, whole = found
    alt = extract(fixed, res, whole, [pp.product])[0]
    if alt.candidate is None:
        return None
    return {**_entry(alt, float(res.objective or 0.0) - base, res.optimal), "single_configuration": True}


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

"""Plan a fleet: scenario -> candidates -> MIP -> solve -> explained plan."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from fleetplan.catalogs.loader import Catalog, InputError
from fleetplan.models.presets import Preset, get_preset
from fleetplan.optimizer.candidates import Candidate, CandidateSet, check_options, generate_candidates
from fleetplan.optimizer.formulation import FleetProblem, build_model
from fleetplan.optimizer.linear import LinearProblem, to_linear_problem
from fleetplan.optimizer.scenario import Product, Scenario
from fleetplan.optimizer.solvers import SolveResult, solve


class InfeasibleError(InputError):
    """No plan meets the targets; the message names the constraint and the best reachable value."""


class SolverError(RuntimeError):
    """The solver returned no proven-optimal plan."""


@dataclass
class Timings:
    """Wall-clock seconds of each planning stage (not part of the plan's JSON: not deterministic)."""

    candidates_s: float = 0.0
    build_s: float = 0.0
    export_s: float = 0.0
    solve_s: float = 0.0


@dataclass
class ProductPlan:
    """The chosen configuration of one product and its alternatives on other GPU types."""

    product: Product
    candidate: Candidate
    replicas: int
    demand_tokens_per_s: float
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    why: str = ""

    @property
    def gpus(self) -> int:
        """GPUs of the product's fleet."""
        return self.replicas * self.candidate.tp

    @property
    def monthly_cost_usd(self) -> float:
        """Monthly cost recomputed from the integer plan."""
        return self.replicas * self.candidate.monthly_cost_per_replica_usd

    @property
    def capacity_tokens_per_s(self) -> float:
        """Usable decode throughput of the fleet (after headroom)."""
        return self.replicas * self.candidate.usable_tokens_per_s


@dataclass
class Plan:
    """A solved plan with everything needed to report and check it."""

    scenario: Scenario
    preset: Preset
    solve_result: SolveResult
    products: list[ProductPlan]
    candidate_sets: dict[str, CandidateSet]
    lp: LinearProblem
    timings: Timings = field(default_factory=Timings)

    @property
    def monthly_cost_usd(self) -> float:
        """Total monthly cost, summed from the products."""
        return sum(p.monthly_cost_usd for p in self.products)


def build_candidates(scenario: Scenario, catalog: Catalog, preset: Preset) -> dict[str, CandidateSet]:
    """Candidate sets of every product, raising a clear error when a product has none."""
    check_options(catalog, scenario.options)
    sets: dict[str, CandidateSet] = {}
    for product in scenario.products:
        llm = catalog.model(product.model, f"products[{product.name}].model")
        cs = generate_candidates(product, llm, catalog, scenario.options, preset)
        if not cs.candidates:
            raise InfeasibleError(explain_no_candidates(product, cs))
        sets[product.name] = cs
    return sets


def explain_no_candidates(product: Product, cs: CandidateSet) -> str:
    """Which constraint no configuration of ``product`` can meet, and the best value reachable."""
    where = f"products[{product.name}]"
    if cs.generated == 0 or cs.generated == cs.invalid_shapes:
        unpriced = f"; no price for {', '.join(cs.unpriced_gpus)}" if cs.unpriced_gpus else ""
        return f"{where}: no valid GPU/TP shape for {product.model} among the allowed options{unpriced}"
    if not cs.any_fits_memory:
        return (
            f"{where}: infeasible: {product.model} with {product.input_tokens + product.output_tokens} tokens of "
            f"context does not fit in memory on any allowed GPU/TP (try larger tp or lower precision)"
        )
    return (
        f"{where}.min_tokens_per_s_per_user: infeasible: no configuration reaches "
        f"{product.min_tokens_per_s_per_user:g} tokens/s per user; the best reachable is "
        f"{cs.best_per_user_tokens_per_s:.1f} tokens/s ({cs.best_per_user_at})"
    )


def make_problem(scenario: Scenario, sets: dict[str, CandidateSet]) -> FleetProblem:
    """The MIP data: peak output tokens/s and candidates per product."""
    return FleetProblem(
        demand_tokens_per_s={p.name: p.peak_output_tokens_per_s for p in scenario.products},
        candidates={name: cs.candidates for name, cs in sets.items()},
    )


def _chosen(lp: LinearProblem, result: SolveResult, prob: FleetProblem) -> dict[str, tuple[Candidate, int]]:
    out: dict[str, tuple[Candidate, int]] = {}
    for c in prob.all_candidates():
        use = result.values[lp.column(f"use[{c.key}]")]
        if use > 0.5:
            out[c.product] = (c, round(result.values[lp.column(f"replicas[{c.key}]")]))
    return out


def _alternatives(
    lp: LinearProblem, prob: FleetProblem, product: str, chosen: Candidate, base_cost: float, solver: str
) -> list[dict[str, Any]]:
    """Cheapest plan with ``product`` forced onto each other GPU type (re-solving the same MIP)."""
    alts: list[dict[str, Any]] = []
    gpus = sorted({c.gpu for c in prob.candidates[product]} - {chosen.gpu})
    for gpu in gpus:
        upper = list(lp.col_upper)
        for c in prob.candidates[product]:
            if c.gpu != gpu:
                upper[lp.column(f"use[{c.key}]")] = 0.0
        fixed = LinearProblem(**{**lp.__dict__, "col_upper": upper})
        res = solve(fixed, solver)
        if not res.optimal:
            continue
        pick = _chosen(fixed, res, prob)[product]
        c, n = pick
        cost = n * c.monthly_cost_per_replica_usd
        total = sum(
            nn * cc.monthly_cost_per_replica_usd for cc, nn in _chosen(fixed, res, prob).values()
        )
        alts.append(
            {
                "gpu": c.gpu, "tp": c.tp, "batch": c.batch, "precision": c.precision, "replicas": n,
                "gpus": n * c.tp, "monthly_cost_usd": round(cost, 2),
                "cost_difference_usd": round(total - base_cost, 2),
            }
        )
    alts.sort(key=lambda a: (a["cost_difference_usd"], a["gpu"]))
    return alts


def _why(pp: ProductPlan) -> str:
    c = pp.candidate
    e = c.estimate
    limiter = {
        "per_user_speed": f"a larger batch would drop below {pp.product.min_tokens_per_s_per_user:g} tokens/s per user",
        "memory": "a larger batch would not fit in memory",
        "batch_options": "the largest batch allowed",
    }[c.batch_limited_by]
    usd_per_ktok = c.monthly_cost_per_replica_usd / c.usable_tokens_per_s * 1000
    txt = (
        f"{c.gpu} tp{c.tp} {c.precision} at batch {c.batch} ({limiter}) is {e.bound}-bound at "
        f"{e.step_time_s * 1e3:.1f} ms per step and delivers {c.usable_tokens_per_s:,.0f} usable tokens/s per replica "
        f"for ${c.monthly_cost_per_replica_usd:,.0f}/month: ${usd_per_ktok:,.0f} per 1,000 tokens/s-month"
    )
    if pp.alternatives:
        a = pp.alternatives[0]
        txt += (
            f"; the runner-up on another GPU type ({a['gpu']} tp{a['tp']} {a['precision']} batch {a['batch']}, "
            f"{a['replicas']} replicas) costs ${a['cost_difference_usd']:,.0f}/month more"
        )
    return txt


def make_plan(
    scenario: Scenario,
    catalog: Catalog,
    solver: str = "highs",
    alternatives: bool = True,
    preset: Preset | None = None,
) -> Plan:
    """Solve ``scenario`` to proven optimality and explain the result.

    ``preset`` replaces the scenario's named preset (e.g. one adjusted by a calibration profile).
    """
    preset = preset or get_preset(scenario.preset)
    timings = Timings()
    t0 = time.perf_counter()
    sets = build_candidates(scenario, catalog, preset)
    prob = make_problem(scenario, sets)
    t1 = time.perf_counter()
    model = build_model(prob)
    t2 = time.perf_counter()
    lp = to_linear_problem(model)
    t3 = time.perf_counter()
    opts = scenario.options
    result = solve(lp, solver, time_limit_s=opts.time_limit_s, mip_rel_gap=opts.mip_rel_gap)
    t4 = time.perf_counter()
    timings.candidates_s, timings.build_s, timings.export_s, timings.solve_s = t1 - t0, t2 - t1, t3 - t2, t4 - t3
    if result.status == "infeasible":
        raise InfeasibleError("infeasible: no fleet meets every product's demand under the given limits")
    if not result.optimal:
        raise SolverError(f"{solver} returned no proven-optimal plan: {result.termination}")

    chosen = _chosen(lp, result, prob)
    products: list[ProductPlan] = []
    for product in scenario.products:
        cand, n = chosen[product.name]
        pp = ProductPlan(product=product, candidate=cand, replicas=n, demand_tokens_per_s=prob.demand_tokens_per_s[product.name])
        products.append(pp)
    total = sum(p.monthly_cost_usd for p in products)
    for pp in products:
        if alternatives:
            pp.alternatives = _alternatives(lp, prob, pp.product.name, pp.candidate, total, solver)
        pp.why = _why(pp)
    return Plan(scenario=scenario, preset=preset, solve_result=result, products=products, candidate_sets=sets, lp=lp, timings=timings)

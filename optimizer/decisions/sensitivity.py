"""Sensitivities of a plan's cost: the tornado of ±20% on demand, GPU price, speed target and
input length, each the scenario with that input moved and planned again.

Two ways to plan again: :meth:`Replanner.cost` runs the whole planner
(:func:`~fleetplan.optimizer.plan.make_plan`, without runner-ups or baselines); with the plan
given, :meth:`Replanner.kept_cost` keeps each product's configuration shape (GPU, TP, precision,
prefill mode; the prefill pool's GPU, TP, precision) and lets the MIP choose again only the
batch that still meets the targets, the replicas, tiers and API share: a far smaller MIP, and a
cost no lower than a full re-plan's (the answer to "what does this fleet cost if ..."). Every
re-plan runs within a share of the caller's one deadline.

Owns which inputs move and how; it changes no plan."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from fleetplan.optimizer.common.defaults import SENSITIVITY_GAP, SWING
from fleetplan.catalogs.loader import Catalog, InputError
from fleetplan.models.presets import Preset, get_preset
from fleetplan.optimizer.problem_data.candidates import (
    Candidate,
    CandidateSet,
    Shapes,
    generate_candidates,
    resolve_gpu_price,
)
from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.common.enums import Tier
from fleetplan.optimizer.common.errors import SolverError
from fleetplan.optimizer.problem_data.problem import CandidateMemo, build_problem, candidate_key
from fleetplan.optimizer.traffic.scenario import Product, Scenario
from fleetplan.optimizer.mip.solution import Plan, ProductPlan
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.decomposition.components import combined_result, solve_components


def _products(scenario: Scenario, change: Callable[[Product], dict[str, Any]]) -> Scenario:
    """``scenario`` with ``change(product)`` applied to every product."""
    return scenario.model_copy(update={"products": [p.model_copy(update=change(p)) for p in scenario.products]})


def demand(scenario: Scenario, catalog: Catalog, f: float) -> Scenario:
    """Every product's ``peak_qps`` times ``f`` (profiles scale with it)."""
    return _products(scenario, lambda p: {"peak_qps": p.peak_qps * f})


def speed_target(scenario: Scenario, catalog: Catalog, f: float) -> Scenario:
    """Every product's ``min_tokens_per_s_per_user`` times ``f``."""
    return _products(scenario, lambda p: {"min_tokens_per_s_per_user": p.min_tokens_per_s_per_user * f})


def input_length(scenario: Scenario, catalog: Catalog, f: float) -> Scenario:
    """Every product's ``input_tokens`` times ``f``, rounded to whole tokens (at least one); a
    request mix's buckets each (they, not the mean, are what a mix is planned from)."""
    def change(p: Product) -> dict[str, Any]:
        update: dict[str, Any] = {"input_tokens": max(1, round(p.input_tokens * f))}
        if p.requests:
            update["requests"] = [b.model_copy(update={"input_tokens": max(1, round(b.input_tokens * f))})
                                  for b in p.requests]
        return update

    return _products(scenario, change)


def gpu_price(scenario: Scenario, catalog: Catalog, f: float) -> Scenario:
    """Every GPU-hour price times ``f``: the on-demand price each GPU gets (override, provider or
    reference) and any reserved or spot override."""
    o = scenario.options
    rented = o.model_copy()
    rented._site_prices = {}  # a site's carbon charge is added again to the scaled price, not scaled
    gpus = o.gpus or sorted(catalog.gpus)
    on_demand = {}
    for g in gpus:
        price = resolve_gpu_price(catalog, rented, g)
        if price is not None:
            on_demand[g] = price.usd_per_gpu_hour * f
    update = {"gpu_hour_usd": on_demand,
              "reserved_gpu_hour_usd": {g: v * f for g, v in o.reserved_gpu_hour_usd.items()},
              "spot_gpu_hour_usd": {g: v * f for g, v in o.spot_gpu_hour_usd.items()}}
    return scenario.model_copy(update={"options": o.model_copy(update=update)})


# The tornado's inputs, in the order the report lists them.
DRIVERS: dict[str, Callable[[Scenario, Catalog, float], Scenario]] = {
    "demand (peak_qps)": demand,
    "GPU-hour price": gpu_price,
    "speed target (min_tokens_per_s_per_user)": speed_target,
    "input length (input_tokens)": input_length,
}


@dataclass(frozen=True)
class Replanner:
    """What a re-plan needs besides the scenario: catalog, preset, folder of profiles, solver."""

    catalog: Catalog
    preset: Preset | None
    folder: Path
    solver: str = "highs"
    memo: CandidateMemo | None = None

    def cost(self, scenario: Scenario, within: Deadline) -> tuple[float | None, bool, str | None]:
        """(monthly cost, proven optimal, why there is no plan) of ``scenario`` by ``within``."""
        quick = scenario.model_copy(update={"options": scenario.options.model_copy(
            update={"mip_rel_gap": max(scenario.options.mip_rel_gap, SENSITIVITY_GAP)})})
        try:
            plan = make_plan(quick, self.catalog, self.solver, False, self.preset, self.folder,  # type: ignore[arg-type]
                             compare_first_come=False, deadline=within, memo=self.memo)
        except (InputError, SolverError) as exc:
            return None, False, str(exc)
        return round(plan.monthly_cost_usd, 2), plan.solve_result.optimal, None


    def kept_cost(self, scenario: Scenario, plan: Plan, within: Deadline) -> tuple[float | None, bool, str | None]:
        """(monthly cost, proven optimal, why there is none) of ``scenario`` with each product of
        ``plan`` kept on its configuration shape (see the module docstring)."""
        preset = self.preset or get_preset(scenario.preset)
        try:
            try:
                # only the kept shapes are generated; where that leaves a product without a plan, the
                # whole build says why (or finds the kept shape gone, below)
                prob, _, planned = build_problem(scenario, self.catalog, preset, self.folder,
                                                 memo=_KeptShapes(plan, scenario, self.memo))
            except InputError:
                prob, _, planned = build_problem(scenario, self.catalog, preset, self.folder, memo=self.memo)
            kept = {name: _kept(pd, plan) for name, pd in prob.products.items()}
            why = next((w for pd in kept.values() if (w := unserved(pd)) is not None), None)
            if why is not None:
                return None, False, why
            gap = max(scenario.options.mip_rel_gap, SENSITIVITY_GAP)
            solved = solve_components(prob.derive(products=kept), [u.request for u in planned],
                                      self.solver, within, gap)  # type: ignore[arg-type]
        except (InputError, SolverError) as exc:
            return None, False, str(exc)
        result = combined_result(solved, self.solver, 0.0)  # type: ignore[arg-type]
        return round(float(result.objective or 0.0), 2), result.optimal, None


class _KeptShapes(CandidateMemo):
    """A candidate memo that generates, for each product running a configuration of ``plan``
    (without pooling), only the shapes :func:`_kept` keeps: a few of the catalog's hundreds. It
    shares ``memo``'s sets, keeping its own under a key of their own."""

    def __init__(self, plan: Plan, scenario: Scenario, memo: CandidateMemo | None) -> None:
        super().__init__(sets=memo.sets if memo is not None else {})
        self.shapes: dict[str, Shapes] = {}
        if scenario.limits.allow_pooling:
            return
        for pp in plan.products:
            shapes = kept_shapes(pp)
            if shapes is not None:
                self.shapes[pp.product.name] = shapes

    def key(self, product: Product, catalog: Catalog, scenario: Scenario, preset: Preset) -> tuple[Any, ...]:
        key = candidate_key(product, catalog, scenario, preset)
        shapes = self.shapes.get(product.name)
        return key if shapes is None else (*key, repr(shapes))

    def fresh(self, product: Product, llm: Any, catalog: Catalog, scenario: Scenario, preset: Preset,
              deadline: Deadline | None = None) -> CandidateSet:
        shapes = self.shapes.get(product.name)
        if shapes is None:
            return super().fresh(product, llm, catalog, scenario, preset, deadline)
        return generate_candidates(product, llm, catalog, scenario.options, preset, shapes=shapes)


def kept_shapes(pp: ProductPlan) -> Shapes | None:
    """The configuration shapes product plan ``pp`` runs: the shape of each of its decode
    configurations (every configuration of a request mix, whose buckets may each need another)
    and of its prefill pool; None when it runs on its API alone."""
    decode = frozenset((c.gpu, c.tp, c.precision, c.mode) for f in pp.fleets
                       if isinstance(c := f.part, Candidate))
    if pp.candidate is None or not decode:
        return None
    k = pp.pool
    return Shapes(decode, frozenset({(k.gpu, k.tp, k.precision)}) if k is not None else frozenset())


def _kept(pd: Any, plan: Plan) -> Any:
    """``pd`` with only the candidates of the configuration shapes its product runs in ``plan``
    (:func:`kept_shapes`; unchanged when the plan has no such product, or runs it on its API alone)."""
    pp = next((p for p in plan.products if p.product.name == pd.name), None)
    shapes = kept_shapes(pp) if pp is not None else None
    if shapes is None:
        return pd
    return replace(pd, candidates=tuple(x for x in pd.candidates if (x.gpu, x.tp, x.precision, x.mode) in shapes.decode),
                   pool=tuple(q for q in pd.pool if (q.gpu, q.tp, q.precision) in shapes.pool))


def unserved(pd: Any) -> str | None:
    """Why the kept configurations of ``pd`` cannot serve it: a product with neither a
    configuration nor the API, or a bucket of its request mix with demand that none of them may
    serve and no API to send it to; None when they can."""
    if not pd.candidates and not pd.has_api:
        return f"{pd.name}: its configuration no longer meets the targets"
    if pd.has_api:
        return None
    for b in pd.buckets:
        if any(d > 0 for d in b.demand_tokens_per_s) and not pd.eligible(b):
            return (f"{pd.name}: no kept configuration serves its requests of {b.input_tokens:,} input and "
                    f"{b.output_tokens:,} output tokens any more")
    return None


def scaled_by_gpu_price(plan: Plan, f: float) -> tuple[float, bool, None] | None:
    """The kept-configuration cost of ``plan`` with every GPU-hour price times ``f``, without a
    re-plan, where it is exact: when every cost of the plan is a GPU-hour (on-demand only, no
    API, no fixed self-hosting cost) the whole objective is multiplied by ``f``, so the same fleet
    stays cheapest and costs ``f`` times as much. None where another cost would not move with it."""
    prob = plan.problem
    if tuple(prob.tiers) != (Tier.ON_DEMAND,) or not plan.solve_result.optimal:
        return None
    if any(pd.has_api or pd.fixed_monthly_usd for pd in prob.products.values()):
        return None
    return round(plan.monthly_cost_usd * f, 2), True, None


def tornado(scenario: Scenario, replan: Replanner, deadline: Deadline, plan: Plan | None = None) -> list[dict[str, Any]]:
    """For each driver, the monthly cost at -20% and +20% (each re-plan gets an equal share of
    what is left of ``deadline``): with ``plan``, that plan's configurations kept
    (:meth:`Replanner.kept_cost`; the GPU-hour price without a re-plan where the cost is all
    GPU-hours, :func:`scaled_by_gpu_price`), else planned afresh. A re-plan with no plan (infeasible, out
    of time) gives None and its reason."""
    out = []
    runs = 2 * len(DRIVERS)
    for name, move in DRIVERS.items():
        row: dict[str, Any] = {"input": name, "low_factor": 1 - SWING, "high_factor": 1 + SWING}
        for side, f in (("low", 1 - SWING), ("high", 1 + SWING)):
            variant, within = move(scenario, replan.catalog, f), deadline.share(1.0 / runs)
            scaled = scaled_by_gpu_price(plan, f) if plan and move is gpu_price else None
            if scaled is not None:
                cost, proven, error = scaled
            elif plan:
                cost, proven, error = replan.kept_cost(variant, plan, within)
            else:
                cost, proven, error = replan.cost(variant, within)
            runs -= 1
            row.update({f"{side}_monthly_cost_usd": cost, f"{side}_proven": proven, f"{side}_error": error})
        out.append(row)
    return out

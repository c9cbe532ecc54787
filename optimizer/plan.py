"""Plan a fleet: scenario -> problem -> solved components -> explained plan.

Owns the order of the stages and how the one deadline is shared between them; every stage is
its own module (:mod:`fleetplan.optimizer.problem_data.problem`, :mod:`fleetplan.optimizer.decomposition.components`, :mod:`fleetplan.optimizer.explanation.explain`, :mod:`fleetplan.optimizer.explanation.baselines`,
:mod:`fleetplan.optimizer.explanation.budget`).

It holds no rule of its own: no constraint, bound, price or explanation is computed here."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fleetplan.catalogs.loader import Catalog
from fleetplan.models.presets import Preset, get_preset
from fleetplan.optimizer.explanation.baselines import first_come_cost, separate_cost
from fleetplan.optimizer.explanation.binding import Resolve, binding_limits
from fleetplan.optimizer.explanation.budget import apply_budget
from fleetplan.optimizer.decomposition.components import (
    combined_result,
    gap_breakdown,
    one_by_one_result,
    solve_components,
)
from fleetplan.optimizer.runtime.deadline import (
    CANDIDATE_SHARE,
    DEFAULT_TIME_LIMIT_S,
    Deadline,
    DeadlinePassed,
    ProgressCallback,
)
from fleetplan.optimizer.common.defaults import EXPLAIN_SHARE, MAIN_SOLVE_SHARE, MONEY_TOLERANCE_USD
from fleetplan.optimizer.traffic.demand import hourly_qps
from fleetplan.optimizer.common.enums import Alternatives, Status
from fleetplan.optimizer.common.errors import InfeasibleError, SolverError
from fleetplan.optimizer.explanation.explain import explain_products
from fleetplan.optimizer.problem_data.problem import CandidateMemo, build_problem
from fleetplan.optimizer.traffic.scenario import Scenario
from fleetplan.optimizer.mip.solution import (
    Plan,
    Timings,
    allocate_stranded,
    instance_report,
)
from fleetplan.optimizer.mip.solvers import Solver
from fleetplan.optimizer.runtime.workers import allowed


def make_plan(
    scenario: Scenario,
    catalog: Catalog,
    solver: Solver = "highs",
    alternatives: bool | Alternatives = True,
    preset: Preset | None = None,
    folder: Path | None = None,
    *,
    with_api: bool = True,
    compare_first_come: bool = True,
    jobs: int = 1,
    deadline: Deadline | None = None,
    reductions: bool = True,
    demand: dict[str, list[float]] | None = None,
    start: dict[tuple[str, tuple[Any, ...]], float] | None = None,
    memo: CandidateMemo | None = None,
    value_limits: bool = True,
    progress: ProgressCallback | None = None,
) -> Plan:
    """Solve ``scenario`` to proven optimality, or as far as the deadline allows, and explain the result.

    Products coupled by a shared limit (a scarce GPU type, in total or in a pricing tier, or
    whole instances) are solved together in one MIP; every other product is its own MIP (same
    formulation), solved by :func:`~fleetplan.optimizer.decomposition.search.solve_by_configuration`;
    ``model_size`` counts the MIPs whose solutions are used. ``alternatives`` says which
    comparisons are searched (:class:`~fleetplan.optimizer.common.enums.Alternatives`; True: ``default``, every one but a
    long request mix's runner-ups and mode costs, which it lists by lower bound; False: ``none``;
    ``all``: every one). ``timings.solve_s`` covers
    building, exporting and solving them. ``preset`` replaces the scenario's named preset (e.g.
    one adjusted by a calibration profile); ``folder`` is where relative paths (demand profiles)
    are resolved; ``with_api=False`` plans as if no product had an API. ``jobs > 1`` solves
    independent multi-hour components, a long mix's hours and the runner-ups in that many
    worker processes (the same plan for any ``jobs``); ``reductions=False`` solves
    the problem as built (benchmarks measure what the exact reductions save); ``demand`` is each
    product's queries per second hour by hour when already read (profiles are read once per
    plan); ``start`` is a solution by column key (a plan's ``solution``) to start joint MIPs from;
    ``memo`` keeps candidate sets for the command's other plans (its re-plans share it);
    ``value_limits=False`` leaves the binding limits unvalued for the caller (the report values
    them with re-plans it started in a worker, see :mod:`fleetplan.optimizer.decisions.ahead`).
    The budget is checked against the plan's total; with limited GPUs the plan also carries the
    cost of planning the products first come, first served.

    Everything runs within one ``deadline`` (by default ``options.time_limit_s`` from now, or
    :data:`DEFAULT_TIME_LIMIT_S`): the plan itself gets most of it and stops with the best plan
    found and its proven gap (status ``time_limit``); explanations share what is left and are
    skipped once it is spent. ``plan.stopped`` lists what the deadline cut short. ``progress``
    receives the stages' progress when no ``deadline`` is given (a given one carries its own).
    """
    alternatives = _alternatives(alternatives)
    preset = preset or get_preset(scenario.preset)
    demand = demand if demand is not None else hourly_qps(scenario.products, folder or Path("."))
    deadline = deadline or Deadline.after(scenario.options.time_limit_s or DEFAULT_TIME_LIMIT_S, progress)
    build = dict(reductions=reductions, demand=demand, memo=memo if memo is not None else CandidateMemo())
    with allowed(jobs):
        plan = _solve_plan(scenario, catalog, solver, alternatives, preset, folder, with_api, jobs, deadline, build,
                           start)
    _finish_plan(plan, scenario, Replanning(catalog, solver, preset, folder, {"with_api": with_api, **build}), deadline,
                 compare_first_come=compare_first_come, value_limits=alternatives != Alternatives.NONE and value_limits)
    plan.stopped = list(deadline.stopped)
    return plan


@dataclass(frozen=True)
class Replanning:
    """What re-plans of a scenario's variants share: the catalog, solver, preset, folder and
    :func:`make_plan`'s keywords."""

    catalog: Catalog
    solver: Solver
    preset: Preset
    folder: Path | None
    keywords: dict[str, Any]

    def resolve(self, **more: Any) -> Resolve:
        """:func:`_replanner` with these settings and ``more`` keywords."""
        return _replanner(self.catalog, self.solver, self.preset, self.folder, {**self.keywords, **more})


def _finish_plan(plan: Plan, scenario: Scenario, replan: Replanning, deadline: Deadline, *,
                 compare_first_come: bool, value_limits: bool) -> None:
    """The solved plan's status when candidate generation was cut, its budget check, its
    first-come cost with limited GPUs and several products, and (with ``value_limits``) its
    binding limits valued by re-plans, all within ``deadline``."""
    _not_proven_if_cut(plan)
    resolve = replan.resolve()
    with_api = bool(replan.keywords["with_api"])
    apply_budget(plan, scenario, lambda variant, within: _cost(resolve(variant, within)), with_api, deadline)
    prob = plan.problem
    if compare_first_come and (prob.gpu_availability or prob.tier_availability) and len(plan.scenario.products) > 1:
        plan.first_come_monthly_cost_usd = first_come_cost(prob, list(plan.scenario.products), replan.solver,
                                                           plan.scenario.options, deadline)
    if value_limits:
        # a limit relaxed by one step leaves the plan feasible: its re-plan starts from the plan
        warm = replan.resolve(start=plan.solution)
        plan.binding_limits = binding_limits(plan, scenario, warm, deadline.share(EXPLAIN_SHARE))


def _replanner(catalog: Catalog, solver: Solver, preset: Preset, folder: Path | None, keywords: dict[str, Any]
               ) -> Resolve:
    """Plans a variant of the scenario (a relaxed limit, a lower speed target) without
    explanations, within a deadline: (monthly cost, proven optimal), or None when it has no plan."""
    def resolve(variant: Scenario, within: Deadline) -> tuple[float, bool] | None:
        try:
            found = make_plan(variant, catalog, solver, False, preset, folder, compare_first_come=False,
                              deadline=within, **keywords)
        except (InfeasibleError, SolverError, DeadlinePassed):
            return None
        return found.monthly_cost_usd, found.solve_result.optimal
    return resolve


def relaxed_cost(variant: Scenario, catalog: Catalog, solver: Solver, preset: Preset, folder: Path | None,
                 seconds: float | None) -> tuple[float, bool] | None:
    """:func:`make_plan`'s cost of ``variant`` (no explanations) within ``seconds``, from a cold
    start: what a worker process computes for a binding limit's value (see :mod:`fleetplan.optimizer.decisions.ahead`)."""
    return _replanner(catalog, solver, preset, folder, {})(variant, Deadline.after(seconds))


def _not_proven_if_cut(plan: Plan) -> None:
    """A plan on candidates the deadline cut is the best over the configurations generated, with no
    bound over the others: status ``time_limit`` and no gap, never optimal."""
    if any(cs.cut for cs in plan.candidate_sets.values()):
        plan.solve_result = replace(plan.solve_result, status=Status.TIME_LIMIT, mip_gap=None, termination=(
            "time limit reached in candidate generation: the best plan over the configurations generated"))


def _alternatives(value: bool | Alternatives) -> Alternatives:
    """Which comparisons to search: True is :attr:`~fleetplan.optimizer.common.enums.Alternatives.DEFAULT`, False ``none``."""
    if isinstance(value, bool):
        return Alternatives.DEFAULT if value else Alternatives.NONE
    return Alternatives(value)


def _cost(found: tuple[float, bool] | None) -> float:
    """A replan's monthly cost (inf without a plan)."""
    return math.inf if found is None else found[0]


def _solve_plan(scenario: Scenario, catalog: Catalog, solver: Solver, alternatives: Alternatives, preset: Preset,
                folder: Path | None, with_api: bool, jobs: int, deadline: Deadline, build: dict[str, Any],
                start: dict[tuple[str, tuple[Any, ...]], float] | None = None) -> Plan:
    """The cheapest plan of ``scenario`` with its explanations (see :func:`make_plan`); with
    ``allow_pooling``, the cheaper of pooled and separate replicas (each with half the time).
    ``build`` holds the keywords of :func:`build_problem` (reductions, demand)."""
    timings = Timings()
    t0 = time.perf_counter()
    prob, sets, planned = build_problem(scenario, catalog, preset, folder, with_api=with_api,
                                        deadline=deadline.share(CANDIDATE_SHARE), **build)
    pooled = any(pd.members for pd in prob.products.values())
    own = deadline.share(0.5) if pooled else deadline
    products = [u.request for u in planned]
    timings.candidates_s = time.perf_counter() - t0
    opts = scenario.options
    solved = solve_components(prob, products, solver, own.share(MAIN_SOLVE_SHARE), opts.mip_rel_gap, jobs, start)
    timings.solve_s = time.perf_counter() - t0 - timings.candidates_s
    plans = [solved.plans[p.name] for p in products]
    result = combined_result(solved, solver, timings.solve_s)
    explain_products(plans, solved, catalog, preset, opts, solver, own.share(EXPLAIN_SHARE), alternatives)
    plan = Plan(scenario=scenario.model_copy(update={"products": products}), preset=preset, solve_result=result,
                products=plans, candidate_sets=sets, problem=prob, model_size=solved.model_size, timings=timings,
                components=solved.components, members={u.name: list(u.members) for u in planned},
                solution=solved.solution)
    plan.instances = instance_report(plan)
    allocate_stranded(plan)
    if solved.decomposed:
        plan.gap_breakdown_usd = gap_breakdown(plan, solved.decomposed, solved.parts, solved.bounds)
        plan.solve_result = one_by_one_result(plan, solved.decomposed, opts.mip_rel_gap, plan.gap_breakdown_usd)
    if not pooled:
        return plan
    for name, pd in prob.products.items():
        if pd.members:
            plan.separate[name] = separate_cost(prob, pd, plan.members[name], solver, opts, own)
    # pooling is allowed, not imposed: keep whichever of pooled and separate replicas is cheaper
    unpooled = scenario.model_copy(update={"limits": scenario.limits.model_copy(update={"allow_pooling": False})})
    alt = _solve_plan(unpooled, catalog, solver, alternatives, preset, folder, with_api, jobs, deadline, build, start)
    note = {"pooled_monthly_cost_usd": round(plan.monthly_cost_usd, 2),
            "separate_monthly_cost_usd": round(alt.monthly_cost_usd, 2)}
    if alt.monthly_cost_usd < plan.monthly_cost_usd - MONEY_TOLERANCE_USD:
        alt.pooling = {**note, "chosen": "separate"}
        return alt
    plan.pooling = {**note, "chosen": "pooled"}
    return plan

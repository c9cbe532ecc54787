"""Products coupled by shared limits (:func:`coupled_components`), each group solved as one MIP
or, when too large, product by product (:func:`solve_one_by_one`), in worker processes when asked.

Owns the split of a problem into independent MIPs; the per-product search is :mod:`.search`.

It does not build problems, formulate or explain."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from fleetplan.optimizer.common.defaults import JOINT_MAX_COLUMNS, LAGRANGIAN_SHARE
from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.common.enums import Status, Tier
from fleetplan.optimizer.common.errors import InfeasibleError, SolverError
from fleetplan.optimizer.mip.formulation import build_model
from fleetplan.optimizer.mip.linear import LinearProblem, to_linear_problem
from fleetplan.optimizer.decomposition.lagrangian import lagrangian_bound
from fleetplan.optimizer.decomposition.portfolio import GroupBound, group_cost, plan_group
from fleetplan.optimizer.problem_data.problem import FleetProblem
from fleetplan.optimizer.problem_data.reductions import reduced
from fleetplan.optimizer.traffic.scenario import Product
from fleetplan.optimizer.decomposition.search import solve_by_configuration
from fleetplan.optimizer.mip.solution import (
    Plan,
    ProductPlan,
    extract,
    gpu_hours,
    tier_gpu_hours,
)
from fleetplan.optimizer.mip.solvers import Solver, SolveResult, solve
from fleetplan.optimizer.common.text import gap_split, pct
from fleetplan.optimizer.runtime.workers import worker_pool

# What solving one group gives: (problem, MIP solved, the product's whole model or None, result or
# None if infeasible, problem to read the solution from)
Outcome = tuple[FleetProblem, LinearProblem | None, LinearProblem | None, SolveResult | None, FleetProblem | None]


@dataclass
class Part:
    """One solved group as the plan uses it: the problem it was solved in, the product's whole
    one-hour model (None otherwise: searches build their own) and its result."""

    whole: FleetProblem
    base_lp: LinearProblem | None
    result: SolveResult


@dataclass
class Solved:
    """Every group of a problem solved: the groups, those planned product by product, each
    product's :class:`Part`, the models the plan was read from, and the plans read."""

    components: list[list[str]]
    decomposed: list[list[str]]
    bounds: list[GroupBound] = field(default_factory=list)  # each decomposed group's bound and costs
    parts: dict[str, Part] = field(default_factory=dict)
    models: dict[int, LinearProblem] = field(default_factory=dict)
    plans: dict[str, ProductPlan] = field(default_factory=dict)
    solution: dict[tuple[str, tuple[Any, ...]], float] = field(default_factory=dict)  # values by column key

    @property
    def model_size(self) -> tuple[int, int]:
        """Columns and rows of the MIPs whose solutions the plan uses."""
        return (sum(lp.num_cols for lp in self.models.values()), sum(lp.num_rows for lp in self.models.values()))

    def results(self) -> list[SolveResult]:
        """Each distinct MIP result once."""
        return list({id(p.result): p.result for p in self.parts.values()}.values())


def solve_component(task: tuple[FleetProblem, list[str], str, Deadline | float | None, float],
                    start: dict[tuple[str, tuple[Any, ...]], float] | None = None) -> Outcome:
    """Solve one group of coupled products: (problem, MIP solved, the product's whole model or None,
    result or None if infeasible, problem to read the solution from). A single product goes
    through :func:`solve_by_configuration`; a coupled group is one MIP after the exact reductions,
    started from ``start`` (values by column key, e.g. the plan of the same group under a tighter
    limit) when given."""
    whole, names, solver, deadline, gap = task
    if not isinstance(deadline, Deadline):  # seconds, in a worker process
        deadline = Deadline.after(deadline)
    if len(names) == 1:
        # one hour: the whole model, shared by the runner-up searches; several hours: each search
        # builds the model of the choices that can matter
        base_lp = to_linear_problem(build_model(reduced(whole))) if whole.hours == 1 else None
        found = solve_by_configuration(whole, names[0], solver, deadline=deadline, mip_rel_gap=gap, base_lp=base_lp)
        if found is None:
            return whole, None, base_lp, None, None
        res, lp, sub = found
        return whole, lp, base_lp, res, sub
    small = reduced(whole)
    lp = to_linear_problem(build_model(small))
    # a coupled group's joint MIP stays on HiGHS: the hand-over to SCIP serves one product's
    # knapsack-like MIPs; on joint MIPs SCIP was the slower (portfolio-20: 9.6 s against 5.5 s)
    first = [start.get(k, 0.0) for k in lp.col_keys] if start else None
    res = solve(lp, solver, time_limit_s=deadline.solver_limit(), mip_rel_gap=gap, handover=False, start=first)
    if res.status == "infeasible":
        return small, lp, None, None, None
    return small, lp, None, res, small


def joint_columns(prob: FleetProblem) -> int:
    """Columns the joint MIP of ``prob`` would have (integer replicas per configuration, tier and hour)."""
    per_hour = len(prob.hourly_tiers)
    configs = sum(len(p.candidates) + len(p.pool) for p in prob.products.values())
    return configs * (per_hour * prob.hours + (Tier.RESERVED in prob.tiers) + 1)


def solve_one_by_one(whole: FleetProblem, names: list[str], solver: Solver, deadline: Deadline, gap: float
                     ) -> tuple[list[Any], float]:
    """A coupled group too large for one MIP, planned product by product with their GPU types
    chosen together (:func:`fleetplan.optimizer.decomposition.portfolio.plan_group`): each product's outcome
    and a lower bound on the group's joint optimum; the plan is checked against the shared
    limits afterwards (:func:`one_by_one_result`). With scarce GPU types the bound is raised to
    the Lagrangian bound with their availability priced
    (:func:`~fleetplan.optimizer.decomposition.lagrangian.lagrangian_bound`, the last
    :data:`LAGRANGIAN_SHARE` of the time) where that is higher."""
    deadline.note("joint plan of " + ", ".join(names[:3]) + (", ..." if len(names) > 3 else "") +
                  ": planned product by product")
    if not whole.gpu_availability:
        return plan_group(whole, names, solver, deadline, gap)
    outcomes, bound = plan_group(whole, names, solver, deadline.share(1.0 - LAGRANGIAN_SHARE), gap)
    if any(o[3] is None for o in outcomes):
        return outcomes, bound
    upper = group_cost(whole, {n: (o[3], o[1], o[4]) for n, o in zip(names, outcomes)})
    found = lagrangian_bound(whole, names, bound.own_usd, upper, deadline)
    return outcomes, replace(bound, lower_usd=max(bound.lower_usd, found.bound_usd))


def one_by_one_result(plan: Plan, groups: list[list[str]], mip_rel_gap: float, parts_usd: dict[str, float]
                      ) -> SolveResult:
    """The plan's result when some coupled groups were planned product by product: within the shared
    limits or an error naming them, and its gap against the lower bound of :func:`gap_breakdown`
    (``parts_usd``: the groups' bounds plus the other MIPs' proven bounds), with where the gap
    lies in its termination."""
    prob = plan.problem
    members = {n for g in groups for n in g}
    mine = [pp for pp in plan.products if pp.product.name in members]
    for gpu, row in gpu_hours(mine, prob.hours).items():
        if gpu in prob.gpu_availability and max(row) > prob.gpu_availability[gpu]:
            raise SolverError(
                f"limits.gpu_availability: the {len(members)} coupled products were too many to plan jointly, and "
                f"planned one by one they need {max(row)} {gpu} GPUs of the {prob.gpu_availability[gpu]} available; "
                f"no plan within the limits was found (raise availability, or plan fewer products together)")
    for (gpu, tier), row in tier_gpu_hours(mine, prob.hours).items():
        limit = prob.tier_availability.get((gpu, tier))
        if limit is not None and max(row) > limit:
            raise SolverError(
                f"limits.gpu_availability: planned one by one the coupled products need {max(row)} {gpu} {tier} GPUs "
                f"of the {limit} available; no plan within the limits was found")
    total = plan.monthly_cost_usd
    gap = max(0.0, (total - parts_usd["lower_bound"]) / total) if total else 0.0
    if gap <= mip_rel_gap:
        return replace(plan.solve_result, status=Status.OPTIMAL, mip_gap=gap)
    return replace(plan.solve_result, status=Status.TIME_LIMIT, mip_gap=gap,
                   termination=f"planned product by product within the shared limits (gap {gap:.3%} against a "
                               f"lower bound of the group; {gap_split(parts_usd)})")


def gap_breakdown(plan: Plan, groups: list[list[str]], parts: dict[str, Part], bounds: list[GroupBound]
                  ) -> dict[str, float]:
    """Where a plan with groups planned product by product stands, USD per month: ``lower_bound``
    (the groups' bounds plus the other MIPs' proven bounds); ``products_alone`` (each product of
    those groups on its cheapest plan found alone, plus the other MIPs' plans without their idle
    instance GPUs); ``sharing_instances`` (what the products' plans cost above that so that they
    share whole instances: GPU types chosen together, spot replicas on idle GPUs, API shares served
    there); ``idle_instance_gpus`` (GPUs of whole instances left idle). The last three add up to
    the plan's cost. No lower bound of a group prices its whole instances: the last two stay in
    the gap however long the search runs."""
    members = {n for g in groups for n in g}
    unique = {id(p.result): p.result for n, p in parts.items() if n not in members}
    idle = sum(pp.stranded_usd for pp in plan.products)
    lower = sum(b.lower_usd for b in bounds) + sum(
        float(r.objective or 0.0) * (1 - (r.mip_gap or 0.0)) for r in unique.values())
    alone = sum(b.alone_usd for b in bounds) + sum(float(r.objective or 0.0) for r in unique.values()) - sum(
        pp.stranded_usd for pp in plan.products if pp.product.name not in members)
    return {"lower_bound": lower, "products_alone": alone,
            "sharing_instances": plan.monthly_cost_usd - alone - idle, "idle_instance_gpus": idle}


def coupled_components(prob: FleetProblem) -> list[list[str]]:
    """Groups of products that must be planned together (networkx connected components).

    Two products are coupled when both may use GPU types on the same site (its power limit), or a
    GPU type whose availability is limited or that is bought in whole instances. A budget couples nothing: the objective is the monthly
    cost itself, so the cheapest plan meets the budget if any plan does, and the plan's total is
    checked against it. Components are listed in scenario order, products inside them too.
    """
    names = list(prob.products)
    shared_limits = prob.gpu_availability or prob.tier_availability or prob.instance_gpus or prob.site_power
    if len(names) == 1 or not shared_limits:
        return [[n] for n in names]
    import networkx as nx  # imported only when products can be coupled

    g = nx.Graph()
    g.add_nodes_from(names)
    shared = set(prob.gpu_availability) | {g for g, _ in prob.tier_availability} | set(prob.instance_gpus)
    # a site's power is shared by every GPU type on it: those types count as one
    on_site = {gpu: f"site {row.name}" for row in prob.site_power for gpu, _ in row.mw_per_gpu}
    users: dict[str, list[str]] = {}
    for n in names:
        pd = prob.products[n]
        for gpu in sorted({c.gpu for c in pd.candidates} | {k.gpu for k in pd.pool}) :
            if gpu in shared:
                users.setdefault(gpu, []).append(n)
            if gpu in on_site and n not in users.get(on_site[gpu], []):
                users.setdefault(on_site[gpu], []).append(n)
    for members in users.values():
        g.add_edges_from(zip(members, members[1:]))
    order = {n: i for i, n in enumerate(names)}
    comps = [sorted(c, key=order.__getitem__) for c in nx.connected_components(g)]
    return sorted(comps, key=lambda c: order[c[0]])


def infeasible_message(prob: FleetProblem, names: list[str], solver: Solver) -> str:
    """Why a coupled group has no plan: GPU availability, or no configuration at all."""
    who = ", ".join(names)
    if prob.gpu_availability or prob.tier_availability:
        limits = [f"{g}: {n}" for g, n in sorted(prob.gpu_availability.items())]
        limits += [f"{g} {t}: {n}" for (g, t), n in sorted(prob.tier_availability.items())]
        return (
            f"limits.gpu_availability: infeasible: {who} cannot all be served within "
            + ", ".join(limits) + " GPUs (raise availability, allow other GPU types or add an API)"
        )
    spot_capped = Tier.SPOT in prob.tiers and prob.spot_max_share < 1.0
    if spot_capped and all(t == Tier.SPOT for t in prob.tiers):
        return (
            f"options.spot_max_share: infeasible: options.tiers allows only spot, but spot_max_share is "
            f"{prob.spot_max_share:g} (spot may provide at most {pct(prob.spot_max_share)} of replica-hours), so "
            f"{who} cannot self-host; set options.spot_max_share: 1 or add on_demand or reserved to options.tiers"
        )
    return f"products[{who}]: infeasible: no configuration meets demand under the given limits"


def solve_components(prob: FleetProblem, products: list[Product], solver: Solver, deadline: Deadline, gap: float,
                     jobs: int = 1, start: dict[tuple[str, tuple[Any, ...]], float] | None = None) -> Solved:
    """Solve every group of coupled products of ``prob`` within ``deadline`` and read the plans of
    ``products``. Independent multi-hour groups run in ``jobs`` worker processes; each result is
    what the same call gives in this process, so the plan does not depend on the scheduling.
    Workers are started fresh (spawn), so a calling script needs the usual ``if __name__ == "__main__"``.
    ``start``: a solution to start coupled groups' MIPs from (see :func:`solve_component`)."""
    components = coupled_components(prob)
    tasks = [(prob.restrict(names).derive(monthly_budget_usd=None), names, solver, deadline, gap)
             for names in components]
    heavy = [t for t in tasks if t[0].hours > 1]
    solved = Solved(components=components, decomposed=[])
    if len(heavy) > 1 and jobs > 1:
        outcomes = _in_workers(tasks, heavy, jobs, deadline)
    else:
        outcomes = _in_turn(tasks, deadline, solved, start)
    pieces = [(names, o) for names, o in zip(components, outcomes) if names not in solved.decomposed]
    pieces += [([name], o) for names, os_ in zip(components, outcomes) if names in solved.decomposed
               for name, o in zip(names, os_)]
    by_name = {p.name: p for p in products}
    for names, (whole, lp, base_lp, res, sub) in pieces:
        if res is None:
            raise InfeasibleError(infeasible_message(prob, names, solver))
        if not res.optimal and not (res.status == Status.TIME_LIMIT and res.values):
            raise SolverError(f"{solver} returned no proven-optimal plan for {', '.join(names)}: {res.termination}")
        solved.models[id(lp)] = lp
        solved.solution.update(zip(lp.col_keys, res.values))
        for name in names:
            solved.parts[name] = Part(whole, base_lp, res)
        for pp in extract(lp, res, sub, [by_name[n] for n in names]):
            solved.plans[pp.product.name] = pp
    return solved


def _in_workers(tasks: list[Any], heavy: list[Any], jobs: int, deadline: Deadline) -> list[Any]:
    """Outcomes of ``tasks``, the ``heavy`` ones in worker processes, copies of this one (seconds,
    not the deadline, cross the process boundary)."""
    timed = [(w, n, so, deadline.left(), g) for w, n, so, _, g in heavy]
    with worker_pool(min(len(heavy), jobs), copy=True) as pool:
        done = dict(zip([id(t) for t in heavy], pool.map(solve_component, timed)))
    return [done[id(t)] if id(t) in done else solve_component(t) for t in tasks]


def _in_turn(tasks: list[Any], deadline: Deadline, solved: Solved,
             start: dict[tuple[str, tuple[Any, ...]], float] | None = None) -> list[Any]:
    """Outcomes of ``tasks`` one after another, each with a share of the time by its size; a
    group too large for one MIP is planned product by product (added to ``solved.decomposed``,
    its lower bound to ``solved.bounds``)."""
    weights = [max(1, sum(len(p.candidates) + len(p.pool) for p in t[0].products.values()) * t[0].hours)
               for t in tasks]
    outcomes: list[Any] = []
    for i, (w, n, so, _, g) in enumerate(tasks):
        deadline.progress.update("planning", i, len(tasks))
        share = deadline.share(weights[i] / sum(weights[i:]))
        # a site's power limit is a row of the joint MIP only: such a group is never split
        if len(n) > 1 and not w.site_power and joint_columns(reduced(w)) > JOINT_MAX_COLUMNS:
            solved.decomposed.append(n)
            group, bound = solve_one_by_one(w, n, so, share, g)
            outcomes.append(group)
            solved.bounds.append(bound)
        else:
            outcomes.append(solve_component((w, n, so, share, g), start))
    return outcomes


def combined_result(solved: Solved, solver: Solver, solve_s: float) -> SolveResult:
    """The plan's solve result: optimal when every MIP was proven, else ``time_limit`` with the
    largest gap; the objective is the sum of the MIPs'."""
    results = solved.results()
    total = sum(float(r.objective or 0.0) for r in results)
    gaps = [r.mip_gap for r in results if r.mip_gap is not None]
    stopped = [r for r in results if not r.optimal]
    return SolveResult(
        solver=str(solver), status=Status.TIME_LIMIT if stopped else Status.OPTIMAL,
        termination=(f"time limit reached with a feasible plan (gap {max(r.mip_gap or 0 for r in stopped):.3%})"
                     if stopped else "optimal (every MIP proven optimal)"),
        objective=total, mip_gap=max(gaps) if gaps else None, solve_time_s=solve_s,
    )

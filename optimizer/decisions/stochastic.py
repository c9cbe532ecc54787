"""Two-stage stochastic fleet planning: reserved commitments now, hourly recourse per outcome.

First stage: ``commit[g, t]``, whole GPUs of type g committed for term t (1y, 3y, or the
catalog's ``reserved`` price), paid every month whatever comes true. Second stage, per outcome s
of :mod:`fleetplan.optimizer.traffic.uncertainty`: the fleet MIP of :mod:`fleetplan.optimizer.mip.formulation` for that outcome's demand, spot
availability and prices, with its reserved replicas free (already paid) but limited by the
commitment:

    sum_c GPUs per replica(c) x reserved_s[c] (c on type g) <= sum_t commit[g, t]   for every s, g

Objective: sum_{g,t} price[g,t] x hours per month x commit[g,t] + sum_s p_s cost_s(recourse),
plus ``risk_weight`` x CVaR_alpha of the outcomes' total cost when asked for (Rockafellar-Uryasev:
eta + 1/(1-alpha) sum_s p_s u_s, u_s >= cost_s - eta, u_s >= 0).

Solved either as one extensive-form MIP (every outcome's model side by side, the commitment
shared), or by dual decomposition (each outcome has its own copy x_s of the commitment, the
nonanticipativity rows x_s = sum_r p_r x_r are priced by multipliers w_s with sum_s p_s w_s = 0):

    L(w) = sum_s p_s min { (c + w_s) . x_s + cost_s(recourse) }  <=  optimum, for any such w

L(w) is a proven lower bound (each outcome's MIP bound is used, not its incumbent); w is moved
by subgradient steps (Polyak's step towards the best plan's cost). Upper bounds come from
evaluating candidate commitments (the outcomes' mean, rounded, and the mean forecast's): the
commitment fixed, each outcome's recourse solved. The outcomes' MIPs are independent, so they
run in worker processes (:func:`~fleetplan.optimizer.runtime.workers.map_in_copies`) or on a Dask cluster; each is solved
alone on one thread, so the plan is the same wherever they run.

Owns the two-stage model, its solution and the figures a decision needs (value of the
stochastic solution, expected value of perfect information, regret); it prints nothing."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetplan.catalogs.loader import Catalog
from fleetplan.models.presets import Preset
from fleetplan.optimizer.traffic.demand import hourly_qps
from fleetplan.optimizer.common.enums import Tier
from fleetplan.optimizer.mip.linear import LinearProblem, to_linear_problem
from fleetplan.optimizer.problem_data.problem import CandidateMemo, FleetProblem, build_problem
from fleetplan.optimizer.problem_data.reductions import reduced
from fleetplan.optimizer.traffic.scenario import Scenario
from fleetplan.optimizer.mip.solvers import Solver, solve
from fleetplan.optimizer.traffic.uncertainty import (Case, Overrides, Uncertainty, UncertaintyError, cases,
                                                     check_outcomes, mean_case, outcome_inputs)
from fleetplan.optimizer.runtime.workers import jobs, map_in_copies, shared
from fleetplan.optimizer.decisions.recourse import (
    MAX_GRID_POINTS,
    PRICE_SCALED,
    grid_points,
    not_separable,
    outcome_recourse,
    plan_columns,
    recourse_grid,
    recourse_plan,
    split,
    violations,
)
from fleetplan.optimizer.problem_data.reductions import on_hours

SUB_GAP = 1e-4  # relative gap the extensive form and the wait-and-see MIPs are proven to
# the decomposition proves each outcome's MIP to a quarter of the gap asked for, at most this: the
# bound, not the incumbent, enters L, so a looser MIP gap costs bound but never validity, and the
# last hundredths of a percent of a horizon's MIP (hours rounding up) cost most of its time
SUB_GAP_MAX = 1e-3
EXTENSIVE_MAX_COLUMNS = 5_000  # ``auto`` solves the extensive form up to this many columns, else decomposes
RESERVED = ("reserved", "pool_reserved")
SPOT = ("spot", "pool_spot")


@dataclass(frozen=True)
class TermPrice:
    """The price of committing one GPU of ``gpu`` for ``term`` (USD per GPU-hour) and its source."""

    gpu: str
    term: str
    usd_per_gpu_hour: float
    source: str
    as_of: str


@dataclass
class OutcomeModel:
    """One outcome's recourse model: the fleet MIP with reserved replicas free, plus the
    commitment's columns (first, in :attr:`commit_cols` order) and its linking rows."""

    case: Case
    lp: LinearProblem
    commit_cols: list[int]
    hours_per_month: float


@dataclass(frozen=True)
class SubResult:
    """An outcome's MIP solved: its objective with the commitment's cost as priced, a proven lower
    bound on it, the commitment it chose, and the recourse cost alone (USD per month)."""

    objective_usd: float
    bound_usd: float
    commit: tuple[float, ...]
    recourse_usd: float


@dataclass
class OutcomeCost:
    """What the chosen commitment costs in one outcome, and what that outcome's own best plan costs."""

    name: str
    probability: float
    cost_usd: float
    own_optimum_usd: float

    @property
    def regret_usd(self) -> float:
        """How much more the commitment costs here than the plan made for this outcome alone."""
        return max(0.0, self.cost_usd - self.own_optimum_usd)


@dataclass
class StochasticPlan:
    """The commitment, the cost distribution it leads to and the figures that justify it."""

    commitment: list[tuple[TermPrice, int]]
    expected_cost_usd: float
    lower_bound_usd: float
    outcomes: list[OutcomeCost]
    mean_forecast_commitment: list[tuple[TermPrice, int]]
    mean_forecast_expected_cost_usd: float
    wait_and_see_usd: float
    method: str
    iterations: int = 0
    solve_s: float = 0.0
    risk_weight: float = 0.0
    cvar_alpha: float = 0.95
    notes: list[str] = field(default_factory=list)

    @property
    def objective_usd(self) -> float:
        """What the plan minimises: the expected cost, plus ``risk_weight`` x CVaR_alpha of the
        outcomes' costs when the risk term weighs in (:func:`cvar`)."""
        if self.risk_weight <= 0:
            return self.expected_cost_usd
        return _objective([o.cost_usd for o in self.outcomes], [o.probability for o in self.outcomes],
                          self.risk_weight, self.cvar_alpha)

    @property
    def gap(self) -> float:
        """Proven relative gap of :attr:`objective_usd` to the lower bound (a bound on the same objective)."""
        objective = self.objective_usd
        if objective <= 0:
            return 0.0
        return max(0.0, (objective - self.lower_bound_usd) / objective)

    @property
    def vss_usd(self) -> float:
        """Value of the stochastic solution: expected cost of committing to the mean forecast's
        plan minus that of this plan."""
        return self.mean_forecast_expected_cost_usd - self.expected_cost_usd

    @property
    def evpi_usd(self) -> float:
        """Expected value of perfect information: this plan's expected cost minus the expected
        cost of planning each outcome knowing it (wait and see)."""
        return self.expected_cost_usd - self.wait_and_see_usd

    def percentiles(self) -> dict[str, float]:
        """P50, P95 and the worst outcome's cost (probability-weighted: the smallest cost whose
        outcomes at or below it hold at least that probability)."""
        ranked = sorted(self.outcomes, key=lambda o: (o.cost_usd, o.name))

        def at(q: float) -> float:
            total = 0.0
            for o in ranked:
                total += o.probability
                if total >= q - 1e-9:
                    return o.cost_usd
            return ranked[-1].cost_usd

        return {"p50": at(0.5), "p95": at(0.95), "worst": ranked[-1].cost_usd}

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data (keys in a fixed order, money in USD per month)."""
        def commit(items: list[tuple[TermPrice, int]]) -> list[dict[str, Any]]:
            return [{"gpu": t.gpu, "term": t.term, "gpus": n, "usd_per_gpu_hour": t.usd_per_gpu_hour,
                     "source": t.source, "as_of": t.as_of} for t, n in items]

        return {
            "commitment": commit(self.commitment),
            "expected_cost_usd": round(self.expected_cost_usd, 2),
            "cost_percentiles_usd": {k: round(v, 2) for k, v in self.percentiles().items()},
            "scenarios": [{"name": o.name, "probability": o.probability, "cost_usd": round(o.cost_usd, 2),
                           "own_optimum_usd": round(o.own_optimum_usd, 2), "regret_usd": round(o.regret_usd, 2)}
                          for o in self.outcomes],
            "vss_usd": round(self.vss_usd, 2) if math.isfinite(self.vss_usd) else None,
            "evpi_usd": round(self.evpi_usd, 2),
            "objective_usd": round(self.objective_usd, 2),
            "lower_bound_usd": round(self.lower_bound_usd, 2),
            "gap": round(self.gap, 6),
            "mean_forecast": {"commitment": commit(self.mean_forecast_commitment),
                              "expected_cost_usd": (round(self.mean_forecast_expected_cost_usd, 2)
                                                    if math.isfinite(self.mean_forecast_expected_cost_usd) else None)},
            "wait_and_see_usd": round(self.wait_and_see_usd, 2),
            "method": self.method,
            "iterations": self.iterations,
            "risk_weight": self.risk_weight,
            "cvar_alpha": self.cvar_alpha,
            "notes": list(self.notes),
        }


# ----------------------------------------------------------------------------- the risk term


def cvar_columns(costs: Any, probabilities: Sequence[float], alpha: float) -> Any:
    """CVaR_alpha of each column of ``costs`` (outcomes down, candidates across; USD), exactly:
    Rockafellar-Uryasev's min over eta of eta + 1/(1 - alpha) sum_s p_s (cost_s - eta)+. The
    function is convex and piecewise linear in eta with its kinks at the outcomes' costs, so its
    minimum is at one of them: each column is sorted and the function is evaluated at every
    cost of it (suffix sums), the least value taken."""
    import numpy as np

    c = np.asarray(costs, dtype=float)
    if c.ndim == 1:
        c = c[:, None]
    p = np.broadcast_to(np.asarray(probabilities, dtype=float)[:, None], c.shape)
    order = np.argsort(c, axis=0, kind="stable")
    cs, ps = np.take_along_axis(c, order, axis=0), np.take_along_axis(p, order, axis=0)
    # sums over the outcomes above each position k (costs at k itself add nothing at eta = cost_k)
    above_p = np.cumsum(ps[::-1], axis=0)[::-1] - ps
    above_pc = np.cumsum((ps * cs)[::-1], axis=0)[::-1] - ps * cs
    value = cs + np.maximum(0.0, above_pc - cs * above_p) / (1.0 - alpha)
    return value.min(axis=0)


def cvar(costs: Sequence[float], probabilities: Sequence[float], alpha: float) -> float:
    """CVaR_alpha of one set of outcomes' costs (:func:`cvar_columns`)."""
    return float(cvar_columns(list(costs), probabilities, alpha)[0])


def _objective(costs: Sequence[float], probabilities: Sequence[float], weight: float, alpha: float) -> float:
    """Expected cost, plus ``weight`` x CVaR_alpha when the risk term weighs in."""
    expected = sum(p * c for p, c in zip(probabilities, costs))
    return expected + weight * cvar(costs, probabilities, alpha) if weight > 0 else expected


# ----------------------------------------------------------------------------- building


def outcome_problem(scenario: Scenario, catalog: Catalog, preset: Preset, folder: Path, case: Case,
                    qps: dict[str, list[float]], memo: CandidateMemo) -> FleetProblem:
    """The fleet problem of one outcome: its demand, request mixes and spot availability as
    :func:`~fleetplan.optimizer.traffic.uncertainty.outcome_inputs` sets them."""
    sc, demand = outcome_inputs(scenario, folder, case.overrides, qps, f"uncertainty.outcomes[{case.name}]")
    prob, _, _ = build_problem(sc, catalog, preset, folder, demand=demand, memo=memo)
    return reduced(prob)


def _reserved_gpus(lp: LinearProblem, prob: FleetProblem) -> dict[str, list[tuple[int, float]]]:
    """Per GPU type, the reserved replica columns of ``lp`` and the GPUs each replica holds."""
    out: dict[str, list[tuple[int, float]]] = {}
    for j, (family, index) in enumerate(lp.col_keys):
        if family in RESERVED:
            part = prob.pools[str(index[0])] if family == "pool_reserved" else prob.cand[str(index[0])]
            out.setdefault(part.gpu, []).append((j, float(part.gpus_per_replica)))
    return out


def _catalog_reserved(prob: FleetProblem) -> dict[str, tuple[float, str]]:
    """The reserved-tier price (USD per GPU-hour) and its source of every GPU type with candidates."""
    out: dict[str, tuple[float, str]] = {}
    for part in [*prob.all_candidates(), *prob.all_pool()]:
        out.setdefault(part.gpu, (part.price.tier(Tier.RESERVED), part.price.tier_source(Tier.RESERVED)))
    return out


def term_prices(unc: Uncertainty, catalog_reserved: dict[str, tuple[float, str]],
                rows: Sequence[dict[str, Any]]) -> list[TermPrice]:
    """The commitment terms offered per GPU type, in (GPU, term) order: a scenario's
    ``term_gpu_hour_usd``, else a row of the commitment catalog (``rows``), else for ``reserved``
    the reserved-tier price the planner already uses. A term with no price is not offered."""
    out = []
    for gpu in sorted(catalog_reserved):
        for term in unc.terms:
            given = unc.term_gpu_hour_usd.get(term, {})
            row = next((r for r in rows if r["gpu"] == gpu and r["term"] == term), None)
            if gpu in given:
                out.append(TermPrice(gpu, term, float(given[gpu]), f"scenario uncertainty.term_gpu_hour_usd.{term}", ""))
            elif row is not None:
                out.append(TermPrice(gpu, term, float(row["usd_per_gpu_hour"]), str(row["source"]), str(row["as_of"])))
            elif term == "reserved":
                usd, source = catalog_reserved[gpu]
                out.append(TermPrice(gpu, term, usd, source, ""))
    return out


def outcome_model(case: Case, prob: FleetProblem, terms: list[TermPrice]) -> OutcomeModel:
    """The recourse MIP of one outcome with the commitment's columns (cost as priced, bounded by
    the most GPUs its reserved replicas could hold) and rows linking its reserved GPUs to them."""
    from fleetplan.optimizer.mip.formulation import build_model  # the modeller, only where a MIP is built

    base = to_linear_problem(build_model(prob))
    objective = recourse_objective(base, prob, case.overrides)
    reserved = _reserved_gpus(base, prob)
    n = len(terms)
    lp = LinearProblem(
        col_names=[f"commit[{t.gpu},{t.term}]" for t in terms] + base.col_names,
        col_lower=[0.0] * n + list(base.col_lower),
        col_upper=[float(_most_gpus(reserved.get(t.gpu, []), base)) for t in terms] + list(base.col_upper),
        col_integer=[True] * n + list(base.col_integer),
        objective=[t.usd_per_gpu_hour * prob.hours_per_month for t in terms] + objective,
        objective_constant=base.objective_constant,
        row_names=list(base.row_names), row_lower=list(base.row_lower), row_upper=list(base.row_upper),
        row_index=[[j + n for j in r] for r in base.row_index], row_value=list(base.row_value),
        col_keys=[("commit", (t.gpu, t.term)) for t in terms] + list(base.col_keys),
        row_families=list(base.row_families),
    )
    for gpu, cols in sorted(reserved.items()):
        mine = [i for i, t in enumerate(terms) if t.gpu == gpu]
        lp.row_names.append(f"{gpu}-reserved_within_commitment-max")
        lp.row_families.append("reserved_within_commitment")
        lp.row_index.append([j + n for j, _ in cols] + mine)
        lp.row_value.append([g for _, g in cols] + [-1.0] * len(mine))
        lp.row_lower.append(-math.inf)
        lp.row_upper.append(0.0)
    return OutcomeModel(case, lp, list(range(n)), prob.hours_per_month)


def recourse_objective(base: LinearProblem, prob: FleetProblem, ov: Overrides) -> list[float]:
    """The outcome's objective on the columns of ``base`` (USD per month): reserved replicas free
    (paid through the commitment), on-demand, spot and API prices times the outcome's scales, and
    each spot replica-hour also paying ``spot_preemption`` on-demand replica-hours, the share of it
    lost to preemption and served on demand instead:

        spot[c,h]:  weight_h x (spot_scale x spot price(c) + preemption x on_demand_scale x on-demand price(c))"""
    objective = list(base.objective)
    for j, (family, index) in enumerate(base.col_keys):
        if family in RESERVED:
            objective[j] = 0.0
        elif family in PRICE_SCALED:
            objective[j] *= getattr(ov, PRICE_SCALED[family])
            if family in SPOT and ov.spot_preemption > 0.0:
                part = prob.pools[str(index[0])] if family == "pool_spot" else prob.cand[str(index[0])]
                objective[j] += (ov.spot_preemption * ov.on_demand_price_scale * prob.weight(int(index[1]))
                                 * part.usd_per_replica_hour_in(Tier.ON_DEMAND))
    return objective


def _most_gpus(cols: list[tuple[int, float]], lp: LinearProblem) -> float:
    """The most GPUs the reserved columns ``cols`` could hold (each at its bound)."""
    total = sum(g * lp.col_upper[j] for j, g in cols)
    return total if math.isfinite(total) else 1e6


# ----------------------------------------------------------------------------- one outcome's MIP


Box = tuple[Sequence[float], Sequence[float]]  # lower and upper GPUs of each commitment column


def solve_outcome(lp: LinearProblem, n_commit: int, commit_cost: Sequence[float], box: Box | None,
                  solver: Solver, gap: float, time_limit_s: float | None) -> SubResult | None:
    """An outcome's MIP with the commitment's columns priced at ``commit_cost`` (USD per GPU per
    month) and kept within ``box`` (fixed where its bounds meet); None when it has no plan."""
    objective = list(commit_cost) + lp.objective[n_commit:]
    lower, upper = list(lp.col_lower), list(lp.col_upper)
    if box is not None:
        for i, (lo, hi) in enumerate(zip(*box)):
            lower[i], upper[i] = float(lo), float(hi)  # more than this outcome could use is still a commitment
    run = lp.with_bounds(lower, upper)
    run.objective = objective
    res = solve(run, solver, time_limit_s=time_limit_s, mip_rel_gap=gap)
    if res.objective is None or not res.values:
        return None
    obj = float(res.objective)
    bound = obj - (res.mip_gap or 0.0) * abs(obj) if res.status == "optimal" or res.mip_gap is not None else -math.inf
    commit = tuple(float(round(v)) for v in res.values[:n_commit])
    paid = sum(c * x for c, x in zip(commit_cost, commit))
    return SubResult(obj, min(obj, bound), commit, obj - paid)


def _solve_in_copy(i: int, commit_cost: Sequence[float], box: Box | None, solver: Solver, gap: float,
                   time_limit_s: float | None) -> SubResult | None:
    """Worker: :func:`solve_outcome` of outcome ``i`` of the parent's models (:func:`~fleetplan.optimizer.runtime.workers.shared`)."""
    models: list[OutcomeModel] = shared()
    m = models[i]
    return solve_outcome(m.lp, len(m.commit_cols), commit_cost, box, solver, gap, time_limit_s)


Runner = Callable[[list[tuple[int, Sequence[float], Box | None]]], list[SubResult | None]]


def local_runner(models: list[OutcomeModel], solver: Solver, gap: float = SUB_GAP,
                 time_limit_s: float | None = None, workers: int | None = None) -> Runner:
    """Solves outcomes' MIPs here: in worker processes (copies of this one) when allowed."""
    def run(calls: list[tuple[int, Sequence[float], Box | None]]) -> list[SubResult | None]:
        return map_in_copies(_solve_in_copy, models, [(i, c, f, solver, gap, time_limit_s) for i, c, f in calls],
                             workers if workers is not None else jobs())
    return run


def dask_runner(client: Any, models: list[OutcomeModel], solver: Solver, gap: float = SUB_GAP,
                time_limit_s: float | None = None) -> Runner:
    """Solves outcomes' MIPs on the Dask cluster of ``client``: each outcome's model is sent once
    and its solves are submitted against it; results in the order asked for."""
    lps = client.scatter([m.lp for m in models], broadcast=False)
    sizes = [len(m.commit_cols) for m in models]

    def run(calls: list[tuple[int, Sequence[float], Box | None]]) -> list[SubResult | None]:
        futures = [client.submit(solve_outcome, lps[i], sizes[i], list(c), None if b is None else (list(b[0]), list(b[1])), solver,
                                 gap, time_limit_s, pure=False) for i, c, b in calls]
        return list(client.gather(futures))
    return run


# ----------------------------------------------------------------------------- the two-stage plan


def _costs(models: list[OutcomeModel]) -> list[float]:
    """The commitment's price per GPU per month, term by term (the same in every outcome)."""
    return models[0].lp.objective[:len(models[0].commit_cols)]


def evaluate(models: list[OutcomeModel], commit: Sequence[float], run: Runner) -> list[float] | None:
    """Each outcome's total cost (commitment plus recourse, USD per month) with ``commit`` fixed;
    None when some outcome has no plan with it."""
    costs = _costs(models)
    found = run([(i, costs, (list(commit), list(commit))) for i in range(len(models))])
    if any(f is None for f in found):
        return None
    return [f.objective_usd for f in found]  # type: ignore[union-attr]


def extensive_form(models: list[OutcomeModel], risk_weight: float = 0.0, alpha: float = 0.95) -> LinearProblem:
    """Every outcome's model side by side, weighted by its probability, sharing one commitment
    (and, with ``risk_weight``, CVaR's columns and rows)."""
    n = len(models[0].commit_cols)
    costs = _costs(models)
    first = models[0].lp
    lp = LinearProblem(col_names=first.col_names[:n], col_lower=[0.0] * n,
                       col_upper=[max(m.lp.col_upper[i] for m in models) for i in range(n)],
                       col_integer=[True] * n, objective=list(costs), col_keys=first.col_keys[:n])
    offsets = []
    for s, m in enumerate(models):
        p, sub = m.case.probability, m.lp
        off = lp.num_cols - n
        offsets.append(off)
        lp.col_names += [f"{s}:{name}" for name in sub.col_names[n:]]
        lp.col_lower += sub.col_lower[n:]
        lp.col_upper += sub.col_upper[n:]
        lp.col_integer += sub.col_integer[n:]
        lp.objective += [p * c for c in sub.objective[n:]]
        lp.col_keys += [(family, (s, *index)) for family, index in sub.col_keys[n:]]
        lp.objective_constant += p * sub.objective_constant
        for i in range(sub.num_rows):
            lp.row_names.append(f"{s}:{sub.row_names[i]}")
            lp.row_families.append(sub.row_families[i])
            lp.row_index.append([j if j < n else j + off for j in sub.row_index[i]])
            lp.row_value.append(list(sub.row_value[i]))
            lp.row_lower.append(sub.row_lower[i])
            lp.row_upper.append(sub.row_upper[i])
    if risk_weight > 0:
        eta = lp.num_cols
        lp.col_names.append("cvar_eta")
        lp.col_keys.append(("cvar_eta", ()))
        lp.col_lower.append(-math.inf)
        lp.col_upper.append(math.inf)
        lp.col_integer.append(False)
        lp.objective.append(risk_weight)
        for s, m in enumerate(models):
            u = lp.num_cols
            lp.col_names.append(f"cvar_excess[{s}]")
            lp.col_keys.append(("cvar_excess", (s,)))
            lp.col_lower.append(0.0)
            lp.col_upper.append(math.inf)
            lp.col_integer.append(False)
            lp.objective.append(risk_weight * m.case.probability / (1.0 - alpha))
            sub = m.lp
            cols = list(range(n)) + [j + offsets[s] for j in range(n, sub.num_cols) if sub.objective[j] != 0.0]
            vals = list(costs) + [sub.objective[j] for j in range(n, sub.num_cols) if sub.objective[j] != 0.0]
            lp.row_names.append(f"{s}-cvar_excess-min")
            lp.row_families.append("cvar_excess")
            lp.row_index.append(cols + [eta, u])
            lp.row_value.append(vals + [-1.0, -1.0])
            lp.row_lower.append(-math.inf)
            lp.row_upper.append(-sub.objective_constant)
    return lp


def _rounded(x: Sequence[float]) -> tuple[float, ...]:
    return tuple(float(max(0, round(v + 1e-9))) for v in x)


def solve_extensive(models: list[OutcomeModel], solver: Solver, gap: float, time_limit_s: float | None,
                    risk_weight: float = 0.0, alpha: float = 0.95) -> tuple[tuple[float, ...], float]:
    """The extensive form solved: (commitment, proven lower bound on its objective)."""
    lp = extensive_form(models, risk_weight, alpha)
    res = solve(lp, solver, time_limit_s=time_limit_s, mip_rel_gap=gap)
    if res.objective is None or not res.values:
        raise UncertaintyError(f"uncertainty: some outcome has no plan ({res.termination})")
    obj = float(res.objective)
    bound = obj - (res.mip_gap or 0.0) * abs(obj)
    return _rounded(res.values[:len(models[0].commit_cols)]), bound


@dataclass
class Decomposed:
    """Where dual decomposition ended: the best commitment, its outcomes' costs, the proven lower
    bound, the wait-and-see optima and the Lagrangian rounds run."""

    commit: tuple[float, ...]
    outcome_costs: list[float]
    lower_bound_usd: float
    own_optima: list[float]
    iterations: int


@dataclass
class _Node:
    """A box of commitments (``lower <= commit <= upper``), a lower bound on the best plan in it
    and the multipliers its Lagrangian rounds start from."""

    bound_usd: float
    lower: list[float]
    upper: list[float]
    w: list[list[float]]


ROUNDS_PER_NODE = 8  # Lagrangian rounds on one box before it is split


class _BranchAndBound:
    """The state of :func:`decompose`'s search: the best commitment found, its expected cost (the
    upper bound), the commitments already evaluated and the Lagrangian rounds run."""

    def __init__(self, models: list[OutcomeModel], run: Runner, gap: float, max_iterations: int,
                 deadline_s: float | None, progress: Callable[[int, float, float], None] | None) -> None:
        self.models, self.run, self.gap, self.max_iterations = models, run, gap, max_iterations
        self.deadline_s, self.progress, self.start = deadline_s, progress, time.monotonic()
        self.n = len(models[0].commit_cols)
        self.p = [m.case.probability for m in models]
        self.c = _costs(models)
        self.upper = math.inf
        self.best: tuple[float, ...] | None = None
        self.best_costs: list[float] = []
        self.seen: dict[tuple[float, ...], float] = {}
        self.own: list[float] = []
        self.rounds = 0
        self.open_nodes: list[_Node] = []

    def consider(self, x: tuple[float, ...]) -> None:
        """Evaluate commitment ``x`` in every outcome; keep it if it is the best so far (ties: the least)."""
        if x in self.seen:
            return
        costs = evaluate(self.models, x, self.run)
        self.seen[x] = math.inf if costs is None else sum(pi * v for pi, v in zip(self.p, costs))
        if costs is not None and (self.seen[x] < self.upper - 1e-9
                                  or (self.best is not None and self.seen[x] <= self.upper + 1e-9 and x < self.best)):
            self.upper, self.best, self.best_costs = self.seen[x], x, costs

    def closed(self, bound: float) -> bool:
        return self.upper < math.inf and self.upper - bound <= self.gap * abs(self.upper)

    def out_of_time(self) -> bool:
        return self.rounds >= self.max_iterations or (
            self.deadline_s is not None and time.monotonic() - self.start > self.deadline_s)

    def rounds_on(self, node: _Node) -> tuple[float, list[list[float]], tuple[float, ...] | None, list[SubResult],
                                              list[float]]:
        """Up to :data:`ROUNDS_PER_NODE` subgradient rounds of L(w) on ``node``'s box: its bound,
        the multipliers reached, the commitment every outcome agreed on (or None), the last
        outcomes' solutions and their probability-weighted mean commitment."""
        w, theta, stall, bound = node.w, 1.0, 0, node.bound_usd
        subs: list[SubResult] = []
        mean: list[float] = []
        for _ in range(ROUNDS_PER_NODE):
            found = self.run([(s, [ci + wi for ci, wi in zip(self.c, w[s])], (node.lower, node.upper))
                              for s in range(len(self.models))])
            self.rounds += 1
            if any(f is None for f in found):
                return math.inf, w, None, subs, mean  # some outcome has no plan with a commitment in this box
            subs = found  # type: ignore[assignment]
            if not self.own:
                self.own = [f.objective_usd for f in subs]
            value = sum(pi * f.bound_usd for pi, f in zip(self.p, subs))
            if value > bound + 1e-9 * max(1.0, abs(value)):
                bound, stall = value, 0
            else:
                stall += 1
                if stall >= 2:
                    theta, stall = theta / 2.0, 0
            mean = [sum(pi * f.commit[i] for pi, f in zip(self.p, subs)) for i in range(self.n)]
            self.consider(tuple(min(max(v, lo), hi) for v, lo, hi in zip(_rounded(mean), node.lower, node.upper)))
            if self.progress is not None:
                self.progress(self.rounds, min([bound, *(nd.bound_usd for nd in self.open_nodes)]), self.upper)
            step = [[f.commit[i] - mean[i] for i in range(self.n)] for f in subs]
            norm = sum(pi * sum(g * g for g in gs) for pi, gs in zip(self.p, step))
            if norm <= 1e-12:
                return bound, w, subs[0].commit, subs, mean
            if self.closed(bound) or self.out_of_time():
                break
            alpha = theta * (self.upper - value) / norm if self.upper < math.inf else 1.0
            w = [[wi + alpha * g for wi, g in zip(w[s], step[s])] for s in range(len(self.models))]
        return bound, w, None, subs, mean

    def split(self, node: _Node, bound: float, w: list[list[float]], subs: list[SubResult], mean: list[float]) -> None:
        """Split ``node`` on the term whose outcomes' commitments disagree most, at their mean."""
        spread = [sum(pi * (f.commit[i] - mean[i]) ** 2 for pi, f in zip(self.p, subs)) for i in range(self.n)]
        i = max(range(self.n), key=lambda k: (spread[k], -k))
        cut = min(math.floor(mean[i]), node.upper[i] - 1.0)
        left_upper, right_lower = list(node.upper), list(node.lower)
        left_upper[i], right_lower[i] = cut, cut + 1.0
        self.open_nodes.append(_Node(bound, list(node.lower), left_upper, [list(r) for r in w]))
        self.open_nodes.append(_Node(bound, right_lower, list(node.upper), [list(r) for r in w]))

    def search(self) -> None:
        """Boxes in order of their bounds until the gap closes, the rounds run out or time does."""
        top = [max(m.lp.col_upper[i] for m in self.models) for i in range(self.n)]
        self.open_nodes = [_Node(-math.inf, [0.0] * self.n, top, [[0.0] * self.n for _ in self.models])]
        while self.open_nodes and not self.out_of_time():
            self.open_nodes.sort(key=lambda nd: (nd.bound_usd, nd.lower, nd.upper))
            node = self.open_nodes.pop(0)
            if self.closed(node.bound_usd):
                self.open_nodes.append(node)
                break
            bound, w, agreed, subs, mean = self.rounds_on(node)
            if agreed is not None:
                self.consider(agreed)  # every outcome's best in the box is this commitment: the box is solved
                continue
            if bound == math.inf or self.closed(bound):
                continue
            if self.out_of_time():
                self.open_nodes.append(_Node(bound, node.lower, node.upper, w))
                break
            self.split(node, bound, w, subs, mean)


def decompose(models: list[OutcomeModel], run: Runner, gap: float, max_iterations: int,
              deadline_s: float | None = None, extra: Sequence[Sequence[float]] = (),
              progress: Callable[[int, float, float], None] | None = None) -> Decomposed:
    """Dual decomposition (see the module docstring) inside a branch and bound on the commitment:
    each box of commitments gets up to :data:`ROUNDS_PER_NODE` subgradient rounds of L(w) with the
    outcomes' copies kept in the box; a box whose bound reaches the best plan's cost (less
    ``gap``) is closed, one whose outcomes agree on a commitment is solved, and any other is split
    on the term whose copies disagree most. The lower bound is the least bound of the open boxes:
    proven whatever the Lagrangian's own duality gap. Ends at ``gap``, ``max_iterations`` rounds
    or ``deadline_s`` seconds; ``extra`` commitments are evaluated as candidates too."""
    bb = _BranchAndBound(models, run, gap, max_iterations, deadline_s, progress)
    for x in extra:
        bb.consider(_rounded(x))
    bb.search()
    if bb.best is None:
        raise UncertaintyError("uncertainty: no commitment found that every outcome can plan with")
    lower = min([bb.upper, *(nd.bound_usd for nd in bb.open_nodes)])
    return Decomposed(bb.best, bb.best_costs, lower, bb.own, bb.rounds)


def _commitment(terms: list[TermPrice], x: Sequence[float]) -> list[tuple[TermPrice, int]]:
    return [(t, int(round(v))) for t, v in zip(terms, x) if round(v) > 0]


def _outcome_models(scenario: Scenario, unc: Uncertainty, catalog: Catalog, preset: Preset, folder: Path,
                    commitment_rows: Sequence[dict[str, Any]],
                    progress: Callable[[str, int, int], None] | None) -> tuple[list[TermPrice], OutcomeModel,
                                                                               list[OutcomeModel]]:
    """The commitment terms priced, the mean forecast's model and each outcome's model."""
    check_outcomes(unc, scenario.products, folder, "scenario")  # a block parsed with product names only
    items = cases(unc)
    qps = hourly_qps(scenario.products, folder)
    memo = CandidateMemo()
    mean = mean_case(items, [p.name for p in scenario.products], scenario, folder, qps)
    probs = []
    for k, case in enumerate([mean, *items]):
        probs.append(outcome_problem(scenario, catalog, preset, folder, case, qps, memo))
        if progress is not None:
            progress("outcome models", k + 1, len(items) + 1)
    reserved: dict[str, tuple[float, str]] = {}
    for prob in probs:
        for gpu, v in _catalog_reserved(prob).items():
            reserved.setdefault(gpu, v)
    terms = term_prices(unc, reserved, commitment_rows)
    if not terms:
        raise UncertaintyError("uncertainty.terms: no commitment term has a price for any GPU type in play; give "
                               "term_gpu_hour_usd or add reserved to terms (nearest valid choice: reserved)")
    models = [outcome_model(case, prob, terms) for case, prob in zip([mean, *items], probs)]
    return terms, models[0], models[1:]


def _extensive(models: list[OutcomeModel], run: Runner, unc: Uncertainty, solver: Solver, gap: float,
               time_limit_s: float | None, notes: list[str]) -> tuple[tuple[float, ...], list[float], float, list[float]]:
    """The extensive form solved: the commitment, each outcome's cost with it, the lower bound
    (on the extensive form's objective: the expected cost, plus the risk term when it weighs in)
    and the wait-and-see optima."""
    x, bound = solve_extensive(models, solver, min(gap, SUB_GAP), time_limit_s, unc.risk_weight, unc.cvar_alpha)
    costs = evaluate(models, x, run)
    own_found = run([(i, _costs(models), None) for i in range(len(models))])
    if costs is None or any(f is None for f in own_found):
        raise UncertaintyError("uncertainty: some outcome has no plan")
    own = [f.objective_usd for f in own_found]  # type: ignore[union-attr]
    if unc.risk_weight > 0:
        notes.append(f"objective: expected cost + {unc.risk_weight:g} x CVaR {unc.cvar_alpha:g}; the lower bound "
                     f"is the extensive form's, on the same objective")
    return x, costs, bound, own


# ----------------------------------------------------------------------------- separable outcomes

# the row families of an outcome's MIP that :mod:`~fleetplan.optimizer.decisions.recourse` models
SEPARABLE_ROWS = frozenset({
    "one_configuration_per_product", "reserved_needs_configuration", "on_demand_needs_configuration",
    "spot_needs_configuration", "throughput_meets_demand", "configuration_meets_demand",
    "configuration_meets_demand_rounded", "api_split", "api_for_needs_configuration", "api_for_share_max",
    "api_share_max", "spot_share_limit", "reserved_within_commitment",
})
CHECK_HOURS = 24  # hours of the mean forecast the product split's plan is checked on against the fleet MIP


@dataclass(frozen=True)
class OutcomeGrid:
    """One outcome's recourse cost (USD per month) for every commitment of its grid, its own best
    total (commitment included), the GPU types it may run on, or why it is not separable."""

    values: Any
    own_usd: float
    gpus: frozenset[str]
    reason: str | None = None


@dataclass(frozen=True)
class GridContext:
    """What an outcome's grid is computed from, shared by the workers."""

    scenario: Scenario
    catalog: Catalog
    preset: Preset
    folder: Path
    qps: dict[str, list[float]]
    memo: CandidateMemo
    cases: list[Case]
    gpus: tuple[str, ...]
    unit_usd: tuple[float, ...]  # USD per committed GPU per month, type by type of ``gpus``
    mean_case: Case | None = None
    terms: tuple[TermPrice, ...] = ()

    def bound_here(self) -> GridContext:
        """This context with its candidate memo keyed to its own catalog and preset: a copy
        unpickled on a Dask worker holds new objects, and would otherwise build every product's
        configurations again (a fork copy holds the same objects: nothing changes)."""
        self.memo.rebind(self.catalog, self.preset)
        return self


def outcome_grid(ctx: GridContext, i: int) -> OutcomeGrid:
    """Outcome ``i``'s grid (:func:`~fleetplan.optimizer.decisions.recourse.recourse_grid`)."""
    case = ctx.cases[i]
    prob = outcome_problem(ctx.scenario, ctx.catalog, ctx.preset, ctx.folder, case, ctx.qps, ctx.memo)
    types = frozenset(c.gpu for c in prob.all_candidates())
    reason = not_separable(prob)
    if reason is None:
        rec = outcome_recourse(prob, case.overrides)
        if grid_points(rec, ctx.gpus) > MAX_GRID_POINTS:
            reason = "the grid of commitments is too large"
    if reason is not None:
        return OutcomeGrid(None, math.inf, types, f"{case.name}: {reason}")
    values = recourse_grid(rec, ctx.gpus)[-1]
    own = float((values + _commit_usd(ctx.unit_usd, values.shape)).min())
    return OutcomeGrid(values, own, types)


def _commit_usd(unit: Sequence[float], shape: tuple[int, ...]) -> Any:
    """The commitment's USD per month at every point of a grid of ``shape``."""
    import numpy as np

    total = np.zeros(shape)
    for axis, usd in enumerate(unit):
        index = [1] * len(shape)
        index[axis] = shape[axis]
        total = total + usd * np.arange(shape[axis]).reshape(index)
    return total


# The task (first, stop) that runs the product split's checks instead of a run of outcomes
SPLIT_CHECKS = (0, -1)


def outcome_grids_of(ctx: GridContext, first: int, stop: int) -> list[OutcomeGrid] | str | None:
    """One worker task: :func:`outcome_grid` of outcomes ``first`` to ``stop - 1``, or for
    :data:`SPLIT_CHECKS` :func:`split_checks`."""
    ctx = ctx.bound_here()
    if (first, stop) == SPLIT_CHECKS:
        return split_checks(ctx)
    return [outcome_grid(ctx, i) for i in range(first, stop)]


def split_checks(ctx: GridContext) -> str | None:
    """The checks of the product split (:func:`check_split`) on the mean forecast and on the first
    outcome (it carries every override the outcomes set): why the split disagrees with the fleet
    MIP, or None. They are one task: the worker that runs it alone imports the modeller."""
    for case in (ctx.mean_case, ctx.cases[0]):
        assert case is not None
        prob = outcome_problem(ctx.scenario, ctx.catalog, ctx.preset, ctx.folder, case, ctx.qps, ctx.memo)
        reason = not_separable(prob) or check_split(prob, case, list(ctx.terms), ctx.gpus, ctx.unit_usd)
        if reason is not None:
            return reason
    return None


def _grids_in_copy(first: int, stop: int) -> list[OutcomeGrid] | str | None:
    """Worker: :func:`outcome_grids_of` on the parent's context."""
    return outcome_grids_of(shared(), first, stop)


CHUNKS_PER_WORKER = 8  # outcomes go to each worker (local or Dask) in about this many runs of consecutive ones (the
# last runs end close together: with 4 per worker the 200-outcome week left one worker 0.03 s alone)


def outcome_grids(ctx: GridContext, client: Any, workers: int | None,
                  progress: Callable[[str, int, int], None] | None,
                  checks: bool = False) -> tuple[list[OutcomeGrid], str | None]:
    """Every outcome's grid, in order, and with ``checks`` why the product split's checks refuse
    it, or None (see :func:`outcome_grids_of`): on the Dask cluster of ``client``, else in worker
    processes. The checks go first, as a task beside the runs of consecutive outcomes (the result
    does not depend on how they are cut)."""
    n = len(ctx.cases)
    count = len(client.nthreads()) if client is not None else workers if workers is not None else jobs()
    size = max(1, math.ceil(n / (CHUNKS_PER_WORKER * count))) if count > 1 else n
    checks_run = [SPLIT_CHECKS] if checks else []
    runs = checks_run + [(a, min(n, a + size)) for a in range(0, n, size)]
    tick = None if progress is None else (lambda done, total: progress("outcome recourse", done, total))
    if client is not None:
        shared_ctx = client.scatter(ctx, broadcast=True)
        futures = [client.submit(outcome_grids_of, shared_ctx, a, b, pure=False) for a, b in runs]
        found = []
        for f in futures:  # each run's grids fetched as it ends, while later runs still compute
            found.append(f.result())
            if tick is not None:
                tick(sum(g.done() for g in futures), len(futures))
    else:
        found = map_in_copies(_grids_in_copy, ctx, runs, count, progress=tick)
    reason = found[0] if checks else None
    return [g for run in found[len(checks_run):] for g in run], reason


def _padded(values: Any, shape: tuple[int, ...]) -> Any:
    """``values`` on a larger grid: beyond its edge the cost stays as at the edge."""
    import numpy as np

    return np.pad(values, [(0, s - v) for s, v in zip(shape, values.shape)], mode="edge")


def _first_min(total: Any) -> tuple[int, ...]:
    """The least commitment (in grid order) whose total is the minimum, to a relative 1e-12."""
    import numpy as np

    best = float(total.min())
    flat = np.flatnonzero(total.ravel() <= best + 1e-12 * max(1.0, abs(best)))
    return tuple(int(v) for v in np.unravel_index(int(flat[0]), total.shape))


def _at(values: Any, point: Sequence[int]) -> float:
    """A grid's value at ``point`` (beyond its edge, at the edge)."""
    return float(values[tuple(min(x, s - 1) for x, s in zip(point, values.shape))])


def _first_day(prob: FleetProblem) -> FleetProblem:
    """``prob`` over its first :data:`CHECK_HOURS` hours (itself when no longer or its hours are merged)."""
    if prob.hours <= CHECK_HOURS or prob.hour_counts:
        return prob
    keep = list(range(CHECK_HOURS))
    return prob.derive(products={n: on_hours(p, keep) for n, p in prob.products.items()}, hours=CHECK_HOURS)


def check_split(prob: FleetProblem, case: Case, terms: list[TermPrice], gpus: Sequence[str],
                unit: Sequence[float]) -> str | None:
    """Why the product split disagrees with the fleet MIP on ``prob`` (checked over its first day),
    or None: the split's best plan is written as the MIP's columns, every row must hold and the
    MIP's objective must price it as the split does."""
    day = _first_day(prob)
    model = outcome_model(case, day, terms)
    unknown = sorted(set(model.lp.row_families) - SEPARABLE_ROWS)
    if unknown:
        return f"the fleet MIP has rows the product split does not model ({', '.join(unknown)})"
    rec = outcome_recourse(day, case.overrides)
    values = recourse_grid(rec, gpus)[-1]
    point = _first_min(values + _commit_usd(unit, values.shape))
    plans = [recourse_plan(day, case.overrides, ch) for ch in split(rec, gpus, point)]
    x = plan_columns(model.lp, day, plans, _commit_columns(terms, gpus, unit, point))
    broken = violations(model.lp, x)
    priced = sum(a * b for a, b in zip(model.lp.objective, x)) + model.lp.objective_constant
    expected = _at(values, point) + sum(u * r for u, r in zip(unit, point))
    if broken or abs(priced - expected) > 1e-6 * max(1.0, abs(expected)):
        return f"the product split's plan does not hold in the fleet MIP ({', '.join(broken[:3]) or 'its cost'})"
    return None


def _cheapest_terms(terms: list[TermPrice], hours_per_month: float) -> tuple[tuple[str, ...], tuple[float, ...],
                                                                           dict[str, int]]:
    """GPU types with a term, each one's cheapest USD per GPU per month, and the index in ``terms``
    of the term it is committed on (the first of the cheapest)."""
    chosen: dict[str, int] = {}
    for i, t in enumerate(terms):
        if t.gpu not in chosen or t.usd_per_gpu_hour < terms[chosen[t.gpu]].usd_per_gpu_hour:
            chosen[t.gpu] = i
    gpus = tuple(sorted(chosen))
    return gpus, tuple(terms[chosen[g]].usd_per_gpu_hour * hours_per_month for g in gpus), chosen


def _commit_columns(terms: list[TermPrice], gpus: Sequence[str], unit: Sequence[float],
                    point: Sequence[int]) -> dict[int, float]:
    """The commitment ``point`` (GPUs per type) as values of the terms' columns."""
    _, _, chosen = _cheapest_terms(terms, 1.0)
    return {chosen[g]: float(r) for g, r in zip(gpus, point)}


def _as_terms(terms: list[TermPrice], gpus: Sequence[str], point: Sequence[int]) -> tuple[float, ...]:
    cols = _commit_columns(terms, gpus, (), point)
    return tuple(cols.get(i, 0.0) for i in range(len(terms)))


@dataclass
class SeparableSetup:
    """The mean forecast's problem and case, the terms priced and the grids' context."""

    mean_case: Case
    mean_problem: FleetProblem
    terms: list[TermPrice]
    ctx: GridContext
    risk_weight: float = 0.0
    cvar_alpha: float = 0.95


def separable_setup(scenario: Scenario, unc: Uncertainty, catalog: Catalog, preset: Preset, folder: Path,
                    commitment_rows: Sequence[dict[str, Any]]) -> SeparableSetup | str:
    """The setup of :func:`separable_plan`, or why the outcomes are not separable (the mean
    forecast's problem here; each outcome's where its grid is made, and the split is checked
    against the fleet MIP on the mean forecast and the first outcome as tasks beside them)."""
    check_outcomes(unc, scenario.products, folder, "scenario")  # a block parsed with product names only
    items = cases(unc)
    qps = hourly_qps(scenario.products, folder)
    memo = CandidateMemo()
    mean = mean_case(items, [p.name for p in scenario.products], scenario, folder, qps)
    prob = outcome_problem(scenario, catalog, preset, folder, mean, qps, memo)
    reason = not_separable(prob)
    if reason is not None:
        return reason
    terms = term_prices(unc, _catalog_reserved(prob), commitment_rows)
    if not terms:
        return "no commitment term has a price"
    gpus, unit, _ = _cheapest_terms(terms, prob.hours_per_month)
    # the first outcome's configurations too, so that the workers (copies of this process) share them
    outcome_problem(scenario, catalog, preset, folder, items[0], qps, memo)
    ctx = GridContext(scenario, catalog, preset, folder, qps, memo, items, gpus, unit, mean, tuple(terms))
    return SeparableSetup(mean, prob, terms, ctx, unc.risk_weight, unc.cvar_alpha)


def separable_plan(setup: SeparableSetup, client: Any, workers: int | None,
                   progress: Callable[[str, int, int], None] | None, start: float) -> StochasticPlan | str:
    """The two-stage plan by the product split: every outcome's recourse cost over the whole grid
    of commitments (in workers), summed with the commitment's cost; the least total is the optimum
    (every commitment is priced, so the bound is the plan's own cost). Returns why not instead
    when an outcome is not separable."""
    ctx, terms = setup.ctx, setup.terms
    grids, reason = outcome_grids(ctx, client, workers, progress, checks=True)
    if reason is not None:
        return reason
    known = {c.gpu for c in setup.mean_problem.all_candidates()}
    for g in grids:
        if g.reason is not None:
            return g.reason
        if not g.gpus <= known:
            return "an outcome runs on a GPU type the mean forecast does not"
    shape = tuple(max(g.values.shape[a] for g in grids) for a in range(len(ctx.gpus)))
    commit = _commit_usd(ctx.unit_usd, shape)
    total = commit.copy()
    for case, g in zip(ctx.cases, grids):
        total = total + case.probability * _padded(g.values, shape)
    if not math.isfinite(float(total.min())):
        raise UncertaintyError("uncertainty: no commitment found that every outcome can plan with")
    searched = 0
    if setup.risk_weight > 0:
        point, searched = _least_risk_objective(total, commit, grids, ctx.cases, setup.risk_weight, setup.cvar_alpha)
    else:
        point = _first_min(total)
    costs = [_at(commit, point) + _at(g.values, point) for g in grids]
    expected = sum(c.probability * v for c, v in zip(ctx.cases, costs))
    objective = _objective(costs, [c.probability for c in ctx.cases], setup.risk_weight, setup.cvar_alpha)
    mean = setup.mean_problem
    mean_values = recourse_grid(outcome_recourse(mean, setup.mean_case.overrides), ctx.gpus)[-1]
    ev = _first_min(mean_values + _commit_usd(ctx.unit_usd, mean_values.shape))
    eev = sum(c.probability * (_at(commit, ev) + _at(g.values, ev)) for c, g in zip(ctx.cases, grids))
    own = [g.own_usd for g in grids]
    wait_and_see = sum(c.probability * v for c, v in zip(ctx.cases, own))
    notes = [f"exact by the product split: every commitment up to {' x '.join(str(s - 1) for s in shape)} GPUs "
             f"({', '.join(ctx.gpus)}) priced in every outcome, each outcome's recourse solved product by product and "
             f"hour by hour"]
    if setup.risk_weight > 0:
        notes.append(f"objective: expected cost + {setup.risk_weight:g} x CVaR {setup.cvar_alpha:g}, exact at each "
                     f"commitment; {searched} of {total.size} commitments priced in the order of a lower bound "
                     f"(CVaR is at least the expected cost and the CVaR of the outcomes' own optima) until it passed "
                     f"the best")
    return StochasticPlan(
        commitment=_commitment(terms, _as_terms(terms, ctx.gpus, point)), expected_cost_usd=expected,
        lower_bound_usd=objective,  # every other commitment is priced, or bounded, no lower: the plan's own
        outcomes=[OutcomeCost(c.name, c.probability, v, o) for c, v, o in zip(ctx.cases, costs, own)],
        mean_forecast_commitment=_commitment(terms, _as_terms(terms, ctx.gpus, ev)),
        mean_forecast_expected_cost_usd=eev if math.isfinite(eev) else math.inf,
        wait_and_see_usd=min(wait_and_see, expected), method="decomposition", solve_s=time.monotonic() - start,
        risk_weight=setup.risk_weight, cvar_alpha=setup.cvar_alpha, notes=notes,
    )


RISK_CHUNK = 4096  # commitments priced together by the risk search, at most
RISK_CHUNK_VALUES = 2_000_000  # outcomes x commitments held at once by it (16 MB of costs)


def _least_risk_objective(total: Any, commit: Any, grids: list[OutcomeGrid], items: list[Case], weight: float,
                          alpha: float) -> tuple[tuple[int, ...], int]:
    """The commitment of least expected cost + ``weight`` x CVaR_alpha, and how many were priced.

    ``total`` is the expected cost at every commitment. CVaR_alpha is at least the expected cost,
    and at least the CVaR of the outcomes' own optima (each outcome costs at least its own optimum
    whatever the commitment, and CVaR grows with every cost), so expected cost + ``weight`` x the
    larger of the two is a lower bound on the objective: commitments are priced exactly
    (:func:`cvar_columns` over the outcomes' costs there) in the order of that bound, in chunks,
    until the next bound exceeds the best objective found; every commitment not priced is then
    proven no better. Ties go to the least commitment in grid order, as without the risk term."""
    import numpy as np

    flat = total.ravel()
    probabilities = [c.probability for c in items]
    floor = cvar([g.own_usd for g in grids], probabilities, alpha)
    bound = flat + weight * np.maximum(flat, floor)
    order = np.argsort(bound, kind="stable")
    best, best_at, priced = math.inf, -1, 0
    chunk = max(1, min(RISK_CHUNK, RISK_CHUNK_VALUES // max(1, len(grids))))
    for a in range(0, order.size, chunk):
        idx = order[a:a + chunk]
        if bound[idx[0]] > best + 1e-12 * max(1.0, abs(best)):
            break
        coords = np.unravel_index(idx, total.shape)
        costs = np.empty((len(grids), idx.size))
        base = commit[coords]
        for s, g in enumerate(grids):
            clipped = tuple(np.minimum(c, n - 1) for c, n in zip(coords, g.values.shape))
            costs[s] = base + g.values[clipped]
        value = flat[idx] + weight * cvar_columns(costs, probabilities, alpha)
        priced += idx.size
        for v, j in zip(value.tolist(), idx.tolist()):
            tol = 1e-12 * max(1.0, abs(best)) if math.isfinite(best) else 0.0
            if best_at < 0 or v < best - tol or (v <= best + tol and j < best_at):
                best, best_at = min(v, best), j
    return tuple(int(v) for v in np.unravel_index(best_at, total.shape)), priced


def _by_product_split(scenario: Scenario, unc: Uncertainty, catalog: Catalog, preset: Preset, folder: Path,
                      commitment_rows: Sequence[dict[str, Any]], client: Any, workers: int | None,
                      progress: Callable[[str, int, int], None] | None, start: float) -> StochasticPlan | str:
    """:func:`separable_plan`, or why the outcomes are not separable."""
    setup = separable_setup(scenario, unc, catalog, preset, folder, commitment_rows)
    return setup if isinstance(setup, str) else separable_plan(setup, client, workers, progress, start)


def _expected(models: list[OutcomeModel], values: Sequence[float]) -> float:
    """The outcomes' ``values`` weighed by their probabilities."""
    return sum(m.case.probability * v for m, v in zip(models, values))


def _expected_cost_of(models: list[OutcomeModel], commit: Sequence[float], run: Runner, notes: list[str]) -> float:
    """Expected cost over the outcomes of committing to ``commit`` (the mean forecast's): infinite,
    with a note, when some outcome has no plan under it."""
    costs = evaluate(models, commit, run)
    if costs is None:
        notes.append("the mean forecast's commitment leaves some outcome without a plan: its expected cost is infinite")
        return math.inf
    return _expected(models, costs)


def plan_under_uncertainty(scenario: Scenario, unc: Uncertainty, catalog: Catalog, preset: Preset, folder: Path,
                           solver: Solver = "highs", *, commitment_rows: Sequence[dict[str, Any]] = (),
                           client: Any = None, workers: int | None = None,
                           time_limit_s: float | None = None,
                           progress: Callable[[str, int, int], None] | None = None,
                           separable: bool = True) -> StochasticPlan:
    """The two-stage plan of ``scenario`` under ``unc``: the commitment, its cost in every outcome,
    the mean forecast's commitment and cost, the wait-and-see optima (for EVPI and regret).

    Outcomes whose products share nothing but the commitment go to the product split (:func:`separable_plan`,
    risk term included) unless ``separable`` is False or the method is ``extensive``; others to whole-horizon
    MIPs, on the Dask cluster of ``client``, else in ``workers`` local processes: the same plan either way."""
    if Tier.RESERVED not in scenario.options.tiers:
        raise UncertaintyError("options.tiers: a commitment needs the reserved tier (nearest valid choice: "
                               "[reserved, on_demand])")
    start = time.monotonic()
    why: StochasticPlan | str = ""  # the product split's plan, or why there is none (told in the notes)
    if separable and unc.method != "extensive":
        why = _by_product_split(scenario, unc, catalog, preset, folder, commitment_rows, client, workers, progress, start)
        if not isinstance(why, str):
            return why
    terms, mean_model, models = _outcome_models(scenario, unc, catalog, preset, folder, commitment_rows, progress)
    gap = unc.max_gap
    sub_gap = min(SUB_GAP_MAX, gap / 4.0)
    run = (dask_runner(client, models, solver, sub_gap, time_limit_s) if client is not None
           else local_runner(models, solver, sub_gap, time_limit_s, workers=workers))
    # the mean forecast's commitment
    ev = solve_outcome(mean_model.lp, len(terms), _costs(models), None, solver, SUB_GAP, time_limit_s)
    if ev is None:
        raise UncertaintyError("uncertainty: the mean forecast has no plan")
    columns = sum(m.lp.num_cols for m in models)
    method = unc.method
    if method == "auto":
        method = "extensive" if unc.risk_weight > 0 or columns <= EXTENSIVE_MAX_COLUMNS else "decomposition"
    notes: list[str] = [f"outcomes solved as whole-horizon MIPs: {why}"] if why else []
    if method == "extensive":
        x, costs, bound, own = _extensive(models, run, unc, solver, gap, time_limit_s, notes)
        iterations = 0
    else:
        dec = decompose(models, run, gap, unc.max_iterations, time_limit_s, extra=[ev.commit],
                        progress=None if progress is None else
                        lambda it, lo, up: progress("decomposition rounds", it, unc.max_iterations))
        x, costs, bound, own, iterations = dec.commit, dec.outcome_costs, dec.lower_bound_usd, dec.own_optima, dec.iterations
    expected = _expected(models, costs)
    objective = _objective(costs, [m.case.probability for m in models], unc.risk_weight, unc.cvar_alpha)
    eev = _expected_cost_of(models, ev.commit, run, notes)
    wait_and_see = _expected(models, own)
    outcomes = [OutcomeCost(m.case.name, m.case.probability, v, o) for m, v, o in zip(models, costs, own)]
    return StochasticPlan(
        commitment=_commitment(terms, x), expected_cost_usd=expected, lower_bound_usd=min(bound, objective),
        outcomes=outcomes, mean_forecast_commitment=_commitment(terms, ev.commit),
        mean_forecast_expected_cost_usd=eev, wait_and_see_usd=min(wait_and_see, expected), method=method,
        iterations=iterations, solve_s=time.monotonic() - start, risk_weight=unc.risk_weight,
        cvar_alpha=unc.cvar_alpha, notes=notes,
    )

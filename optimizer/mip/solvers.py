"""Solve a :class:`LinearProblem` with HiGHS (default) or OR-Tools (SCIP); same formulation, two engines.

Statuses are reported as the solver gives them; only ``optimal`` counts as a plan.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

from fleetplan.optimizer.common.defaults import HIGHS_CUT_POOL_ROWS, HIGHS_NODE_LIMIT
from fleetplan.optimizer.common.enums import Status
from fleetplan.optimizer.mip.linear import LinearProblem
from fleetplan.optimizer.runtime.signals import PENDING_INTERRUPTS

SOLVERS = ("highs", "ortools")


@dataclass(frozen=True)
class SolverOptions:
    """Which solver runs and how: ``name`` is ``highs`` (HiGHS, handing MIPs it cannot close in
    :data:`HIGHS_NODE_LIMIT` nodes to SCIP) or ``ortools`` (SCIP); ``log`` prints the solver's own
    log on stdout; ``presolve`` is HiGHS's presolve setting (``choose``, ``on``, ``off``).
    Wherever a solver is asked for, its name alone (a string) means these defaults."""

    name: str = "highs"
    log: bool = False
    presolve: str = "choose"

    def __post_init__(self) -> None:
        if self.name not in SOLVERS:
            raise ValueError(f"unknown solver {self.name!r} (valid: {', '.join(SOLVERS)})")

    def __str__(self) -> str:
        return self.name

    @classmethod
    def of(cls, solver: str | SolverOptions) -> SolverOptions:
        """``solver`` as options (a name gets the defaults)."""
        return solver if isinstance(solver, SolverOptions) else cls(name=solver)


Solver = str | SolverOptions  # a solver's name, or its options


@dataclass
class SolveResult:
    """Outcome of one solve: status, objective and variable values."""

    solver: str
    status: str  # optimal | infeasible | unbounded | time_limit | error
    termination: str
    objective: float | None = None
    values: list[float] = field(default_factory=list)
    mip_gap: float | None = None
    solve_time_s: float = 0.0

    @property
    def optimal(self) -> bool:
        """Proven optimal (within the requested relative gap)."""
        return self.status == "optimal"


def solve(lp: LinearProblem, solver: Solver = "highs", time_limit_s: float | None = None, mip_rel_gap: float = 1e-6,
          cutoff: float | None = None, handover: bool = True, start: list[float] | None = None,
          node_limit: int | None = None) -> SolveResult:
    """Solve ``lp`` with ``solver`` (``highs`` or ``ortools``). With ``highs`` and ``handover`` a
    MIP not proven within :data:`HIGHS_NODE_LIMIT` nodes is handed to SCIP (OR-Tools) for the rest
    of the time; the result names both. With ``cutoff`` and ``node_limit``, see
    :meth:`Session.solve`; ``start`` is a solution HiGHS may start its MIP search from (ignored
    where it is not feasible)."""
    return Session(lp, solver).solve(lp.col_lower, lp.col_upper, time_limit_s=time_limit_s, mip_rel_gap=mip_rel_gap,
                                     cutoff=cutoff, handover=handover, start=start, node_limit=node_limit)


def solve_restricted(lp: LinearProblem, lower: list[float], upper: list[float], solver: Solver = "highs", *,
                     relax: bool = False, time_limit_s: float | None = None, mip_rel_gap: float = 1e-6,
                     cutoff: float | None = None, node_limit: int | None = None) -> SolveResult:
    """Solve ``lp`` under column bounds ``lower``/``upper`` (the MIP, or its LP relaxation with
    ``relax``) by giving the solver only the columns not fixed at zero
    (:meth:`LinearProblem.restricted`); the values come back for every column of ``lp``. The same
    optimum as solving the whole problem under those bounds, at the size of what is left free.
    With ``cutoff`` and ``node_limit``, see :meth:`Session.solve`."""
    part = lp.restricted(lower, upper)
    if part is None:
        return SolveResult(solver=str(solver), status=Status.INFEASIBLE,
                           termination="a row fails with its columns fixed at zero")
    sub, kept = part
    if not sub.num_cols:
        values = [0.0] * lp.num_cols
        return SolveResult(solver=str(solver), status=Status.OPTIMAL, termination="nothing left to choose",
                           objective=lp.objective_constant, values=values, mip_gap=0.0)
    res = solve(sub.relaxed() if relax else sub, solver, time_limit_s=time_limit_s, mip_rel_gap=mip_rel_gap,
                cutoff=cutoff, node_limit=node_limit)
    if res.values:
        values = [0.0] * lp.num_cols
        for j, x in zip(kept, res.values):
            values[j] = x
        res = replace(res, values=values)
    return res


def with_cutoff_row(lp: LinearProblem, cutoff: float) -> LinearProblem:
    """``lp`` with the objective as a row, ``c x + c0 <= cutoff`` (scaled to coefficients of at
    most 1): only solutions cheaper than ``cutoff`` remain."""
    nz = [j for j, a in enumerate(lp.objective) if a]
    scale = max((abs(lp.objective[j]) for j in nz), default=1.0)
    out = lp.with_bounds(lp.col_lower, lp.col_upper)
    out.row_names = [*lp.row_names, "all-objective_cutoff-max"]
    out.row_families = [*lp.row_families, "objective_cutoff"]
    out.row_lower = [*lp.row_lower, -math.inf]
    out.row_upper = [*lp.row_upper, (cutoff - lp.objective_constant) / scale]
    out.row_index = [*lp.row_index, nz]
    out.row_value = [*lp.row_value, [lp.objective[j] / scale for j in nz]]
    return out


class Session:
    """One :class:`LinearProblem` loaded into its solver once and solved again under other column
    bounds, as an LP relaxation or as the MIP: a per-configuration search fixes a configuration
    by bounds instead of building a model per configuration.

    With HiGHS the model stays loaded and only bounds and integrality change between solves;
    a MIP starts from a cleared solver state, so its result does not depend on earlier solves.
    OR-Tools (SCIP) is given the problem afresh each time.
    """

    def __init__(self, lp: LinearProblem, solver: Solver = "highs") -> None:
        self.options = SolverOptions.of(solver)
        self.lp = lp
        self.solver = self.options.name
        self._highs: Any = None
        self._relaxed = False

    def solve(self, lower: list[float], upper: list[float], *, relax: bool = False, time_limit_s: float | None = None,
              mip_rel_gap: float = 1e-6, cutoff: float | None = None, handover: bool = True,
              start: list[float] | None = None, node_limit: int | None = None) -> SolveResult:
        """Solve under column bounds ``lower``/``upper`` (the MIP, or its LP relaxation with ``relax``);
        ``handover=False`` keeps a MIP on HiGHS to the end (no hand-over to SCIP).

        With ``cutoff`` only a solution costing less is wanted: a MIP stops as soon as its bound
        reaches the cutoff (status ``cutoff``: no such solution). HiGHS is interrupted from its
        MIP callback, leaving the model as it is; SCIP gets the objective as a row.

        ``node_limit`` bounds a MIP's work in branch-and-bound nodes, HiGHS's and then SCIP's
        together: a MIP that reaches it stops with its best solution and bound (status
        ``time_limit``), the same on any machine at any load, where a time limit stops it wherever
        the clock says."""
        cutoff = None if cutoff is None or math.isinf(cutoff) or relax else cutoff
        nodes = None if relax else node_limit

        def scip(limit: float | None, scip_nodes: int | None) -> SolveResult:
            lp = self.lp.with_bounds(list(lower), list(upper))
            lp = lp.relaxed() if relax else lp
            res = _solve_ortools(lp if cutoff is None else with_cutoff_row(lp, cutoff), limit, mip_rel_gap, scip_nodes)
            if cutoff is not None and res.status == "infeasible":
                return replace(res, status="cutoff", termination=f"no solution below {cutoff:,.2f}")
            return res

        if self.solver == "ortools":
            return scip(time_limit_s, nodes)
        # HiGHS stops at the hand-over count or at the MIP's own nodes, whichever comes first
        caps = [n for n in (HIGHS_NODE_LIMIT if handover and not relax else None, nodes) if n is not None]
        highs_nodes = min(caps) if caps else None
        first = self._run_highs(lower, upper, relax, time_limit_s, mip_rel_gap, highs_nodes, cutoff, start)
        if first.status != "node_limit":
            return first
        if highs_nodes == nodes:  # the MIP's nodes are spent: no hand-over
            return replace(first, status="time_limit", termination=f"stopped after {highs_nodes} nodes "
                                                                  f"(gap {first.mip_gap or 0:.3%})")
        left = None if time_limit_s is None else max(0.05, time_limit_s - first.solve_time_s)
        second = scip(left, None if nodes is None else nodes - HIGHS_NODE_LIMIT)
        if second.status == "cutoff":
            return replace(second, solver="highs+ortools")
        if not second.values and first.values:  # SCIP found nothing better to report
            second = SolveResult(solver="highs", status="time_limit", termination=first.termination,
                                 objective=first.objective, values=first.values, mip_gap=first.mip_gap)
        return SolveResult(
            solver="highs+ortools", status=second.status,
            termination=f"HiGHS stopped after {HIGHS_NODE_LIMIT} nodes (gap {first.mip_gap or 0:.3%}); SCIP: {second.termination}",
            objective=second.objective, values=second.values, mip_gap=second.mip_gap,
            solve_time_s=first.solve_time_s + second.solve_time_s,
        )

    def _run_highs(self, lower: list[float], upper: list[float], relax: bool, time_limit_s: float | None,
                   mip_rel_gap: float, max_nodes: int | None, cutoff: float | None = None,
                   start: list[float] | None = None) -> SolveResult:
        import highspy
        import numpy as np

        lp = self.lp
        if self._highs is None:
            self._highs = _load_highs(lp, self.options)
            if self._highs is None:
                return SolveResult(solver="highs", status="error", termination="HiGHS rejected the model (passModel)")
        h = self._highs
        n = lp.num_cols
        cols = np.arange(n, dtype=np.int32)
        inf = highspy.kHighsInf
        h.changeColsBounds(n, cols, np.array([max(-inf, x) for x in lower], dtype=float),
                           np.array([min(inf, x) for x in upper], dtype=float))
        integer = any(lp.col_integer) and not relax
        if relax != self._relaxed and any(lp.col_integer):
            kinds = [highspy.HighsVarType.kInteger if (i and not relax) else highspy.HighsVarType.kContinuous
                     for i in lp.col_integer]
            h.changeColsIntegrality(n, cols, np.array(kinds))
            h.clearSolver()  # nothing of a MIP's search carries over to an LP, or back
            self._relaxed = relax
        if integer:
            h.clearSolver()
            if start is not None:
                _start_from(h, highspy, start)
        h.setOptionValue("mip_rel_gap", mip_rel_gap)
        h.setOptionValue("time_limit", float(time_limit_s) if time_limit_s is not None else inf)
        h.setOptionValue("mip_max_nodes", int(max_nodes) if max_nodes is not None else 2**31 - 1)
        if not integer or cutoff is None:
            return _run(h, highspy, integer)

        raised: list[BaseException] = []

        def stop_at_cutoff(event: Any) -> None:
            try:
                if PENDING_INTERRUPTS or event.data_out.mip_dual_bound >= cutoff:
                    event.interrupt()
            except BaseException as exc:  # e.g. Ctrl-C arriving here: stop HiGHS, re-raise after it
                raised.append(exc)
                event.interrupt()

        h.cbMipInterrupt.subscribe(stop_at_cutoff)
        try:
            res = _run(h, highspy, integer)
        finally:
            h.cbMipInterrupt.unsubscribe(stop_at_cutoff)
        if raised:
            raise raised[0]
        if PENDING_INTERRUPTS:  # taken while HiGHS called back, and lost on the way out of it
            raise PENDING_INTERRUPTS[0]
        if res.status == "interrupted" or (res.optimal and float(res.objective or 0.0) >= cutoff):
            return replace(res, status="cutoff", termination=f"no solution below {cutoff:,.2f}", values=[],
                           objective=None)
        return res


def _start_from(h: Any, highspy: Any, values: list[float]) -> None:
    """Offer HiGHS ``values`` as a first MIP solution (it checks and ignores one that is not feasible)."""
    sol = highspy.HighsSolution()
    sol.col_value = list(values)
    sol.value_valid = True
    h.setSolution(sol)


def _quiet_highs(highspy: Any) -> Any:
    """A HiGHS instance whose ``output_flag`` is off from its first moment, so it prints nothing.

    ``highspy.Highs()`` prints a banner while it registers its callbacks, before a caller can set
    any option. A class placed between ``Highs`` and its C++ base in the method resolution order
    switches the log off right after the C++ object is made, before ``Highs.__init__`` registers
    them: no file descriptor or stream of the process is touched."""
    return _silent_highs_class(highspy)()


@functools.cache
def _silent_highs_class(highspy: Any) -> type:
    """``highspy.Highs`` whose C++ base starts with ``output_flag`` off (see :func:`_quiet_highs`);
    made once per process."""
    base = highspy.Highs.__mro__[1]  # the C++ class that Highs wraps

    def __init__(self: Any) -> None:
        base.__init__(self)
        self.setOptionValue("output_flag", False)

    silent = type("_SilentBase", (base,), {"__init__": __init__})
    return type("QuietHighs", (highspy.Highs, silent), {})


def _load_highs(lp: LinearProblem, options: SolverOptions) -> Any:
    """A quiet, single-threaded, seeded HiGHS instance holding ``lp`` (None if HiGHS rejects it)."""
    import highspy
    import numpy as np

    h = _quiet_highs(highspy)
    h.setOptionValue("output_flag", options.log)
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("threads", 1)
    h.setOptionValue("presolve", options.presolve)
    h.setOptionValue("mip_pool_soft_limit", HIGHS_CUT_POOL_ROWS)
    inf = highspy.kHighsInf
    model = highspy.HighsLp()
    model.num_col_ = lp.num_cols
    model.num_row_ = lp.num_rows
    model.col_cost_ = np.array(lp.objective, dtype=float)
    model.offset_ = lp.objective_constant
    model.col_lower_ = np.array([max(-inf, x) for x in lp.col_lower], dtype=float)
    model.col_upper_ = np.array([min(inf, x) for x in lp.col_upper], dtype=float)
    model.row_lower_ = np.array([max(-inf, x) for x in lp.row_lower], dtype=float)
    model.row_upper_ = np.array([min(inf, x) for x in lp.row_upper], dtype=float)
    starts = [0]
    index: list[int] = []
    value: list[float] = []
    for idx, val in zip(lp.row_index, lp.row_value):
        index.extend(idx)
        value.extend(val)
        starts.append(len(index))
    model.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    model.a_matrix_.start_ = np.array(starts, dtype=np.int32)
    model.a_matrix_.index_ = np.array(index, dtype=np.int32)
    model.a_matrix_.value_ = np.array(value, dtype=float)
    model.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous for i in lp.col_integer]
    if h.passModel(model) == highspy.HighsStatus.kError:
        return None
    return h


def _run(h: Any, highspy: Any, integer: bool) -> SolveResult:
    """Run a loaded HiGHS instance and read its outcome."""
    t0 = time.perf_counter()
    h.run()
    elapsed = time.perf_counter() - t0
    ms = h.getModelStatus()
    name = h.modelStatusToString(ms)
    status = {
        highspy.HighsModelStatus.kOptimal: "optimal",
        highspy.HighsModelStatus.kInfeasible: "infeasible",
        highspy.HighsModelStatus.kUnbounded: "unbounded",
        highspy.HighsModelStatus.kUnboundedOrInfeasible: "infeasible",
        highspy.HighsModelStatus.kTimeLimit: "time_limit",
        highspy.HighsModelStatus.kSolutionLimit: "node_limit",  # mip_max_nodes reached
        highspy.HighsModelStatus.kInterrupt: "interrupted",  # by a callback (a cutoff reached)
    }.get(ms, "error")
    info = h.getInfo()
    has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
    values = list(h.getSolution().col_value) if has_solution else []
    gap = float(info.mip_gap) if integer and has_solution else None
    return SolveResult(
        solver="highs", status=status, termination=name, objective=float(info.objective_function_value) if has_solution else None,
        values=values, mip_gap=None if gap is None or math.isinf(gap) else gap, solve_time_s=elapsed,
    )


def _solve_ortools(lp: LinearProblem, time_limit_s: float | None, mip_rel_gap: float,
                   node_limit: int | None = None) -> SolveResult:
    from ortools.linear_solver import pywraplp

    s = pywraplp.Solver.CreateSolver("SCIP")
    if s is None:  # pragma: no cover - SCIP ships with ortools wheels
        return SolveResult(solver="ortools", status="error", termination="SCIP backend not available")
    s.SetNumThreads(1)
    # SCIP would catch Ctrl-C itself and return its best plan; leave the signal to fleetplan. A node
    # limit is a count: where it stops is the same on any machine.
    settings = "misc/catchctrlc = FALSE\n"
    if node_limit is not None:
        settings += f"limits/nodes = {max(1, int(node_limit))}\n"
    s.SetSolverSpecificParametersAsString(settings)
    if time_limit_s is not None:
        s.SetTimeLimit(max(1, int(time_limit_s * 1000)))
    inf = s.infinity()
    xs = []
    for j in range(lp.num_cols):
        lo = -inf if math.isinf(lp.col_lower[j]) else lp.col_lower[j]
        hi = inf if math.isinf(lp.col_upper[j]) else lp.col_upper[j]
        xs.append(s.IntVar(lo, hi, f"x{j}") if lp.col_integer[j] else s.NumVar(lo, hi, f"x{j}"))
    for i in range(lp.num_rows):
        lo = -inf if math.isinf(lp.row_lower[i]) else lp.row_lower[i]
        hi = inf if math.isinf(lp.row_upper[i]) else lp.row_upper[i]
        row = s.RowConstraint(lo, hi, f"r{i}")
        for j, a in zip(lp.row_index[i], lp.row_value[i]):
            row.SetCoefficient(xs[j], a)
    obj = s.Objective()
    for j, c in enumerate(lp.objective):
        if c:
            obj.SetCoefficient(xs[j], c)
    obj.SetOffset(lp.objective_constant)
    obj.SetMinimization()
    params = pywraplp.MPSolverParameters()
    params.SetDoubleParam(pywraplp.MPSolverParameters.RELATIVE_MIP_GAP, mip_rel_gap)
    t0 = time.perf_counter()
    code = s.Solve(params)
    elapsed = time.perf_counter() - t0
    names = {
        pywraplp.Solver.OPTIMAL: "optimal",
        pywraplp.Solver.FEASIBLE: "time_limit",
        pywraplp.Solver.INFEASIBLE: "infeasible",
        pywraplp.Solver.UNBOUNDED: "unbounded",
        pywraplp.Solver.ABNORMAL: "error",
        pywraplp.Solver.NOT_SOLVED: "time_limit",
    }
    status = names.get(code, "error")
    has_solution = code in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE)
    values = [x.solution_value() for x in xs] if has_solution else []
    objective = obj.Value() if has_solution else None
    gap = None
    if has_solution and any(lp.col_integer):
        bound = obj.BestBound()
        gap = abs(objective - bound) / max(1e-9, abs(objective)) if objective else 0.0
    return SolveResult(
        solver="ortools", status=status, termination=f"SCIP result status {code} ({status})", objective=objective,
        values=values, mip_gap=gap, solve_time_s=elapsed,
    )

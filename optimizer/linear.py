"""Export a Pyomo model to a solver-neutral linear problem, so every solver gets the same formulation.

Rows and columns are named ``{entity}-{rule}-{bound}`` / ``{rule}[{entity}]`` so results can be
explained by name: e.g. row ``chat-throughput_meets_demand-min``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pyomo.core import Constraint, Objective, Var, maximize
from pyomo.repn.standard_repn import generate_standard_repn


@dataclass
class LinearProblem:
    """min c^T x + c0 subject to row_lower <= A x <= row_upper, col bounds, integrality."""

    col_names: list[str] = field(default_factory=list)
    col_lower: list[float] = field(default_factory=list)
    col_upper: list[float] = field(default_factory=list)
    col_integer: list[bool] = field(default_factory=list)
    objective: list[float] = field(default_factory=list)
    objective_constant: float = 0.0
    row_names: list[str] = field(default_factory=list)
    row_lower: list[float] = field(default_factory=list)
    row_upper: list[float] = field(default_factory=list)
    row_index: list[list[int]] = field(default_factory=list)
    row_value: list[list[float]] = field(default_factory=list)

    @property
    def num_cols(self) -> int:
        """Number of variables."""
        return len(self.col_names)

    @property
    def num_rows(self) -> int:
        """Number of constraints."""
        return len(self.row_names)

    @property
    def col_index(self) -> dict[str, int]:
        """Variable name -> column index (built once)."""
        idx = self.__dict__.get("_col_index")
        if idx is None:
            idx = {n: j for j, n in enumerate(self.col_names)}
            self.__dict__["_col_index"] = idx
        return idx

    def column(self, name: str) -> int:
        """Index of the variable called ``name``."""
        return self.col_index[name]

    def relaxed(self) -> LinearProblem:
        """The LP relaxation: the same problem with every variable continuous."""
        out = self.with_bounds(self.col_lower, self.col_upper)
        out.col_integer = [False] * self.num_cols
        return out

    def with_bounds(self, lower: list[float], upper: list[float]) -> LinearProblem:
        """A copy sharing everything but the column bounds."""
        out = LinearProblem(
            col_names=self.col_names, col_lower=lower, col_upper=upper, col_integer=self.col_integer,
            objective=self.objective, objective_constant=self.objective_constant, row_names=self.row_names,
            row_lower=self.row_lower, row_upper=self.row_upper, row_index=self.row_index, row_value=self.row_value,
        )
        if "_col_index" in self.__dict__:
            out.__dict__["_col_index"] = self.__dict__["_col_index"]
        return out


def _bound_tag(lo: float, hi: float) -> str:
    if lo == hi:
        return "eq"
    if math.isinf(hi):
        return "min"
    if math.isinf(lo):
        return "max"
    return "range"


def _entity(index: object) -> str:
    if index is None:
        return "all"
    if isinstance(index, tuple):
        return "/".join(str(i) for i in index)
    return str(index)


def to_linear_problem(model: object) -> LinearProblem:
    """Flatten the active variables, linear constraints and objective of a Pyomo ``model``."""
    lp = LinearProblem()
    col_of: dict[int, int] = {}
    for var in model.component_objects(Var, active=True, descend_into=True):  # type: ignore[attr-defined]
        for idx, v in var.items():
            col_of[id(v)] = len(lp.col_names)
            lp.col_names.append(f"{var.local_name}[{_entity(idx)}]")
            lb, ub = v.bounds
            lp.col_lower.append(-math.inf if lb is None else float(lb))
            lp.col_upper.append(math.inf if ub is None else float(ub))
            lp.col_integer.append(v.is_integer() or v.is_binary())
            lp.objective.append(0.0)

    objectives = list(model.component_data_objects(Objective, active=True))  # type: ignore[attr-defined]
    if len(objectives) != 1:
        raise ValueError(f"expected one active objective, found {len(objectives)}")
    obj = objectives[0]
    sign = -1.0 if obj.sense == maximize else 1.0
    repn = generate_standard_repn(obj.expr, quadratic=False)
    if not repn.is_linear():
        raise ValueError("objective is not linear")
    for v, coef in zip(repn.linear_vars, repn.linear_coefs):
        lp.objective[col_of[id(v)]] += sign * float(coef)
    lp.objective_constant = sign * float(repn.constant or 0.0)

    for con in model.component_objects(Constraint, active=True, descend_into=True):  # type: ignore[attr-defined]
        for idx, c in con.items():
            repn = generate_standard_repn(c.body, quadratic=False)
            if not repn.is_linear():
                raise ValueError(f"constraint {c.name} is not linear")
            const = float(repn.constant or 0.0)
            lo = -math.inf if c.lower is None else float(c.lower) - const
            hi = math.inf if c.upper is None else float(c.upper) - const
            merged: dict[int, float] = {}
            for v, coef in zip(repn.linear_vars, repn.linear_coefs):
                j = col_of[id(v)]
                merged[j] = merged.get(j, 0.0) + float(coef)
            lp.row_names.append(f"{_entity(idx)}-{con.local_name}-{_bound_tag(lo, hi)}")
            lp.row_lower.append(lo)
            lp.row_upper.append(hi)
            lp.row_index.append(list(merged))
            lp.row_value.append(list(merged.values()))
    return lp

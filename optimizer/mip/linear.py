"""Export a Pyomo model to a solver-neutral linear problem, so every solver gets the same formulation.

Rows and columns are named ``{entity}-{rule}-{bound}`` / ``{rule}[{entity}]`` so results can be
explained by name: e.g. row ``chat-throughput_meets_demand-min``.

Owns the matrix form of a model and column or row lookups; it knows nothing of fleets, products or solvers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any



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
    # each column's variable family and index, e.g. ("on_demand", ("chat/h100-sxm/tp1/fp8/b64", 3))
    col_keys: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)
    # each row's constraint family (the Pyomo component's name)
    row_families: list[str] = field(default_factory=list)

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

    @property
    def col_of(self) -> dict[tuple[str, tuple[Any, ...]], int]:
        """(variable family, index) -> column (built once): how plans and searches find a
        variable, e.g. ``lp.col_of["use", (key,)]``; never by rebuilding a column's name."""
        idx = self.__dict__.get("_col_of")
        if idx is None:
            idx = {k: j for j, k in enumerate(self.col_keys)}
            self.__dict__["_col_of"] = idx
        return idx

    def find(self, family: str, *index: Any) -> int | None:
        """Column of variable ``family[index]``, or None when the model has no such variable."""
        return self.col_of.get((family, index))

    def family_columns(self, family: str) -> list[tuple[tuple[Any, ...], int]]:
        """Every (index, column) of one variable family, in column order."""
        return [(k[1], j) for j, k in enumerate(self.col_keys) if k[0] == family]

    def matrix(self) -> tuple[Any, Any, Any]:
        """The constraint matrix as coordinate arrays ``(row, col, value)`` (NumPy, built once)."""
        coo = self.__dict__.get("_coo")
        if coo is None:
            import numpy as np

            sizes = np.fromiter((len(r) for r in self.row_index), dtype=np.int64, count=self.num_rows)
            rows = np.repeat(np.arange(self.num_rows, dtype=np.int64), sizes)
            cols = np.fromiter((j for r in self.row_index for j in r), dtype=np.int64, count=int(sizes.sum()))
            vals = np.fromiter((v for r in self.row_value for v in r), dtype=float, count=int(sizes.sum()))
            coo = (rows, cols, vals)
            self.__dict__["_coo"] = coo
        return coo

    def row_activity(self, x: list[float]) -> Any:
        """``A x`` for a full column vector ``x`` (NumPy array, one entry per row)."""
        import numpy as np

        rows, cols, vals = self.matrix()
        return np.bincount(rows, weights=vals * np.asarray(x, dtype=float)[cols], minlength=self.num_rows)

    def restricted(self, lower: list[float], upper: list[float]) -> tuple[LinearProblem, list[int]] | None:
        """The same problem under column bounds ``lower``/``upper`` with every column fixed at zero
        left out, as ``(problem, kept column indices)``; rows left without a column are dropped
        when zero satisfies them. None when such a row does not hold at zero (no solution).

        A configuration search fixes all but one configuration at zero: the solver then gets a
        problem the size of that configuration instead of the whole product's."""
        import numpy as np

        lo = np.asarray(lower, dtype=float)
        hi = np.asarray(upper, dtype=float)
        keep = ~((lo == 0.0) & (hi == 0.0))
        rows, cols, vals = self.matrix()
        on = keep[cols]
        kept_rows = np.unique(rows[on])
        r_lo = np.asarray(self.row_lower, dtype=float)
        r_hi = np.asarray(self.row_upper, dtype=float)
        empty = np.ones(self.num_rows, dtype=bool)
        empty[kept_rows] = False
        tol = 1e-9
        if np.any(empty & ((r_lo > tol) | (r_hi < -tol))):
            return None
        kept_cols = np.flatnonzero(keep)
        new_col = np.full(self.num_cols, -1, dtype=np.int64)
        new_col[kept_cols] = np.arange(len(kept_cols))
        r, c, v = rows[on], new_col[cols[on]], vals[on]  # rows stay sorted: entries are row-major
        new_row = np.searchsorted(kept_rows, r)
        bounds = np.searchsorted(new_row, np.arange(len(kept_rows) + 1))
        idx, val = c.tolist(), v.tolist()
        row_index = [idx[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        row_value = [val[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        names = self.col_names
        kept = kept_cols.tolist()
        sub = LinearProblem(
            col_names=[names[j] for j in kept], col_keys=[self.col_keys[j] for j in kept], col_lower=lo[kept_cols].tolist(), col_upper=hi[kept_cols].tolist(),
            col_integer=[self.col_integer[j] for j in kept], objective=[self.objective[j] for j in kept],
            objective_constant=self.objective_constant,
            row_names=[self.row_names[i] for i in kept_rows.tolist()],
            row_families=[self.row_families[i] for i in kept_rows.tolist()] if self.row_families else [],
            row_lower=r_lo[kept_rows].tolist(),
            row_upper=r_hi[kept_rows].tolist(), row_index=row_index, row_value=row_value,
        )
        return sub, kept

    def relaxed(self) -> LinearProblem:
        """The LP relaxation: the same problem with every variable continuous."""
        out = self.with_bounds(self.col_lower, self.col_upper)
        out.col_integer = [False] * self.num_cols
        return out

    def with_bounds(self, lower: list[float], upper: list[float]) -> LinearProblem:
        """A copy sharing everything but the column bounds."""
        out = LinearProblem(
            col_names=self.col_names, col_keys=self.col_keys, col_lower=lower, col_upper=upper, col_integer=self.col_integer,
            objective=self.objective, objective_constant=self.objective_constant, row_names=self.row_names,
            row_families=self.row_families,
            row_lower=self.row_lower, row_upper=self.row_upper, row_index=self.row_index, row_value=self.row_value,
        )
        for cached in ("_col_index", "_col_of"):
            if cached in self.__dict__:
                out.__dict__[cached] = self.__dict__[cached]
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
    from pyomo.core import Constraint, Objective, Var, maximize  # here: a matrix alone does not need the modeller
    from pyomo.repn.standard_repn import generate_standard_repn

    lp = LinearProblem()
    col_of: dict[int, int] = {}
    for var in model.component_objects(Var, active=True, descend_into=True):  # type: ignore[attr-defined]
        for idx, v in var.items():
            col_of[id(v)] = len(lp.col_names)
            lp.col_names.append(f"{var.local_name}[{_entity(idx)}]")
            lp.col_keys.append((var.local_name, idx if isinstance(idx, tuple) else (idx,)))
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
            lp.row_families.append(con.local_name)
            lp.row_lower.append(lo)
            lp.row_upper.append(hi)
            lp.row_index.append(list(merged))
            lp.row_value.append(list(merged.values()))
    return lp

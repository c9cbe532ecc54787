"""The two ways a plan can fail: the targets cannot be met, or the solver gave no plan."""

from __future__ import annotations

from fleetplan.catalogs.loader import InputError


class InfeasibleError(InputError):
    """No plan meets the targets; the message names the constraint and the best reachable value."""


class SolverError(RuntimeError):
    """The solver returned no proven-optimal plan (``lower_bound``: what was proven, if anything)."""

    def __init__(self, message: str, lower_bound: float | None = None) -> None:
        super().__init__(message)
        self.lower_bound = lower_bound

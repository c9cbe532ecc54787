"""One wall-clock deadline for a whole command, and the progress it reports on the way.

A command (``plan``, a batch, ``breakeven``) creates one :class:`Deadline` and hands it down:
candidate generation, model building, relaxations, MIPs, runner-up reports, the pooling
comparison, budget relief and the first-come baseline all take their time from it, so the
command as a whole stays within ``time_limit_s``. Stages that only explain a plan get a share
of what is left (:meth:`Deadline.share`) and are skipped, with a note, once it is spent.

Progress goes to a callback (:data:`ProgressCallback`), one :class:`ProgressEvent` per stage
update; the caller decides whether and how to show it (the command line draws a status line on
a terminal). This module owns time keeping and the progress events; it draws nothing, reads no
environment variable and does not decide what to solve.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fleetplan.optimizer.common.defaults import CANDIDATE_SHARE, DEFAULT_TIME_LIMIT_S, MIN_SOLVE_S
from fleetplan.catalogs.files import InputError
from fleetplan.optimizer.common.errors import SolverError

# The stage named in ``stopped_by_time_limit`` when candidate generation was cut short.
CANDIDATE_STAGE = "candidate generation"


class DeadlinePassed(InputError):
    """The deadline passed in candidate generation before a product had any configuration to
    plan with, or in a solve before the solver found any plan: a user error (exit code 2) naming
    ``options.time_limit_s``, never a crash."""


class NoPlanInTime(DeadlinePassed, SolverError):
    """A solve the deadline ended before the solver found any plan: one line and exit code 2 for
    the user, and still a :class:`~fleetplan.optimizer.common.errors.SolverError` for the searches that treat a solve
    without a plan as "nothing found in time" (runner-ups, baselines, portfolio rounds)."""

    def __init__(self, message: str) -> None:
        SolverError.__init__(self, message)


def no_plan_in_time(solver: str, where: str) -> NoPlanInTime:
    """The error for a solve the deadline ended before ``solver`` found any plan for ``where``."""
    return NoPlanInTime(f"options.time_limit_s: the deadline passed before {solver} found any plan for {where}; "
                          "allow more time, or search fewer GPUs, tp, batches or request buckets")


@dataclass(frozen=True)
class ProgressEvent:
    """One update of a long run: the stage, how far it is (``done`` of ``total`` items, either may
    be None), the best monthly cost found and the proven bound (USD per month, None when not known),
    and the seconds since the run started. ``force`` marks an update a viewer should not skip."""

    stage: str
    done: int | None = None
    total: int | None = None
    best_usd: float | None = None
    bound_usd: float | None = None
    elapsed_s: float = 0.0
    force: bool = False


# What receives progress: called once per update, in the planning process, between solver calls.
ProgressCallback = Callable[[ProgressEvent], None]
"""What a long call (planning, replaying, sweeping) calls with each :class:`ProgressEvent`; it returns nothing."""


@dataclass
class Progress:
    """The progress reporter a deadline carries: turns each stage update into a
    :class:`ProgressEvent` for ``callback``; without a callback it does nothing."""

    callback: ProgressCallback | None = None
    start: float = field(default_factory=time.perf_counter)

    def update(self, stage: str, done: int | None = None, total: int | None = None,
               best: float | None = None, bound: float | None = None, force: bool = False) -> None:
        """Report ``stage`` (``done``/``total``, best cost and bound in USD per month) to the callback."""
        if self.callback is None:
            return
        self.callback(ProgressEvent(stage, done, total, best, bound, time.perf_counter() - self.start, force))


@dataclass
class Deadline:
    """A point in time (``time.perf_counter``) by which a command ends; None means no limit.

    ``stopped`` records which stages were cut short or skipped, so the plan can say so.
    """

    at: float | None
    progress: Progress = field(default_factory=Progress)
    stopped: list[str] = field(default_factory=list)

    @classmethod
    def after(cls, seconds: float | None, progress: ProgressCallback | None = None) -> Deadline:
        """A deadline ``seconds`` from now (None: no limit) reporting progress to ``progress``."""
        at = None if seconds is None else time.perf_counter() + seconds
        return cls(at=at, progress=Progress(progress))

    def left(self) -> float | None:
        """Seconds left (never negative), or None without a limit."""
        return None if self.at is None else max(0.0, self.at - time.perf_counter())

    @property
    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return self.at is not None and time.perf_counter() >= self.at

    def share(self, fraction: float) -> Deadline:
        """A deadline ``fraction`` of the time left from now (the same object without a limit),
        sharing this one's progress reporter and notes."""
        if self.at is None:
            return self
        now = time.perf_counter()
        return Deadline(at=now + max(0.0, self.at - now) * fraction, progress=self.progress, stopped=self.stopped)

    def split(self, parts: int) -> Deadline:
        """An equal share of the time left for the first of ``parts`` stages still to run (its
        unused time goes to the next ones); the same object without a limit."""
        return self.share(1.0 / max(1, parts))

    def solver_limit(self) -> float | None:
        """Time limit to give one solver call: what is left, at least :data:`MIN_SOLVE_S`."""
        left = self.left()
        return None if left is None else max(left, MIN_SOLVE_S)

    def note(self, what: str) -> None:
        """Record that ``what`` was cut short or skipped by the deadline (once)."""
        if what not in self.stopped:
            self.stopped.append(what)


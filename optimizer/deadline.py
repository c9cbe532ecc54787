"""One wall-clock deadline for a whole command, and the progress line it shows on a terminal.

A command (``plan``, a batch, ``breakeven``) creates one :class:`Deadline` and hands it down:
candidate generation, model building, relaxations, MIPs, runner-up reports, the pooling
comparison, budget relief and the first-come baseline all take their time from it, so the
command as a whole stays within ``time_limit_s``. Stages that only explain a plan get a share
of what is left (:meth:`Deadline.share`) and are skipped, with a note, once it is spent.

This module owns time keeping and the progress line; it does not decide what to solve.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from fleetplan.catalogs.loader import InputError
from fleetplan.optimizer.errors import SolverError

# Without ``options.time_limit_s`` a command takes at most this long: long enough to prove most
# plans optimal (the shipped examples need seconds), short enough that an edit to a scenario
# never leaves a user waiting for minutes without an answer.
DEFAULT_TIME_LIMIT_S = 60.0
# Candidate generation may take at most this share of the time left when it starts: cut there, the
# MIPs and explanations still have the rest to return a plan on the configurations generated.
CANDIDATE_SHARE = 0.5
# The stage named in ``stopped_by_time_limit`` when candidate generation was cut short.
CANDIDATE_STAGE = "candidate generation"
# Every MIP gets at least this long once started, so that a solver can return the plan it has.
MIN_SOLVE_S = 0.05
# The progress line appears once a command has run this long, and is redrawn at most this often.
PROGRESS_AFTER_S = 2.0
PROGRESS_EVERY_S = 0.5


class DeadlinePassed(InputError):
    """The deadline passed in candidate generation before a product had any configuration to
    plan with, or in a solve before the solver found any plan: a user error (exit code 2) naming
    ``options.time_limit_s``, never a crash."""


class NoPlanInTime(DeadlinePassed, SolverError):
    """A solve the deadline ended before the solver found any plan: one line and exit code 2 for
    the user, and still a :class:`~.errors.SolverError` for the searches that treat a solve
    without a plan as "nothing found in time" (runner-ups, baselines, portfolio rounds)."""

    def __init__(self, message: str) -> None:
        SolverError.__init__(self, message)


def no_plan_in_time(solver: str, where: str) -> NoPlanInTime:
    """The error for a solve the deadline ended before ``solver`` found any plan for ``where``."""
    return NoPlanInTime(f"options.time_limit_s: the deadline passed before {solver} found any plan for {where}; "
                          "allow more time, or search fewer GPUs, tp, batches or request buckets")


@dataclass
class Progress:
    """A one-line status on stderr (stage, configurations searched, best cost and bound), shown
    only on a terminal, only after :data:`PROGRESS_AFTER_S`, and never with ``enabled=False``."""

    enabled: bool = False
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    start: float = field(default_factory=time.perf_counter)
    width: int = 80  # the terminal's columns: the line is kept shorter, so it never wraps
    _last: float = 0.0
    _shown: bool = False

    @classmethod
    def for_terminal(cls, quiet: bool = False) -> Progress:
        """Progress on stderr when it is a terminal and ``quiet`` is False."""
        try:
            tty = sys.stderr.isatty()
        except (AttributeError, ValueError):
            tty = False
        import shutil

        width = shutil.get_terminal_size((80, 24)).columns  # honours a valid COLUMNS, ignores a bad one
        return cls(enabled=tty and not quiet and not os.environ.get("CI"), width=max(20, width))

    def update(self, stage: str, done: int | None = None, total: int | None = None,
               best: float | None = None, bound: float | None = None, force: bool = False) -> None:
        """Redraw the line if due: ``stage [done/total] best $X bound $Y (Ns)``."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.start < PROGRESS_AFTER_S or (now - self._last < PROGRESS_EVERY_S and not force):
            return
        self._last = now
        parts = [f"fleetplan: {stage}"]
        if done is not None:
            parts.append(f"{done}/{total}" if total is not None else str(done))
        if best is not None and math.isfinite(best):
            parts.append(f"best ${best:,.0f}")
        if bound is not None and math.isfinite(bound):
            parts.append(f"bound ${bound:,.0f}")
        parts.append(f"{now - self.start:.0f} s")
        line = " ".join(parts)[: min(120, self.width - 1)]
        self.stream.write("\r\x1b[2K" + line)
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """Clear the line, if one was drawn."""
        if self._shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._shown = False


@dataclass
class Deadline:
    """A point in time (``time.perf_counter``) by which a command ends; None means no limit.

    ``stopped`` records which stages were cut short or skipped, so the plan can say so.
    """

    at: float | None
    progress: Progress = field(default_factory=Progress)
    stopped: list[str] = field(default_factory=list)

    @classmethod
    def after(cls, seconds: float | None, progress: Progress | None = None) -> Deadline:
        """A deadline ``seconds`` from now (None: no limit)."""
        at = None if seconds is None else time.perf_counter() + seconds
        return cls(at=at, progress=progress or Progress())

    def left(self) -> float | None:
        """Seconds left (never negative), or None without a limit."""
        return None if self.at is None else max(0.0, self.at - time.perf_counter())

    @property
    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return self.at is not None and time.perf_counter() >= self.at

    def share(self, fraction: float) -> Deadline:
        """A deadline ``fraction`` of the time left from now (the same object without a limit),
        sharing this one's progress line and notes."""
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


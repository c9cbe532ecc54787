"""The progress line a command draws on a terminal: the renderer of the library's progress events.

The library reports progress to a callback (:class:`~fleetplan.optimizer.runtime.deadline.ProgressEvent`);
a command passes a :class:`ProgressLine`, which draws one status line on stderr, only on a
terminal, never in CI (the ``CI`` environment variable), only once the command has run
:data:`PROGRESS_AFTER_S` and at most every :data:`PROGRESS_EVERY_S`. :meth:`ProgressLine.close`
clears it before the command prints its result.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from fleetplan.optimizer.runtime.deadline import ProgressEvent

# The progress line appears once a command has run this long, and is redrawn at most this often.
PROGRESS_AFTER_S = 2.0
PROGRESS_EVERY_S = 0.5
# The line is cut to this many characters even on a wider terminal: a status, not a log.
MAX_LINE_CHARS = 120


@dataclass
class ProgressLine:
    """A one-line status on ``stream`` (stage, items done, best cost and bound, seconds), drawn
    only with ``enabled``; called with each :class:`ProgressEvent` of a run."""

    enabled: bool = False
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    start: float = field(default_factory=time.perf_counter)
    width: int = 80  # the terminal's columns: the line is kept shorter, so it never wraps
    _last: float = 0.0
    _shown: bool = False

    @classmethod
    def for_terminal(cls, quiet: bool = False) -> ProgressLine:
        """A line on stderr when it is a terminal, ``quiet`` is False and ``CI`` is not set."""
        try:
            tty = sys.stderr.isatty()
        except (AttributeError, ValueError):
            tty = False
        width = shutil.get_terminal_size((80, 24)).columns  # honours a valid COLUMNS, ignores a bad one
        return cls(enabled=tty and not quiet and not os.environ.get("CI"), width=max(20, width))

    def __call__(self, event: ProgressEvent) -> None:
        """Draw ``event`` if due."""
        self.update(event.stage, event.done, event.total, event.best_usd, event.bound_usd, event.force)

    def update(self, stage: str, done: int | None = None, total: int | None = None,
               best: float | None = None, bound: float | None = None, force: bool = False) -> None:
        """Redraw the line if due: ``fleetplan: stage done/total best $X bound $Y N s``."""
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
        line = " ".join(parts)[: min(MAX_LINE_CHARS, self.width - 1)]
        self.stream.write("\r\x1b[2K" + line)
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """Clear the line, if one was drawn."""
        if self._shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._shown = False

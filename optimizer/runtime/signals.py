"""Interrupts (Ctrl-C, SIGTERM) that the command line's signal handlers have raised, held for a
solver. Python may run a handler inside a solver's callback, where its exception is lost; the
callback then stops the solver and the interrupt is raised again once the solver returns.

A module of its own, free of solver imports, so the signal handlers cost nothing to install."""

from __future__ import annotations

PENDING_INTERRUPTS: list[BaseException] = []

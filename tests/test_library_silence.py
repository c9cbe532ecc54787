"""The library does not act like a command line: planning, simulating and building the report
write nothing to stdout or stderr (checked at the file-descriptor level, so a C extension's
output counts too), create no file, and leave every piece of process-wide state as it was:
matplotlib's backend and settings, the environment, the working directory's contents, logging,
warnings filters, numpy's error handling, signal handlers and ``sys.path``."""

from __future__ import annotations

import copy
import logging
import os
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fleetplan

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _signals() -> dict[int, Any]:
    """Every catchable signal's handler."""
    out = {}
    for s in signal.valid_signals():
        try:
            out[s] = signal.getsignal(s)
        except (OSError, ValueError):
            continue
    return out


def _logging() -> dict[str, Any]:
    """Every logger's level, handlers and propagation, the root's included."""
    loggers = {"": logging.getLogger()}
    loggers.update({n: lg for n, lg in logging.Logger.manager.loggerDict.items() if isinstance(lg, logging.Logger)})
    return {n: (lg.level, tuple(h for h in lg.handlers if not type(h).__module__.startswith("_pytest")),
                lg.propagate, lg.disabled) for n, lg in loggers.items()}


def global_state() -> dict[str, Any]:
    """What a library call must leave as it found it."""
    import matplotlib

    return {
        "backend": matplotlib.get_backend(),
        "rcParams": copy.deepcopy(dict(matplotlib.rcParams)),
        "environ": dict(os.environ),
        "cwd": os.getcwd(),
        "cwd_files": sorted(os.listdir(os.getcwd())),
        "logging": _logging(),
        "warnings": list(warnings.filters),
        "numpy_err": np.geterr(),
        "signals": _signals(),
        "sys_path": list(sys.path),
        "open_figures": _open_figures(),
    }


def _open_figures() -> list[int]:
    """The figures pyplot holds, if pyplot was imported (importing it here would change state)."""
    plt = sys.modules.get("matplotlib.pyplot")
    return [] if plt is None else list(plt.get_fignums())


def plan_simulate_report() -> tuple[Any, Any, str]:
    """Plan a shipped example, simulate its peak hour and build the HTML report (charts included)."""
    from fleetplan.rendering.html import page

    plan = fleetplan.plan(EXAMPLES / "seed-chat-70b.yaml")
    sim = fleetplan.simulate(plan, requests=2000)
    html = page(plan.to_dict(), None, "seed")
    return plan, sim, html


@pytest.fixture
def settled(monkeypatch, tmp_path):
    """A working directory of its own, and the modules the calls use imported (an import may set
    its own defaults once; a call must change nothing, the first one included)."""
    import importlib

    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_svg", "pyomo.environ", "highspy",
                 "fleetplan.commands.api", "fleetplan.rendering.html", "fleetplan.rendering.charts", "fleetplan.optimizer.plan",
                 "fleetplan.optimizer.simulation.verify", "fleetplan.optimizer.simulation.simulate_plan"):
        importlib.import_module(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("x", encoding="utf-8")
    return tmp_path


def test_the_library_writes_nothing_and_changes_no_global_state(settled, capfd):
    capfd.readouterr()
    before = global_state()
    plan, sim, html = plan_simulate_report()
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    after = global_state()
    # a logger made by a module imported on first use is new, not changed: compare the ones there were
    after["logging"] = {n: v for n, v in after["logging"].items() if n in before["logging"] or v[:2] != (0, ())}
    assert {k: v for k, v in after.items() if before[k] != v} == {}
    # and the calls did their work
    assert plan.monthly_cost_usd > 0 and sim.to_dict()["products"] and "<svg" in html


def test_the_check_catches_a_print_and_a_changed_setting(settled, capfd, monkeypatch):
    """The assertions above can fail: a print, a write to file descriptor 2 and a changed
    matplotlib setting are each seen."""
    import matplotlib

    capfd.readouterr()
    print("x")
    os.write(2, b"y")
    assert capfd.readouterr() == ("x\n", "y")
    before = global_state()
    with matplotlib.rc_context():
        matplotlib.rcParams["font.size"] = 99
        changed = global_state()
    assert changed["rcParams"] != before["rcParams"]
    monkeypatch.setenv("FLEETPLAN_SILENCE_PROBE", "1")
    assert global_state()["environ"] != before["environ"]

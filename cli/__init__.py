"""fleetplan: the cheapest GPU fleet (and API share) that serves an LLM workload at a target speed.

Pipeline: ``fleetplan.catalogs`` (data) -> ``fleetplan.models`` (roofline) ->
``fleetplan.optimizer`` (candidates, MIP, solve, results) -> ``fleetplan.main`` (CLI).

The package root is the Python API (:mod:`fleetplan.commands.api`); in three lines::

    import fleetplan
    p = fleetplan.plan("examples/seed-chat-70b.yaml")
    print(p.monthly_cost_usd, p.to_json())

A scenario may be a YAML path, a dict or a :class:`Scenario`; results are immutable and their
``to_json()`` is what the matching command prints with ``--json``. The command line lives in
:mod:`fleetplan.main` (also ``python -m fleetplan``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as a type checker sees them; at run time they load on first use
    from fleetplan.commands.api import Breakeven, Estimate, Plan, Simulation, SweepTable, Validation, breakeven, estimate
    from fleetplan.commands.api import load_catalog, load_scenario, plan, simulate, sweep, validate
    from fleetplan.catalogs.files import InputError
    from fleetplan.catalogs.loader import Catalog
    from fleetplan.optimizer.runtime.deadline import ProgressCallback, ProgressEvent
    from fleetplan.optimizer.traffic.scenario import Scenario

__version__ = "0.1.0"

__all__ = [
    "Breakeven", "Catalog", "Estimate", "InputError", "Plan", "ProgressCallback", "ProgressEvent", "Scenario",
    "Simulation", "SweepTable",
    "Validation", "__version__", "breakeven", "estimate", "load_catalog", "load_scenario", "plan", "simulate", "sweep",
    "validate",
]

# Where each exported name lives. They load on first use, so the command line (which imports
# this package first) does not pay for pydantic and the solver libraries before it needs them.
_HOMES = {
    **dict.fromkeys(("Breakeven", "Estimate", "Plan", "Simulation", "SweepTable", "Validation", "breakeven",
                     "estimate", "load_catalog", "load_scenario", "plan", "simulate", "sweep", "validate"),
                    "fleetplan.commands.api"),
    "Catalog": "fleetplan.catalogs.loader", "InputError": "fleetplan.catalogs.loader",
    "Scenario": "fleetplan.optimizer.traffic.scenario",
    "ProgressCallback": "fleetplan.optimizer.runtime.deadline", "ProgressEvent": "fleetplan.optimizer.runtime.deadline",
}


def __getattr__(name: str) -> Any:
    """An exported name, imported from its module on first use (PEP 562)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'fleetplan' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names with the exported ones, for completion in a notebook."""
    return sorted({*globals(), *__all__})

"""Shared fixtures: the shipped catalog (loaded once), paths, and each shipped example's plan
(made once per test session, as the CLI makes it, for every test that reads it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from fleetplan.catalogs import Catalog, load_catalog

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="session")
def examples() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def example_plan(catalog: Catalog) -> Callable[[str], Any]:
    """``example_plan("seed-chat-70b.yaml")``: that example's plan, with runner-ups, as the CLI
    makes it; each example is planned once per session."""
    from fleetplan.optimizer.plan import make_plan
    from fleetplan.optimizer.traffic.scenario import load_scenario

    cache: dict[str, Any] = {}

    def plan_of(name: str) -> Any:
        if name not in cache:
            scenario, folder = load_scenario(EXAMPLES / name)
            own = load_catalog([folder / c for c in scenario.catalogs]) if scenario.catalogs else catalog
            cache[name] = make_plan(scenario, own, folder=folder)
        return cache[name]

    return plan_of

"""Shared fixtures: the shipped catalog (loaded once) and paths."""

from __future__ import annotations

from pathlib import Path

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

"""Each constraint family of the MIP, pinned: its rows for a small problem that has every
family (``tests/data/families.json``, rewritten by ``python tests/data/make_references.py``),
and a few rows checked by hand against the problem's own numbers."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from pyomo.core import ConcreteModel, Constraint

from fleetplan.catalogs import load_catalog
from fleetplan.models.presets import get_preset
from fleetplan.optimizer.mip.formulation import FAMILIES, build_model, define_variables
from fleetplan.optimizer.mip.linear import to_linear_problem
from fleetplan.optimizer.problem_data.problem import build_problem
from fleetplan.optimizer.traffic.scenario import parse_scenario

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
import make_references  # noqa: E402

GOLDEN = json.loads(make_references.FAMILIES.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def small():
    scenario = parse_scenario(make_references.SMALL, "small")
    prob, _, _ = build_problem(scenario, load_catalog(), get_preset("default"))
    return prob, to_linear_problem(build_model(prob))


@pytest.fixture(scope="module")
def now():
    return make_references.family_rows()


@pytest.mark.parametrize("family", sorted(GOLDEN))
def test_family_rows_equal_the_reference(now, family):
    assert now.get(family) == GOLDEN[family]


def test_every_family_function_adds_rows(small):
    """Each define_* of FAMILIES, applied in order, adds constraint rows of its own."""
    prob, _ = small
    m = ConcreteModel()
    define_variables(m, prob)
    for family in FAMILIES:
        before = {c.local_name for c in m.component_objects(Constraint)}
        family(m, prob)
        added = [c for c in m.component_objects(Constraint) if c.local_name not in before]
        if family.__name__ in ("declare_instances", "declare_mix_shares", "define_objective"):
            assert not added
            continue
        assert added and all(len(c) for c in added), family.__name__
    assert sorted(GOLDEN) == sorted(c.local_name for c in m.component_objects(Constraint))


def at_least(lp, family, entity):
    """The row ``entity`` of ``family`` read as ``sum coef x >= rhs``: (rhs, coefs by column name)."""
    (i,) = [i for i, n in enumerate(lp.row_names) if lp.row_families[i] == family and n.startswith(f"{entity}-")]
    coefs = {lp.col_names[j]: v for j, v in zip(lp.row_index[i], lp.row_value[i])}
    if math.isfinite(lp.row_lower[i]):
        return lp.row_lower[i], coefs
    return -lp.row_upper[i], {k: -v for k, v in coefs.items()}


def test_demand_rows_by_hand(small):
    prob, lp = small
    rag = prob.products["rag"]
    (c,) = rag.candidates
    d = rag.demand_tokens_per_s[0]
    assert d == 5 * 200
    rhs, coefs = at_least(lp, "configuration_meets_demand", f"{c.key}/0")
    # without an API: whole replicas, ceil(demand / usable) of them when chosen
    assert rhs == 0 and coefs[f"use[{c.key}]"] == -math.ceil(d / c.usable_tokens_per_s)
    assert coefs[f"on_demand[{c.key}/0]"] == coefs[f"reserved[{c.key}]"] == coefs[f"spot[{c.key}/0]"] == 1
    chat = prob.products["chat"]
    rhs, coefs = at_least(lp, "throughput_meets_demand", "chat/0")
    assert rhs == pytest.approx(20 * 300) and coefs["api[chat/0]"] == 1
    for k in chat.candidates:
        assert coefs[f"on_demand[{k.key}/0]"] == pytest.approx(k.usable_tokens_per_s)


def test_limit_rows_by_hand(small):
    prob, lp = small
    rhs, coefs = at_least(lp, "whole_instances", "h100-sxm/0")
    assert rhs == 0 and coefs["instances[h100-sxm/0]"] == 8
    for c in prob.all_candidates():
        assert coefs[f"spot[{c.key}/0]"] == -c.gpus_per_replica
    rhs, coefs = at_least(lp, "gpu_tier_availability", "h100-sxm/spot/0")
    assert rhs == -8 and all(name.startswith(("spot[", "pool_spot[")) and v == -1 for name, v in coefs.items())
    rhs, coefs = at_least(lp, "spot_share_limit", "chat")
    for c in prob.products["chat"].candidates:  # spot <= 0.2 x all replicas
        assert coefs[f"spot[{c.key}/0]"] == pytest.approx(-(1 - 0.2))
        assert coefs[f"on_demand[{c.key}/0]"] == pytest.approx(0.2)

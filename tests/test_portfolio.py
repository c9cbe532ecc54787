"""Portfolios: shared availability, whole instances, budget and pooling, against brute force."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetplan.optimizer.candidates import generate_candidates
from fleetplan.models.presets import get_preset
from fleetplan.optimizer.plan import InfeasibleError, coupled_components, build_problem, make_plan
from fleetplan.optimizer.results import check_invariants, plan_to_dict
from fleetplan.optimizer.scenario import load_scenario, parse_scenario


def test_portfolio_3_joint_beats_first_come(catalog, examples):
    scenario, folder = load_scenario(examples / "portfolio-3.yaml")
    plan = make_plan(scenario, catalog, folder=folder, alternatives=False)
    d = plan_to_dict(plan)
    assert check_invariants(plan) == []
    assert d["gpu_usage"]["h100-sxm"]["gpus"] <= 64
    assert d["components"] == [["chat", "rag", "code"]]
    assert d["first_come_monthly_cost_usd"] is not None
    assert d["monthly_cost_usd"] < d["first_come_monthly_cost_usd"]
    assert sum(p["monthly_cost_usd"] for p in d["products"]) == pytest.approx(d["monthly_cost_usd"], abs=0.05)
    for u in d["gpu_usage"].values():  # whole 8-GPU instances
        assert u["instances"] * 8 >= u["gpus"] and u["stranded_gpus"] == u["instances"] * 8 - u["gpus"]


def test_independent_products_are_separate_components(catalog):
    raw = {
        "products": [
            {"name": "a", "model": "llama-3.1-8b", "peak_qps": 5, "input_tokens": 500, "output_tokens": 200},
            {"name": "b", "model": "qwen3-32b", "peak_qps": 5, "input_tokens": 500, "output_tokens": 200},
        ],
        "options": {"gpus": ["h100-sxm", "l40s"]},
        "limits": {"gpu_availability": {"l40s": 4}},
    }
    prob, _, _ = build_problem(parse_scenario(raw, "s"), catalog, get_preset("default"))
    comps = coupled_components(prob)
    users = [n for n in ("a", "b") if any(c.gpu == "l40s" for c in prob.products[n].candidates)]
    assert len(comps) == (1 if len(users) == 2 else 2)
    raw["limits"] = {"monthly_budget_usd": 1e9}
    prob, _, _ = build_problem(parse_scenario(raw, "s"), catalog, get_preset("default"))
    assert coupled_components(prob) == [["a", "b"]]


def test_budget_limit(catalog, examples):
    scenario, folder = load_scenario(examples / "portfolio-3.yaml")
    free = make_plan(scenario, catalog, folder=folder, alternatives=False, compare_first_come=False).monthly_cost_usd
    raw = scenario.model_dump(mode="python")
    raw["limits"]["monthly_budget_usd"] = free - 1000
    with pytest.raises(InfeasibleError, match=r"monthly_budget_usd: infeasible: .* over the budget"):
        make_plan(parse_scenario(raw, "s"), catalog, folder=folder, alternatives=False)
    raw["limits"]["monthly_budget_usd"] = free + 1000
    plan = make_plan(parse_scenario(raw, "s"), catalog, folder=folder, alternatives=False)
    assert plan.monthly_cost_usd == pytest.approx(free) and check_invariants(plan) == []


def test_pooling_needs_fewer_gpus(catalog, examples):
    scenario, folder = load_scenario(examples / "pooling-2chat.yaml")
    plan = make_plan(scenario, catalog, folder=folder, alternatives=False)
    d = plan_to_dict(plan)
    assert d["pooling"]["chosen"] == "pooled"
    (pool,) = d["pools"]
    assert pool["products"] == ["consumer-chat", "internal-assistant"]
    assert pool["gpus"] < pool["separate_gpus"]
    assert pool["monthly_cost_usd"] < pool["separate_monthly_cost_usd"]
    assert sum(p["monthly_cost_usd"] for p in d["products"]) == pytest.approx(d["monthly_cost_usd"], abs=0.05)
    assert pool["per_user_tokens_per_s"] >= 25  # the strictest target of the pooled products
    assert check_invariants(plan) == []


def brute_force(catalog, scenario) -> float:
    """Cheapest pair of configurations with each product's fewest replicas, within availability,
    with whole 8-GPU instances charged per GPU type."""
    preset = get_preset(scenario.preset)
    per_product = []
    for p in scenario.products:
        cs = generate_candidates(p, catalog.models[p.model], catalog, scenario.options, preset, prune=False)
        demand = p.peak_qps * p.output_tokens
        per_product.append([(c, math.ceil(demand / c.usable_tokens_per_s - 1e-9)) for c in cs.candidates])
    avail = scenario.limits.gpu_availability
    n = scenario.limits.gpus_per_instance
    best = math.inf
    for combo in itertools.product(*per_product):
        used: dict[str, int] = {}
        cost = 0.0
        for c, r in combo:
            used[c.gpu] = used.get(c.gpu, 0) + r * c.tp
            cost += r * c.monthly_cost_per_replica_usd
        if any(used.get(g, 0) > a for g, a in avail.items()):
            continue
        for g, u in used.items():
            k = n(g)
            if k:
                price = next(c.price.usd_per_gpu_hour for c, _ in combo if c.gpu == g)
                cost += (math.ceil(u / k) * k - u) * price * preset.hours_per_month
        best = min(best, cost)
    return best


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    qps=st.lists(st.floats(1, 60), min_size=2, max_size=2),
    models=st.lists(st.sampled_from(["llama-3.1-8b", "llama-3.1-70b", "qwen3-32b"]), min_size=2, max_size=2),
    avail=st.integers(0, 40),
    instances=st.sampled_from([None, 4, 8]),
    batches=st.lists(st.integers(8, 160), min_size=1, max_size=3, unique=True),
)
def test_joint_optimum_equals_brute_force(catalog, qps, models, avail, instances, batches):
    raw = {
        "preset": "seed",
        "products": [
            {"name": f"p{i}", "model": m, "precision": "fp8", "peak_qps": q, "input_tokens": 1000, "output_tokens": 300,
             "min_tokens_per_s_per_user": 20}
            for i, (m, q) in enumerate(zip(models, qps))
        ],
        "options": {"gpus": ["h100-sxm", "a100-sxm-80gb"], "tp": [1, 2, 4], "batch": batches},
        "limits": {"gpu_availability": {"h100-sxm": avail}, "instance_gpus": instances},
    }
    scenario = parse_scenario(raw, "random")
    expected = brute_force(catalog, scenario)
    if math.isinf(expected):
        with pytest.raises(InfeasibleError):
            make_plan(scenario, catalog, alternatives=False, compare_first_come=False)
        return
    plan = make_plan(scenario, catalog, alternatives=False, compare_first_come=False)
    assert plan.monthly_cost_usd == pytest.approx(expected, rel=1e-6)
    assert check_invariants(plan) == []

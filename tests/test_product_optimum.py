"""A product's optimum without a solver (``optimizer/decomposition/product_optimum.py``): equal to the searched
MIP optimum over every choice and per decode GPU type, its GPUs for certain never above a plan's,
and the group bounds built on it below the joint MIP's optimum with pools in play."""

from __future__ import annotations

import json
import math

import pytest

from fleetplan.models.presets import get_preset
from fleetplan.optimizer.decomposition import portfolio
from fleetplan.optimizer.decomposition.components import solve_component
from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.problem_data.problem import build_problem
from fleetplan.optimizer.decomposition.product_optimum import best_pool, exact_by_rule, optima_by_types, own_optimum
from fleetplan.optimizer.traffic.scenario import parse_scenario
from fleetplan.optimizer.decomposition.search import solve_by_configuration

PROFILE = "profiles/peak-hour-day.csv"
RAG = {"model": "llama-3.1-8b", "precision": "fp8", "input_tokens": 6000, "output_tokens": 300,
       "min_tokens_per_s_per_user": 20, "prefill": "auto", "demand_profile": PROFILE}
CHAT = {"model": "qwen3-32b", "precision": "fp8", "input_tokens": 1500, "output_tokens": 250,
        "min_tokens_per_s_per_user": 30, "prefill": "auto", "demand_profile": PROFILE}
OPTIONS = {"gpus": ["h100-sxm", "mi300x"], "tp": [1], "tiers": ["reserved", "on_demand", "spot"],
           "spot_max_share": 0.25}
PRODUCTS = [{**RAG, "name": "rag", "peak_qps": 7}, {**CHAT, "name": "chat", "peak_qps": 5}]


@pytest.fixture(scope="module")
def prob(catalog, examples):
    scenario = parse_scenario({"products": PRODUCTS, "options": OPTIONS, "limits": {"instance_gpus": 8}}, "s")
    problem, _, _ = build_problem(scenario, catalog, get_preset(scenario.preset), examples)
    return problem


def _searched(prob, name: str, gpu: str | None = None) -> float:
    """The product's MIP optimum on its own (decode on ``gpu`` when given), proven to 1e-7."""
    alone = prob.restrict([name], limits=False)
    keep = None if gpu is None else (lambda c: c.gpu == gpu)
    found = solve_by_configuration(alone, name, "highs", keep=keep, deadline=Deadline.after(60), mip_rel_gap=1e-7)
    assert found is not None and found[0].optimal
    return float(found[0].objective)


@pytest.mark.parametrize("name", ["rag", "chat"])
def test_own_optimum_is_the_searched_optimum(prob, name):
    alone = prob.restrict([name], limits=False)
    assert exact_by_rule(alone, alone.products[name])
    assert any(k for k in alone.products[name].pool)  # pools are in play
    best = own_optimum(alone, name)
    assert best is not None
    assert best.cost_usd == pytest.approx(_searched(prob, name), rel=1e-7)
    # its choice read back as a rule plan costs the same
    plan = portfolio.rule_plan(alone, alone.products[name], best.choice)
    assert plan is not None and plan.cost_usd == pytest.approx(best.cost_usd, rel=1e-12)
    if best.pool_gpu is not None:
        assert best.choice[1] == best_pool(alone, alone.products[name])


def test_optimum_per_decode_type_is_the_searched_one_and_its_gpus_are_certain(prob):
    alone = prob.restrict(["rag"], limits=False)
    optima = optima_by_types(alone, "rag")
    for gpu in sorted({o.decode_gpu for o in optima}):
        there = [o for o in optima if o.decode_gpu == gpu]
        assert min(o.cost_usd for o in there) == pytest.approx(_searched(prob, "rag", gpu), rel=1e-7)
    for o in optima:
        plan = portfolio.rule_plan(alone, alone.products["rag"], o.choice)
        assert plan is not None and plan.cost_usd == pytest.approx(o.cost_usd, rel=1e-12)
        used = dict(plan.gpus(alone.hours))
        for g, row in o.certain_gpus:
            assert all(a <= b for a, b in zip(row, used[g]))
        assert all(a <= b for a, b in zip(o.decode_gpus, used[o.decode_gpu]))


def test_no_exact_optimum_with_an_api(catalog, examples):
    api = {**PRODUCTS[0], "api": {"model": "llama-3.1-8b", "max_fraction": 0.5}}
    scenario = parse_scenario({"products": [api], "options": OPTIONS}, "s")
    problem, _, _ = build_problem(scenario, catalog, get_preset(scenario.preset), examples)
    assert own_optimum(problem, "rag") is None


def test_bounds_with_pools_are_below_the_joint_optimum(prob):
    names = list(prob.products)
    _, _, _, res, _ = solve_component((prob, names, "highs", Deadline.after(120), 1e-7))
    assert res is not None and res.optimal
    joint = float(res.objective)
    bound = portfolio.instance_bound(prob, names, "highs", Deadline.after(60), 1e-7)
    assert 0 < bound <= joint * (1 + 1e-9)
    outcomes, group_bound = portfolio.plan_group(prob, names, "highs", Deadline.after(120), 1e-6)
    assert group_bound.lower_usd <= joint * (1 + 1e-9)
    # each product's own optimum is proven without a solver, so the bound is at least their sum,
    # and the products alone cost exactly that
    own = sum(own_optimum(prob.restrict([n], limits=False), n).cost_usd for n in names)
    assert group_bound.lower_usd >= own * (1 - 1e-9)
    assert group_bound.alone_usd == pytest.approx(own, rel=1e-9)
    cost = portfolio.group_cost(prob, {n: (o[3], o[1], o[4]) for n, o in zip(names, outcomes)})
    assert joint * (1 - 1e-9) <= cost and not math.isinf(cost)


def test_decomposed_plan_with_pools_is_a_plan_of_the_joint_problem_and_repeats(catalog, examples, prob, monkeypatch):
    from fleetplan.optimizer.decomposition import components
    from fleetplan.optimizer.plan import make_plan
    from fleetplan.optimizer.explanation.results import plan_to_dict
    from fleetplan.optimizer.mip.solution import gpu_hours

    monkeypatch.setattr(components, "JOINT_MAX_COLUMNS", 0)  # plan the group product by product
    scenario = parse_scenario({"products": PRODUCTS, "options": OPTIONS, "limits": {"instance_gpus": 8}}, "s")
    plan = make_plan(scenario, catalog, folder=examples, alternatives=False)
    assert plan.components == [["rag", "chat"]]
    # idle instance GPUs recomputed from every replica, decode and pool, at the plain price
    used = gpu_hours(plan.products, prob.hours)
    price = {g: pp.gpu_prices()[g] for pp in plan.products for g in pp.gpu_prices()}
    idle = sum(price[g] * prob.hour_weight * (math.ceil(n / 8) * 8 - n) for g, row in used.items() for n in row)
    assert sum(pp.stranded_usd for pp in plan.products) == pytest.approx(idle, rel=1e-9, abs=1e-6)
    assert plan.monthly_cost_usd == pytest.approx(sum(pp.monthly_cost_usd for pp in plan.products))
    # the plan costs at least the sum of the products' own optima, and its gap is against a bound
    # at least that sum
    own = sum(own_optimum(prob.restrict([n], limits=False), n).cost_usd for n in ["rag", "chat"])
    gap = plan.solve_result.mip_gap
    assert plan.monthly_cost_usd >= own * (1 - 1e-9)
    assert gap is not None and 0 <= gap <= (plan.monthly_cost_usd - own) / plan.monthly_cost_usd + 1e-9
    again = make_plan(scenario, catalog, folder=examples, alternatives=False)
    assert json.dumps(plan_to_dict(plan), sort_keys=True) == json.dumps(plan_to_dict(again), sort_keys=True)

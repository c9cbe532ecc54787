"""Coupled groups planned product by product (``optimizer/portfolio.py``): the instance bound and
the group's bound stay below the joint MIP's optimum, the plan is a plan of the joint problem
(instances and availability recomputed from its replicas), the tier split without a solver is the
cheapest one, the type search moves products onto shared instances, and plans repeat exactly."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fleetplan.models.presets import get_preset
from fleetplan.optimizer import components, portfolio
from fleetplan.optimizer.deadline import Deadline
from fleetplan.optimizer.components import solve_component
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.problem import build_problem
from fleetplan.optimizer.solution import extract, gpu_hours
from fleetplan.optimizer.results import plan_to_dict
from fleetplan.optimizer.scenario import parse_scenario

PROFILE = "profiles/peak-hour-day.csv"
SMALL = {"model": "llama-3.1-8b", "precision": "fp8", "input_tokens": 1000, "output_tokens": 300,
         "min_tokens_per_s_per_user": 20, "prefill": "colocated", "demand_profile": PROFILE}
MID = {"model": "qwen3-32b", "precision": "fp8", "input_tokens": 2000, "output_tokens": 250,
       "min_tokens_per_s_per_user": 30, "prefill": "colocated", "demand_profile": PROFILE}
OPTIONS = {"gpus": ["h100-sxm", "l40s", "a100-sxm-80gb"], "tp": [1, 2], "tiers": ["reserved", "on_demand", "spot"],
           "spot_max_share": 0.25}
CASES = {
    # three small products that each fill a fraction of an 8-GPU instance; H100s are scarce
    "three-small": ([{**SMALL, "name": "a", "peak_qps": 6}, {**SMALL, "name": "b", "peak_qps": 9},
                     {**MID, "name": "c", "peak_qps": 5}],
                    {"instance_gpus": 8, "gpu_availability": {"h100-sxm": 8}}),
    # one product may send up to half its tokens to an API
    "with-api": ([{**SMALL, "name": "a", "peak_qps": 7, "api": {"model": "llama-3.1-8b", "max_fraction": 0.5}},
                  {**MID, "name": "c", "peak_qps": 4}],
                 {"instance_gpus": 8}),
}


# How far above the joint optimum the plan may be: the API product of "with-api" is planned on
# its own with much of its demand on the API, where the joint optimum serves it on idle GPUs.
# how far above the joint optimum the group search may land on each small case (measured on the
# model fitted to silicon-train.csv with per-sequence host work: 15.9% and 31.8%; 0.1% and 16.0%
# on the model before)
WITHIN = {"three-small": 0.17, "with-api": 0.33}


def _problem(catalog, examples, case: str):
    products, limits = CASES[case]
    scenario = parse_scenario({"products": products, "options": OPTIONS, "limits": limits}, "s")
    prob, _, _ = build_problem(scenario, catalog, get_preset(scenario.preset), examples)
    return scenario, prob


def _joint_optimum(prob) -> float:
    """The group solved as one MIP (HiGHS), proven optimal."""
    _, _, _, res, _ = solve_component((prob, list(prob.products), "highs", Deadline.after(120), 1e-7))
    assert res is not None and res.optimal
    return float(res.objective)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bounds_are_below_the_joint_optimum_and_the_plan_above(catalog, examples, case):
    _, prob = _problem(catalog, examples, case)
    names = list(prob.products)
    joint = _joint_optimum(prob)
    bound = portfolio.instance_bound(prob, names, "highs", Deadline.after(60), 1e-7)
    assert 0 < bound <= joint * (1 + 1e-9)
    outcomes, group_bound = portfolio.plan_group(prob, names, "highs", Deadline.after(120), 1e-6)
    assert group_bound.lower_usd <= joint * (1 + 1e-9)
    plans = {n: (o[3], o[1], o[4]) for n, o in zip(names, outcomes)}
    cost = portfolio.group_cost(prob, plans)
    # the products alone cost no more than the plans chosen together, and those, idle instance GPUs
    # left out, no more than the plan
    rules = sum(min(float(portfolio.rule_found(prob, r)[0].objective) for r in portfolio.rule_plans_by_type(prob, n).values())
                for n in names)
    assert group_bound.alone_usd <= rules * (1 + 1e-9)
    assert group_bound.alone_usd <= group_bound.chosen_usd * (1 + 1e-9) <= cost * (1 + 1e-9)
    # a plan of the joint problem costs at least its optimum (idle instance GPUs are in its cost),
    # and not much more: idle GPUs run spot replicas, as the joint optimum runs them
    assert joint * (1 - 1e-9) <= cost <= joint * (1 + WITHIN[case])


def test_decomposed_plan_keeps_instances_and_availability(catalog, examples, monkeypatch):
    monkeypatch.setattr(components, "JOINT_MAX_COLUMNS", 0)  # plan the group product by product
    scenario, prob = _problem(catalog, examples, "three-small")
    plan = make_plan(scenario, catalog, folder=examples, alternatives=False)
    assert plan.components == [["a", "b", "c"]]
    used = gpu_hours(plan.products, prob.hours)
    assert max(used.get("h100-sxm", [0])) <= 8
    # stranded cost recomputed from the replicas: whole instances per GPU type and hour
    price = {g: pp.gpu_prices()[g] for pp in plan.products for g in pp.gpu_prices()}
    idle = sum(price[g] * prob.hour_weight * (math.ceil(n / 8) * 8 - n) for g, row in used.items() for n in row)
    assert sum(pp.stranded_usd for pp in plan.products) == pytest.approx(idle, rel=1e-9)
    assert plan.monthly_cost_usd == pytest.approx(sum(pp.monthly_cost_usd for pp in plan.products))
    # never worse than every product on its own cheapest plan, idle GPUs included
    joint = _joint_optimum(prob.restrict(["a", "b", "c"]))
    assert joint * (1 - 1e-9) <= plan.monthly_cost_usd
    gap = plan.solve_result.mip_gap
    assert gap is not None and 0 <= gap < 1
    # where the gap lies: the parts add up to the plan's cost, the bound gives the gap, and the idle
    # instance GPUs cost at least the stranded GPUs left idle (plus the spot replicas run on the others)
    parts = plan.gap_breakdown_usd
    assert parts is not None
    assert parts["products_alone"] + parts["gpu_types_shared"] + parts["idle_instance_gpus"] == pytest.approx(
        plan.monthly_cost_usd, rel=1e-9)
    assert gap == pytest.approx(max(0.0, 1 - parts["lower_bound"] / plan.monthly_cost_usd), abs=1e-9)
    assert parts["gpu_types_shared"] >= -1e-6
    assert parts["idle_instance_gpus"] >= sum(pp.stranded_usd for pp in plan.products) - 1e-6
    assert parts["lower_bound"] <= joint * (1 + 1e-9)
    assert plan.solve_result.status == ("optimal" if gap <= scenario.options.mip_rel_gap else "time_limit")


def test_decomposed_plan_is_the_same_twice(catalog, examples, monkeypatch):
    monkeypatch.setattr(components, "JOINT_MAX_COLUMNS", 0)
    scenario, _ = _problem(catalog, examples, "with-api")
    first, second = (json.dumps(plan_to_dict(make_plan(scenario, catalog, folder=examples, alternatives=False)),
                                sort_keys=True) for _ in range(2))
    assert first == second


def _brute_split(need: list[int], prices: dict[str, float], share: float) -> float:
    """Cheapest tier split by enumeration: a reserved level, then any number of spot replica-hours
    within the share of all replica-hours (the rest on demand)."""
    best = math.inf
    for held in range(max(need) + 2):
        excess = sum(max(0, n - held) for n in need)
        in_use = sum(max(n, held) for n in need)
        for spot in range(excess + 1):
            if spot <= share * in_use + 1e-9:
                cost = held * prices["reserved"] * 730 + (spot * prices["spot"] + (excess - spot) * prices["on_demand"]) * 10
                best = min(best, cost)
    return best


@pytest.mark.parametrize("need", [[0, 1, 3, 2], [4, 4, 4, 4], [1, 6, 0, 2, 5], [2, 3, 9, 1, 1, 8]])
def test_tier_split_is_the_cheapest(need):
    prices = {"reserved": 2.1, "on_demand": 3.0, "spot": 1.5}
    split = portfolio.split_by_tier(np.array(need), prices, 730.0, 10.0, 0.25)
    assert split is not None
    assert split.cost_usd == pytest.approx(_brute_split(need, prices, 0.25), rel=1e-12)
    assert all(split.running(h) >= n for h, n in enumerate(need))
    assert sum(split.spot) <= 0.25 * sum(split.running(h) for h in range(len(need))) + 1e-9
    # without a spot tier the same rule is reserved versus on demand only
    plain = portfolio.split_by_tier(np.array(need), {"reserved": 2.1, "on_demand": 3.0}, 730.0, 10.0, None)
    assert plain is not None and sum(plain.spot) == 0


def test_type_choice_shares_instances(catalog, examples):
    _, prob = _problem(catalog, examples, "three-small")
    hours = prob.hours
    one = tuple([1] * hours)
    # each product is $10 cheaper on its own type, but one GPU an hour strands seven of an instance
    options = {
        "a": [portfolio.Option("a", "l40s", 100.0, (("l40s", one),)), portfolio.Option("a", "h100-sxm", 110.0, (("h100-sxm", one),))],
        "b": [portfolio.Option("b", "h100-sxm", 100.0, (("h100-sxm", one),)), portfolio.Option("b", "l40s", 110.0, (("l40s", one),))],
    }
    state = portfolio.TypeChoice(prob, options, portfolio.plain_prices(prob))
    before = state.total()
    state.improve()
    chosen = {n: options[n][i].gpu for n, i in state.chosen.items()}
    assert len(set(chosen.values())) == 1
    price = portfolio.plain_prices(prob)[next(iter(set(chosen.values())))]
    assert state.total() == pytest.approx(210.0 + price * 8 * prob.hour_weight * hours)
    assert state.total() < before


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_plans_read_back_as_plans_that_meet_demand(catalog, examples, case):
    _, prob = _problem(catalog, examples, case)
    for name, pd in prob.products.items():
        for gpu, rule in portfolio.rule_plans_by_type(prob, name).items():
            found = portfolio.rule_found(prob, rule)
            assert portfolio.plan_gpu_type(found, name) == gpu
            assert dict(portfolio.plan_gpus(found, name)) == dict(rule.gpus(prob.hours))
            pp = extract(found[1], found[0], found[2], parse_scenario(
                {"products": [p for p in CASES[case][0] if p["name"] == name]}, "s").products)[0]
            assert pp.monthly_cost_usd == pytest.approx(rule.cost_usd, rel=1e-9)
            c = pp.candidate
            for h, d in enumerate(pd.demand_tokens_per_s):
                assert pp.replicas_in_hour(h) * c.usable_tokens_per_s + pp.api_tokens_per_s[h] >= d * (1 - 1e-12)
                assert pp.spot[h] <= pd.replica_bound(c, h) and pp.on_demand[h] <= pd.replica_bound(c, h)
            assert sum(pp.api_tokens_per_s) <= pd.api_max_fraction * sum(pd.demand_tokens_per_s) + 1e-9
            running = sum(pp.replicas_in_hour(h) for h in range(prob.hours))
            assert sum(pp.spot) <= prob.spot_max_share * running + 1e-9
    if case == "with-api":  # the API takes some hours' last replica on some GPU type
        assert any(any(r.api_tokens_per_s) for r in portfolio.rule_plans_by_type(prob, "a").values())

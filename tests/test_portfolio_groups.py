"""Coupled groups planned product by product (``optimizer/decomposition/portfolio.py``): the instance bound and
the group's bound stay below the joint MIP's optimum, the plan is a plan of the joint problem
(instances and availability recomputed from its replicas), the tier split without a solver is the
cheapest one, the type search moves products onto shared instances, and plans repeat exactly."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fleetplan.models.presets import get_preset
from fleetplan.optimizer.decomposition import components, portfolio
from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.decomposition.components import solve_component
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.problem_data.problem import build_problem
from fleetplan.optimizer.mip.solution import extract, gpu_hours
from fleetplan.optimizer.explanation.results import plan_to_dict
from fleetplan.optimizer.traffic.scenario import parse_scenario

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


# How far above the joint optimum the group search may land on each small case. Measured
# 2026-12-03: 3.6% and 6.7% with each product planned again with the others' GPUs in its
# instances (15.9% and 31.8% before: the API product of "with-api" was planned on its own with
# much of its demand on the API, where the joint optimum serves it on idle GPUs).
WITHIN = {"three-small": 0.04, "with-api": 0.07}


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
    # the products alone cost no more than their rule plans, nor than their plans in the group
    rules = sum(min(float(portfolio.rule_found(prob, r)[0].objective) for r in portfolio.rule_plans_by_type(prob, n).values())
                for n in names)
    assert group_bound.alone_usd <= rules * (1 + 1e-9)
    assert group_bound.alone_usd <= sum(float(p[0].objective) for p in plans.values()) * (1 + 1e-9)
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
    # where the gap lies: the parts add up to the plan's cost, the bound gives the gap, the idle
    # instance GPUs are the stranded ones recomputed above, and sharing instances costs >= 0
    parts = plan.gap_breakdown_usd
    assert parts is not None
    assert parts["products_alone"] + parts["sharing_instances"] + parts["idle_instance_gpus"] == pytest.approx(
        plan.monthly_cost_usd, rel=1e-9)
    assert gap == pytest.approx(max(0.0, 1 - parts["lower_bound"] / plan.monthly_cost_usd), abs=1e-9)
    assert parts["idle_instance_gpus"] == pytest.approx(idle, rel=1e-9)
    assert parts["sharing_instances"] >= -1e-6
    assert parts["lower_bound"] <= joint * (1 + 1e-9)
    # the table and the report's summary say the same, in dollars a user can add up
    import io

    from rich.console import Console

    from fleetplan.rendering.html import summary
    from fleetplan.rendering.tables import print_plan

    d = plan_to_dict(plan)
    console = Console(width=400, record=True, highlight=False, file=io.StringIO())
    print_plan(d, console)
    said = f"lower bound ${d['gap_breakdown_usd']['lower_bound']:,.0f} per month; each product planned alone " \
           f"${d['gap_breakdown_usd']['products_alone']:,.0f}"
    assert gap > 0 and said in console.export_text()
    assert 'id="gap-split"' in summary(d) and said in summary(d)
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


def _joint_lp_start(prob, plans):
    """The joint MIP of ``prob`` (every configuration) and the group's plans as its columns' values."""
    from fleetplan.optimizer.mip.formulation import build_model
    from fleetplan.optimizer.mip.linear import to_linear_problem

    lp = to_linear_problem(build_model(prob))
    start = {k: v for res, sub_lp, _ in plans.values() for k, v in zip(sub_lp.col_keys, res.values)}
    usage = {}
    for n, f in plans.items():
        for g, row in portfolio.plan_gpus(f, n).items():
            usage[g] = usage.get(g, np.zeros(prob.hours)) + np.asarray(row, dtype=float)
    for g, row in usage.items():
        for h, n in enumerate(row):
            start[("instances", (g, h))] = math.ceil(n / prob.instance_gpus[g] - 1e-9)
    return lp, [start.get(k, 0.0) for k in lp.col_keys]


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_product_alone_can_lower_the_groups_cost(catalog, examples, case):
    """Each product was planned again with the others' GPUs in its instances: in the joint MIP with
    every other product's columns fixed at its plan (brute force over the product's configurations,
    every GPU type), the product finds nothing cheaper for the group, and the group's plan, read in
    the joint MIP, costs what :func:`group_cost` says."""
    from fleetplan.optimizer.mip.solvers import solve

    _, prob = _problem(catalog, examples, case)
    names = list(prob.products)
    outcomes, _ = portfolio.plan_group(prob, names, "highs", Deadline.after(120), 1e-6)
    plans = {n: (o[3], o[1], o[4]) for n, o in zip(names, outcomes)}
    cost = portfolio.group_cost(prob, plans)
    lp, x = _joint_lp_start(prob, plans)
    assert lp.objective_constant + float(np.dot(lp.objective, x)) == pytest.approx(cost, rel=1e-9)

    def owner(key):
        first = key[1][0] if key[1] else None
        if isinstance(first, str) and "/" in first:
            return first.split("/")[0]
        return first if first in names else None

    owners = [owner(k) for k in lp.col_keys]
    for name in names:
        lower = [v if o is not None and o != name else lo for v, o, lo in zip(x, owners, lp.col_lower)]
        upper = [v if o is not None and o != name else up for v, o, up in zip(x, owners, lp.col_upper)]
        res = solve(lp.with_bounds(lower, upper), "highs", time_limit_s=60, mip_rel_gap=1e-7, handover=False, start=x)
        assert res.optimal
        assert float(res.objective) >= cost - portfolio.BEST_RESPONSE_SAVING_USD - 1e-6, name


def test_gpus_elsewhere_share_instances_and_their_idle_gpus_are_priced(catalog, examples):
    """A product planned with other products' GPUs in its instances: on a GPU type the product
    cannot use, the others' idle instance GPUs are a constant of its objective (plain price x idle
    GPUs x hour weight, by hand); on H100s, scarce at 8, the 5 the others run leave it 3 in every
    hour."""
    from fleetplan.optimizer.decomposition.search import solve_by_configuration

    _, prob = _problem(catalog, examples, "three-small")
    one = prob.restrict(["a"])
    res, _, _ = solve_by_configuration(one, "a", "highs", mip_rel_gap=1e-9)
    # 13 B200 GPUs elsewhere in the first hour (two instances, 3 idle), 2 in the others (6 idle)
    row = tuple(13 if h == 0 else 2 for h in range(one.hours))
    far = one.derive(gpus_elsewhere={"b200": (10.0, row)}, instance_gpus={**one.instance_gpus, "b200": 8})
    idle = sum(10.0 * one.weight(h) * (3 if h == 0 else 6) for h in range(one.hours))
    far_res, _, _ = solve_by_configuration(far, "a", "highs", mip_rel_gap=1e-9)
    assert float(far_res.objective) == pytest.approx(float(res.objective) + idle, rel=1e-9)
    # 5 H100s elsewhere in every hour
    plain = portfolio.plain_prices(one)
    near = one.derive(gpus_elsewhere={"h100-sxm": (plain["h100-sxm"], (5,) * one.hours)})
    found = solve_by_configuration(near, "a", "highs", mip_rel_gap=1e-9)
    mine = portfolio.plan_gpus(found, "a")
    assert all(5 + n <= 8 for n in mine.get("h100-sxm", (0,) * one.hours))

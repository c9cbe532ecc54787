"""The Lagrangian bound of a coupled group (``optimizer/decomposition/lagrangian.py``): at zero
multipliers it is the sum of the products' own bounds; at any multipliers it stays below the
group's joint MIP optimum (solved whole); where availability binds, the subgradient raises it
above the products' own bounds, and the group planned product by product keeps
bound <= joint optimum <= plan."""

from __future__ import annotations

import numpy as np
import pytest

from fleetplan.models.presets import get_preset
from fleetplan.optimizer.decomposition import components, lagrangian, portfolio
from fleetplan.optimizer.decomposition.components import solve_component
from fleetplan.optimizer.decomposition.product_optimum import exact_by_rule, own_optimum
from fleetplan.optimizer.problem_data.problem import build_problem
from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.traffic.scenario import parse_scenario

MID = {"model": "qwen3-32b", "precision": "fp8", "input_tokens": 2000, "output_tokens": 250,
       "min_tokens_per_s_per_user": 30, "prefill": "colocated", "demand_profile": "profiles/peak-hour-day.csv"}
OPTIONS = {"gpus": ["h100-sxm", "l40s", "a100-sxm-80gb"], "tp": [1, 2], "tiers": ["reserved", "on_demand", "spot"],
           "spot_max_share": 0.25}
# Two products whose own optima both run on H100s, more of them than are available in some hours.
CASES = {
    "scarce-h100": ([{**MID, "name": "c", "peak_qps": 10}, {**MID, "name": "d", "peak_qps": 12}],
                    {"gpu_availability": {"h100-sxm": 4}}),
    "scarce-h100-instances": ([{**MID, "name": "c", "peak_qps": 10}, {**MID, "name": "d", "peak_qps": 12}],
                              {"gpu_availability": {"h100-sxm": 4}, "instance_gpus": 8}),
    "scarce-h100-busier": ([{**MID, "name": "c", "peak_qps": 20}, {**MID, "name": "d", "peak_qps": 25}],
                           {"gpu_availability": {"h100-sxm": 8}}),
    "with-api": ([{**MID, "name": "c", "peak_qps": 20}, {**MID, "name": "d", "peak_qps": 25,
                                                          "api": {"model": "qwen3-32b", "max_fraction": 0.5}}],
                 {"gpu_availability": {"h100-sxm": 8}}),
}
# Measured on these cases (HiGHS, 1e-7): own bounds $6,200.13 / $6,200.13 / $10,310.34; the
# Lagrangian bound $8,480.03 (the joint optimum itself), $8,480.03 (joint $16,541.00 with 8-GPU
# instances, which no Lagrangian bound prices) and $14,539.23 (joint $15,053.08; $14,562.45 and
# $14,845.42 before the physics' bf16 work share).
RAISED = {"scarce-h100": 8480.03, "scarce-h100-instances": 8480.03, "scarce-h100-busier": 14539.23}


def _problem(catalog, examples, case: str):
    products, limits = CASES[case]
    scenario = parse_scenario({"products": products, "options": OPTIONS, "limits": limits}, "s")
    prob, _, _ = build_problem(scenario, catalog, get_preset(scenario.preset), examples)
    return prob


def _joint_optimum(prob) -> float:
    _, _, _, res, _ = solve_component((prob, list(prob.products), "highs", Deadline.after(120), 1e-7))
    assert res is not None and res.optimal
    return float(res.objective)


def _own(prob) -> dict[str, float]:
    """Each product's exact own optimum (every product of these cases without an API)."""
    out = {}
    for n in prob.products:
        best = own_optimum(prob.restrict([n], limits=False), n)
        assert best is not None
        out[n] = best.cost_usd
    return out


@pytest.mark.parametrize("case", sorted(RAISED))
def test_zero_multipliers_give_the_sum_of_own_optima(catalog, examples, case):
    prob = _problem(catalog, examples, case)
    rule = [lagrangian.rule_product(prob, pd) for pd in prob.products.values()]
    zero = {g: np.zeros(prob.hours) for g in prob.gpu_availability}
    value, sub = lagrangian.dual_value(rule, 0.0, zero, dict(prob.gpu_availability), prob.hours)
    assert value == pytest.approx(sum(_own(prob).values()), rel=1e-12)
    # the subgradient is the own optima's H100s less those available: some hour is over
    assert max(sub["h100-sxm"]) > 0


@pytest.mark.parametrize("case", sorted(RAISED))
def test_bound_rises_above_own_optima_and_stays_below_the_joint_optimum(catalog, examples, case):
    prob = _problem(catalog, examples, case)
    own = _own(prob)
    joint = _joint_optimum(prob)
    found = lagrangian.lagrangian_bound(prob, list(prob.products), own, joint, Deadline.after(60))
    assert found.at_zero_usd == pytest.approx(sum(own.values()), rel=1e-12)
    assert sum(own.values()) + 100 < found.bound_usd <= joint * (1 + 1e-9)
    assert found.bound_usd == pytest.approx(RAISED[case], abs=0.01)


@pytest.mark.parametrize("case", sorted(CASES))
def test_any_multipliers_give_a_valid_bound(catalog, examples, case):
    """Weak duality: L(nu) <= the joint optimum for every nu >= 0 (random prices, seeded)."""
    prob = _problem(catalog, examples, case)
    joint = _joint_optimum(prob)
    names = list(prob.products)
    exact = [n for n in names if exact_by_rule(prob, prob.products[n])]
    rule = [lagrangian.rule_product(prob, prob.products[n]) for n in exact]
    # a product with an API enters with a lower bound of its own cost: its quick bound here
    fixed = sum(min(b for b, _ in portfolio.cheapest_by_type(prob.restrict([n], limits=False), n).values())
                for n in names if n not in exact)
    rng = np.random.default_rng(5)
    for scale in (10.0, 100.0, 1000.0):
        prices = {g: rng.uniform(0, scale, prob.hours) for g in prob.gpu_availability}
        value, _ = lagrangian.dual_value(rule, fixed, prices, dict(prob.gpu_availability), prob.hours)
        assert value <= joint * (1 + 1e-9)


def test_priced_optimum_pays_each_gpu_it_runs(catalog, examples):
    """A flat surcharge s on every H100 in every hour adds s x the H100s the optimum runs, or the
    optimum moves to another choice that costs less with it; both are checked against a
    hand-priced sum over every configuration and reserved level."""
    prob = _problem(catalog, examples, "scarce-h100")
    product = lagrangian.rule_product(prob, prob.products["d"])
    _, at_zero = lagrangian.priced_optimum(product, {}, prob.hours)
    for s in (0.0, 50.0, 400.0):
        surcharge = {"h100-sxm": np.full(prob.hours, s)}
        cost, gpus = lagrangian.priced_optimum(product, surcharge, prob.hours)
        by_hand = min(float(part.cost_usd[r]) + (s if part.gpu == "h100-sxm" else 0.0) * part.gpus_per_replica
                      * float(np.maximum(part.need, r).sum())
                      for part in product.decode if not part.pool_mode for r in part.levels)
        assert cost == pytest.approx(product.fixed_usd + by_hand, rel=1e-12)
        # never below the own optimum, never above it with the surcharge on its own H100s, and
        # exactly what the GPUs it runs pay on top of their tier split
        own = _own(prob.restrict(["d"], limits=False))["d"]
        held = float(np.asarray(at_zero.get("h100-sxm", np.zeros(1))).sum())
        assert own * (1 - 1e-12) <= cost <= own + s * held + 1e-6
        assert gpus == {} or min(float(r.min()) for r in gpus.values()) >= 0


def test_group_planned_product_by_product_keeps_bound_below_joint_below_plan(catalog, examples):
    prob = _problem(catalog, examples, "scarce-h100-busier")
    names = list(prob.products)
    joint = _joint_optimum(prob)
    outcomes, bound = components.solve_one_by_one(prob, names, "highs", Deadline.after(120), 1e-6)
    plans = {n: (o[3], o[1], o[4]) for n, o in zip(names, outcomes)}
    cost = portfolio.group_cost(prob, plans)
    assert sum(bound.own_usd.values()) + 100 < bound.lower_usd <= joint * (1 + 1e-9) <= cost * (1 + 1e-9)
    # the group's bound is the best of the three: own bounds, the instance master ($14,965.41
    # here, below the joint optimum $15,053.08; it was the joint optimum itself, $14,845.42, before
    # the physics' bf16 work share) and the Lagrangian
    assert bound.lower_usd >= RAISED["scarce-h100-busier"] - 0.01
    assert bound.lower_usd == pytest.approx(14965.41, abs=0.01)

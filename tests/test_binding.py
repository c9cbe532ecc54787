"""The value of binding limits: which limits bind, and that each value is the saving of a real
re-plan with the limit raised by one step (checked against a plan made here with that limit)."""

from __future__ import annotations

from typing import Any

import pytest

from fleetplan.optimizer.explanation.binding import binding_relaxations, binding_sentence
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.explanation.results import plan_to_dict
from fleetplan.optimizer.traffic.scenario import parse_scenario


def scenario(availability: dict[str, Any], instance_gpus: int | None = 8) -> dict[str, Any]:
    """Two chat products on Llama 3.1 70B (one hour, seed preset) that may use H100 and H200."""
    limits: dict[str, Any] = {"gpu_availability": availability}
    if instance_gpus:
        limits["instance_gpus"] = instance_gpus
    return {
        "preset": "seed",
        "products": [{"name": f"chat{i}", "model": "llama-3.1-70b", "precision": "fp8", "peak_qps": qps,
                      "input_tokens": 2000, "output_tokens": 400, "min_tokens_per_s_per_user": 30}
                     for i, qps in enumerate((60, 30))],
        "options": {"gpus": ["h100-sxm", "h200-sxm"], "tp": [1, 2, 4]},
        "limits": limits,
    }


def plan_of(s: dict[str, Any], catalog: Any, alternatives: bool = False) -> dict[str, Any]:
    """The plan JSON of scenario ``s``."""
    return plan_to_dict(make_plan(parse_scenario(s, "s"), catalog, alternatives=alternatives))


def test_a_scarce_gpu_binds_and_its_value_is_the_saving_of_one_more_instance(catalog):
    free = plan_of(scenario({}), catalog)
    [gpu] = {p["gpu"] for p in free["products"]}  # without limits both products run on one type
    scarce = free["gpu_usage"][gpu]["gpus"] - 8  # one instance short
    d = plan_of(scenario({gpu: scarce}), catalog, alternatives=True)
    assert d["monthly_cost_usd"] > free["monthly_cost_usd"]
    [entry] = d["binding_limits"]
    assert entry["limit"] == f"limits.gpu_availability.{gpu}"
    assert (entry["step"], entry["relaxed_to"]) == (8, scarce + 8)
    raised = plan_of(scenario({gpu: scarce + 8}), catalog)
    assert entry["relaxed_monthly_cost_usd"] == raised["monthly_cost_usd"] == free["monthly_cost_usd"]
    assert entry["value_usd_per_month"] == round(d["monthly_cost_usd"] - free["monthly_cost_usd"], 2) > 0
    assert entry["proven"]
    assert f"8 more {gpu} GPUs (limit {scarce} -> {scarce + 8}) would save ${entry['value_usd_per_month']:,.0f}" \
        in binding_sentence(entry)


def test_a_full_limit_whose_next_step_saves_nothing_is_listed_at_zero(catalog):
    free = plan_of(scenario({}), catalog)
    [gpu] = {p["gpu"] for p in free["products"]}
    d = plan_of(scenario({gpu: free["gpu_usage"][gpu]["gpus"]}), catalog, alternatives=True)
    [entry] = d["binding_limits"]
    assert entry["value_usd_per_month"] == 0.0 and entry["relaxed_monthly_cost_usd"] == d["monthly_cost_usd"]


def test_a_limit_with_an_instance_to_spare_does_not_bind(catalog):
    assert plan_of(scenario({"h100-sxm": 4096, "h200-sxm": 4096}), catalog, alternatives=True)["binding_limits"] == []


def test_without_instances_the_step_is_one_gpu_and_a_tier_binds_on_its_own(catalog):
    # without instances both products run on H200 (18 GPUs); 12 on demand leave one product there
    s = scenario({"h200-sxm": {"on_demand": 12, "total": 100}, "h100-sxm": {"on_demand": 100, "total": 100}},
                 instance_gpus=None)
    plan = make_plan(parse_scenario(s, "s"), catalog, alternatives=False)
    assert plan.instances["h200-sxm"]["gpus"] == 12
    [r] = binding_relaxations(plan, parse_scenario(s, "s"))
    assert (r.limit, r.step_gpus, r.relaxed_to) == ("limits.gpu_availability.h200-sxm.on_demand", 1, 13)
    assert r.scenario.limits.gpu_availability["h200-sxm"] == {"on_demand": 13, "total": 100}


def _values_from_a_worker(s: Any, catalog: Any, copy: bool) -> list[dict[str, Any]]:
    """The binding limits of scenario ``s`` valued as the report values them: the smallest
    limit's re-plan started in a worker (a copy of this process, as the report starts it, or a
    fresh one) before the plan, the rest once the plan is known."""
    from fleetplan.models.presets import get_preset
    from fleetplan.optimizer.decisions.ahead import LimitsAhead
    from fleetplan.optimizer.explanation.binding import binding_limits
    from fleetplan.optimizer.runtime.deadline import Deadline
    from fleetplan.optimizer.runtime.workers import worker_pool

    with worker_pool(1, finish=False, copy=copy) as pool:
        ahead = LimitsAhead(pool, s, catalog, "highs", get_preset(s.preset), None, 120)
        plan = make_plan(s, catalog, value_limits=False)
        ahead.keep(binding_relaxations(plan, s))
        return binding_limits(plan, s, ahead.resolve, Deadline.after(120))


@pytest.mark.parametrize("guess_binds, copy", [(True, True), (False, True), (True, False)])
def test_values_from_a_worker_are_those_planned_in_turn(catalog, guess_binds, copy):
    # both limits at 16 GPUs: the first listed is the worker's guess; the other type's binds nothing
    free = plan_of(scenario({}), catalog)
    [gpu] = {p["gpu"] for p in free["products"]}
    rest = next(g for g in ("h100-sxm", "h200-sxm") if g != gpu)
    scarce = free["gpu_usage"][gpu]["gpus"] - 8
    order = [gpu, rest] if guess_binds else [rest, gpu]
    s = parse_scenario(scenario({g: scarce for g in order}), "s")
    in_turn = make_plan(s, catalog).binding_limits
    assert [b["limit"] for b in in_turn] == [f"limits.gpu_availability.{gpu}"]
    assert _values_from_a_worker(s, catalog, copy) == in_turn

"""The tornado of a request mix: the kept configurations are every configuration the mix runs
(one bucket may run only on one of them), and a problem cut to configurations that leave a
bucket unserved is refused by name instead of building the constant row ``0 >= 1``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fleetplan.models.presets import get_preset
from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.common.errors import InfeasibleError
from fleetplan.optimizer.mip.formulation import build_model
from fleetplan.optimizer.problem_data.problem import build_problem
from fleetplan.optimizer.traffic.scenario import load_scenario, parse_scenario
from fleetplan.optimizer.decisions.sensitivity import DRIVERS, Replanner, input_length, kept_shapes, tornado, unserved

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_a_mix_keeps_the_shape_of_every_configuration_it_runs(example_plan):
    plan = example_plan("mix-conversational.yaml")
    (pp,) = plan.products
    shapes = kept_shapes(pp)
    run = {(f.part.gpu, f.part.tp, f.part.precision, f.part.mode) for f in pp.fleets}
    assert len(run) >= 2 and shapes is not None and shapes.decode == run


def test_the_tornado_of_a_mix_prices_every_input_on_both_sides(catalog, example_plan):
    """Keeping only the mix's headline configuration (L40S) left its long buckets with no
    configuration, and building the re-plan's model failed on ``bucket_demand_covered``."""
    scenario, folder = load_scenario(EXAMPLES / "mix-conversational.yaml")
    plan = example_plan("mix-conversational.yaml")
    rows = tornado(scenario, Replanner(catalog, None, folder), Deadline.after(120), plan)
    assert [r["input"] for r in rows] == list(DRIVERS)
    base = plan.monthly_cost_usd
    for r in rows:
        assert r["low_error"] is None and r["high_error"] is None, r
        assert r["low_monthly_cost_usd"] <= base + 0.01 <= r["high_monthly_cost_usd"] + 0.02, r
    demand, price, _, length = rows
    assert demand["low_monthly_cost_usd"] < base < demand["high_monthly_cost_usd"]
    # on-demand GPU-hours only, no API: the price moves the whole cost by exactly its factor
    assert price["low_monthly_cost_usd"] == pytest.approx(0.8 * base, abs=0.01)
    assert price["high_monthly_cost_usd"] == pytest.approx(1.2 * base, abs=0.01)
    # longer prompts in every bucket cost more, shorter ones no more (replicas are whole: with the
    # physics' bf16 work share, 0.8x prompts leave every hour's replica count where it was)
    assert length["low_monthly_cost_usd"] <= base < length["high_monthly_cost_usd"]


def test_input_length_moves_every_bucket_of_a_mix(catalog):
    scenario, _ = load_scenario(EXAMPLES / "mix-conversational.yaml")
    (p,) = input_length(scenario, catalog, 1.2).products
    assert [b.input_tokens for b in p.requests] == [round(b.input_tokens * 1.2) for b in scenario.products[0].requests]


MIX = {
    "preset": "default",
    "products": [{"name": "mix", "model": "llama-3.1-8b", "precision": "fp8", "peak_qps": 10,
                  "min_tokens_per_s_per_user": 20,
                  "requests": [{"input_tokens": 500, "output_tokens": 200, "share": 0.7},
                               {"input_tokens": 6000, "output_tokens": 400, "share": 0.3}]}],
    "options": {"gpus": ["h100-sxm"], "tp": [1], "batch": [32, 64]},
}


def test_a_bucket_left_without_configuration_is_refused_by_name(catalog):
    prob, _, _ = build_problem(parse_scenario(MIX, "mix.yaml"), catalog, get_preset("default"))
    pd = prob.products["mix"]
    assert unserved(pd) is None and all(pd.eligible(b) for b in pd.buckets)
    build_model(prob)  # the whole problem builds
    # the long bucket may no longer run on any configuration (as when a re-plan keeps too few)
    long_cut = replace(pd, buckets=(pd.buckets[0], replace(pd.buckets[1], capacity={})))
    assert unserved(long_cut) == "mix: no kept configuration serves its requests of 6,000 input and 400 output tokens any more"
    with pytest.raises(InfeasibleError, match=r"^products\[mix\]\.requests\[1\]: no configuration left may serve its "
                                              r"requests \(in 6000 / out 400 tokens\)"):
        build_model(prob.derive(products={"mix": long_cut}))
    no_config = replace(pd, candidates=())
    assert unserved(no_config) == "mix: its configuration no longer meets the targets"

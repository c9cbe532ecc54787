"""Outcome overrides of the ``uncertainty:`` block: a request-mix shift, an hourly profile and spot
preemption each change the outcome's problem by the amount worked out by hand, an outcome's own
optimum equals the plan of the scenario written out with the override applied, and every bad
field is one line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

import fleetplan
from fleetplan.catalogs.commitments import load_commitments
from fleetplan.catalogs.loader import load_catalog
from fleetplan.main import main
from fleetplan.models.presets import get_preset
from fleetplan.optimizer.common.enums import Tier
from fleetplan.optimizer.decisions.stochastic import outcome_model, outcome_problem, plan_under_uncertainty, term_prices
from fleetplan.optimizer.problem_data.problem import CandidateMemo
from fleetplan.optimizer.traffic.demand import hourly_qps
from fleetplan.optimizer.traffic.scenario import parse_scenario
from fleetplan.optimizer.traffic.uncertainty import (Case, Overrides, UncertaintyError, cases, mean_case, outcome_inputs,
                                                     parse_uncertainty)

HOURS = 730.0  # hours per month of the default preset
TERM_1Y_H100 = 2.35  # catalogs/data/commitments.yaml
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

MIX = {
    "preset": "default",
    "products": [{"name": "assistant", "model": "llama-3.1-8b", "peak_qps": 30, "min_tokens_per_s_per_user": 30,
                  "prefill": "colocated",
                  "requests": [{"input_tokens": 1000, "output_tokens": 250, "share": 0.8},
                               {"input_tokens": 8000, "output_tokens": 400, "share": 0.2}]}],
    "options": {"gpus": ["h100-sxm"], "tp": [1], "tiers": ["reserved", "on_demand"]},
}
PLAIN = {
    "preset": "default",
    "products": [{"name": "chat", "model": "llama-3.1-8b", "peak_qps": 20, "input_tokens": 1000,
                  "output_tokens": 300, "min_tokens_per_s_per_user": 40, "prefill": "colocated"}],
    "options": {"gpus": ["h100-sxm"], "tp": [1], "tiers": ["reserved", "on_demand"]},
}


def _problem(raw: dict, ov: Overrides, folder: Path = Path(".")):
    scenario = parse_scenario(raw, "test", folder)
    return outcome_problem(scenario, load_catalog(), get_preset(scenario.preset), folder, Case("x", 1.0, ov),
                           hourly_qps(scenario.products, folder), CandidateMemo())


def _prefill_flops_by_hand(input_tokens: int) -> float:
    """Prefill FLOPs of one llama-3.1-8b prompt with the default preset: 2 x P_active x n for the
    linear layers plus 2 x heads x head_dim x n^2 x layers of attention."""
    llm = load_catalog().model("llama-3.1-8b", "test")
    n = float(input_tokens)
    return 2.0 * llm.active_params * n + 2.0 * llm.num_attention_heads * llm.head_dim * n * n * llm.num_layers


def test_a_doubled_long_prompt_share_moves_bucket_demand_and_prefill_work_by_hand():
    # long prompts: the 8,000-token bucket (above the mix's mean prompt of 2,400); 0.2 x 2 = 0.4,
    # the short bucket 0.8 x (1 - 0.4) / (1 - 0.2) = 0.6
    base, shifted = _problem(MIX, Overrides()), _problem(MIX, Overrides(long_prompt_shift=2.0))
    for prob, shares in ((base, (0.8, 0.2)), (shifted, (0.6, 0.4))):
        b = prob.products["assistant"].buckets
        assert b[0].demand_tokens_per_s[0] == pytest.approx(30 * shares[0] * 250)
        assert b[1].demand_tokens_per_s[0] == pytest.approx(30 * shares[1] * 400)
    work = {n: _prefill_flops_by_hand(n) for n in (1000, 8000)}

    def prefill_per_s(prob) -> float:
        return sum(b.demand_tokens_per_s[0] * b.prefill_flops_per_output_token for b in prob.products["assistant"].buckets)

    assert prefill_per_s(base) == pytest.approx(30 * (0.8 * work[1000] + 0.2 * work[8000]), rel=1e-9)
    assert prefill_per_s(shifted) == pytest.approx(30 * (0.6 * work[1000] + 0.4 * work[8000]), rel=1e-9)
    assert prefill_per_s(shifted) / prefill_per_s(base) == pytest.approx(1.612, abs=1e-3)  # 2.04 / 1.26 PFLOP/s

    # replicas the busy hour needs on each configuration: sum over buckets of demand / capacity
    for c in shifted.products["assistant"].candidates:
        caps = [b.capacity.get(c.key) for b in shifted.products["assistant"].buckets]
        if None in caps:
            continue
        need = 30 * 0.6 * 250 / caps[0] + 30 * 0.4 * 400 / caps[1]
        was = 30 * 0.8 * 250 / caps[0] + 30 * 0.2 * 400 / caps[1]
        assert sum(b.demand_tokens_per_s[0] / cap for b, cap in zip(shifted.products["assistant"].buckets, caps)) \
            == pytest.approx(need) and need > was


def test_outcome_inputs_move_the_mean_sizes_and_leave_the_rest():
    scenario = parse_scenario(MIX, "test", Path("."))
    qps = hourly_qps(scenario.products, Path("."))
    same, demand = outcome_inputs(scenario, Path("."), Overrides(), qps)
    assert same is scenario and demand == qps
    sc, _ = outcome_inputs(scenario, Path("."), Overrides(mix_shares={"assistant": [0.5, 0.5]}), qps)
    p = sc.products[0]
    # the scenario filled in the mix's means (2,400 and 280); the outcome's are 4,500 and 325
    assert (scenario.products[0].input_tokens, scenario.products[0].output_tokens) == (2400, 280)
    assert (p.input_tokens, p.output_tokens) == (4500, 325) and [b.share for b in p.requests] == [0.5, 0.5]
    sc, _ = outcome_inputs(scenario, Path("."), Overrides(mix_shares={"assistant": [0.0, 1.0]}), qps)
    assert [(b.input_tokens, b.share) for b in sc.products[0].requests] == [(8000, 1.0)]  # a share of 0 leaves it out


def _own_optimum(raw: dict, outcome: dict, folder: Path = Path(".")) -> float:
    scenario = parse_scenario(raw, "test", folder)
    u = parse_uncertainty({"outcomes": [{"name": "x", "probability": 1.0, **outcome}], "terms": ["reserved"]}, "test",
                          scenario.products, folder)
    plan = plan_under_uncertainty(scenario, u, load_catalog(), get_preset(scenario.preset), folder,
                                  commitment_rows=load_commitments())
    return plan.outcomes[0].own_optimum_usd


def _with_product(raw: dict, **update: object) -> dict:
    return {**raw, "products": [{**raw["products"][0], **update}]}


def test_an_outcome_plans_as_the_scenario_written_out_with_its_override(tmp_path):
    # the commitment priced as the reserved tier: the outcome's own optimum is the plan's cost
    shifted = _with_product(MIX, requests=[{"input_tokens": 1000, "output_tokens": 250, "share": 0.6},
                                           {"input_tokens": 8000, "output_tokens": 400, "share": 0.4}])
    expected = fleetplan.plan(shifted, verify=False).monthly_cost_usd
    assert _own_optimum(MIX, {"long_prompt_shift": 2.0}) == pytest.approx(expected, abs=0.01)
    assert _own_optimum(MIX, {"mix_shares": {"assistant": [0.6, 0.4]}}) == pytest.approx(expected, abs=0.01)
    assert expected > fleetplan.plan(MIX, verify=False).monthly_cost_usd

    day = [0.3] * 8 + [0.6] * 8 + [1.0] * 4 + [0.5] * 4
    (tmp_path / "day.csv").write_text("hour,multiplier\n" + "".join(f"{h},{m}\n" for h, m in enumerate(day)))
    profiled = fleetplan.plan(_with_product(PLAIN, demand_profile="day.csv"), folder=tmp_path, verify=False)
    assert _own_optimum(PLAIN, {"demand_profile": {"chat": "day.csv"}}, tmp_path) == pytest.approx(
        profiled.monthly_cost_usd, abs=0.01)
    assert _own_optimum(PLAIN, {"demand_profile": {"chat": day}}, tmp_path) == pytest.approx(
        profiled.monthly_cost_usd, abs=0.01)
    both = fleetplan.plan(_with_product(PLAIN, demand_profile="day.csv", peak_qps=30), folder=tmp_path, verify=False)
    assert _own_optimum(PLAIN, {"demand_profile": {"chat": "day.csv"}, "demand_scale": 1.5}, tmp_path) == \
        pytest.approx(both.monthly_cost_usd, abs=0.01)


def test_a_profile_outcome_puts_every_product_on_its_horizon():
    raw = {**PLAIN, "products": [PLAIN["products"][0], {**PLAIN["products"][0], "name": "other", "peak_qps": 5}]}
    scenario = parse_scenario(raw, "test", Path("."))
    week = [1.0] * 24 * 6 + [0.25] * 24
    _, demand = outcome_inputs(scenario, Path("."), Overrides(demand_profile={"chat": week}, demand_scale=2.0),
                               hourly_qps(scenario.products, Path(".")))
    assert demand["chat"] == [40.0] * 144 + [10.0] * 24 and demand["other"] == [10.0] * 168


SPOT = {**_with_product(PLAIN, peak_qps=100), "options": {"gpus": ["h100-sxm"], "tp": [1], "tiers": ["reserved", "on_demand", "spot"],
                             "spot_max_share": 0.5}}


def test_spot_preemption_prices_lost_spot_hours_on_demand():
    prob = _problem(SPOT, Overrides())
    cand = prob.products["chat"].candidates[0]
    od, sp = cand.price.tier(Tier.ON_DEMAND), cand.price.tier(Tier.SPOT)
    terms = term_prices(parse_uncertainty({"outcomes": [{"name": "x", "probability": 1.0}], "terms": ["1y"]}, "t",
                                          ["chat"]), {"h100-sxm": (0.0, "")}, load_commitments())
    for r in (0.0, 0.3):
        m = outcome_model(Case("x", 1.0, Overrides(spot_preemption=r, on_demand_price_scale=1.2)), prob, terms)
        for (family, index), cost in zip(m.lp.col_keys, m.lp.objective):
            if family == "spot":
                c = prob.cand[index[0]]
                expected = prob.weight(index[1]) * c.gpus_per_replica * (sp + r * 1.2 * od)
                assert cost == pytest.approx(expected, rel=1e-12)


def test_spot_preemption_moves_the_commitment_by_hand():
    # one busy hour needing n single-GPU replicas; at most half of them on spot. A spot GPU-hour
    # costs sp + r x od when a share r of it is lost and served on demand instead: while that is
    # below the one-year price, floor(n / 2) GPUs run on spot and the rest is committed
    scenario = parse_scenario(SPOT, "test", Path("."))
    prob = _problem(SPOT, Overrides())
    pd = prob.products["chat"]
    n = min(pd.replica_bound(c, 0) * c.gpus_per_replica for c in pd.candidates)
    od, sp = pd.candidates[0].price.tier(Tier.ON_DEMAND), pd.candidates[0].price.tier(Tier.SPOT)
    assert sp < TERM_1Y_H100 < od and n >= 2
    for r in (0.0, 0.1, 0.5):
        u = parse_uncertainty({"outcomes": [{"name": "x", "probability": 1.0, "spot_preemption": r}], "terms": ["1y"]},
                              "t", scenario.products)
        plan = plan_under_uncertainty(scenario, u, load_catalog(), get_preset("default"), Path("."),
                                      commitment_rows=load_commitments())
        spot_gpus = n // 2 if sp + r * od < TERM_1Y_H100 else 0
        assert plan.commitment[0][1] == n - spot_gpus
        assert plan.expected_cost_usd == pytest.approx(
            HOURS * ((n - spot_gpus) * TERM_1Y_H100 + spot_gpus * (sp + r * od)), abs=0.01)


def test_sampled_mix_shift_and_preemption_are_drawn_in_order():
    raw = {"sample": {"scenarios": 4, "seed": 3,
                      "mix_shift": {"distribution": "uniform", "low": 1.0, "high": 3.0},
                      "spot_preemption": {"distribution": "uniform", "low": 0.0, "high": 0.3}}}
    scenario = parse_scenario(MIX, "test", Path("."))
    drawn = cases(parse_uncertainty(raw, "t", scenario.products))
    rng = np.random.default_rng(3)
    for c in drawn:
        assert c.overrides.long_prompt_shift == pytest.approx(float(rng.uniform(1.0, 3.0)))
        assert c.overrides.spot_preemption == pytest.approx(float(rng.uniform(0.0, 0.3)))
    # a draw above 1 / long share (5 here) makes every request long
    scenario_qps = hourly_qps(scenario.products, Path("."))
    sc, _ = outcome_inputs(scenario, Path("."), Overrides(long_prompt_shift=7.0), scenario_qps)
    assert [(b.input_tokens, b.share) for b in sc.products[0].requests] == [(8000, 1.0)]


def test_the_mean_forecast_averages_shares_profiles_and_preemption():
    scenario = parse_scenario({**MIX, "products": [MIX["products"][0], {**PLAIN["products"][0]}]}, "test", Path("."))
    items = [Case("a", 0.25, Overrides(long_prompt_shift=2.0, spot_preemption=0.4)),
             Case("b", 0.75, Overrides(demand_profile={"chat": [0.5] * 12 + [1.0] * 12}))]
    mean = mean_case(items, ["assistant", "chat"], scenario, Path("."), hourly_qps(scenario.products, Path("."))).overrides
    assert mean.mix_shares["assistant"] == pytest.approx([0.25 * 0.6 + 0.75 * 0.8, 0.25 * 0.4 + 0.75 * 0.2])
    assert mean.demand_profile["chat"] == pytest.approx([0.25 + 0.75 * 0.5] * 12 + [1.0] * 12)
    assert mean.spot_preemption == pytest.approx(0.1) and mean.scale_of("chat") == 1.0
    # without the scenario, or without such overrides, the mean is as it always was
    plain = mean_case([Case("a", 0.5, Overrides(demand_scale=2.0)), Case("b", 0.5)], ["chat"]).overrides
    assert plain == Overrides(demand_scale={"chat": 1.5})


def test_the_shipped_mix_shift_example_values_the_stochastic_solution(capsys):
    assert main(["commit", str(EXAMPLES / "uncertainty" / "commit-mix-shift.yaml"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["vss_usd"] > 0 and data["evpi_usd"] >= 0 and data["gap"] == 0.0
    by = {s["name"]: s for s in data["scenarios"]}
    # long prompts and preempted spot cost more than the forecast, planned on their own as with the commitment
    assert by["long-prompts"]["own_optimum_usd"] > by["forecast"]["own_optimum_usd"]
    assert by["spot-preempted"]["own_optimum_usd"] > by["forecast"]["own_optimum_usd"]
    assert by["evening-peak"]["own_optimum_usd"] < by["forecast"]["own_optimum_usd"]


def _write(tmp_path: Path, raw: dict, unc: object) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**raw, "uncertainty": unc}))
    return str(path)


def _one(**overrides: object) -> dict:
    return {"outcomes": [{"name": "a", "probability": 1.0, **overrides}]}


@pytest.mark.parametrize("unc, words", [
    (_one(mix_shares={"asistant": [0.5, 0.5]}), "mix_shares: no product 'asistant' (nearest valid choice: assistant)"),
    (_one(mix_shares={"assistant": [0.5, 0.4]}), "assistant: shares sum to 0.9; they must sum to 1"),
    (_one(mix_shares={"assistant": [0.5, 0.25, 0.25]}), "mix_shares.assistant: 3 shares for 2 buckets"),
    (_one(mix_shares={"assistant": [1.5, -0.5]}), "one share from 0 to 1 per bucket"),
    (_one(long_prompt_shift=6.0), "long_prompt_shift: 6 x 0.2 (the long-prompt share of products[assistant]) is "
                                  "above 1 (nearest valid choice: 5)"),
    (_one(long_prompt_shift=0.0), "long_prompt_shift: 0.0 is outside (0, 100]"),
    (_one(long_prompt_shift={"assistant": 2.0}, mix_shares={"assistant": [0.5, 0.5]}), "not both"),
    (_one(demand_profile={"assistant": [1.0] * 23}), "24 (a day) or 168 (a week) multipliers of peak_qps (got 23 values)"),
    (_one(demand_profile={"assistant": [1.0] * 23 + [-2.0]}), "assistant[23]: must be a number from 0 to 1000"),
    (_one(demand_profile={"assistant": "missing.csv"}), "outcomes[a].demand_profile.assistant: demand profile not found"),
    (_one(demand_profile={"asistant": [1.0] * 24}), "demand_profile: no product 'asistant' (nearest valid choice: assistant)"),
    (_one(spot_preemption=1.5), "spot_preemption: Input should be less than or equal to 1"),
    (_one(spot_preemtion=0.1), "unknown field (nearest valid choice: spot_preemption)"),
    ({"sample": {"scenarios": 2, "mix_shft": {"distribution": "uniform", "low": 1, "high": 2}}},
     "unknown field (nearest valid choice: mix_shift)"),
])
def test_a_bad_override_is_one_line_and_exit_2(tmp_path, capsys, unc, words):
    assert main(["commit", _write(tmp_path, MIX, unc)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("unc, words", [
    (_one(mix_shares={"chat": [1.0]}), "mix_shares.chat: products[chat] has no request mix (requests:)"),
    (_one(long_prompt_shift=2.0), "long_prompt_shift: no product has a request mix with prompts longer than its mean"),
    ({"sample": {"scenarios": 2, "mix_shift": {"distribution": "uniform", "low": 1, "high": 2}}},
     "sample.mix_shift: no product has a request mix"),
])
def test_a_mix_override_on_a_product_without_a_mix_is_refused(tmp_path, capsys, unc, words):
    assert main(["commit", _write(tmp_path, PLAIN, unc)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_a_bad_profile_file_names_its_line(tmp_path, capsys):
    (tmp_path / "bad.csv").write_text("hour,multiplier\n0,1.0\n2,1.0\n")
    assert main(["commit", _write(tmp_path, PLAIN, _one(demand_profile={"chat": "bad.csv"}))]) == 2
    err = capsys.readouterr().err
    assert "bad.csv: line 3: hour 2 out of order (expected 1)" in err and err.count("\n") == 1


def test_a_block_parsed_with_product_names_only_is_checked_when_planned():
    scenario = parse_scenario(MIX, "test", Path("."))
    u = parse_uncertainty(_one(mix_shares={"assistant": [0.5, 0.25, 0.25]}), "t", ["assistant"])
    with pytest.raises(UncertaintyError, match=r"mix_shares.assistant: 3 shares for 2 buckets"):
        plan_under_uncertainty(scenario, u, load_catalog(), get_preset("default"), Path("."),
                               commitment_rows=load_commitments())

"""Two-stage planning under uncertainty: VSS and EVPI checked by hand on two outcomes, the
decomposition against the extensive form, the same plan from worker processes and a Dask
cluster, deterministic sampling, and one-line errors for a bad ``uncertainty:`` block."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from fleetplan.catalogs.commitments import load_commitments
from fleetplan.catalogs.loader import load_catalog
from fleetplan.main import main
from fleetplan.models.presets import get_preset
from fleetplan.optimizer.traffic.demand import hourly_qps
from fleetplan.optimizer.problem_data.problem import CandidateMemo
from fleetplan.optimizer.traffic.scenario import parse_scenario
from fleetplan.optimizer.decisions.stochastic import outcome_problem, plan_under_uncertainty
from fleetplan.optimizer.traffic.uncertainty import Case, Overrides, UncertaintyError, cases, parse_uncertainty

HOURS = 730.0  # hours per month of the default preset
TERM_1Y_H100 = 2.35  # catalogs/data/commitments.yaml

BASE = {
    "preset": "default",
    "products": [{"name": "chat", "model": "llama-3.1-8b", "peak_qps": 20, "input_tokens": 1000,
                  "output_tokens": 300, "min_tokens_per_s_per_user": 40, "prefill": "colocated"}],
    "options": {"gpus": ["h100-sxm"], "tp": [1], "tiers": ["reserved", "on_demand"]},
}


def _plan(raw: dict, unc: dict, **kw: object):
    scenario = parse_scenario(raw, "test", Path("."))
    u = parse_uncertainty(unc, "test", [p.name for p in scenario.products])
    return plan_under_uncertainty(scenario, u, load_catalog(), get_preset(scenario.preset), Path("."),
                                  commitment_rows=load_commitments(), **kw), scenario, u


def _gpus_needed(scenario, scale: float) -> tuple[int, float]:
    """GPUs one outcome needs (the fewest over the configurations, each replica count what alone
    meets the hour) and the on-demand USD per GPU-hour, read from the problem's data."""
    prob = outcome_problem(scenario, load_catalog(), get_preset("default"), Path("."),
                           Case("x", 1.0, Overrides(demand_scale=scale)), hourly_qps(scenario.products, Path(".")),
                           CandidateMemo())
    pd = prob.products["chat"]
    need = min(pd.replica_bound(c, 0) * c.gpus_per_replica for c in pd.candidates)
    return need, pd.candidates[0].price.tier("on_demand")


def test_vss_and_evpi_by_hand_on_two_outcomes():
    unc = {"outcomes": [{"name": "low", "probability": 0.5, "demand_scale": 0.5},
                        {"name": "high", "probability": 0.5, "demand_scale": 2.0}], "terms": ["1y"]}
    plan, scenario, _ = _plan(BASE, unc)
    (n_low, od), (n_high, _) = _gpus_needed(scenario, 0.5), _gpus_needed(scenario, 2.0)
    n_mean, _ = _gpus_needed(scenario, 0.5 * 0.5 + 0.5 * 2.0)
    assert od > TERM_1Y_H100 and n_low < n_mean <= n_high

    def cost(r: int, n: int) -> float:  # r GPUs committed, n needed: the rest on demand
        return (TERM_1Y_H100 * r + od * max(0, n - r)) * HOURS

    def expected(r: int) -> float:
        return 0.5 * cost(r, n_low) + 0.5 * cost(r, n_high)

    best = min(range(n_high + 1), key=lambda r: (expected(r), r))
    rp = expected(best)
    wait_and_see = 0.5 * cost(n_low, n_low) + 0.5 * cost(n_high, n_high)
    eev = expected(n_mean)  # the mean forecast commits to what its own demand needs
    assert plan.commitment[0][1] == best
    assert plan.expected_cost_usd == pytest.approx(rp, abs=0.01)
    assert plan.vss_usd == pytest.approx(eev - rp, abs=0.01)
    assert plan.evpi_usd == pytest.approx(rp - wait_and_see, abs=0.01)
    assert plan.vss_usd > 0 and plan.evpi_usd > 0
    d = plan.to_dict()
    assert [s["regret_usd"] for s in d["scenarios"]] == [round(cost(best, n_low) - cost(n_low, n_low), 2),
                                                         round(cost(best, n_high) - cost(n_high, n_high), 2)]
    assert d["cost_percentiles_usd"]["worst"] == round(max(cost(best, n_low), cost(best, n_high)), 2)


SAMPLED = {"sample": {"scenarios": 8, "seed": 7, "demand_scale": {"distribution": "lognormal", "mean": 0.0, "std": 0.6}},
           "terms": ["1y", "reserved"]}


@pytest.mark.parametrize("separable", [True, False], ids=["product split", "lagrangian"])
def test_decomposition_equals_the_extensive_form_within_a_tenth_of_a_percent(separable):
    ef, _, _ = _plan(BASE, {**SAMPLED, "method": "extensive"})
    dec, _, _ = _plan(BASE, {**SAMPLED, "method": "decomposition", "max_gap": 0.001, "max_iterations": 400},
                      separable=separable)
    assert dec.method == "decomposition" and ef.method == "extensive"
    assert [n.startswith("exact by the product split") for n in dec.notes] == ([True] if separable else [])
    assert abs(dec.expected_cost_usd - ef.expected_cost_usd) <= 0.001 * ef.expected_cost_usd
    # the bound is proven: never above the extensive form's optimum, and the gap is what is reported
    assert dec.lower_bound_usd <= ef.expected_cost_usd + 1e-6
    assert dec.gap <= 0.001
    assert dec.wait_and_see_usd == pytest.approx(ef.wait_and_see_usd, rel=1e-6)


def test_a_commitment_beats_none_and_the_largest_on_a_skewed_outcome_set():
    plan, scenario, _ = _plan(BASE, {**SAMPLED, "method": "extensive"})
    costs = [o.cost_usd for o in plan.outcomes]
    assert plan.expected_cost_usd == pytest.approx(sum(o.probability * c for o, c in zip(plan.outcomes, costs)))
    assert all(o.cost_usd >= o.own_optimum_usd - 1e-6 for o in plan.outcomes)
    assert plan.wait_and_see_usd <= plan.expected_cost_usd <= plan.mean_forecast_expected_cost_usd + 1e-6


def test_the_same_plan_from_worker_processes_and_a_dask_cluster():
    from distributed import Client, LocalCluster

    unc = {**SAMPLED, "method": "decomposition", "max_iterations": 5}
    risky = {**SAMPLED, "risk_weight": 1.5, "cvar_alpha": 0.8}
    runs: dict[str, list[str]] = {"split": [], "mips": [], "split with risk": []}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as two, \
            Client(two) as client2, \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as one, \
            Client(one) as client1:
        for name, block, separable in (("split", unc, True), ("mips", unc, False), ("split with risk", risky, True)):
            for kw in ({"workers": 1}, {"workers": 2}, {"client": client1}, {"client": client2}):
                plan, _, _ = _plan(BASE, block, separable=separable, **kw)
                runs[name].append(json.dumps(plan.to_dict()))
    for name, found in runs.items():
        assert len(set(found)) == 1, name
    assert runs["split"][0] != runs["mips"][0]  # the two paths both ran (their notes differ)
    risk = json.loads(runs["split with risk"][0])
    assert risk["objective_usd"] > risk["expected_cost_usd"] and risk["gap"] == 0.0


def test_risk_weight_trades_expected_cost_for_a_lower_tail():
    unc = {"outcomes": [{"name": "low", "probability": 0.6, "demand_scale": 0.5},
                        {"name": "high", "probability": 0.4, "demand_scale": 3.0}], "terms": ["1y"]}
    neutral, _, _ = _plan(BASE, unc)
    averse, _, _ = _plan(BASE, {**unc, "risk_weight": 0.3, "cvar_alpha": 0.5})
    assert averse.expected_cost_usd >= neutral.expected_cost_usd - 1e-6
    assert averse.percentiles()["worst"] <= neutral.percentiles()["worst"] + 1e-6
    assert averse.commitment[0][1] >= neutral.commitment[0][1]


def test_sampled_outcomes_are_deterministic_and_equally_likely():
    u = parse_uncertainty(SAMPLED, "t", ["chat"])
    a, b = cases(u), cases(u)
    assert a == b and len(a) == 8 and all(c.probability == 1 / 8 for c in a)
    other = cases(parse_uncertainty({**SAMPLED, "sample": {**SAMPLED["sample"], "seed": 8}}, "t", ["chat"]))
    assert [c.overrides.demand_scale for c in a] != [c.overrides.demand_scale for c in other]
    import numpy as np

    assert a[0].overrides.demand_scale == pytest.approx(float(np.random.default_rng(7).lognormal(0.0, 0.6)))


def _write(tmp_path: Path, unc: object, options: dict | None = None) -> str:
    raw = {**BASE, "options": options or BASE["options"], "uncertainty": unc}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize("unc, words", [
    ({"outcomes": [{"name": "a", "probability": 0.5}, {"name": "b", "probability": 0.4}]},
     "probabilities sum to 0.9; they must sum to 1"),
    ({"outcoms": []}, "uncertainty.outcoms: unknown field (nearest valid choice: outcomes)"),
    ({"outcomes": [{"name": "a", "probability": 1.0, "demand_scale": {"chta": 2}}]},
     "demand_scale: no product 'chta' (nearest valid choice: chat)"),
    ({"sample": {"scenarios": 3, "demand_scale": {"distribution": "normal", "mean": 1.0}}},
     "std: required for a normal distribution"),
    ({"sample": {"scenarios": 3, "demand_scale": {"distribution": "gauss", "mean": 1.0}}}, "distribution"),
    ({"outcomes": [{"name": "a", "probability": 1.0}], "sample": {"scenarios": 2}}, "one of them"),
    ({"outcomes": [{"name": "a", "probability": 1.0, "demand_scale": -1}]}, "outside (0, 100]"),
    ({"outcomes": [{"name": "a", "probability": 1.0}], "terms": ["2y"]}, "terms"),
    ("everything", "must be a mapping"),
    ({"sample": {"scenarios": 10_001, "demand_scale": {"distribution": "uniform", "low": 0.5, "high": 1.5}}},
     "uncertainty.sample.scenarios: Input should be less than or equal to 10000 (got 10001)"),
])
def test_a_bad_block_is_one_line_and_exit_2(tmp_path, capsys, unc, words):
    assert main(["commit", _write(tmp_path, unc)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err


def test_with_workers_started_before_the_input_is_read_a_bad_input_is_still_one_line(tmp_path, capsys):
    assert main(["commit", str(tmp_path / "missing.yaml"), "--jobs", "2"]) == 2
    err = capsys.readouterr().err
    assert "missing.yaml" in err and err.count("\n") == 1 and "Traceback" not in err
    assert main(["commit", _write(tmp_path, {"outcoms": []}), "--jobs", "2", "--json"]) == 2
    assert "nearest valid choice: outcomes" in capsys.readouterr().err


def test_the_shipped_week_of_sampled_outcomes_is_the_same_from_one_worker_and_two(capsys):
    path = Path(__file__).resolve().parent.parent / "examples" / "uncertainty" / "commit-week-sampled.yaml"
    found = []
    for jobs in ("1", "2"):
        assert main(["commit", str(path), "--json", "--jobs", jobs]) == 0
        found.append(capsys.readouterr().out)
    assert found[0] == found[1]
    data = json.loads(found[0])
    assert len(data["scenarios"]) == 200 and data["gap"] == 0.0
    assert data["expected_cost_usd"] == pytest.approx(  # the expected cost is the outcomes' costs weighed
        sum(s["probability"] * s["cost_usd"] for s in data["scenarios"]), abs=0.02)
    assert all(s["regret_usd"] >= 0 and s["cost_usd"] >= s["own_optimum_usd"] - 0.01 for s in data["scenarios"])


def test_a_commitment_needs_the_reserved_tier(tmp_path, capsys):
    path = _write(tmp_path, {"outcomes": [{"name": "a", "probability": 1.0}]},
                  {"gpus": ["h100-sxm"], "tiers": ["on_demand"]})
    assert main(["commit", path]) == 2
    assert "options.tiers" in capsys.readouterr().err


def test_the_command_writes_json_and_html_with_the_issue_keys(tmp_path, capsys):
    unc = {"outcomes": [{"name": "low <b>", "probability": 0.5, "demand_scale": 0.5},
                        {"name": "high", "probability": 0.5, "demand_scale": 2.0}]}
    out = tmp_path / "out"
    assert main(["commit", _write(tmp_path, unc), "--out", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data)[:6] == ["commitment", "expected_cost_usd", "cost_percentiles_usd", "scenarios", "vss_usd",
                              "evpi_usd"]
    assert json.loads((out / "commit.json").read_text()) == data
    page = (out / "commit.html").read_text()
    assert "low &lt;b&gt;" in page and "low <b>" not in page and "<svg" in page and "Regret by outcome" in page
    assert math.isclose(data["expected_cost_usd"], sum(s["probability"] * s["cost_usd"] for s in data["scenarios"]),
                        abs_tol=0.02)


def test_a_scenario_without_uncertainty_is_refused_by_commit_and_plans_as_before(tmp_path, capsys):
    path = tmp_path / "plain.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert main(["commit", str(path)]) == 2
    assert "no uncertainty: block" in capsys.readouterr().err
    with pytest.raises(UncertaintyError):
        parse_uncertainty({"outcomes": []}, "t", ["chat"])


def test_the_shipped_two_outcome_example_values_the_stochastic_solution(capsys):
    path = Path(__file__).resolve().parent.parent / "examples" / "uncertainty" / "commit-two-outcomes.yaml"
    assert main(["commit", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["vss_usd"] > 0 and data["evpi_usd"] >= 0 and data["gap"] == 0.0
    assert data["expected_cost_usd"] == pytest.approx(
        data["mean_forecast"]["expected_cost_usd"] - data["vss_usd"], abs=0.02)


def test_plan_points_a_scenario_with_outcomes_to_commit(capsys):
    path = Path(__file__).resolve().parent.parent / "examples" / "uncertainty" / "commit-two-outcomes.yaml"
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert "uncertainty: plan outcomes with `fleetplan commit`" in err and err.count("\n") == 1


def test_the_command_reports_the_risk_objective_computed_by_hand(tmp_path, capsys):
    """Two outcomes, CVaR at 0.5: the worst half of the probability is all of "high" (0.4) and 0.1
    of "low", so objective = expected + w x (0.4 x high + 0.1 x low) / 0.5, from the JSON's own costs
    (w = 0.3: a weight large enough commits to the high outcome's fleet and makes the costs equal)."""
    unc = {"outcomes": [{"name": "low", "probability": 0.6, "demand_scale": 0.5},
                        {"name": "high", "probability": 0.4, "demand_scale": 3.0}],
           "terms": ["1y"], "risk_weight": 0.3, "cvar_alpha": 0.5}
    path = _write(tmp_path, unc)
    assert main(["commit", path, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    low, high = (s["cost_usd"] for s in data["scenarios"])
    assert high > low
    assert data["objective_usd"] == pytest.approx(data["expected_cost_usd"] + 0.3 * (0.4 * high + 0.1 * low) / 0.5,
                                                  abs=0.05)
    assert data["gap"] == 0.0 and data["lower_bound_usd"] == pytest.approx(data["objective_usd"], abs=0.01)
    assert main(["commit", path]) == 0
    assert "objective $" in capsys.readouterr().out

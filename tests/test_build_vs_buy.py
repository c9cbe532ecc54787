"""Build vs buy: demand profiles, capacity tiers, API burst, fixed cost, breakeven."""

from __future__ import annotations


import pytest

from fleetplan.main import main
from fleetplan.optimizer.decisions.breakeven import breakeven
from fleetplan.optimizer.explanation.invariants import check_invariants
from fleetplan.optimizer.explanation.results import plan_to_dict
from fleetplan.optimizer.traffic.scenario import load_scenario

PLANNABLE = ["seed-chat-70b.yaml", "seed-chat-70b-open.yaml", "seed-chat-70b-pool.yaml", "seed-chat-70b-colocated.yaml",
             "rag-20k.yaml", "peak-sized-30pct.yaml", "chat-diurnal-blend.yaml", "build-vs-buy.yaml"]


@pytest.fixture(scope="module")
def plans(example_plan):
    return {name: example_plan(name) for name in PLANNABLE}


@pytest.mark.parametrize("name", PLANNABLE)
def test_invariants_on_every_example(plans, name):
    plan = plans[name]
    assert check_invariants(plan) == []
    d = plan_to_dict(plan)
    # cost equals the sum of its parts, per product and in total
    for p in d["products"]:
        assert sum(p["monthly_cost_breakdown_usd"].values()) == pytest.approx(p["monthly_cost_usd"], abs=0.05)
    assert sum(d["monthly_cost_breakdown_usd"].values()) == pytest.approx(d["monthly_cost_usd"], abs=0.05)
    for pp in plan.products:
        for h in range(plan.hours):  # every hour's demand is met (reserved replicas are one number: constant)
            cap = pp.replicas_in_hour(h) * (pp.candidate.usable_tokens_per_s if pp.candidate else 0) + pp.api_tokens_per_s[h]
            assert cap >= pp.data.demand_tokens_per_s[h] * (1 - 1e-9) - 1e-6
        if "hourly" in (row := next(p for p in d["products"] if p["name"] == pp.product.name)):
            assert len({r["reserved_replicas"] for r in row["hourly"]}) == 1


def test_thirty_percent_utilisation_costs_three_times_ideal(plans):
    (p,) = plan_to_dict(plans["peak-sized-30pct.yaml"])["products"]
    assert p["utilisation"] == pytest.approx(0.30, abs=0.01)
    assert p["cost_per_million_tokens_usd"] > 3 * p["ideal_cost_per_million_tokens_usd"]
    assert p["monthly_cost_breakdown_usd"]["reserved"] == pytest.approx(295_650)


def test_build_vs_buy_three_answers(plans):
    d = {p["name"]: p for p in plan_to_dict(plans["build-vs-buy.yaml"])["products"]}
    assert d["internal-tool"]["gpu"] is None and d["internal-tool"]["api_fraction"] == pytest.approx(1.0)
    assert d["internal-tool"]["monthly_cost_breakdown_usd"]["fixed"] == 0
    steady = d["summariser"]
    assert steady["gpu"] is not None and steady["monthly_cost_breakdown_usd"]["reserved"] > 0
    assert steady["monthly_cost_breakdown_usd"]["on_demand"] == 0
    # a steady load is self-hosted: at most the remainder of an hour smaller than a replica's worth
    # goes to the API
    assert steady["api_fraction"] < 0.01


def test_diurnal_bursts_to_api_at_peak(plans):
    plan = plans["chat-diurnal-blend.yaml"]
    (pp,) = plan.products
    api_hours = [h for h, a in enumerate(pp.api_tokens_per_s) if a > 1e-6]
    assert api_hours, "the blend should send some peak-hour remainder to the API"
    # the API takes remainders smaller than one more replica would serve, never a whole replica's worth
    assert all(pp.api_tokens_per_s[h] < pp.candidate.usable_tokens_per_s for h in api_hours)
    assert sum(pp.api_tokens_per_s) <= 0.3 * sum(pp.data.demand_tokens_per_s)
    assert "costs less than another replica" in pp.why
    d = plan_to_dict(plan)["products"][0]
    assert d["monthly_cost_breakdown_usd"]["reserved"] > 0 and d["monthly_cost_breakdown_usd"]["on_demand"] > 0
    assert len(d["hourly"]) == 168


def test_blend_never_costs_more_than_pure_strategies(catalog, examples):
    scenario, folder = load_scenario(examples / "build-vs-buy.yaml")
    r = breakeven(scenario, catalog, folder, scales=(0.05, 1.0))
    for p in r.points:
        # all three products may go all-API only up to their max_fraction, so the blend is compared
        # with self-host only (always allowed here: no min_fraction)
        assert p.blend_usd <= p.self_host_usd + 0.01


def test_blend_le_all_api_when_policy_allows(catalog, examples, tmp_path):
    text = (examples / "build-vs-buy.yaml").read_text().replace("max_fraction: 0.5", "max_fraction: 1.0").replace(
        "max_fraction: 0.4", "max_fraction: 1.0")
    f = tmp_path / "bvb.yaml"
    f.write_text(text)
    (tmp_path / "profiles").symlink_to(examples / "profiles")
    scenario, folder = load_scenario(f)
    r = breakeven(scenario, catalog, folder, scales=(0.05, 1.0))
    for p in r.points:
        assert p.blend_usd <= p.all_api_usd + 0.01
        assert p.blend_usd <= p.self_host_usd + 0.01


def test_breakeven_cli_json_and_plot(capsys, examples, tmp_path):
    png = tmp_path / "be.png"
    code = main(["breakeven", str(examples / "peak-sized-30pct.yaml"), "--scales", "0.1", "1", "--json", "--plot", str(png)])
    out = capsys.readouterr()
    assert code == 2 and "breakeven needs an API" in out.err and not png.exists()


@pytest.mark.parametrize(
    ("csv", "expected"),
    [
        ("hour,load\n0,1\n", "header must be 'hour,multiplier' or 'hour,qps'"),
        ("hour,multiplier\n" + "".join(f"{h},1\n" for h in range(23)), "23 hourly rows"),
        ("hour,multiplier\n" + "".join(f"{h},{-1 if h == 5 else 1}\n" for h in range(24)), "line 7: multiplier: must be a number from 0 to 1000"),
        ("hour,multiplier\n1,1\n", "hour 1 out of order"),
    ],
)
def test_bad_profiles_exit_2(capsys, tmp_path, csv, expected):
    (tmp_path / "p.csv").write_text(csv)
    (tmp_path / "s.yaml").write_text(
        "products:\n  - name: x\n    model: llama-3.1-8b\n    peak_qps: 1\n    input_tokens: 10\n    output_tokens: 10\n"
        "    demand_profile: p.csv\n"
    )
    assert main(["plan", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


def test_breakeven_scales_an_absolute_qps_profile(catalog, tmp_path):
    """A profile of absolute queries per second scales with the breakeven scale like a profile of
    multiples does: the all-API cost doubles with the scale, and equals tokens x price by hand."""
    from fleetplan.optimizer.problem_data.api import resolve_api
    from fleetplan.optimizer.traffic.scenario import parse_scenario

    (tmp_path / "qps.csv").write_text("hour,qps\n" + "".join(f"{h},{2 + h % 3}\n" for h in range(24)))
    raw = {"products": [{"name": "chat", "model": "llama-3.1-8b", "precision": "fp8", "peak_qps": 4,
                         "input_tokens": 500, "output_tokens": 200, "min_tokens_per_s_per_user": 20,
                         "demand_profile": "qps.csv", "api": {"model": "llama-3.1-8b"}}],
           "options": {"gpus": ["h100-sxm"], "tp": [1]}}
    scenario = parse_scenario(raw, "qps")
    result = breakeven(scenario, catalog, tmp_path, scales=(1.0, 2.0))
    one, two = result.points
    assert two.all_api_usd == pytest.approx(2 * one.all_api_usd, rel=1e-12)
    mean_qps = sum(2 + h % 3 for h in range(24)) / 24  # the profile's own numbers, not peak_qps
    offer = resolve_api(scenario.products[0], catalog)
    by_hand = mean_qps * 200 * 3600 * 730 * offer.usd_per_output_token
    assert one.all_api_usd == pytest.approx(by_hand, rel=1e-9)

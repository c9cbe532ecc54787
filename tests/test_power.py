"""Power, sites and owned hardware: hand-checked formulas, the site's limit held in every hour of a
plan, the value of one more MW equal to the re-plan's saving, owned prices in the plan, and the
model's tokens per joule against published measurements."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetplan.catalogs.loader import load_catalog
from fleetplan.catalogs.power import power_catalog
from fleetplan.models.power import capital_recovery_factor, gpu_draw_w, owned_usd_per_gpu_hour
from fleetplan.models.presets import get_preset
from fleetplan.optimizer.problem_data.candidates import generate_candidates
from fleetplan.optimizer.explanation.invariants import check_invariants
from fleetplan.optimizer.decisions.owned_breakeven import owned_curves
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.explanation.results import plan_to_dict
from fleetplan.optimizer.traffic.scenario import ScenarioError, load_scenario, parse_scenario
from fleetplan.optimizer.traffic.sites import full_load_w_per_gpu

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_capital_recovery_factor_by_hand() -> None:
    # 8% over 4 years: 0.08 x 1.08^4 / (1.08^4 - 1) = 0.08 x 1.36048896 / 0.36048896
    assert capital_recovery_factor(0.08, 4) == pytest.approx(0.08 * 1.36048896 / 0.36048896, rel=1e-12)
    assert capital_recovery_factor(0.08, 4) == pytest.approx(0.301921, abs=1e-6)
    assert capital_recovery_factor(0.0, 4) == 0.25


def test_owned_hourly_cost_by_hand() -> None:
    # one DGX H100 ($199,000, 8 GPUs) over 4 years at 8%, colocation $165 per kW-month for the
    # GPU's full-load IT draw of 532 W + 3,496 W / 8 = 969 W:
    #   199,000 x 0.3019208 / (8 x 8760) = 0.857338 $/GPU-hour of capital
    #   165 x 0.969 / 730               = 0.219021 $/GPU-hour of colocation
    assert full_load_w_per_gpu("h100-sxm") == pytest.approx(969.0)
    usd = owned_usd_per_gpu_hour(199_000, 8, 0.08, 4, 165, 0.969)
    assert usd == pytest.approx(0.857338 + 0.219021, abs=1e-6)


def test_draw_is_linear_between_idle_and_busy() -> None:
    assert gpu_draw_w(70, 532, 0.0) == 70
    assert gpu_draw_w(70, 532, 0.5) == pytest.approx(301)
    assert gpu_draw_w(70, 532, 1.0) == 532
    assert gpu_draw_w(70, 532, 2.0) == 532  # a load above capacity is clamped


def _plan(catalog, scenario, folder=EXAMPLES):
    plan = make_plan(scenario, catalog, folder=folder, jobs=1)
    return plan, plan_to_dict(plan)


def _site_mw(d: dict, pue: float) -> list[float]:
    """Facility MW at full load per hour, recomputed from the plan's replicas by tier (only
    reserved stands on the site in the example)."""
    (p,) = d["products"]
    w = full_load_w_per_gpu(p["gpu"])
    if "hourly" in p:
        return [h["reserved_replicas"] * p["gpus_per_replica"] * w * pue / 1e6 for h in p["hourly"]]
    # every GPU type's reserved GPUs stand on the site (the example's plan fills it with H200s and
    # tops it up with a few H100s)
    return [sum(u["gpus_by_tier"].get("reserved", 0) * full_load_w_per_gpu(g) for g, u in d["gpu_usage"].items())
            * pue / 1e6]


def test_power_capped_site_holds_its_limit_and_values_one_mw(catalog) -> None:
    scenario, _ = load_scenario(EXAMPLES / "power-capped-site.yaml")
    capped, d = _plan(catalog, scenario)
    assert check_invariants(capped) == []
    site = scenario.sites[0]
    pue = power_catalog().defaults.pue
    for mw in _site_mw(d, pue):
        assert mw <= site.limit_mw + 1e-9
    (sd,) = d["sites"]
    assert sd["peak_mw"] == pytest.approx(max(_site_mw(d, pue)), abs=1e-4)
    assert sd["hours_at_limit"] > 0
    free = scenario.model_copy(update={"sites": [site.model_copy(update={"limit_mw": 100.0})]})
    _, u = _plan(catalog, free)
    # unconstrained every replica is reserved; the cap moves part of them to on-demand
    assert u["monthly_cost_breakdown_usd"]["on_demand"] == 0
    assert d["monthly_cost_breakdown_usd"]["on_demand"] > 0
    assert d["monthly_cost_usd"] > u["monthly_cost_usd"]
    (b,) = d["binding_limits"]
    assert b["limit"] == f"power of site {site.name}" and b["step_unit"] == "MW" and b["step"] == 1.0
    # one more MW is enough for the unconstrained plan here (it holds 0.23 MW), so it saves the difference
    assert b["value_usd_per_month"] == pytest.approx(d["monthly_cost_usd"] - u["monthly_cost_usd"], abs=0.02)


def test_owned_hardware_is_priced_and_wins_for_the_steady_product(catalog) -> None:
    scenario, _ = load_scenario(EXAMPLES / "owned-vs-cloud.yaml")
    plan, d = _plan(catalog, scenario)
    assert check_invariants(plan) == []
    assert "owned" in d["tiers"]
    (owned,) = d["sites"][0]["owned"]
    # energy: 969 W x PUE 1.56 x $0.08/kWh
    assert owned["energy_usd_per_gpu_hour"] == pytest.approx(0.969 * 1.56 * 0.08, abs=1e-6)
    assert owned["amortised_usd_per_gpu_hour"] == pytest.approx(0.857338 + 0.219021, abs=2e-6)
    by = {p["name"]: p for p in d["products"]}
    summariser = by["summariser"]
    # a flat day at 92% utilisation: every replica owned, nothing rented
    assert summariser["monthly_cost_breakdown_usd"]["on_demand"] == 0
    assert summariser["prices_paid"]["reserved"]["usd_per_gpu_hour"] == pytest.approx(owned["usd_per_gpu_hour"], abs=1e-6)
    # owning costs its price in every hour; renting on demand only in the hours used: a replica is
    # owned when it runs more than owned / on-demand of the hours
    breakeven = owned["usd_per_gpu_hour"] / summariser["usd_per_gpu_hour"]
    assert breakeven == pytest.approx(0.3035, abs=1e-3)
    chat = by["chat"]
    assert chat["monthly_cost_breakdown_usd"]["reserved"] > 0 and chat["monthly_cost_breakdown_usd"]["on_demand"] > 0
    for p in d["products"]:
        assert p["power"]["tco2_per_month"] == pytest.approx(p["power"]["energy_mwh_per_month"] * 1000 * 367 / 1e6,
                                                             rel=1e-3)


def test_a_plan_without_sites_reports_power(catalog) -> None:
    scenario, _ = load_scenario(EXAMPLES / "seed-chat-70b.yaml")
    _, d = _plan(catalog, scenario)
    assert "sites" not in d
    pw = d["power"]
    assert pw["facility_kw_peak"] == pytest.approx(pw["it_kw_peak"] * power_catalog().defaults.pue, rel=1e-3)
    # one hour stands for the whole month: energy is the peak facility draw for 730 hours
    assert pw["energy_mwh_per_month"] == pytest.approx(pw["facility_kw_peak"] * 730 / 1000, rel=1e-4)
    (p,) = d["products"]
    tokens = p["demand_tokens_per_s"] * 730 * 3600
    assert pw["tokens_per_joule"] == pytest.approx(tokens / (pw["it_kw_peak"] * 1000 * 730 * 3600), rel=1e-3)


@pytest.mark.parametrize("row", power_catalog().measured_efficiency, ids=lambda r: f"{r.gpu}-{r.model}")
def test_tokens_per_joule_within_1_5x_of_measured(catalog, row) -> None:
    """The model's output tokens per joule of GPU energy at full load (roofline throughput of the
    measured configuration over its GPUs' busy draw) against the published measurement."""
    raw = {"products": [{"name": "m", "model": row.model, "precision": row.precision, "peak_qps": 1,
                         "input_tokens": 512, "output_tokens": 512, "min_tokens_per_s_per_user": 0.1,
                         "prefill": "headroom", "headroom": 0.0}],
           "options": {"gpus": [row.gpu], "tp": [row.tp], "pp": [1], "batch": [row.batch]}}
    scenario = parse_scenario(raw, "measured")
    (product,) = scenario.products
    cs = generate_candidates(product, catalog.models[row.model], catalog, scenario.options,
                             get_preset(scenario.preset), prune=False)
    (c,) = [c for c in cs.candidates if c.batch == row.batch]
    modelled = c.replica_tokens_per_s / (row.tp * power_catalog().gpu(row.gpu).busy_power_w)
    assert 1 / 1.5 <= modelled / row.output_tokens_per_joule <= 1.5, (modelled, row.output_tokens_per_joule)


def test_bad_sites_exit_with_one_line() -> None:
    base = {"products": [{"name": "c", "model": "llama-3.1-70b", "peak_qps": 1, "input_tokens": 100,
                          "output_tokens": 100, "min_tokens_per_s_per_user": 10}]}
    with pytest.raises(ScenarioError, match=r"options.tiers: owned h100-sxm .* add reserved"):
        parse_scenario({**base, "sites": [{"name": "a", "limit_mw": 1, "owned": {"h100-sxm": {}}}]}, "s")
    with pytest.raises(ScenarioError, match=r"capex_usd_per_server: the power catalog has no sourced server price for b200"):
        parse_scenario({**base, "options": {"tiers": ["reserved"]},
                        "sites": [{"name": "a", "limit_mw": 1, "owned": {"b200": {}}}]}, "s")
    with pytest.raises(ScenarioError, match=r"h100-sxm is already hosted by site a"):
        parse_scenario({**base, "sites": [{"name": "a", "limit_mw": 1, "gpus": ["h100-sxm"]},
                                          {"name": "b", "limit_mw": 1, "gpus": ["h100-sxm"]}]}, "s")
    with pytest.raises(ScenarioError, match=r"sites\[a\].energy_usd_per_kwh: hour 1: must be a number from 0 to 100 USD per kWh"):
        parse_scenario({**base, "sites": [{"name": "a", "limit_mw": 1, "energy_usd_per_kwh": [0.1, -1] + [0.1] * 22}]}, "s")
    with pytest.raises(ScenarioError, match=r"sites\[a\].limit_mw: must be a number above 0"):
        parse_scenario({**base, "sites": [{"name": "a", "limit_mw": 0}]}, "s")
    with pytest.raises(ScenarioError, match=r"24 \(a day\) or 168"):
        parse_scenario({**base, "sites": [{"name": "a", "limit_mw": 1, "energy_usd_per_kwh": [0.1, 0.2]}]}, "s")


def test_the_invariant_catches_a_site_over_its_limit(catalog) -> None:
    """The same plan checked against a site half as large breaks the site's limit."""
    scenario, _ = load_scenario(EXAMPLES / "power-capped-site.yaml")
    plan = make_plan(scenario, catalog, folder=EXAMPLES, jobs=1, alternatives=False)
    site = scenario.sites[0]
    smaller = scenario.model_copy(update={"sites": [site.model_copy(update={"limit_mw": site.limit_mw / 2})]})
    plan.scenario = smaller
    (problem,) = check_invariants(plan)
    assert problem.startswith("site dc1: hour 0: 0.09") and "> its limit of 0.05 MW" in problem


def test_owned_versus_rented_curve_by_hand(catalog) -> None:
    """Owned H100 at $0.08/kWh, PUE 1.56: idle IT draw 70 + 437 = 507 W, busy 969 W; on demand at
    the catalog's reference $3.945/GPU-hour. A GPU-month owned costs
    730 x (1.076358 + 0.507 x 1.56 x 0.08) = $831.9 idle and $42.09 more busy; renting on demand
    costs $2,879.85 busy, so owning wins above 831.9 / (2879.85 - 42.09) = 29.3% utilisation."""
    scenario, _ = load_scenario(EXAMPLES / "owned-vs-cloud.yaml")
    (c,) = owned_curves(scenario, catalog)
    assert c.owned_usd[0] == pytest.approx(730 * (1.076358 + 0.507 * 1.56 * 0.08), abs=0.01)
    assert c.owned_usd[-1] - c.owned_usd[0] == pytest.approx(730 * 0.462 * 1.56 * 0.08, abs=0.01)
    assert c.on_demand_usd[-1] == pytest.approx(730 * 3.945)
    fixed, slope = c.owned_usd[0], c.owned_usd[-1] - c.owned_usd[0]
    assert c.owned_beats_on_demand_above == pytest.approx(fixed / (730 * 3.945 - slope), rel=1e-9)
    assert c.owned_beats_on_demand_above == pytest.approx(0.2932, abs=1e-4)
    assert c.owned_beats_reserved_above == 0.0  # idle owned costs less than the rented reserved GPU-month


def test_products_on_one_site_share_its_power(catalog) -> None:
    """Two products, each within the site's limit alone, exceed it together: they are planned as
    one group and the joint plan keeps the site within its limit in every hour."""
    product = {"model": "llama-3.1-70b", "precision": "fp8", "peak_qps": 100, "input_tokens": 2000,
               "output_tokens": 400, "min_tokens_per_s_per_user": 30, "prefill": "headroom"}
    raw = {"products": [{"name": "a", **product}, {"name": "b", **product}],
           "options": {"gpus": ["h100-sxm", "h200-sxm"], "tiers": ["reserved", "on_demand"], "tp": [2, 4]},
           "sites": [{"name": "s", "limit_mw": 0.06, "tiers": ["reserved"]}]}
    scenario = parse_scenario(raw, "two")
    plan = make_plan(scenario, catalog, jobs=1, alternatives=False)
    d = plan_to_dict(plan)
    assert d["components"] == [["a", "b"]]
    assert check_invariants(plan) == []
    (site,) = d["sites"]
    assert site["peak_mw"] <= 0.06 + 1e-9 and site["hours_at_limit"] > 0
    for name in ("a", "b"):
        alone = parse_scenario({**raw, "products": [p for p in raw["products"] if p["name"] == name]}, "one")
        da = plan_to_dict(make_plan(alone, catalog, jobs=1, alternatives=False))
        assert da["monthly_cost_breakdown_usd"]["on_demand"] < d["monthly_cost_breakdown_usd"]["on_demand"]


def test_carbon_price_adds_full_load_carbon_to_every_tier(catalog) -> None:
    """$100/tCO2 on an H100 outside any site: 0.969 kW x PUE 1.56 x 367 g/kWh = 0.5548 kg an hour,
    $0.05548 on each GPU-hour of every tier; on a site at 50 g/kWh, 50/367 of that."""
    from fleetplan.optimizer.problem_data.candidates import resolve_gpu_price

    base = {"products": [{"name": "c", "model": "llama-3.1-70b", "peak_qps": 1, "input_tokens": 100,
                          "output_tokens": 100, "min_tokens_per_s_per_user": 10}],
            "options": {"tiers": ["reserved", "on_demand", "spot"]}}
    plain = resolve_gpu_price(catalog, parse_scenario(base, "s").options, "h100-sxm")
    priced = parse_scenario({**base, "options": {**base["options"], "carbon_usd_per_tco2": 100}}, "s")
    carbon = resolve_gpu_price(catalog, priced.options, "h100-sxm")
    add = 100 * 0.969 * 1.56 * 367 / 1e6
    assert add == pytest.approx(0.055477, abs=1e-6)
    for tier in ("reserved", "on_demand", "spot"):
        assert carbon.tier(tier) - plain.tier(tier) == pytest.approx(add, rel=1e-9)
    assert "carbon at $100/tCO2" in carbon.tier_source("spot")
    clean = parse_scenario({**base, "options": {**base["options"], "carbon_usd_per_tco2": 100},
                            "sites": [{"name": "hydro", "limit_mw": 10, "carbon_gco2_per_kwh": 50}]}, "s")
    low = resolve_gpu_price(catalog, clean.options, "h100-sxm")
    assert low.tier("on_demand") - plain.tier("on_demand") == pytest.approx(add * 50 / 367, rel=1e-9)


def test_site_power_row_by_hand(catalog) -> None:
    """The MIP row of a site: every GPU it hosts (reserved and on-demand here, spot rented
    elsewhere) at 969 W x PUE 1.56 = 0.00151164 MW, at most the 0.2 MW limit."""
    import sys

    from fleetplan.optimizer.mip.formulation import build_model
    from fleetplan.optimizer.mip.linear import to_linear_problem
    from fleetplan.optimizer.problem_data.problem import build_problem

    sys.path.insert(0, str(Path(__file__).resolve().parent / "data"))
    import make_references

    prob, _, _ = build_problem(parse_scenario(make_references.SMALL, "small"), catalog, get_preset("default"))
    lp = to_linear_problem(build_model(prob))
    (i,) = [i for i, n in enumerate(lp.row_names) if lp.row_families[i] == "site_power"]
    assert lp.row_upper[i] == 0.2
    coefs = {lp.col_names[j]: v for j, v in zip(lp.row_index[i], lp.row_value[i])}
    assert coefs and all(v == pytest.approx(969 * 1.56 / 1e6, rel=1e-9) for v in coefs.values())
    assert not any(name.startswith(("spot", "pool_spot")) for name in coefs)
    assert any(name.startswith("reserved[") for name in coefs) and any(name.startswith("on_demand[") for name in coefs)


def test_a_site_naming_an_unknown_gpu_is_refused_with_the_nearest(tmp_path) -> None:
    """A typo in a site's GPU ids is an error naming the field and the nearest id, never a site
    that silently hosts nothing (exit 2, one line, no output)."""
    import subprocess
    import sys

    import yaml

    doc = yaml.safe_load((EXAMPLES / "power-capped-site.yaml").read_text(encoding="utf-8"))
    doc["sites"][0]["gpus"] = ["h100-sxmm"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "fleetplan", "plan", str(path)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip() == ("fleetplan: error: sites[dc1].gpus: unknown GPU id 'h100-sxmm' "
                                  "(nearest valid choice: h100-sxm)")

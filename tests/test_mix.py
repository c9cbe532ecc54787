"""Request mixes and percentile TTFT targets: the MIP against brute force on tiny mixes, HiGHS
against OR-Tools, a one-bucket mix against the plain product, invariants recomputed from the
plan, the saving against the best single configuration, and the input rules."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from fleetplan.main import main
from fleetplan.models.presets import get_preset
from fleetplan.models.queueing import ServiceTime, max_utilisation_for_quantile
from fleetplan.optimizer.explanation.invariants import check_invariants
from fleetplan.optimizer.explanation.mix_results import mix_fields
from fleetplan.optimizer.problem_data.percentiles import pool_utilisation_cap
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.problem_data.problem import build_problem
from fleetplan.optimizer.explanation.results import plan_to_dict
from fleetplan.optimizer.traffic.scenario import ScenarioError, load_scenario, parse_scenario

TWO = [{"input_tokens": 128, "output_tokens": 128, "share": 0.8},
       {"input_tokens": 6000, "output_tokens": 400, "share": 0.2}]


def tiny(qps: float, buckets: list[dict], **product: object) -> dict:
    """A one-hour mix on two GPU types, one TP, one precision, three batches, colocated prefill."""
    return {
        "products": [{"name": "m", "model": "llama-3.1-8b", "peak_qps": qps, "min_tokens_per_s_per_user": 20,
                      "precision": "fp8", "prefill": "colocated", "requests": buckets, **product}],
        "options": {"gpus": ["l4", "h100-sxm"], "tp": [1], "batch": [16, 64, 256]},
    }


def covers_second(n: dict[str, int], a: dict[str, float], r: dict[str, float]) -> bool:
    """Whether replicas ``n`` serve both buckets of a two-bucket mix, exactly: bucket 1 is spread
    over its configurations (``a[c]``: replicas one full bucket 1 takes on c), cheapest first in
    what it takes from bucket 2 (``r[c]``: share of bucket 2 one replica of c serves), and bucket 2
    gets the rest: a fractional knapsack, solved by the greedy order."""
    left, lost = 1.0, 0.0
    for c in sorted(a, key=lambda c: (a[c] * r.get(c, 0.0), c)):
        x = min(left, n[c] / a[c])
        left -= x
        lost += x * a[c] * r.get(c, 0.0)
    return left <= 1e-9 and sum(n[c] * r[c] for c in r) - lost >= 1 - 1e-9


def brute_force(catalog, raw: dict) -> float:
    """Cheapest integer replicas of every configuration that serve both buckets (enumerated)."""
    scenario = parse_scenario(raw, "tiny")
    prob, _, _ = build_problem(scenario, catalog, get_preset("default"))
    pd = prob.products["m"]
    b1, b2 = pd.buckets
    a = {k: b1.demand_tokens_per_s[0] / u for k, u in b1.capacity.items()}
    r = {k: u / b2.demand_tokens_per_s[0] for k, u in b2.capacity.items()}
    keys = [c.key for c in pd.candidates]
    price = {c.key: c.monthly_cost_per_replica_usd for c in pd.candidates}
    best = math.inf
    for counts in itertools.product(*[range(pd.replica_bound(c) + 1) for c in pd.candidates]):
        n = dict(zip(keys, counts))
        if covers_second(n, a, r):
            best = min(best, sum(price[k] * n[k] for k in keys))
    return best


@pytest.mark.parametrize("qps,buckets", [
    (3.0, TWO),
    (11.0, TWO),
    (25.0, [{"input_tokens": 64, "output_tokens": 256, "share": 0.5},
            {"input_tokens": 3000, "output_tokens": 200, "share": 0.5}]),
    (40.0, [{"input_tokens": 512, "output_tokens": 64, "share": 0.9},
            {"input_tokens": 12000, "output_tokens": 500, "share": 0.1}]),
])
def test_mix_mip_equals_brute_force(catalog, qps, buckets):
    raw = tiny(qps, buckets)
    expected = brute_force(catalog, raw)
    assert math.isfinite(expected)
    for solver in ("highs", "ortools"):
        plan = make_plan(parse_scenario(raw, "tiny"), catalog, solver=solver, alternatives=False)
        assert plan.monthly_cost_usd == pytest.approx(expected, rel=1e-9), solver
        assert check_invariants(plan) == []


def test_one_bucket_mix_is_the_plain_product(catalog):
    """A mix of one bucket plans exactly what the product with that request size plans."""
    plain = {"name": "m", "model": "llama-3.1-8b", "peak_qps": 30, "input_tokens": 2000, "output_tokens": 300,
             "min_tokens_per_s_per_user": 20, "max_ttft_ms": 1500}
    mixed = {k: v for k, v in plain.items() if k not in ("input_tokens", "output_tokens")}
    mixed["requests"] = [{"input_tokens": 2000, "output_tokens": 300, "share": 1.0}]
    options = {"gpus": ["l40s", "h100-sxm"]}
    a = make_plan(parse_scenario({"products": [plain], "options": options}, "plain"), catalog, alternatives=False)
    b = make_plan(parse_scenario({"products": [mixed], "options": options}, "mix"), catalog, alternatives=False)
    (pa,), (pb,) = a.products, b.products
    assert b.monthly_cost_usd == pytest.approx(a.monthly_cost_usd, rel=1e-9)
    assert pb.candidate.key == pa.candidate.key and pb.replicas == pa.replicas
    assert (pb.pool.key if pb.pool else None) == (pa.pool.key if pa.pool else None)
    assert pb.prefill_pool.peak == pa.prefill_pool.peak
    assert [f.part.key for f in pb.mix.fleets] == [pa.candidate.key]
    assert check_invariants(b) == []


def test_mix_splits_buckets_and_reports_its_saving(catalog):
    """Short requests on small GPUs, long ones on large ones: the mix costs less than the best
    single configuration, by the saving it reports; every bucket is covered at the peak hour."""
    raw = {
        "products": [{"name": "chat", "model": "llama-3.1-8b", "peak_qps": 400, "min_tokens_per_s_per_user": 20,
                      "prefill": "colocated",
                      "requests": [{"input_tokens": 24, "output_tokens": 160, "share": 0.6},
                                   {"input_tokens": 96, "output_tokens": 256, "share": 0.35},
                                   {"input_tokens": 4096, "output_tokens": 512, "share": 0.05}]}],
        "options": {"gpus": ["l4", "l40s", "h100-sxm", "h200-sxm"], "tp": [1, 2]},
    }
    plan = make_plan(parse_scenario(raw, "chat"), catalog)
    (pp,) = plan.products
    assert check_invariants(plan) == []
    d = mix_fields(pp)
    single = pp.mix.single
    assert single is not None and single["single_configuration"]
    assert d["mix_saving_usd"] == pytest.approx(single["monthly_cost_usd"] - pp.monthly_cost_usd, abs=0.01)
    assert d["mix_saving_usd"] > 0
    assert len(d["configurations"]) >= 2
    for row in d["requests"]:
        assert sum(c["share"] for c in row["configurations"]) + row["api_fraction"] == pytest.approx(1, abs=1e-5)
    assert sum(c["usd_per_month"] for c in d["configurations"]) == pytest.approx(pp.decode_cost_usd, abs=0.05)
    # the JSON totals count every configuration's GPUs
    assert plan_to_dict(plan)["totals"]["gpus"] == sum(c["gpus"] for c in d["configurations"])


def test_mix_with_api_and_a_day_keeps_invariants(catalog, examples):
    """A mix over a day with a capped API burst share: each bucket covered every hour (by its
    configurations and the API), capacity consumed within replicas, the API within its share."""
    raw = tiny(20.0, TWO, api={"model": "llama-3.1-8b", "max_fraction": 0.2},
               demand_profile=str(examples / "profiles" / "peak-hour-day.csv"))
    plan = make_plan(parse_scenario(raw, "day"), catalog, alternatives=False)
    (pp,) = plan.products
    assert plan.hours == 24 and check_invariants(plan) == []
    assert sum(pp.api_tokens_per_s) <= 0.2 * sum(pp.data.demand_tokens_per_s) * (1 + 1e-9)


def test_broken_plan_is_caught(catalog):
    """The invariants would catch a mix whose replicas do not hold what its buckets consume."""
    plan = make_plan(parse_scenario(tiny(11.0, TWO), "tiny"), catalog, alternatives=False)
    (pp,) = plan.products
    f = pp.mix.fleets[0]
    f.on_demand[0] -= 1
    assert any("consumes" in p for p in check_invariants(plan))


def test_percentile_target_caps_pool_utilisation(catalog):
    """A pool sized for p99 is loaded no more than the queueing model allows at one server, and
    the plan reports percentiles within the targets."""
    raw = {"products": [{"name": "rag", "model": "llama-3.1-8b", "peak_qps": 20, "min_tokens_per_s_per_user": 20,
                         "prefill": "pool", "max_ttft_ms": {"p50": 800, "p99": 3000}, "requests": TWO}],
           "options": {"gpus": ["h100-sxm"], "tp": [1]}}
    plan = make_plan(parse_scenario(raw, "rag"), catalog, alternatives=False)
    (pp,) = plan.products
    k = pp.pool
    service = k.service_time
    fixed = k.transfer_s + k.admission_s
    assert service.scv > 0  # a mix of prompt lengths is not deterministic
    expected = min(max_utilisation_for_quantile(0.5, 0.8, servers=1, service=service, fixed_s=fixed),
                   max_utilisation_for_quantile(0.99, 3.0, servers=1, service=service, fixed_s=fixed))
    assert k.max_utilisation == pytest.approx(min(expected, 1.0))
    assert pp.pool_peak_utilisation <= k.max_utilisation + 1e-9
    assert pp.ttft_percentiles_ms["p50"] <= 800 and pp.ttft_percentiles_ms["p99"] <= 3000
    assert pp.ttft_percentiles_ms["p50"] <= pp.ttft_percentiles_ms["p90"] <= pp.ttft_percentiles_ms["p99"]
    assert check_invariants(plan) == []


def test_tighter_p99_never_loads_more():
    service = ServiceTime(0.2, 0.5)
    caps = [pool_utilisation_cap(service, 0.01, [(0.99, t)]) for t in (1.0, 2.0, 4.0, 8.0)]
    assert caps == sorted(caps) and 0 < caps[0] < caps[-1] < 1


def test_plain_product_with_percentiles_reports_them(catalog):
    raw = {"products": [{"name": "c", "model": "llama-3.1-8b", "peak_qps": 10, "input_tokens": 500,
                         "output_tokens": 200, "min_tokens_per_s_per_user": 20, "prefill": "colocated",
                         "max_ttft_ms": {"p99": 3000}}], "options": {"gpus": ["l40s"], "tp": [1]}}
    plan = make_plan(parse_scenario(raw, "c"), catalog, alternatives=False)
    d = plan_to_dict(plan)["products"][0]
    assert set(d["ttft_percentiles_ms"]) == {"p50", "p90", "p99"} and d["ttft_percentiles_ms"]["p99"] <= 3000
    assert "requests" not in d and "mix_saving_usd" not in d


def test_inline_mix_fills_mean_sizes_and_scales_shares():
    s = parse_scenario({"products": [{"name": "m", "model": "x", "peak_qps": 1, "requests": [
        {"input_tokens": 100, "output_tokens": 10, "share": 0.502},
        {"input_tokens": 300, "output_tokens": 30, "share": 0.5}]}]}, "s")
    (p,) = s.products
    assert sum(b.share for b in p.requests) == pytest.approx(1.0, abs=1e-15)
    assert (p.input_tokens, p.output_tokens) == (200, 20)


@pytest.mark.parametrize("buckets,field", [
    ([{"input_tokens": 100, "output_tokens": 10, "share": 0.5}], "requests"),
    ([{"input_tokens": 100, "output_tokens": 10, "share": 0}], "requests.0.share"),
    ([{"input_tokens": 0, "output_tokens": 10, "share": 1}], "requests.0.input_tokens"),
    ([], "requests"),
])
def test_bad_mix_is_one_line_naming_the_field(buckets, field):
    with pytest.raises(ScenarioError) as err:
        parse_scenario({"products": [{"name": "m", "model": "x", "peak_qps": 1, "input_tokens": 1,
                                      "output_tokens": 1, "requests": buckets}]}, "s")
    assert "\n" not in str(err.value) and f"products[m].{field}" in str(err.value)


def test_histogram_csv_with_counts(tmp_path: Path):
    (tmp_path / "h.csv").write_text("output_tokens,input_tokens,count\n10,100,3\n30,300,1\n", encoding="utf-8")
    s = parse_scenario({"products": [{"name": "m", "model": "x", "peak_qps": 1, "requests": "h.csv"}]}, "s",
                       tmp_path)
    (p,) = s.products
    assert [(b.input_tokens, b.output_tokens, b.share) for b in p.requests] == [(100, 10, 0.75), (300, 30, 0.25)]


@pytest.mark.parametrize("csv,words", [
    ("input_tokens,output_tokens\n1,1\n", "one of share or count"),
    ("input_tokens,output_tokens,share\n1.5,1,1\n", "line 2: input_tokens"),
    ("input_tokens,output_tokens,share\n10,1,0.5\n", "requests: shares sum to 0.5"),
])
def test_bad_histogram_exits_2_with_one_line(tmp_path: Path, capsys, csv, words):
    (tmp_path / "h.csv").write_text(csv, encoding="utf-8")
    (tmp_path / "s.yaml").write_text(json.dumps(
        {"products": [{"name": "m", "model": "llama-3.1-8b", "peak_qps": 1, "requests": "h.csv"}]}), encoding="utf-8")
    out = tmp_path / "plan.json"
    code = main(["plan", str(tmp_path / "s.yaml"), "--json", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and words in err
    assert not out.exists()


def test_a_problem_cut_to_fewer_configurations_still_builds(catalog):
    """Restricting a mix's configurations (sensitivity, the report) leaves its buckets on the rest."""
    from dataclasses import replace

    from fleetplan.optimizer.decomposition.search import solve_by_configuration

    prob, _, _ = build_problem(parse_scenario(tiny(11.0, TWO), "tiny"), catalog, get_preset("default"))
    pd = prob.products["m"]
    h100 = tuple(c for c in pd.candidates if c.gpu == "h100-sxm")
    assert 0 < len(h100) < len(pd.candidates)
    cut = prob.derive(products={"m": replace(pd, candidates=h100)})
    res, _, _ = solve_by_configuration(cut, "m", "highs")
    whole, _, _ = solve_by_configuration(prob, "m", "highs")
    assert res.objective >= whole.objective - 1e-6


def test_mix_plan_is_deterministic_and_every_product_reports_percentiles(catalog):
    """Same scenario, same JSON; with one product's percentile targets, the others report theirs."""
    raw = tiny(11.0, TWO, max_ttft_ms={"p99": 60000})
    raw["products"].append({"name": "plain", "model": "llama-3.1-8b", "peak_qps": 5, "input_tokens": 300,
                            "output_tokens": 100, "min_tokens_per_s_per_user": 20, "prefill": "colocated"})
    a, b = (plan_to_dict(make_plan(parse_scenario(raw, "s"), catalog)) for _ in range(2))
    assert a == b
    assert all(set(p["ttft_percentiles_ms"]) == {"p50", "p90", "p99"} for p in a["products"])
    assert a["products"][0]["ttft_percentiles_ms"]["p99"] <= 60000


def test_an_idle_mix_and_a_mix_coupled_by_shared_limits(catalog):
    """A mix without demand costs nothing; a mix sharing limited H100s and whole instances with a
    plain product is solved with it in one MIP and keeps every promise (no saving is reported:
    the single-configuration comparison is made for a product planned on its own)."""
    idle = make_plan(parse_scenario(tiny(0.0, TWO), "idle"), catalog)
    assert idle.monthly_cost_usd == 0 and check_invariants(idle) == []
    raw = tiny(30.0, TWO)
    raw["products"].append({"name": "p", "model": "llama-3.1-8b", "peak_qps": 10, "input_tokens": 1000,
                            "output_tokens": 200, "min_tokens_per_s_per_user": 20})
    raw["limits"] = {"gpu_availability": {"h100-sxm": 16}, "instance_gpus": 8}
    plan = make_plan(parse_scenario(raw, "coupled"), catalog)
    assert plan.components == [["m", "p"]] and check_invariants(plan) == []
    d = plan_to_dict(plan)
    assert d["products"][0]["mix_saving_usd"] is None
    assert all(u["gpus"] <= 16 for g, u in d["gpu_usage"].items() if g == "h100-sxm")


def test_a_mixs_mode_costs_are_alternatives_and_never_undercut_it(catalog, examples):
    """A mix runs some buckets colocated and others on a pool: with alternatives, the mix kept to
    each prefill mode is priced (never below the mix, which may run either) and the explanation
    says the mix uses both; without alternatives neither is searched, and the plan is the same."""
    scenario, folder = load_scenario(examples / "mix-conversational.yaml")
    full = make_plan(scenario, catalog, folder=folder)
    bare = make_plan(scenario, catalog, folder=folder, alternatives=False)
    pp, cost = full.products[0], full.monthly_cost_usd
    modes = {f.part.mode for f in pp.mix.fleets if any(f.on_demand)}
    assert modes == {"colocated", "pool"}
    assert set(pp.mode_costs) == modes and all(v >= cost - 0.01 for v in pp.mode_costs.values())
    assert "prefill colocated and pool by bucket; the mix kept to one prefill mode costs" in pp.why
    assert bare.products[0].mode_costs == {} and "prefill mode" not in bare.products[0].why
    assert bare.monthly_cost_usd == cost

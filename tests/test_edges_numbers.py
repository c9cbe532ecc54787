"""Numbers at the edges: absurd or non-finite values refused by name, valid extremes planned.

Every bad case runs the command in-process as a user would and checks the contract: exit code
2, the field (or flag) named on stderr, no traceback, a short message, and no output file.
The valid extremes (full prefix-cache hit, zero demand, shares of 0 and 1, one calibration
configuration) must give plans and files with the right numbers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from fleetplan.catalogs import fields as F
from fleetplan.commands.io import dumps
from fleetplan.main import main

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT / "benchmarks" / "data" / "public-measurements.csv"

PRODUCT = {
    "name": "chat", "model": "llama-3.1-70b", "precision": "fp8", "peak_qps": 35, "input_tokens": 2000,
    "output_tokens": 400, "min_tokens_per_s_per_user": 30,
}
OPTIONS = {"gpus": ["h100-sxm"], "tp": [2], "batch": [64], "gpu_hour_usd": {"h100-sxm": 2.5}}
MEASURE_HEADER = "model,gpu,precision,tp,batch,input_tokens,output_tokens,engine,measured_tpot_ms\n"
MEASURE_ROW = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "precision": "fp8", "tp": "1", "batch": "8",
               "input_tokens": "1000", "output_tokens": "200", "engine": "vllm", "measured_tpot_ms": "8"}
HF_CONFIG = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
             "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072}


def run(capsys, argv: list[str]) -> tuple[int, str, str]:
    """Run the CLI in-process; argparse's own exits count as return codes."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def scenario(tmp_path: Path, product: dict | None = None, options: dict | None = None, **top: object) -> str:
    """Write a scenario (the worked example at a tenth of its load) with overrides; its path."""
    doc = {"preset": "seed", "products": [{**PRODUCT, **(product or {})}], "options": {**OPTIONS, **(options or {})},
           **top}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def raw_scenario(tmp_path: Path, line: str, where: str = "product") -> str:
    """A scenario with one raw YAML line in the product (or in options, or as limits), for
    values ``yaml.safe_dump`` would not write as typed (``.inf``, ``1e18``, ``!!set``)."""
    key = line.split(":", 1)[0].strip()
    product = {k: v for k, v in PRODUCT.items() if not (where == "product" and k == key)}
    options = {k: v for k, v in OPTIONS.items() if not (where == "options" and k == key)}
    text = yaml.safe_dump({"preset": "seed", "products": [product]}, sort_keys=False)
    if where == "product":
        text += f"  {line}\n"
    text += "options:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in options.items())
    if where == "options":
        text += f"  {line}\n"
    if where == "limits":
        text += f"limits:\n  {line}\n"
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return str(path)


def catalog_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return str(path)


def measurements(tmp_path: Path, **cells: str) -> str:
    row = {**MEASURE_ROW, **cells}
    path = tmp_path / "m.csv"
    path.write_text(MEASURE_HEADER + ",".join(row[c] for c in MEASURE_HEADER.strip().split(",")) + "\n")
    return str(path)


def profile(tmp_path: Path, kind: str, value: str, peak_qps: float = 35) -> str:
    (tmp_path / "p.csv").write_text(f"hour,{kind}\n" + "".join(f"{h},{value if h == 3 else 1}\n" for h in range(24)))
    return scenario(tmp_path, {"demand_profile": "p.csv", "peak_qps": peak_qps})


def calibration(tmp_path: Path, key: str, value: str) -> str:
    factors = {"bandwidth_scale": "1.0", "compute_scale": "1.0", "overhead_scale": "1.0", "comm_scale": "1.0", key: value}
    text = "fleetplan_calibration: 1\npreset: default\nfactors:\n  - gpu: null\n    engine: null\n" + "".join(
        f"    {k}: {v}\n" for k, v in factors.items())
    path = tmp_path / "cal.yaml"
    path.write_text(text)
    return str(path)


def hf_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.json"
    path.write_text(text)
    return str(path)


def hf_with(**changes: object) -> str:
    return json.dumps({**HF_CONFIG, **changes})


PLAN = ["plan", "--json", "--out"]
ESTIMATE = ["estimate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--input-tokens", "1000", "--output-tokens", "200"]
GPU_ENTRY = "gpus:\n  - id: h100-sxm\n    "
NEW_PRICE = ("prices:\n  - {gpu: h100-sxm, provider: acme, kind: spot, usd_per_gpu_hour: %s, source: s, "
             "as_of: 2026-01-01}\n")
NEW_API = ("api_prices:\n  - {id: acme/x, provider: acme, model: llama-3.1-8b, input_usd_per_million_tokens: 1, "
           "output_usd_per_million_tokens: %s, source: s, as_of: 2026-01-01}\n")

# (id, argv builder from tmp_path and the output path, text the error must contain)
CASES = [
    # scenario: products
    ("qps-1e308", lambda t, o: [*PLAN, o, raw_scenario(t, "peak_qps: 1.0e+308")], "peak_qps"),
    ("qps-1e18-text", lambda t, o: [*PLAN, o, raw_scenario(t, "peak_qps: 1e18")], "peak_qps"),
    ("qps-inf", lambda t, o: [*PLAN, o, raw_scenario(t, "peak_qps: .inf")], "peak_qps"),
    ("qps-nan", lambda t, o: [*PLAN, o, raw_scenario(t, "peak_qps: .nan")], "peak_qps"),
    ("qps-true", lambda t, o: [*PLAN, o, raw_scenario(t, "peak_qps: true")], "peak_qps: must be a number from 0 to 1e+07 queries per second, not true or false"),
    ("qps-negative", lambda t, o: [*PLAN, o, scenario(t, {"peak_qps": -1})], "peak_qps"),
    ("qps-set", lambda t, o: [*PLAN, o, raw_scenario(t, "peak_qps: !!set {1: null}")], "peak_qps"),
    ("input-tokens-huge", lambda t, o: [*PLAN, o, scenario(t, {"input_tokens": 1e308})], "input_tokens"),
    ("input-tokens-over", lambda t, o: [*PLAN, o, scenario(t, {"input_tokens": 10_000_001})], "input_tokens"),
    ("output-tokens-fraction", lambda t, o: [*PLAN, o, scenario(t, {"output_tokens": 2.5})], "output_tokens"),
    ("hit-rate-over-one", lambda t, o: [*PLAN, o, scenario(t, {"prefix_cache_hit_rate": 1.5})], "prefix_cache_hit_rate"),
    ("headroom-one", lambda t, o: [*PLAN, o, scenario(t, {"headroom": 1.0})], "headroom"),
    ("fixed-cost-inf", lambda t, o: [*PLAN, o, raw_scenario(t, "self_host_fixed_monthly_usd: .inf")],
     "self_host_fixed_monthly_usd"),
    ("fixed-cost-huge", lambda t, o: [*PLAN, o, scenario(t, {"self_host_fixed_monthly_usd": 1e13})],
     "self_host_fixed_monthly_usd"),
    ("speed-zero", lambda t, o: [*PLAN, o, scenario(t, {"min_tokens_per_s_per_user": 0})], "min_tokens_per_s_per_user"),
    ("ttft-negative", lambda t, o: [*PLAN, o, scenario(t, {"max_ttft_ms": -5})], "max_ttft_ms"),
    ("api-share-two", lambda t, o: [*PLAN, o, scenario(t, {"api": {"model": "llama-3.1-70b", "max_fraction": 2}})],
     "api.max_fraction"),
    # scenario: options and limits
    ("max-batch-1e9", lambda t, o: [*PLAN, o, scenario(t, options={"max_batch": 1_000_000_000})], "max_batch"),
    ("batch-zero", lambda t, o: [*PLAN, o, scenario(t, options={"batch": [0]})], "options.batch"),
    ("tp-huge", lambda t, o: [*PLAN, o, scenario(t, options={"tp": [10**9]})], "options.tp"),
    ("gpu-price-inf", lambda t, o: [*PLAN, o, raw_scenario(t, "gpu_hour_usd: {h100-sxm: .inf}", "options")],
     "gpu_hour_usd"),
    ("gpu-price-bool", lambda t, o: [*PLAN, o, scenario(t, options={"gpu_hour_usd": {"h100-sxm": True}})],
     "gpu_hour_usd"),
    ("time-limit-inf", lambda t, o: [*PLAN, o, "--solver", "ortools", raw_scenario(t, "time_limit_s: .inf", "options")],
     "time_limit_s"),
    ("time-limit-tiny", lambda t, o: [*PLAN, o, "--solver", "ortools", scenario(t, options={"time_limit_s": 0.0004})],
     "time_limit_s"),
    ("spot-share-over", lambda t, o: [*PLAN, o, scenario(t, options={"spot_max_share": 1.5})], "spot_max_share"),
    ("discount-one", lambda t, o: [*PLAN, o, scenario(t, options={"reserved_discount": 1})], "reserved_discount"),
    ("gap-negative", lambda t, o: [*PLAN, o, scenario(t, options={"mip_rel_gap": -1})], "mip_rel_gap"),
    ("budget-inf", lambda t, o: [*PLAN, o, raw_scenario(t, "monthly_budget_usd: .inf", "limits")],
     "monthly_budget_usd"),
    ("availability-huge", lambda t, o: [*PLAN, o, raw_scenario(t, "gpu_availability: {h100-sxm: 1.0e+30}", "limits")],
     "gpu_availability"),
    ("instance-bool", lambda t, o: [*PLAN, o, raw_scenario(t, "instance_gpus: true", "limits")], "instance_gpus"),
    # catalogs, through plan (checked before any solve) and through catalog list
    ("gpu-bandwidth-inf", lambda t, o: [*PLAN, o, scenario(t), "--catalog",
                                        catalog_file(t, GPU_ENTRY + "mem_bandwidth_bytes_per_s: .inf\n")],
     "mem_bandwidth_bytes_per_s"),
    ("gpu-flops-huge", lambda t, o: ["catalog", "list", "gpus", "--catalog",
                                     catalog_file(t, GPU_ENTRY + "dense_flops_per_s: {bf16: 1.0e+30}\n")],
     "dense_flops_per_s.bf16"),
    ("gpu-memory-bool", lambda t, o: ["catalog", "list", "gpus", "--catalog",
                                      catalog_file(t, GPU_ENTRY + "memory_bytes: true\n")], "memory_bytes"),
    ("gpu-domain-fraction", lambda t, o: ["catalog", "list", "gpus", "--catalog",
                                          catalog_file(t, GPU_ENTRY + "scaleup_domain_gpus: 7.5\n")],
     "scaleup_domain_gpus"),
    ("price-inf", lambda t, o: ["catalog", "list", "prices", "--catalog", catalog_file(t, NEW_PRICE % ".inf")],
     "usd_per_gpu_hour"),
    ("reference-price-huge", lambda t, o: [*PLAN, o, scenario(t, options={"gpu_hour_usd": {}}), "--catalog",
                                           catalog_file(t, "reference:\n  - {gpu: h100-sxm, usd_per_gpu_hour: 1.0e+9}\n")],
     "usd_per_gpu_hour"),
    ("api-price-nan", lambda t, o: ["catalog", "list", "api", "--catalog", catalog_file(t, NEW_API % ".nan")],
     "output_usd_per_million_tokens"),
    ("model-params-huge", lambda t, o: ["catalog", "list", "models", "--catalog",
                                        catalog_file(t, "models:\n  - {id: llama-3.1-8b, total_params: 1.76e+56}\n")],
     "total_params"),
    ("model-hidden-bool", lambda t, o: ["catalog", "list", "models", "--catalog",
                                        catalog_file(t, "models:\n  - {id: llama-3.1-8b, hidden_size: true}\n")],
     "hidden_size"),
    # demand profiles
    ("profile-multiplier-inf", lambda t, o: [*PLAN, o, profile(t, "multiplier", "inf")], "multiplier"),
    ("profile-qps-huge", lambda t, o: [*PLAN, o, profile(t, "qps", "1e308")], "qps"),
    ("profile-peak-times-multiplier", lambda t, o: [*PLAN, o, profile(t, "multiplier", "100", peak_qps=1e6)],
     "demand_profile"),
    # measurement files
    ("measure-input-1e308", lambda t, o: ["validate", "--json", measurements(t, input_tokens="1e308")], "input_tokens"),
    ("measure-tp-huge", lambda t, o: ["validate", measurements(t, tp="1e9")], "'tp'"),
    ("measure-batch-fraction", lambda t, o: ["calibrate", measurements(t, batch="2.5"), "--out", o], "'batch'"),
    ("measure-tpot-inf", lambda t, o: ["calibrate", measurements(t, measured_tpot_ms="inf"), "--out", o],
     "measured_tpot_ms"),
    ("measure-tpot-tiny", lambda t, o: ["validate", "--json", measurements(t, measured_tpot_ms="1e-300")],
     "measured_tpot_ms"),
    # calibration profiles
    ("calibration-inf", lambda t, o: [*ESTIMATE, "--calibration", calibration(t, "bandwidth_scale", ".inf")],
     "bandwidth_scale"),
    ("calibration-bool", lambda t, o: [*ESTIMATE, "--calibration", calibration(t, "compute_scale", "true")],
     "compute_scale"),
    ("calibration-zero", lambda t, o: [*ESTIMATE, "--calibration", calibration(t, "overhead_scale", "0")],
     "overhead_scale"),
    # config.json import
    ("hf-hidden-1e30", lambda t, o: ["catalog", "add-model", hf_config(t, hf_with(hidden_size=1e30)), "--id", "x",
                                     "--out", o], "hidden_size"),
    ("hf-layers-infinity", lambda t, o: ["catalog", "add-model", hf_config(t, hf_with().replace("32,", "Infinity,", 1)),
                                         "--id", "x", "--out", o], "num_hidden_layers"),
    ("hf-heads-bool", lambda t, o: ["catalog", "add-model", hf_config(t, hf_with(num_attention_heads=True)), "--id",
                                    "x", "--out", o], "num_attention_heads"),
    ("hf-vocab-text", lambda t, o: ["catalog", "add-model", hf_config(t, hf_with(vocab_size="many")), "--id", "x",
                                    "--out", o], "vocab_size"),
    ("hf-5000-digits", lambda t, o: ["catalog", "add-model", hf_config(t, hf_with().replace("4096", "9" * 5000)),
                                     "--id", "x", "--out", o], "config.json"),
    ("hf-params-from-architecture", lambda t, o: ["catalog", "add-model",
                                                  hf_config(t, hf_with(num_hidden_layers=90000, hidden_size=900000,
                                                                       intermediate_size=900000)),
                                                  "--id", "x", "--out", o], "parameters"),
    # command-line flags
    ("flag-scales-1e308", lambda t, o: ["breakeven", str(ROOT / "examples" / "build-vs-buy.yaml"), "--scales", "1e308",
                                        "--plot", o], "--scales"),
    ("flag-scales-past-qps", lambda t, o: ["breakeven", str(ROOT / "examples" / "build-vs-buy.yaml"), "--scales", "1",
                                           "1e6", "--json", "--plot", o.replace(".json", ".png")], "peak_qps"),
    ("flag-batch-1e9", lambda t, o: [*ESTIMATE, "--batch", "1e9"], "--batch"),
    ("flag-tokens-nan", lambda t, o: [*ESTIMATE[:-4], "--input-tokens", "nan", "--output-tokens", "1"], "--input-tokens"),
    ("flag-tp-fraction", lambda t, o: [*ESTIMATE, "--tp", "1.5"], "--tp"),
    ("flag-jobs-zero", lambda t, o: ["plan", scenario(t), "--jobs", "0", "--out", o], "--jobs"),
    ("flag-params-inf", lambda t, o: ["catalog", "add-model", hf_config(t, hf_with()), "--id", "x",
                                      "--total-params", "inf", "--out", o], "--total-params"),
]


@pytest.mark.parametrize(("build", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_number_exits_2_naming_the_field(capsys, tmp_path, build, field):
    out_file = tmp_path / "out" / "result.json"
    out_file.parent.mkdir()
    code, out, err = run(capsys, build(tmp_path, str(out_file)))
    assert code == 2, err
    assert field in err
    assert "Traceback" not in err and "internal error" not in err
    assert len(err.splitlines()) <= 12 and len(err) < 1000
    assert out == ""
    assert list(out_file.parent.iterdir()) == []  # nothing written, not even a temporary file


def test_long_refused_value_is_cut_in_the_message(capsys, tmp_path):
    code, _, err = run(capsys, ["plan", scenario(tmp_path, {"peak_qps": "9" * 5000})])
    assert code == 2 and "peak_qps" in err and len(err) < 400


# ---------------------------------------------------------------- the ranges themselves
def test_ranges_refuse_booleans_and_non_finite_accept_ints_and_text():
    assert F.QPS.check(5) == 5.0 and isinstance(F.QPS.check(5), float)
    assert F.QPS.check("1e5") == 1e5
    assert F.QPS.check(0) == 0.0 and F.QPS.check(1e7) == 1e7
    for bad in (True, False, math.inf, -math.inf, math.nan, 1e7 * (1 + 1e-12), -1e-300, None, [1], "x", 10**400):
        with pytest.raises(ValueError):
            F.QPS.check(bad)
    assert F.BATCH.check_int(2.0) == 2
    with pytest.raises(ValueError, match="whole number"):
        F.BATCH.check(2.5)
    with pytest.raises(ValueError, match="to below 1"):
        F.FRACTION_BELOW_ONE.check(1)
    with pytest.raises(ValueError, match="above 0"):
        F.USD_PER_GPU_HOUR.check(0)


def test_every_range_documents_a_reason_and_sane_bounds():
    ranges = [v for v in vars(F).values() if isinstance(v, F.Range)]
    assert len(ranges) > 20
    for r in ranges:
        assert r.reason and math.isfinite(r.lo) and math.isfinite(r.hi) and r.lo < r.hi
        assert r.hi <= 1e18  # products of a few bounds stay far inside a float


def test_schema_fields_carry_their_range_and_reason():
    from fleetplan.catalogs.schema import GPU
    from fleetplan.optimizer.traffic.scenario import Options, Product

    product = Product.model_json_schema()["properties"]
    assert "1e+07 queries per second" in product["peak_qps"]["x-valid-range"]
    assert product["peak_qps"]["description"] == "requests per second at the busiest hour"
    assert F.BATCH.reason in Options.model_json_schema()["properties"]["max_batch"]["x-valid-range"]
    gpu = GPU.model_json_schema()["properties"]
    assert F.BANDWIDTH_BYTES_PER_S.reason in gpu["mem_bandwidth_bytes_per_s"]["x-valid-range"]


def test_whole_number_fields_refuse_fractions_and_optional_fields_take_none():
    from fleetplan.optimizer.traffic.scenario import Product

    base = {"name": "a", "model": "m", "peak_qps": 1, "input_tokens": 100, "output_tokens": 10}
    p = Product.model_validate({**base, "input_tokens": 100.0, "max_ttft_ms": None, "peak_qps": "2"})
    assert (p.input_tokens, type(p.input_tokens), p.max_ttft_ms, p.peak_qps) == (100, int, None, 2.0)
    with pytest.raises(ValueError, match="whole number"):
        Product.model_validate({**base, "input_tokens": 100.5})


def test_json_output_refuses_non_finite():
    assert json.loads(dumps({"a": 1.5})) == {"a": 1.5}
    for bad in (math.inf, math.nan):
        with pytest.raises(ValueError):
            dumps({"a": [bad]})


# ---------------------------------------------------------------- valid extremes
def plan_json(capsys, path: str) -> dict:
    code, out, err = run(capsys, ["plan", path, "--json", "--no-alternatives"])
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("mode", ["pool", "auto"])
@pytest.mark.parametrize("preset", ["seed", "default"])
def test_full_prefix_cache_hit_plans_and_costs_no_more(capsys, tmp_path, mode, preset):
    costs = {}
    for hit in (0.9, 1.0):
        d = plan_json(capsys, scenario(tmp_path, {"prefix_cache_hit_rate": hit, "prefill": mode,
                                                  "prefill_gpus": ["h100-sxm"], "peak_qps": 350}, preset=preset))
        assert d["status"] == "optimal"
        costs[hit] = d["monthly_cost_usd"]
    assert 0 < costs[1.0] <= costs[0.9]
    assert math.isfinite(costs[1.0])


def test_full_prefix_cache_hit_needs_no_prefill_pool(capsys, tmp_path):
    d = plan_json(capsys, scenario(tmp_path, {"prefix_cache_hit_rate": 1.0, "prefill": "pool",
                                              "prefill_gpus": ["h100-sxm"], "peak_qps": 350}))
    (p,) = d["products"]
    # decode alone: 140,000 tokens/s over 2,483 tokens/s per replica less 10% burst headroom
    # is 63 replicas of 2 GPUs at $2.50/GPU-hour for 730 hours; the pool has nothing to do
    assert p["replicas"] == 63 and p["gpus"] == 126
    assert d["monthly_cost_usd"] == pytest.approx(63 * 2 * 2.5 * 730)


def test_zero_demand_product_costs_nothing(capsys, tmp_path):
    doc = {"preset": "seed", "options": OPTIONS,
           "products": [PRODUCT, {**PRODUCT, "name": "idle", "peak_qps": 0}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    d = plan_json(capsys, str(path))
    by_name = {p["name"]: p for p in d["products"]}
    assert by_name["idle"]["replicas"] == 0 and by_name["idle"]["monthly_cost_usd"] == 0
    assert by_name["chat"]["replicas"] == 9  # 35 QPS x 400 tokens over 1,738 usable tokens/s per replica
    assert d["monthly_cost_usd"] == pytest.approx(9 * 2 * 2.5 * 730)


def test_zero_demand_everywhere_is_a_plan_of_nothing(capsys, tmp_path):
    d = plan_json(capsys, scenario(tmp_path, {"peak_qps": 0, "api": {"model": "llama-3.1-70b", "max_fraction": 1}}))
    assert d["status"] == "optimal" and d["monthly_cost_usd"] == 0
    assert d["products"][0]["replicas"] == 0


@pytest.mark.parametrize("share", [0, 1])
def test_spot_share_extremes_plan(capsys, tmp_path, share):
    d = plan_json(capsys, scenario(tmp_path, options={"tiers": ["on_demand", "spot"], "spot_max_share": share}))
    breakdown = d["monthly_cost_breakdown_usd"]
    if share == 0:
        assert breakdown["spot"] == 0 and d["monthly_cost_usd"] == pytest.approx(9 * 2 * 2.5 * 730)
    else:  # every replica on spot, cheaper than on demand
        assert breakdown["on_demand"] == 0 and 0 < breakdown["spot"] == d["monthly_cost_usd"] < 9 * 2 * 2.5 * 730


def test_largest_valid_numbers_plan(capsys, tmp_path):
    d = plan_json(capsys, scenario(tmp_path, {"peak_qps": 1e7}, options={"time_limit_s": 1e6}))
    assert d["status"] == "optimal" and math.isfinite(d["monthly_cost_usd"])
    (p,) = d["products"]
    usable = p["replica_tokens_per_s"] * 0.7  # the seed's 30% prefill headroom
    assert (p["replicas"] - 1) * usable < 1e7 * 400 <= p["replicas"] * usable * (1 + 1e-9)


def test_calibrate_one_configuration_writes_only_finite_numbers(capsys, tmp_path):
    lines = MEASUREMENTS.read_text().splitlines()
    one = tmp_path / "one.csv"
    # three batch sizes of one configuration (the third at 64: 120 sequences do not fit in usable memory)
    one.write_text("\n".join([*lines[:3], lines[3].replace(",120,", ",64,", 1)]) + "\n")
    out = tmp_path / "profile.yaml"
    # one configuration group: no level can be checked on another, so none is written
    code, text, err = run(capsys, ["calibrate", str(one), "--out", str(out), "--json"])
    assert code == 2 and text == "" and not out.exists()
    assert "one configuration group" in err and "--force" in err and len(err.splitlines()) == 1
    code, text, err = run(capsys, ["calibrate", str(one), "--out", str(out), "--json", "--force"])
    assert code == 0, err
    assert "Infinity" not in text and "NaN" not in text
    doc = json.loads(text)
    assert doc["error"]["tpot"]["cross_validated"]["overall"] == {"rows": 0}
    assert all(r["predicted_tpot_ms"] is None for r in doc["cross_validated_rows"])
    profile_text = out.read_text()
    assert ".inf" not in profile_text and ".nan" not in profile_text
    # a cell's offset needs two configuration groups: forced on one, the profile changes nothing
    doc = yaml.safe_load(profile_text)
    assert doc["forced"] is True and all(lv["offsets"] == [] for q in ("tpot", "ttft") for lv in doc[q]["levels"])
    code, _, err = run(capsys, [*ESTIMATE, "--calibration", str(out), "--json"])
    assert code == 0, err

"""`fleetplan validate` and `fleetplan calibrate`: file format, statistics, profiles, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fleetplan.catalogs import load_catalog
from fleetplan.catalogs.loader import InputError
from fleetplan.main import main
from fleetplan.models.calibration import apply_profile
from fleetplan.models.measurements import MeasurementError, parse_measurements
from fleetplan.models.presets import DEFAULT, SEED, CalibrationFactors
from fleetplan.models.validation import error_stats, predict

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ROOT / "benchmarks" / "data" / "public-measurements.csv"
HEADER = "model,gpu,precision,tp,batch,input_tokens,output_tokens,engine,measured_tpot_ms"


def run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- format
def test_parse_required_optional_and_ignored_columns():
    text = (HEADER + ",measured_ttft_ms,ep,comment\n"
            "deepseek-v3,h200-sxm,FP8,8,16,1000,1000,SGLang v0.5,30.5,120,8,hello\n"
            "llama-3.1-8b,h100-sxm,fp16,1,4,200,200,vllm,6.0,,,\n")
    a, b = parse_measurements(text, "m.csv")
    assert (a.model, a.precision, a.tp, a.batch, a.ep, a.measured_ttft_ms) == ("deepseek-v3", "fp8", 8, 16, 8, 120.0)
    assert a.raw["comment"] == "hello" and a.line == 2 and a.batching == "continuous"
    assert (b.precision, b.ep, b.measured_ttft_ms, b.line) == ("bf16", 1, None, 3)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("model,gpu,precision,tp,batch,input_tokens,output_tokens,engine\n", "missing required column 'measured_tpot_ms'"),
        ("", "empty file"),
        (HEADER + "\nx,h100-sxm,fp8,two,1,1,1,vllm,5\n", "m.csv:2: column 'tp': must be a whole number from 1 to 1024 GPUs"),
        (HEADER + "\nx,h100-sxm,int4,1,1,1,1,vllm,5\n", "column 'precision': unknown precision 'int4'"),
        (HEADER + "\nx,h100-sxm,fp8,1,1,1,1,vllm,-5\n", "column 'measured_tpot_ms': must be a number from 0.001 to 1e+06 milliseconds"),
        (HEADER + "\nx,h100-sxm,fp8,1,1.5,1,1,vllm,5\n", "column 'batch': must be a whole number"),
        (HEADER + "\nx,,fp8,1,1,1,1,vllm,5\n", "m.csv:2: column 'gpu': empty cell"),
        (HEADER + '\nx,h100-sxm,fp8,1,1,1,1,"vllm,5\n', "malformed CSV"),
    ],
)
def test_parse_errors_name_file_and_column(text, expected):
    with pytest.raises(MeasurementError, match="m.csv") as exc:
        parse_measurements(text, "m.csv")
    assert expected in str(exc.value)


# ---------------------------------------------------------------- statistics
def test_error_stats_hand_values():
    s = error_stats([2.0, 1.0, 4.0], [1.0, 1.0, 2.0])  # ratios 2, 1, 2
    assert s["rows"] == 3 and s["median_ratio"] == pytest.approx(2.0)
    assert s["within_1.25x"] == pytest.approx(1 / 3) and s["within_1.5x"] == pytest.approx(1 / 3)
    assert s["within_2x"] == pytest.approx(1.0)
    assert s["mape"] == pytest.approx((0.5 + 0.0 + 0.5) / 3)
    even = error_stats([1.0, 4.0], [1.0, 1.0])  # median of an even count: geometric mean of the middle two
    assert even["median_ratio"] == pytest.approx(2.0)


def test_prediction_of_static_row_matches_decode_step(catalog):
    (row,) = parse_measurements(HEADER + ",batching\nllama-3.1-70b,h100-sxm,fp8,2,64,2000,400,vllm,30,static\n", "m")
    p = predict(row, catalog, SEED)
    assert p.predicted_tpot_ms == pytest.approx(25.774, abs=0.005)
    assert p.ratio == pytest.approx(30 / 25.774, rel=1e-3)


def test_continuous_rows_carry_other_requests_prefill(catalog):
    text = HEADER + ",batching\nllama-3.1-70b,h100-sxm,fp8,2,64,2000,400,vllm,30,{}\n"
    (static,) = parse_measurements(text.format("static"), "m")
    (cont,) = parse_measurements(text.format("continuous"), "m")
    s, c = predict(static, catalog, DEFAULT), predict(cont, catalog, DEFAULT)
    assert s.estimate.prefill_time_s == 0.0
    assert c.estimate.prefill_time_s > 0.0  # 63 other requests' prompts, 2000 tokens each per 400 steps
    extra_comm = c.estimate.comm_time_s - s.estimate.comm_time_s  # the prompts' activations all-reduced too
    assert extra_comm > 0.0
    assert c.predicted_tpot_ms == pytest.approx(s.predicted_tpot_ms + (c.estimate.prefill_time_s + extra_comm) * 1e3)


# ---------------------------------------------------------------- validate
def _csv(tmp_path, rows):
    f = tmp_path / "m.csv"
    f.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    return f


def test_validate_json_rows_summary_and_skips(tmp_path, capsys):
    f = _csv(tmp_path, [
        "llama-3.1-70b,h100-sxm,fp8,2,64,2000,400,vllm,30",
        "llama-3.1-8b,h100-sxm,bf16,1,8,1000,1000,sglang,7",
        "no-such-model,h100-sxm,bf16,1,8,1000,1000,sglang,7",
        "llama-3.1-8b,h900,bf16,1,8,1000,1000,sglang,7",
    ])
    code, out, _ = run(capsys, ["validate", str(f), "--json"])
    assert code == 0
    d = json.loads(out)
    assert [r["line"] for r in d["rows"]] == [2, 3]
    assert all("predicted_tpot_ms" in r and "predicted_ttft_ms" in r for r in d["rows"])
    assert d["rows"][0]["model"] == "llama-3.1-70b" and d["preset"] == "default"
    assert [s["line"] for s in d["skipped"]] == [4, 5]
    assert "unknown model" in d["skipped"][0]["reason"] and "unknown GPU" in d["skipped"][1]["reason"]
    summary = d["summary"]
    assert summary["overall"]["rows"] == 2
    for key in ("by_gpu", "by_tp", "by_engine", "by_model"):
        assert key in summary
    assert set(summary["by_engine"]) == {"vllm", "sglang"}
    again = run(capsys, ["validate", str(f), "--json"])[1]
    assert again == out  # byte-identical


def test_validate_table_and_missing_column(tmp_path, capsys):
    f = _csv(tmp_path, ["llama-3.1-70b,h100-sxm,fp8,2,64,2000,400,vllm,30", "nope,h100-sxm,fp8,2,64,2000,400,vllm,30"])
    code, out, _ = run(capsys, ["validate", str(f), "--preset", "seed"])
    assert code == 0 and "skipped line 3: unknown model 'nope'" in out and "by engine" in out
    bad = tmp_path / "bad.csv"
    bad.write_text("model,gpu,precision,tp,batch,input_tokens,output_tokens,measured_tpot_ms\nx,y,fp8,1,1,1,1,5\n")
    code, out, err = run(capsys, ["validate", str(bad)])
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "bad.csv" in err and "'engine'" in err
    code, _, err = run(capsys, ["validate", str(tmp_path / "absent.csv")])
    assert code == 2 and "absent.csv" in err


# ---------------------------------------------------------------- calibrate
def _synthetic(tmp_path, catalog):
    """Rows whose 'measurements' are the default preset 1.3 times slower on hopper with vllm (every
    term of the step: bandwidth and compute / 1.3, overhead and communication x 1.3)."""
    truth = CalibrationFactors(gpu="hopper", engine="vllm", bandwidth_scale=1 / 1.3, compute_scale=1 / 1.3,
                               overhead_scale=1.3, comm_scale=1.3)
    import dataclasses

    true_preset = dataclasses.replace(DEFAULT, factors=(truth,))
    lines = []
    for model, tp in (("llama-3.1-8b", 1), ("llama-3.1-70b", 2), ("llama-3.1-70b", 4), ("qwen3-32b", 2)):
        for gpu in ("h100-sxm", "h200-sxm"):
            for batch in (1, 8, 32, 128):
                text = HEADER + f"\n{model},{gpu},fp8,{tp},{batch},1000,1000,vllm,1\n"
                (row,) = parse_measurements(text, "x")
                t = predict(row, catalog, true_preset).predicted_tpot_ms
                lines.append(f"{model},{gpu},fp8,{tp},{batch},1000,1000,vllm,{t:.6f}")
    return _csv(tmp_path, lines)


def test_calibrate_recovers_known_factors_and_cross_validates(tmp_path, capsys, catalog):
    f = _synthetic(tmp_path, catalog)
    out_file = tmp_path / "profile.yaml"
    code, out, _ = run(capsys, ["calibrate", str(f), "--out", str(out_file), "--json"])
    assert code == 0
    d = json.loads(out)
    cv = d["error"]["tpot"]["cross_validated"]
    # one fold per configuration group (4 model x TP on 2 GPUs)
    assert cv["method"].startswith("leave-one-group-out") and cv["folds"] == 8
    assert d["error"]["tpot"]["uncalibrated"]["overall"]["mape"] == pytest.approx(1 - 1 / 1.3, abs=2e-3)
    # every group is 1.3x slower: each held-out model is predicted from the others nearly exactly
    assert cv["overall"]["mape"] < 0.01 and d["tpot"]["kept"] and d["forced"] is False
    # the first level, all rows: 8 groups of log 1.3 each, shrunk by the k cross-validation chose
    first = d["tpot"]["levels"][0]
    assert first["level"] == "all" and first["shrink_groups"] in (0.25, 0.5)
    assert first["offsets"][0]["scale"] == pytest.approx(1.3 ** (8 / (8 + first["shrink_groups"])), rel=1e-5)
    preset = apply_profile(DEFAULT, out_file)
    assert preset.calibration == "profile.yaml"
    got = preset.factors_for("h100-sxm", "hopper", "vllm", "dense")
    assert got.overhead_scale == pytest.approx(1.3, rel=5e-3)
    assert got.bandwidth_scale == pytest.approx(1 / got.overhead_scale, rel=1e-5) and got.compute_scale == got.bandwidth_scale
    # an engine and a GPU family never measured get the product of the levels that name neither
    # (all and kind): the offset of every group measured, as far as cross-validation carried it
    scales = {lv["level"]: {(o["kind"],): o["scale"] for o in lv["offsets"]} for lv in d["tpot"]["levels"]}
    expected = scales["all"].get((None,), 1.0) * scales["kind"].get(("dense",), 1.0)
    assert preset.factors_for("b200", "blackwell", "sglang", "dense").overhead_scale == pytest.approx(expected, rel=1e-5)
    doc = yaml.safe_load(out_file.read_text())
    assert doc["preset"] == "default" and doc["fleetplan_calibration"] == 2


def test_calibration_flag_on_validate_estimate_and_plan(tmp_path, capsys, catalog, examples):
    f = _synthetic(tmp_path, catalog)
    prof = tmp_path / "p.yaml"
    assert run(capsys, ["calibrate", str(f), "--out", str(prof)])[0] == 0
    scale = apply_profile(DEFAULT, prof).factors_for("h100-sxm", "hopper", "vllm", "dense").overhead_scale
    code, out, _ = run(capsys, ["validate", str(f), "--calibration", str(prof), "--json"])
    d = json.loads(out)
    assert code == 0 and d["calibration"] == "p.yaml"
    assert d["summary"]["overall"]["mape"] == pytest.approx(abs(1 - scale / 1.3), abs=2e-3)
    est = ["estimate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "2", "--batch", "64",
           "--precision", "fp8", "--input-tokens", "2000", "--output-tokens", "400", "--json"]
    plain = json.loads(run(capsys, est)[1])
    code, out, _ = run(capsys, [*est, "--calibration", str(prof)])
    # estimate names no engine, as the planner: the levels that name no engine
    unnamed = apply_profile(DEFAULT, prof).factors_for("h100-sxm", "hopper", None, "dense").overhead_scale
    assert code == 0 and json.loads(out)["step_time_ms"] == pytest.approx(plain["step_time_ms"] * unnamed, rel=1e-4)
    # a profile fitted for one preset is refused for another
    code, _, err = run(capsys, [*est[:-1], "--preset", "seed", "--json", "--calibration", str(prof)])
    assert code == 2 and "fitted for preset 'default'" in err
    # plans say which calibration they used (a profile of the earlier format still loads)
    seed_prof = tmp_path / "seed.yaml"
    seed_prof.write_text("fleetplan_calibration: 1\npreset: seed\nmeasurements: m.csv\nrows: 1\nskipped_rows: 0\n"
                         "factors:\n  - {gpu: null, engine: null, "
                         "bandwidth_scale: 1.0, compute_scale: 1.0, overhead_scale: 1.0, comm_scale: 1.0}\n")
    code, out, _ = run(capsys, ["plan", str(examples / "seed-chat-70b.yaml"), "--json", "--calibration", str(seed_prof),
                                "--no-alternatives"])
    assert code == 0 and json.loads(out)["calibration"] == "seed.yaml"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("just text", "not a fleetplan calibration profile"),
     ("fleetplan_calibration: 3\npreset: default\n", "p.yaml.fleetplan_calibration: profile format 3 is not one "
      "this fleetplan reads (1 or 2)"),
     ("fleetplan_calibration: 2\npreset: default\ntpot: {kept: true}\n", "p.yaml.ttft: Field required"),
     ("fleetplan_calibration: 1\npreset: default\nmeasurements: m.csv\nrows: 1\nskipped_rows: 0\nfactors: []\n",
      "p.yaml.factors: List should have at least 1 item"),
     ("fleetplan_calibration: 1\npreset: default\nfactors: []\nrows: -1\n", "p.yaml.rows: Input should be greater than"),
     ("fleetplan_calibration: 1\npreset: default\nmeasurements: m.csv\nrows: 1\nskipped_rows: 0\nfactors:\n"
      "  - {bandwidth_scale: -1, compute_scale: 1, overhead_scale: 1, comm_scale: 1}\n", "factors.0.bandwidth_scale"),
     ("a: [\n", "malformed YAML")],
)
def test_bad_profiles_are_input_errors(tmp_path, text, expected):
    f = tmp_path / "p.yaml"
    f.write_text(text)
    with pytest.raises(InputError, match="p.yaml") as exc:
        apply_profile(DEFAULT, f)
    assert expected in str(exc.value)
    with pytest.raises(InputError, match="not found"):
        apply_profile(DEFAULT, tmp_path / "absent.yaml")


def test_calibrate_needs_rows(tmp_path, capsys):
    f = _csv(tmp_path, ["nope,h100-sxm,fp8,2,64,2000,400,vllm,30"])
    code, _, err = run(capsys, ["calibrate", str(f), "--out", str(tmp_path / "p.yaml")])
    assert code == 2 and "at least 3 rows" in err and not (tmp_path / "p.yaml").exists()


# ---------------------------------------------------------------- public data
def test_public_measurements_fidelity():
    """The shipped public measurements: the default preset tracks them, the seed does not."""
    from fleetplan.models.presets import get_preset
    from fleetplan.models.validation import predict_all, summarize

    catalog = load_catalog()
    rows = parse_measurements(PUBLIC.read_text(encoding="utf-8"), PUBLIC.name)
    assert len(rows) >= 40
    stats = {}
    for name in ("seed", "default"):
        preds, skipped = predict_all(rows, catalog, get_preset(name))
        # only what the planner would refuse: a batch beyond usable memory, TP beyond the scale-up domain
        assert all(why.startswith("does not fit") or "scale-up domain" in why for _, why in skipped)
        assert sum("scale-up domain" in why for _, why in skipped) == 2  # the two L40S rows at TP 2 and 4
        stats[name] = summarize([p.row for p in preds], [p.predicted_tpot_ms for p in preds])["overall"]
    assert stats["default"]["within_1.5x"] >= 0.85 and stats["default"]["mape"] <= 0.25
    assert stats["seed"]["mape"] > 2 * stats["default"]["mape"]


# ---------------------------------------------------------------- prompts from the prefix cache
def test_benchmark_hit_rate_matches_engine_and_release():
    from fleetplan.models.physics import DEFAULT_PHYSICS as P

    assert P.benchmark_hit_rate("vllm", "0.12.0") == pytest.approx(0.806)
    assert P.benchmark_hit_rate("vllm", "0.12") == pytest.approx(0.806)
    for engine, version in (("vllm", "0.120"), ("vllm", "0.11.2"), ("vllm", "0.18.0"), ("vllm", ""),
                            ("sglang", "0.12.0"), (None, "0.12.0")):
        assert P.benchmark_hit_rate(engine, version) == 0.0


def test_cached_prompts_lower_prefill_work_tpot_and_ttft(catalog):
    from fleetplan.models.prefill import prefill_attention_flops

    text = (HEADER + ",measured_ttft_ms,engine_version,prefix_cache_hit_rate\n"
            "llama-3.1-8b,h200-sxm,fp8,1,64,2000,100,vllm,9.7,122,{},{}\n")
    (plain,) = parse_measurements(text.format("0.18.0", ""), "m")
    (rule,) = parse_measurements(text.format("0.12.0", ""), "m")
    (own,) = parse_measurements(text.format("0.18.0", "0.806"), "m")
    (none,) = parse_measurements(text.format("0.12.0", "0"), "m")
    assert (rule.engine_version, rule.prefix_cache_hit_rate, own.prefix_cache_hit_rate) == ("0.12.0", None, 0.806)
    p, r, o, n = (predict(x, catalog, DEFAULT) for x in (plain, rule, own, none))
    llm = catalog.models["llama-3.1-8b"]
    # 388 uncached tokens (2,000 x (1 - 0.806)) through the linear layers; attention of positions 1,612-2,000
    assert r.prefill_flops_per_request == pytest.approx(2 * llm.active_params * 388 + prefill_attention_flops(llm, 2000, 1612))
    assert p.prefill_flops_per_request == pytest.approx(2 * llm.active_params * 2000 + prefill_attention_flops(llm, 2000))
    assert (r.prefix_cache_hit_rate, p.prefix_cache_hit_rate, n.prefix_cache_hit_rate) == (0.806, 0.0, 0.0)
    # the release's rule and the row's own column give the same prediction; a 0 in the column wins
    assert o.predicted_tpot_ms == pytest.approx(r.predicted_tpot_ms) and o.predicted_ttft_ms == pytest.approx(r.predicted_ttft_ms)
    assert n.predicted_tpot_ms == pytest.approx(p.predicted_tpot_ms) and n.predicted_ttft_ms == pytest.approx(p.predicted_ttft_ms)
    # the decode step is the same; only the prefill the steps and the first token carry shrinks
    assert r.decode_step_time_ms == pytest.approx(p.decode_step_time_ms)
    assert r.estimate.prefill_time_s < 0.3 * p.estimate.prefill_time_s
    assert r.predicted_tpot_ms < p.predicted_tpot_ms and r.predicted_ttft_ms < p.predicted_ttft_ms
    # the seed preset has no rule: the column alone counts
    assert predict(rule, catalog, SEED).prefix_cache_hit_rate == 0.0


def test_prefix_cache_column_is_checked():
    text = HEADER + ",prefix_cache_hit_rate\nllama-3.1-8b,h200-sxm,fp8,1,64,2000,100,vllm,9.7,1.5\n"
    with pytest.raises(MeasurementError, match="m.csv:2: column 'prefix_cache_hit_rate': must be a number from 0 to 1"):
        parse_measurements(text, "m.csv")


# ---------------------------------------------------------------- a release's own share of prefill ahead
def test_validate_reads_the_release_share_of_sglang_0_5_1(tmp_path, capsys):
    """SGLang 0.5.1 prefilled most of a wave before a request's first token (0.623 of the other
    prompts against SGLang's 0.137): its row predicts a shorter TPOT and a longer TTFT than the
    same configuration under 0.5.6, and an unversioned row gets SGLang's share."""
    f = tmp_path / "m.csv"
    row = "qwen3-32b,h100-sxm,bf16,4,64,2048,128,sglang,25,2500,{}\n"
    f.write_text(HEADER + ",measured_ttft_ms,engine_version\n" + row.format("0.5.1.post1") + row.format("0.5.6.post2")
                 + row.format(""), encoding="utf-8")
    code, out, _ = run(capsys, ["validate", str(f), "--json"])
    assert code == 0
    old, new, plain = json.loads(out)["rows"]
    assert old["predicted_tpot_ms"] < 0.85 * new["predicted_tpot_ms"]
    assert old["predicted_ttft_ms"] > 2 * new["predicted_ttft_ms"]
    assert plain["predicted_tpot_ms"] == new["predicted_tpot_ms"] and plain["predicted_ttft_ms"] == new["predicted_ttft_ms"]
    # the decode step without the benchmark's prefill is the same: only the share differs
    assert old["step_time_ms"] == new["step_time_ms"]

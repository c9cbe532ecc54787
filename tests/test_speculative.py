"""Speculative decoding in measured runs: the step verifies draft + 1 tokens per sequence and
gains the accepted ones; the measurement columns, the release rule, validate and calibrate."""

from __future__ import annotations

import json

import pytest

from fleetplan.main import main
from fleetplan.models.calibration import _base_s, components
from fleetplan.models.measurements import MeasurementError, parse_measurements
from fleetplan.models.moe import params_read_per_step
from fleetplan.models.overhead import layer_time_s
from fleetplan.models.physics import DEFAULT_PHYSICS
from fleetplan.models.presets import DEFAULT, SEED
from fleetplan.models.roofline import decode_step
from fleetplan.models.validation import predict, skip_reason, speculation

HEADER = "model,gpu,precision,tp,batch,input_tokens,output_tokens,engine,engine_version,measured_tpot_ms"


def step(catalog, model, gpu, draft=0, accepted=1.0, **kw):
    args = dict(precision="fp8", tp=8, batch=16, input_tokens=1024, output_tokens=1024, preset=DEFAULT)
    args.update(kw)
    return decode_step(catalog.models[model], catalog.gpus[gpu], draft_tokens=draft,
                       accepted_tokens_per_step=accepted, **args)


def test_dense_step_verifies_every_drafted_token(catalog):
    """Llama-3.1-70B FP8 on 8 H100 at batch 16, one drafted token per step: twice the FLOPs, the
    weights and KV cache read once, a one-layer draft pass (1/80 of the step's GPU time), and
    1.8 tokens per step gained per sequence."""
    llm, gpu = catalog.models["llama-3.1-70b"], catalog.gpus["h100-sxm"]
    plain = step(catalog, "llama-3.1-70b", "h100-sxm")
    spec = step(catalog, "llama-3.1-70b", "h100-sxm", draft=1, accepted=1.8)
    assert spec.flops_per_step == pytest.approx(2 * plain.flops_per_step)
    assert spec.flops_per_step == pytest.approx(2 * llm.active_params * 32)
    assert spec.compute_time_s == pytest.approx(2 * plain.compute_time_s)
    assert (spec.weights_time_s, spec.kv_time_s) == pytest.approx((plain.weights_time_s, plain.kv_time_s))
    assert spec.overhead_time_s == pytest.approx(plain.overhead_time_s)  # host work is per sequence
    assert spec.comm_time_s > plain.comm_time_s  # 32 tokens' activations all-reduced, not 16
    gpu_time = max(spec.weights_time_s, spec.compute_time_s) + spec.kv_time_s
    draft = (gpu_time + layer_time_s(llm, gpu, DEFAULT_PHYSICS)) / llm.num_layers
    assert llm.num_layers == 80
    assert spec.step_time_s == pytest.approx(gpu_time + draft + spec.comm_time_s + spec.overhead_time_s)
    assert spec.per_user_tokens_per_s == pytest.approx(1.8 / spec.step_time_s)
    assert spec.replica_tokens_per_s == pytest.approx(16 * 1.8 / spec.step_time_s)
    # at batch 16 the step is bandwidth-bound: speculation buys 1.8 tokens for a step ~5% longer
    assert spec.step_time_s < 1.08 * plain.step_time_s
    assert spec.per_user_tokens_per_s > 1.7 * plain.per_user_tokens_per_s


def test_moe_step_routes_the_drafted_tokens_too(catalog):
    """DeepSeek-R1 at batch 4 with one drafted token routes 8 tokens: more experts are read."""
    llm = catalog.models["deepseek-r1"]
    plain = step(catalog, "deepseek-r1", "b200", batch=4)
    spec = step(catalog, "deepseek-r1", "b200", batch=4, draft=1, accepted=1.9)
    assert plain.weight_bytes_read == pytest.approx(params_read_per_step(llm, 4))  # FP8: a byte per value
    assert spec.weight_bytes_read == pytest.approx(params_read_per_step(llm, 8))
    assert spec.weight_bytes_read > 1.5 * plain.weight_bytes_read


def test_accepted_one_without_drafts_is_plain_decoding(catalog):
    a = step(catalog, "qwen3-32b", "h200-sxm", tp=2, batch=64)
    b = step(catalog, "qwen3-32b", "h200-sxm", tp=2, batch=64, draft=0, accepted=1.0)
    assert a == b


def test_release_rule_matches_engine_release_and_model():
    P = DEFAULT_PHYSICS
    draft, accepted = P.benchmark_speculative("trtllm", "1.2.0rc6.post3", "deepseek-r1")
    assert draft == 1 and 1.8 <= accepted <= 2.0  # DeepSeek-V3's report: 85-90% of second tokens accepted
    assert P.benchmark_speculative("trtllm", "1.2.0rc6.post3", "deepseek-v3") == (draft, accepted)
    for engine, version, model in (("trtllm", "1.2.0rc6.post2", "deepseek-r1"), ("trtllm", "1.2.0rc6", "deepseek-r1"),
                                   ("trtllm", "1.2.0rc6.post3", "qwen3-32b"), ("sglang", "1.2.0rc6.post3", "deepseek-r1"),
                                   ("trtllm", "", "deepseek-r1"), (None, "1.2.0rc6.post3", "deepseek-r1")):
        assert P.benchmark_speculative(engine, version, model) == (0, 1.0)


ROW = "deepseek-r1,b200,fp8,8,8,1024,8192,trtllm,{},{}"


def test_validate_divides_the_step_by_the_accepted_tokens(catalog):
    text = HEADER + ",draft_tokens,accepted_tokens_per_step\n" + "\n".join([
        ROW.format("1.2.0rc6.post3", "5.87,,"),      # the release's rule
        ROW.format("1.2.0rc6.post2", "10.5,,"),      # plain decoding
        ROW.format("1.2.0rc6.post2", "5.87,1,1.82"),  # the row's own columns (the rule's values)
        ROW.format("1.2.0rc6.post3", "10.5,0,1"),     # the row's columns win over the rule
    ]) + "\n"
    rule, plain, own, off = parse_measurements(text, "m.csv")
    assert (rule.draft_tokens, rule.accepted_tokens_per_step, own.draft_tokens, own.accepted_tokens_per_step) == (
        None, None, 1, 1.82)
    assert speculation(rule, DEFAULT) == DEFAULT_PHYSICS.benchmark_speculative("trtllm", "1.2.0rc6.post3", "deepseek-r1")
    assert speculation(rule, SEED) == (0, 1.0)
    pr, pp, po, pf = (predict(r, catalog, DEFAULT) for r in (rule, plain, own, off))
    _, accepted = speculation(rule, DEFAULT)
    assert pr.predicted_tpot_ms == pytest.approx(pr.estimate.step_time_s * 1e3 / accepted)
    assert (pr.draft_tokens, pr.accepted_tokens_per_step) == (1, accepted)
    assert pf.predicted_tpot_ms == pytest.approx(pp.predicted_tpot_ms)
    assert accepted == 1.82 and po.predicted_tpot_ms == pytest.approx(pr.predicted_tpot_ms)
    # a verify step is longer (16 tokens route to more experts than 8) but yields 1.82 tokens: TPOT
    # falls by 1.3-1.6x at batch 8
    assert pr.estimate.step_time_s > pp.estimate.step_time_s
    assert 1.3 < pp.predicted_tpot_ms / pr.predicted_tpot_ms < 1.6
    # calibration sees the same time per output token
    comp = components(rule, catalog, DEFAULT)
    assert _base_s(comp) * 1e3 == pytest.approx(pr.predicted_tpot_ms, rel=1e-9)
    assert _base_s(components(plain, catalog, DEFAULT)) * 1e3 == pytest.approx(pp.predicted_tpot_ms, rel=1e-9)


@pytest.mark.parametrize("cells, column, message", [
    ("1,", "accepted_tokens_per_step", "empty cell"),
    (",1.5", "draft_tokens", "empty cell"),
    ("1,2.5", "accepted_tokens_per_step", "must be a number from 1 to 2 tokens"),
    ("2,0.5", "accepted_tokens_per_step", "must be a number from 1 to 3 tokens"),
    ("1.5,2", "draft_tokens", "must be a whole number from 0 to 16"),
    ("-1,1", "draft_tokens", "must be a whole number from 0 to 16"),
])
def test_speculation_columns_are_checked(cells, column, message):
    text = HEADER + ",draft_tokens,accepted_tokens_per_step\n" + ROW.format("", "9.0," + cells) + "\n"
    with pytest.raises(MeasurementError, match=f"m.csv:2: column '{column}': {message}"):
        parse_measurements(text, "m.csv")


def test_speculation_with_pipeline_stages_is_skipped(catalog):
    text = HEADER + ",pp,draft_tokens,accepted_tokens_per_step\n" + ROW.format("", "9.0,2,1,1.9") + "\n"
    (row,) = parse_measurements(text, "m.csv")
    assert "speculative decoding is modelled for tensor-parallel replicas only" in skip_reason(row, catalog, DEFAULT)


def test_validate_json_reports_the_speculation(capsys, tmp_path):
    path = tmp_path / "m.csv"
    path.write_text(HEADER + "\n" + ROW.format("1.2.0rc6.post3", "5.87") + "\n" + ROW.format("1.2.0rc6.post2", "10.5") + "\n")
    assert main(["validate", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    _, accepted = DEFAULT_PHYSICS.benchmark_speculative("trtllm", "1.2.0rc6.post3", "deepseek-r1")
    assert [(r["draft_tokens"], r["accepted_tokens_per_step"]) for r in rows] == [(1, accepted), (0, 1.0)]
    # step_time_ms is the step, predicted_tpot_ms the time per token the run reports
    assert rows[0]["predicted_tpot_ms"] < rows[0]["step_time_ms"]
    assert rows[1]["predicted_tpot_ms"] >= rows[1]["step_time_ms"]

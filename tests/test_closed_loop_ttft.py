"""Closed-loop benchmark TTFT: waves and drifted (steady) arrivals computed by hand, the 99th
percentile, the attention-DP balancing hold, the harness catalog lookup and what `validate` says."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetplan.main import main
from fleetplan.models.interference import (
    Arrival,
    binomial_quantile,
    closed_loop_prompts_ahead,
    steady_prompts_ahead,
    wave_share,
)
from fleetplan.models.measurements import MeasurementError, parse_measurements
from fleetplan.models.physics import DEFAULT_PHYSICS, EnginePhysics
from fleetplan.models.presets import DEFAULT
from fleetplan.models.validation import predict, recv_interval, row_arrival, server_recipe
from fleetplan.models.ttft import attention_dp_balance_wait_s, benchmark_ttft_percentiles_s

# One engine with round figures: a tenth of a wave ahead, 30 ms fixed latency, no busy-share
# fall-off; one cycle of drift; ten steps of balancing; no decode steps without prefill
PHYSICS = dataclasses.replace(
    DEFAULT_PHYSICS, engines=(EnginePhysics("vllm", 0.1, 8192, 0.030),), busy_share_exponent=0.0,
    benchmark_release_shares=(), length_drift_cycles=1.0, attention_dp_balance_steps=(("vllm", 10.0),),
    first_token_steps=0.0)
PRESET = dataclasses.replace(DEFAULT, physics=PHYSICS)
# 11 clients, 50 ms prompts of 1,000 tokens, 20 ms decode steps, prefill 22% of a cycle
CASE = dict(prefill_s=0.05, step_s=0.02, batch=11, input_tokens=1000.0, engine="vllm", busy_share=0.22)


def test_waves_by_hand():
    # ahead = 0.1 x 10 = 1 prompt; one chunk: 30 + 2 x 50 + 20 = 150 ms
    # tail: a wave's place is uniform, 2 x 0.99 x 0.1 x 10 = 1.98 ahead: 30 + 2.98 x 50 + 20 = 199 ms
    median, p99 = benchmark_ttft_percentiles_s(PRESET, **CASE)
    assert median == pytest.approx(0.150)
    assert p99 == pytest.approx(0.199)


def test_first_token_steps_by_hand():
    # two and a half decode steps without prefill come on top of the waves' 150 / 199 ms (and of the
    # drifted 110 / 200 ms): 2.5 x 20 ms each, median and tail alike
    waits = dataclasses.replace(PRESET, physics=dataclasses.replace(PHYSICS, first_token_steps=2.5))
    assert benchmark_ttft_percentiles_s(waits, **CASE) == pytest.approx((0.200, 0.249))
    steady = Arrival("steady", None, "row", "")
    assert benchmark_ttft_percentiles_s(waits, **CASE, arrival=steady, output_tokens=1000.0) == pytest.approx(
        (0.160, 0.250))
    # a chunk budget that splits the wave's 2,000 tokens in two: one more step with prefill
    small = dataclasses.replace(waits, physics=dataclasses.replace(
        waits.physics, engines=(EnginePhysics("vllm", 0.1, 1500, 0.030),)))
    assert benchmark_ttft_percentiles_s(small, **CASE)[0] == pytest.approx(0.030 + 2 * 0.05 + (2 + 2.5) * 0.02)


def test_scheduler_poll_interval_by_hand():
    # polling every 10 steps: a request arriving at a random step waits 4.5 steps more at the median
    # and 9 at the tail, 20 ms each, on top of the waves' 150 / 199 ms; every step (1) adds nothing
    assert benchmark_ttft_percentiles_s(PRESET, **CASE, recv_interval_steps=10) == pytest.approx(
        (0.150 + 4.5 * 0.02, 0.199 + 9 * 0.02))
    assert benchmark_ttft_percentiles_s(PRESET, **CASE, recv_interval_steps=1) == pytest.approx((0.150, 0.199))


def test_recipes_by_concurrency(catalog):
    """InferenceMAX's SGLang DeepSeek-R1 B200 scripts poll every 10 iterations below 16 clients and
    every 30 from 16 (TP 4 FP8: 10 always); other engines and harnesses poll every step."""
    rows = parse_measurements(rows_text(
        "deepseek-r1,b200,fp8,8,8,1024,1024,sglang,10.8,169,inferencemax_b200_sglang_fp8_tp8_c8,,,",
        "deepseek-r1,b200,fp8,8,16,1024,1024,sglang,13.6,355,inferencemax_b200_sglang_fp8_tp8_c16,,,",
        "deepseek-r1,b200,fp8,4,16,8192,1024,sglang,23.3,611,inferencemax_b200_sglang_fp8_tp4_c16,,,",
        "deepseek-r1,b200,fp4,4,64,1024,1024,sglang,20.0,456,inferencemax_b200_sglang_fp4_tp4_c64,,,",
        "deepseek-r1,b200,fp8,8,16,1024,1024,sglang,13.6,355,lab_run,,,",
        "gpt-oss-120b,b200,fp4,2,64,1024,1024,vllm,9.0,50,inferencemax_b200_vllm_x,,,",
    ), "t.csv")
    assert [recv_interval(r, catalog) for r in rows] == [10, 30, 10, 30, 1, 1]
    recipe = server_recipe(rows[0], catalog)
    assert recipe is not None and (recipe.memory_fraction, recipe.kv_cache_precision) == (0.82, "fp8")
    # the measured jump from 8 to 16 clients (169 -> 355 ms) is mostly the poll: (29 - 9) / 2 steps
    # of 13.6 ms = 136 ms; predicted, the step from 8 to 16 clients grows by more than that
    p8, p16 = (predict(r, catalog, DEFAULT) for r in rows[:2])
    assert p16.predicted_ttft_ms - p8.predicted_ttft_ms > 10 * p16.decode_step_time_ms


def test_steady_by_hand():
    # fully drifted: (B - 1) / B x rho = 10 / 11 x 0.22 = 0.2 prompts ahead: 30 + 1.2 x 50 + 20 = 110 ms
    # tail: Binomial(10, 0.02): P(0) 0.8171, P(<=1) 0.9838, P(<=2) 0.9991, so 2 ahead: 30 + 3 x 50 + 20 = 200 ms
    steady = Arrival("steady", None, "row", "")
    median, p99 = benchmark_ttft_percentiles_s(PRESET, **CASE, arrival=steady, output_tokens=1000.0)
    assert median == pytest.approx(0.110)
    assert p99 == pytest.approx(0.200)
    assert binomial_quantile(10, 0.02) == 2
    assert steady_prompts_ahead(11, 0.22) == pytest.approx(0.2)


def test_partly_drifted_wave_by_hand():
    # lengths from 0.8 of the stated ones: a wave's arrivals spread over W = 1 x 0.2 x 100 x 0.02 = 0.4 s
    # against its prefill 11 x 0.05 = 0.55 s, so f = 1 - 0.4 / 0.55 = 3/11 of it still queues:
    # ahead = 3/11 x 1 + 8/11 x 0.2 = 0.41818: 30 + 1.41818 x 50 + 20 = 120.909 ms
    arrival = Arrival("steady", 0.8, "h", "h")
    assert wave_share(arrival, 11, 0.05, 100.0, 0.02, 1.0) == pytest.approx(3 / 11)
    median, p99 = benchmark_ttft_percentiles_s(PRESET, **CASE, arrival=arrival, output_tokens=100.0)
    assert median == pytest.approx(0.030 + (1 + 3 / 11 + 8 / 11 * 0.2) * 0.05 + 0.02)
    assert median == pytest.approx(0.120909, abs=1e-6)
    assert p99 >= median
    # a longer output spreads the wave past its prefill: fully drifted
    assert wave_share(arrival, 11, 0.05, 1000.0, 0.02, 1.0) == 0.0
    assert wave_share(Arrival(), 11, 0.05, 1000.0, 0.02, 1.0) == 1.0


def test_tail_uses_the_stated_prompt_length():
    steady = Arrival("steady", None, "row", "")
    _, p99 = benchmark_ttft_percentiles_s(PRESET, **CASE, arrival=steady, output_tokens=1000.0, tail_prefill_s=0.06)
    assert p99 == pytest.approx(0.200 + 0.010)


def test_attention_dp_balancing_hold_by_hand():
    # 20 clients each back every 30 ms + 100 x 20 ms = 2.03 s: one more arrives after 2.03 / 20 =
    # 101.5 ms, under the limit of 10 steps (200 ms); the tail waits the limit out
    assert attention_dp_balance_wait_s(PRESET, "vllm", 2, 20, 2.03, 0.02) == pytest.approx((0.1015, 0.2))
    # 10 clients: 203 ms, held 200 ms at most
    assert attention_dp_balance_wait_s(PRESET, "vllm", 2, 10, 2.03, 0.02) == pytest.approx((0.2, 0.2))
    assert attention_dp_balance_wait_s(PRESET, "vllm", 1, 10, 2.03, 0.02) == (0.0, 0.0)
    assert attention_dp_balance_wait_s(PRESET, "sglang", 4, 10, 2.03, 0.02) == (0.0, 0.0)
    base, _ = benchmark_ttft_percentiles_s(PRESET, **{**CASE, "batch": 20}, output_tokens=100.0)
    held, _ = benchmark_ttft_percentiles_s(PRESET, **{**CASE, "batch": 20}, output_tokens=100.0, attention_dp=2)
    assert held - base == pytest.approx(0.1015)


@settings(max_examples=200, deadline=None)
@given(batch=st.integers(1, 1024), share=st.floats(0, 1), busy=st.floats(0, 1), wave=st.floats(0, 1))
def test_tail_is_never_below_the_median(batch, share, busy, wave):
    median, tail = closed_loop_prompts_ahead(batch, share, busy, wave)
    assert 0.0 <= median <= tail <= max(batch - 1, 0) + 1e-9


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 512), prefill=st.floats(1e-3, 1.0), ratio=st.one_of(st.none(), st.floats(0, 0.99)),
       busy=st.floats(0, 1), dp=st.integers(1, 8))
def test_predicted_p99_is_at_least_the_median(batch, prefill, ratio, busy, dp):
    arrival = Arrival("steady", ratio, "row", "inferencemax")
    median, p99 = benchmark_ttft_percentiles_s(DEFAULT, prefill_s=prefill, step_s=0.02, batch=batch,
                                               input_tokens=4000.0, engine="trtllm", busy_share=busy,
                                               arrival=arrival, output_tokens=500.0, attention_dp=dp,
                                               tail_prefill_s=prefill * 1.1)
    assert p99 >= median > 0


def test_harness_lookup(catalog):
    imx = catalog.harness_for("inferencemax_b200_sglang_fp4_tp4_ep4_dpa0_1024x1024_c4")
    assert imx is not None and (imx.id, imx.arrival_pattern, imx.length_range_ratio) == ("inferencemax", "steady", 0.8)
    aic = catalog.harness_for("2026_04_06_gpt_oss_120b_b200_sxm_trtllm_fp4_agg_1024x8192_c32_tp8_ep1_191")
    assert aic is not None and (aic.id, aic.arrival_pattern) == ("aiconfigurator", "waves")
    assert catalog.harness_for("my_lab_run_7") is None
    assert all(h.source and h.as_of for h in catalog.harnesses.values())


HEADER = ("model,gpu,precision,tp,batch,input_tokens,output_tokens,engine,measured_tpot_ms,measured_ttft_ms,"
          "source_id,arrival_pattern,length_range_ratio,measured_ttft_p99_ms\n")


def rows_text(*lines: str) -> str:
    return HEADER + "".join(line + "\n" for line in lines)


def test_row_arrival_precedence(catalog):
    rows = parse_measurements(rows_text(
        "gpt-oss-120b,b200,fp4,2,64,1024,1024,vllm,9.0,50,inferencemax_b200_vllm_x,,,",
        "gpt-oss-120b,b200,fp4,2,64,1024,1024,vllm,9.0,50,inferencemax_b200_vllm_x,waves,,",
        "gpt-oss-120b,b200,fp4,2,64,1024,1024,vllm,9.0,50,lab_run,,0.5,",
        "gpt-oss-120b,b200,fp4,2,64,1024,1024,vllm,9.0,50,,,,",
    ), "t.csv")
    got = [row_arrival(r, catalog) for r in rows]
    assert got[0] == Arrival("steady", 0.8, "inferencemax", "inferencemax")
    assert got[1] == Arrival("waves", 1.0, "row", "inferencemax")
    assert got[2] == Arrival("steady", 0.5, "row", "")
    assert got[3] == Arrival()
    # InferenceMAX's clients drift apart: fewer prompts ahead, a lower TTFT
    preds = [predict(r, catalog, DEFAULT) for r in rows]
    assert preds[0].predicted_ttft_ms < preds[1].predicted_ttft_ms
    assert preds[0].predicted_tpot_ms == preds[1].predicted_tpot_ms  # arrivals change TTFT only


def test_validate_json_reports_patterns_and_p99(tmp_path, capsys):
    f = tmp_path / "runs.csv"
    f.write_text(rows_text(
        "gpt-oss-120b,b200,fp4,2,64,1024,1024,vllm,9.0,50,inferencemax_b200_vllm_x,,,90",
        "gpt-oss-120b,b200,fp4,2,64,1024,1024,vllm,9.0,50,2026_04_06_gpt_oss,,,",
    ))
    assert main(["validate", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    first, second = doc["rows"]
    assert (first["arrival_pattern"], first["arrival_source"]) == ("steady", "inferencemax")
    assert (second["arrival_pattern"], second["arrival_source"]) == ("waves", "aiconfigurator")
    assert first["predicted_ttft_p99_ms"] >= first["predicted_ttft_ms"]
    assert "predicted_ttft_p99_ms" not in second
    assert doc["summary"]["arrival_patterns"] == {"waves": 1, "steady": 1}
    p99 = doc["summary"]["ttft_p99"]
    assert p99["rows"] == 1
    assert p99["median_ratio"] == pytest.approx(90 / first["predicted_ttft_p99_ms"], rel=1e-3)
    assert main(["validate", str(f)]) == 0
    text = capsys.readouterr().out
    assert "1 rows in waves (fixed lengths), 1 steady" in text and "99th-percentile" in text


@pytest.mark.parametrize("cells, expected", [
    ("burst,,", "column 'arrival_pattern': must be waves or steady, got 'burst' (nearest valid choice: waves)"),
    ("waves,0.8,", "column 'length_range_ratio': waves are fixed lengths, ratio 1, got 0.8"),
    ("steady,1,", "column 'length_range_ratio': steady needs lengths drawn from a range"),
    (",1.5,", "column 'length_range_ratio'"),
    (",,-3", "column 'measured_ttft_p99_ms'"),
])
def test_bad_arrival_columns(tmp_path, capsys, cells, expected):
    text = rows_text(f"gpt-oss-120b,b200,fp4,2,64,1024,1024,vllm,9.0,50,x,{cells}")
    with pytest.raises(MeasurementError, match="t.csv:2"):
        parse_measurements(text, "t.csv")
    f = tmp_path / "bad.csv"
    f.write_text(text)
    assert main(["validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1

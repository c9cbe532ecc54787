"""``fleetplan simulate``: the event loop by hand, and the command on a planned example."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from fleetplan.main import main
from fleetplan.optimizer.simulation.simulate import DecodeReplicas, Requests, decode_fleet, tpot_s

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def constant_step(seconds: float):
    return lambda decoding, context, prefill: seconds


def run(arrival, tokens_in, tokens_out, batch, chunk=1000, step=0.1):
    reqs = Requests(np.array(arrival, dtype=float), np.array(tokens_in), np.array(tokens_out))
    fleet = DecodeReplicas(replicas=1, batch=batch, step_s=constant_step(step), chunk_tokens=chunk)
    timings, busy = decode_fleet(reqs, reqs.arrival_s, fleet, rate_per_s=0.0)
    return reqs, timings, busy


def test_chunked_prefill_then_one_token_a_step_by_hand():
    # request 0 at t=0: its prompt fills step 1 (first token at 0.1), tokens 2 and 3 at 0.2, 0.3;
    # request 1 at 0.05 joins at the next step (0.1): its prompt in step 2, first token at 0.2
    reqs, t, _ = run([0.0, 0.05], [10, 10], [3, 2], batch=2)
    assert t.first_s.tolist() == pytest.approx([0.1, 0.2])
    assert t.last_s.tolist() == pytest.approx([0.3, 0.3])
    assert tpot_s(reqs, t).tolist() == pytest.approx([0.1, 0.1])


def test_a_long_prompt_takes_several_chunks():
    # 2,500 prompt tokens at 1,000 a step: three steps before the first token
    _, t, _ = run([0.0], [2500], [2], batch=4)
    assert t.first_s[0] == pytest.approx(0.3) and t.last_s[0] == pytest.approx(0.4)


def test_a_full_batch_makes_the_next_request_wait():
    # batch 1: request 1 waits until request 0's last token (0.3) before its prompt starts
    _, t, _ = run([0.0, 0.0], [10, 10], [3, 3], batch=1)
    assert t.first_s.tolist() == pytest.approx([0.1, 0.4])


def plan_file(tmp_path: Path, example: str, *extra: str, **product: object) -> Path:
    """The plan of a shipped example (its first product changed by ``product``; ``extra``: more
    ``plan`` options) as a JSON file."""
    scenario = EXAMPLES / example
    if product:
        raw = yaml.safe_load(scenario.read_text(encoding="utf-8"))
        raw["products"][0].update(product)
        raw["products"][0]["trace"] = str(EXAMPLES / raw["products"][0]["trace"])
        scenario = tmp_path / example
        scenario.write_text(yaml.safe_dump(raw), encoding="utf-8")
    out = tmp_path / "plan.json"
    assert main(["plan", str(scenario), "--out", str(out), "--no-alternatives", "--json", *extra]) == 0
    return out


def test_simulate_json_keys_determinism_and_target(tmp_path, capsys):
    # the plan as the MIP makes it (not raised by a replay round), so its peak hour runs at peak_qps
    plan = plan_file(tmp_path, "chat-trace.yaml", "--no-verify")
    capsys.readouterr()
    args = ["simulate", str(plan), "--requests", "3000", "--seed", "5", "--json"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == first
    d = json.loads(first)
    p = d["products"][0]
    assert {"ttft_ms", "tpot_ms", "utilisation", "missed_requests", "meets_targets"} <= set(p)
    assert set(p["ttft_ms"]) == set(p["tpot_ms"]) == {"p50", "p90", "p99"}
    assert p["hour"] == 12 and p["qps"] == pytest.approx(40.0) and p["requests"] == 3000
    assert p["ttft_ms"]["p50"] <= p["ttft_ms"]["p90"] <= p["ttft_ms"]["p99"] <= 1000.0  # the planned P99 target
    assert p["tpot_ms"]["p50"] <= 1000.0 / 30  # the per-user speed
    assert d["meets_targets"] is True and 0.0 < p["utilisation"] < 1.0


def test_simulate_with_the_sample_trace_replays_its_busiest_hour(tmp_path, capsys):
    plan = plan_file(tmp_path, "chat-trace.yaml")
    capsys.readouterr()
    assert main(["simulate", str(plan), "--trace", str(EXAMPLES / "traces" / "chat-week.csv"), "--json"]) == 0
    p = json.loads(capsys.readouterr().out)["products"][0]
    assert p["hour"] == 12 and 500 < p["requests"] < 1500  # Monday 12:00 of the 60,000-request week
    # replayed as logged: the hour's requests over its span, far below the 40 QPS the plan serves
    assert p["arrival_rate_qps"] == pytest.approx((p["requests"] - 1) / p["simulated_s"], abs=1e-4)
    assert p["arrival_rate_qps"] < 0.01 * p["qps"] and p["qps"] == 40
    assert main(["simulate", str(plan), "--trace", str(EXAMPLES / "traces" / "chat-week.csv")]) == 0
    out, err = capsys.readouterr()
    assert f"{p['requests']:,} requests arriving at {p['arrival_rate_qps']:g}/s (the plan's hour serves 40/s)" in out.splitlines()[0]
    assert "--trace-rate plan replays them at the planned rate" in err


def test_a_trace_replayed_at_the_plans_rate_keeps_its_bursts_in_shape(tmp_path, capsys):
    from fleetplan.optimizer.simulation.simulate_plan import Settings, arrivals, hour_load
    from fleetplan.optimizer.traffic.trace import read_trace

    plan = plan_file(tmp_path, "chat-trace.yaml")
    capsys.readouterr()
    trace_path = str(EXAMPLES / "traces" / "chat-week.csv")
    assert main(["simulate", str(plan), "--trace", trace_path, "--trace-rate", "plan", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    p = d["products"][0]
    assert d["trace_rate"] == "plan" and p["hour"] == 12 and 500 < p["requests"] < 1500
    # the same requests as the logged replay, their times scaled to arrive at the hour's 40/s
    assert p["arrival_rate_qps"] == pytest.approx(40.0, rel=0.05)
    assert main(["simulate", str(plan), "--trace", trace_path, "--trace-rate", "plan"]) == 0
    out, err = capsys.readouterr()
    assert f"{p['requests']:,} requests at 40/s on" in out.splitlines()[0] and "--trace-rate" not in err
    # by hand: every arrival time is the logged one times n / 3600 s / qps, the sizes unchanged
    pd = json.loads(plan.read_text(encoding="utf-8"))["products"][0]
    load = hour_load(pd, 12)
    trace = read_trace(trace_path)
    logged = arrivals(pd, load, 168, Settings(trace=trace, seed=3))
    scaled = arrivals(pd, load, 168, Settings(trace=trace, seed=3, trace_rate="plan"))
    stretch = logged.count / 3600.0 / load.qps
    assert 0 < stretch < 0.01 and np.allclose(scaled.arrival_s, logged.arrival_s * stretch, rtol=1e-12)
    assert np.array_equal(scaled.input_tokens, logged.input_tokens)
    assert np.array_equal(scaled.output_tokens, logged.output_tokens)


def test_trace_rate_without_a_trace_is_one_line_and_exit_2(tmp_path, capsys):
    plan = plan_file(tmp_path, "seed-chat-70b.yaml")
    capsys.readouterr()
    assert main(["simulate", str(plan), "--trace-rate", "plan", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--trace-rate" in err and "--trace" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exc:  # an argparse error: the parser's one line
        main(["simulate", str(plan), "--trace-rate", "scaled"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "invalid choice: 'scaled'" in err


def test_simulate_at_the_planned_rate_says_the_planned_rate(tmp_path, capsys):
    plan = plan_file(tmp_path, "seed-chat-70b.yaml")
    capsys.readouterr()
    assert main(["simulate", str(plan), "--requests", "3000", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)["products"][0]
    # a Poisson sample at the hour's rate: 2,999 gaps of mean 1 / qps
    assert p["arrival_rate_qps"] == pytest.approx(p["qps"], rel=0.1)
    assert main(["simulate", str(plan), "--requests", "3000"]) == 0
    assert f"3,000 requests at {p['qps']:g}/s on" in capsys.readouterr().out


def test_simulate_hour_outside_the_plan_exits_2(tmp_path, capsys):
    plan = plan_file(tmp_path, "seed-chat-70b.yaml")  # one hour
    capsys.readouterr()
    assert main(["simulate", str(plan), "--hour", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--hour: 3 is outside the plan's hours 0..0" in err


def test_simulate_hour_beyond_a_week_is_refused_by_the_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "plan.json", "--hour", "200"])
    assert exc.value.code == 2 and "--hour" in capsys.readouterr().err


def test_simulate_not_a_plan_exits_2(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"a": 1}', encoding="utf-8")
    assert main(["simulate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a plan" in err


def test_simulate_a_scenario_says_to_plan_it_first(capsys):
    assert main(["simulate", str(EXAMPLES / "chat-trace.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fleetplan plan" in err and "--out plan.json" in err


def mix_plan(tmp_path: Path) -> Path:
    """The chat-trace plan of one request size with its replicas split over two configurations (keys
    a and b, 2 and 1 replicas) and its demand over two size buckets, as a plan made from a mix
    states them."""
    plan = json.loads(plan_file(tmp_path, "chat-trace.yaml", trace_buckets=1).read_text(encoding="utf-8"))
    p = plan["products"][0]
    base = {k: p[k] for k in ("gpu", "tp", "pp", "ep", "dp_attention", "layout", "batch", "precision",
                              "kv_precision", "step_time_ms")}
    p["configurations"] = [{**base, "key": "a", "prefill_mode": "colocated", "replicas": 2},
                           {**base, "key": "b", "prefill_mode": "colocated", "replicas": 1}]
    p["requests"] = [
        {"input_tokens": 600, "output_tokens": 160, "share": 0.6, "api_fraction": 0.0,
         "configurations": [{"key": "a", "share": 1.0}]},
        {"input_tokens": 3000, "output_tokens": 230, "share": 0.4, "api_fraction": 0.0,
         "configurations": [{"key": "a", "share": 0.25}, {"key": "b", "share": 0.75}]},
    ]
    out = tmp_path / "mix.json"
    out.write_text(json.dumps(plan), encoding="utf-8")
    return out


def test_simulate_a_mix_plan_runs_each_configuration(tmp_path, capsys):
    plan = mix_plan(tmp_path)
    capsys.readouterr()
    assert main(["simulate", str(plan), "--requests", "3000", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)["products"][0]
    assert p["requests"] == 3000 and p["meets_targets"] is True
    assert 0.0 < p["utilisation"] < 1.0 and p["missed_requests"] == 0
    assert main(["simulate", str(plan), "--hour", "3"]) == 2
    assert "--hour: a product planned from a mix" in capsys.readouterr().err


def test_a_short_run_is_flagged(tmp_path, capsys):
    plan = plan_file(tmp_path, "chat-trace.yaml")
    capsys.readouterr()
    assert main(["simulate", str(plan), "--requests", "50", "--json"]) == 0
    captured = capsys.readouterr()
    p = json.loads(captured.out)["products"][0]
    assert p["short_run"] is True and p["simulated_s"] < 3 * p["mean_request_s"]
    assert "under three request lifetimes" in captured.err


def test_a_pool_plan_reports_the_analytic_percentiles_beside_the_simulated(capsys):
    plans = Path(__file__).resolve().parent / "data" / "plans"
    assert main(["simulate", str(plans / "seed-chat-70b-pool.json"), "--requests", "3000", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)["products"][0]
    # 125 pool replicas at 80%: almost nobody waits; TTFT is the 2,000-token prefill plus the hand-off
    assert p["pool_replicas"] == 125 and p["analytic_ttft_ms"]["p50"] == pytest.approx(291.8, abs=0.2)
    assert abs(p["analytic_ttft_ms"]["p99"] / p["ttft_ms"]["p99"] - 1) <= 0.25


def test_a_planned_mix_meets_its_p99_target_in_simulation(tmp_path, capsys):
    # short and long prompts on two GPU types: the long bucket sets the colocated batch it may use
    raw = {"products": [{"name": "m", "model": "llama-3.1-8b", "peak_qps": 30, "min_tokens_per_s_per_user": 20,
                         "precision": "fp8", "prefill": "colocated", "max_ttft_ms": {"p99": 3000},
                         "requests": [{"input_tokens": 200, "output_tokens": 150, "share": 0.8},
                                      {"input_tokens": 6000, "output_tokens": 300, "share": 0.2}]}],
           "options": {"gpus": ["l40s", "h100-sxm"], "tp": [1, 2]}}
    (tmp_path / "mix.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
    out = tmp_path / "plan.json"
    assert main(["plan", str(tmp_path / "mix.yaml"), "--out", str(out), "--no-alternatives", "--json"]) == 0
    plan = json.loads(out.read_text(encoding="utf-8"))["products"][0]
    assert plan["max_ttft_ms"] == {"p99": 3000.0}
    # every configuration says at which request sizes its step time is timed
    assert all(c["step_input_tokens"] in (200, 6000) for c in plan["configurations"])
    capsys.readouterr()
    assert main(["simulate", str(out), "--requests", "4000", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)["products"][0]
    assert p["qps"] == pytest.approx(30.0, rel=1e-3)
    assert p["ttft_ms"]["p99"] <= 3000.0 and p["meets_targets"] is True
    assert p["tpot_ms"]["p50"] <= 1e3 / 20

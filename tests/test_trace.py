"""Traces: reading (column aliases, datetimes, bad files), the hourly profile, the size mix, the
synthetic generator and a product planned from a trace."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fleetplan.catalogs.loader import InputError
from fleetplan.main import main
from fleetplan.optimizer.traffic.synthetic import generate, trace_csv
from fleetplan.optimizer.traffic.trace import (
    Trace, horizon_hours, trace_hourly_qps, product_fields, read_trace, size_histogram,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_canonical_columns_sorted_and_failed_requests_left_out(tmp_path):
    p = write(tmp_path, "timestamp,input_tokens,output_tokens\n5,100,10\n1,200,20\n3,300,0\n")
    t = read_trace(p)
    assert t.arrival_s.tolist() == [1.0, 5.0]
    assert t.input_tokens.tolist() == [200, 100] and t.output_tokens.tolist() == [20, 10]


def test_azure_names_and_datetimes_from_monday(tmp_path):
    # 2023-11-16 was a Thursday: 3 days and 18:15:46.68 after Monday 00:00
    p = write(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                        "2023-11-16 18:15:50.9951690,396,109\n")
    t = read_trace(p)
    assert t.arrival_s[0] == pytest.approx(3 * 86400 + 18 * 3600 + 15 * 60 + 46.68059)
    assert t.arrival_s[1] - t.arrival_s[0] == pytest.approx(4.314579)
    assert t.input_tokens.tolist() == [374, 396]


def test_burstgpt_names(tmp_path):
    p = write(tmp_path, "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                        "5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,230,1317,Conversation log\n")
    t = read_trace(p)
    assert t.arrival_s.tolist() == [5.0, 45.0] and t.output_tokens.tolist() == [18, 230]


@pytest.mark.parametrize("text, words", [
    ("time,input_tokens,output_tokens\n1,2,3\n", ["no column 'timestamp'", "nearest valid choice: time"]),
    ("timestamp,input_tokens,out_tokens\n1,2,3\n", ["no column 'output_tokens'", "out_tokens"]),
    ("timestamp,input_tokens,output_tokens\n1,2.5,3\n", ["line 2", "'input_tokens'", "whole number"]),
    ("timestamp,input_tokens,output_tokens\n1,-2,3\n", ["line 2", "'input_tokens'"]),
    ("timestamp,input_tokens,output_tokens\nnoon,2,3\n", ["'timestamp'", "seconds or ISO datetimes"]),
    ("timestamp,input_tokens,output_tokens\n1,0,3\n", ["no request with input and output tokens"]),
])
def test_bad_traces_name_the_file_and_column(tmp_path, text, words):
    p = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        read_trace(p)
    assert str(p) in str(err.value)
    for w in words:
        assert w in str(err.value)


def trace_of(arrival: list[float]) -> Trace:
    n = len(arrival)
    return Trace(np.array(arrival, dtype=float), np.full(n, 100), np.full(n, 10))


def test_hour_planned_at_a_percentile_of_its_minutes_not_its_mean():
    # one hour: minute 0 has 600 requests (10/s), the other 59 minutes one each (1/60 per s)
    arrival = [i * 0.1 for i in range(600)] + [60.0 * m + 1 for m in range(1, 60)]
    t = trace_of(arrival)
    assert horizon_hours(t) == 1
    assert trace_hourly_qps(t, 1.0) == [pytest.approx(10.0)]  # the busiest minute
    assert trace_hourly_qps(t, 0.5) == [pytest.approx(1 / 60)]  # the median minute
    assert (600 + 59) / 3600 < 0.2  # the hourly mean would plan 0.18/s


def test_day_trace_hours_map_to_the_hour_of_day_and_uncovered_hours_take_the_peak():
    # two hours of a day: hour 2 at 1/s, hour 3 at 2/s; the trace spans more than an hour
    arrival = [7200 + i for i in range(3600)] + [10800 + i * 0.5 for i in range(7200)] + [86000.0]
    qps = trace_hourly_qps(trace_of(arrival), 0.95)
    assert len(qps) == 24
    assert qps[2] == pytest.approx(1.0) and qps[3] == pytest.approx(2.0)
    assert qps[0] == pytest.approx(2.0)  # not covered: the busiest hour, never too little


def test_week_trace_folds_weeks_taking_the_busier():
    week = 168 * 3600
    arrival = [i * 1.0 for i in range(3600)] + [week + i * 0.25 for i in range(14400)]
    qps = trace_hourly_qps(trace_of(arrival), 0.95)
    assert len(qps) == 168 and qps[0] == pytest.approx(4.0)


def test_size_buckets_log_spaced_with_weighted_means():
    t = Trace(np.arange(4, dtype=float), np.array([90, 110, 9000, 11000]), np.array([10, 10, 1000, 1000]))
    buckets = size_histogram(t, 2)  # edges 100, ~3,300, 12,000: two requests each side
    assert buckets == [{"input_tokens": 100, "output_tokens": 10, "share": 0.5},
                       {"input_tokens": 10000, "output_tokens": 1000, "share": 0.5}]


def test_product_fields_of_the_sample_trace():
    f = product_fields(EXAMPLES / "traces" / "chat-week.csv")
    assert len(f["profile"]) == 168 and max(f["profile"]) == 1.0
    assert f["input_tokens"] == 1680 and f["output_tokens"] == 194
    assert sum(b["share"] for b in f["requests"]) == pytest.approx(1.0)
    assert f["requests"][0]["input_tokens"] < f["requests"][-1]["input_tokens"]
    busy, quiet = f["profile"][16], f["profile"][4]  # Monday 16:00 against 04:00
    assert busy > 2 * quiet


def test_generator_is_deterministic_and_has_the_stated_medians():
    a = generate(20_000, 3)
    b = generate(20_000, 3)
    assert trace_csv(*a) == trace_csv(*b)
    assert trace_csv(*a) != trace_csv(*generate(20_000, 4))
    arrival, tokens_in, tokens_out = a
    assert arrival.size == 20_000 and np.all(np.diff(arrival) >= 0) and arrival[-1] < 7 * 86400
    assert np.median(tokens_in) == pytest.approx(1020, rel=0.05)
    assert np.median(tokens_out) == pytest.approx(129, rel=0.05)


def test_cli_generate_then_show(tmp_path, capsys):
    out = tmp_path / "g.csv"
    assert main(["trace", "generate", "--out", str(out), "--requests", "2000", "--seed", "1"]) == 0
    first = out.read_bytes()
    assert main(["trace", "generate", "--out", str(out), "--requests", "2000", "--seed", "1"]) == 0
    assert out.read_bytes() == first
    capsys.readouterr()
    assert main(["trace", "show", str(out), "--json", "--buckets", "3"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d) == {"peak_qps", "profile", "input_tokens", "output_tokens", "requests", "arrival_scv", "arrivals"}
    assert len(d["requests"]) <= 3


def test_cli_bad_trace_exits_2_with_one_line(tmp_path, capsys):
    p = write(tmp_path, "when,ContextTokens,GeneratedTokens\n1,2,3\n")
    assert main(["trace", "show", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'timestamp'" in err and str(p) in err


def test_scenario_with_a_trace_needs_no_sizes_and_plans(tmp_path):
    from fleetplan.optimizer.traffic.scenario import load_scenario

    s, folder = load_scenario(EXAMPLES / "chat-trace.yaml")
    p = s.products[0]
    assert (p.peak_qps, p.input_tokens, p.output_tokens) == (40, 1680, 194)
    from fleetplan.optimizer.traffic.demand import hourly_qps as demand

    qps = demand(s.products, folder)["chat"]
    assert len(qps) == 168 and max(qps) == pytest.approx(40.0)


@pytest.mark.parametrize("extra, words", [
    ("", "peak_qps: required (or give trace"),
    ("    trace: t.csv\n    demand_profile: p.csv\n", "demand_profile or trace, not both"),
])
def test_scenario_trace_rules(tmp_path, extra, words):
    from fleetplan.optimizer.traffic.scenario import ScenarioError, load_scenario

    y = write(tmp_path, "products:\n  - name: a\n    model: llama-3.1-8b\n" + extra, "s.yaml")
    with pytest.raises(ScenarioError, match=words.replace("(", r"\(")):
        load_scenario(y)


def test_scenario_trace_missing_names_the_field(tmp_path):
    from fleetplan.optimizer.traffic.scenario import load_scenario

    y = write(tmp_path, "products:\n  - name: a\n    model: llama-3.1-8b\n    trace: nothere.csv\n", "s.yaml")
    with pytest.raises(InputError, match=r"products\[a\]\.trace: .*nothere.csv: trace file not found"):
        load_scenario(y)


@pytest.mark.parametrize("text, words", [
    ("", "empty; a trace starts with a header"),
    ("timestamp,input_tokens,output_tokens\n", "no requests after the header"),
    ("\ufefftimestamp,input_tokens,output_tokens\n1,2,3\n", None),
])
def test_empty_traces_and_a_byte_order_mark(tmp_path, text, words):
    p = write(tmp_path, text)
    if words is None:
        assert read_trace(p).requests == 1
        return
    with pytest.raises(InputError, match=words):
        read_trace(p)


def test_a_plan_never_overwrites_its_trace(tmp_path, capsys):
    import shutil

    (tmp_path / "traces").mkdir()
    shutil.copy(EXAMPLES / "chat-trace.yaml", tmp_path / "s.yaml")
    trace = tmp_path / "traces" / "chat-week.csv"
    shutil.copy(EXAMPLES / "traces" / "chat-week.csv", trace)
    before = trace.read_bytes()
    assert main(["plan", str(tmp_path / "s.yaml"), "--out", str(trace)]) == 2
    assert "is one of this command's input files" in capsys.readouterr().err
    assert trace.read_bytes() == before

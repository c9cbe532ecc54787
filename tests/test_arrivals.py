"""Arrival variability of a trace hour (:mod:`fleetplan.optimizer.traffic.arrival_stats`), checked by hand
on tiny traces, what ``trace show`` reports of it, and the bursty arrivals the generator draws
(:func:`fleetplan.optimizer.traffic.synthetic.renewal_gaps`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fleetplan.main import main
from fleetplan.optimizer.traffic.arrival_stats import (
    hour_stats, interarrival_scv, longest_burst_s, peak_rate, planned_hour_stats, trace_hour_stats,
)
from fleetplan.optimizer.traffic.synthetic import BURST_GAP_SHARE, TraceShape, burst_probability, generate, renewal_gaps


def test_even_gaps_have_scv_zero_and_poisson_gaps_scv_one():
    assert interarrival_scv(np.arange(10.0)) == 0.0
    rng = np.random.Generator(np.random.PCG64(3))
    assert interarrival_scv(np.cumsum(rng.exponential(1.0, 200_000))) == pytest.approx(1.0, abs=0.02)


def test_scv_and_windows_by_hand():
    # gaps 0, 0, 10: mean 10/3, variance 200/9, SCV 2
    t = np.array([0.0, 0.0, 0.0, 10.0])
    assert interarrival_scv(t) == pytest.approx(2.0)
    assert peak_rate(t, 1.0) == 3.0          # [0, 1) holds three
    assert peak_rate(t, 10.0) == 0.3         # [0, 10) holds three: 10.0 is outside
    assert peak_rate(t, 60.0) == pytest.approx(4 / 60)
    # mean 4/3600 per second: bins [0, 10) and [10, 20) are above it, then none: 20 s
    assert longest_burst_s(t, 0.0) == 20.0


def test_fewer_than_three_requests_have_no_scv():
    assert interarrival_scv(np.array([1.0, 5.0])) == 0.0


def test_hours_are_split_on_the_clock_and_the_busiest_lands_on_each_plan_hour():
    # trace hours 0 and 24 land on plan hour 0 of a day; 24 is busier
    t = np.array([1.0, 2.0, 3.0, 3600.0 + 5, 86400.0 + 1, 86400.0 + 2, 86400.0 + 3, 86400.0 + 4])
    stats = trace_hour_stats(t)
    assert sorted(stats) == [0, 1, 24]
    assert stats[0]["requests"] == 3 and stats[24]["requests"] == 4 and stats[1]["requests"] == 1
    hours = planned_hour_stats(t, 24)
    assert hours[0]["trace_hour"] == 24 and hours[1]["trace_hour"] == 1
    assert hours[5]["trace_hour"] == 24  # no trace hour: the busiest


def test_hour_stats_of_a_burst():
    # 30 requests in the first second, then one a minute: a burst of dozens within a second
    t = np.sort(np.concatenate([np.linspace(0.0, 0.9, 30), 60.0 * np.arange(1, 60)]))
    row = hour_stats(t, 0.0)
    assert row["requests"] == 89 and row["peak_qps_1s"] == 30.0 and row["peak_qps_10s"] == 3.0
    # every 10 s bin holding a request is above the mean (89/3600 per second), none is adjacent to another
    assert row["longest_burst_s"] == 10.0


def test_trace_show_prints_the_variability(tmp_path, capsys):
    p = tmp_path / "t.csv"
    p.write_text("timestamp,input_tokens,output_tokens\n0,10,5\n0,10,5\n0,10,5\n10,10,5\n", encoding="utf-8")
    assert main(["trace", "show", str(p), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["arrival_scv"] == 2.0
    assert d["arrivals"][0]["peak_qps_1s"] == 3.0 and d["arrivals"][0]["longest_burst_s"] == 20.0
    assert main(["trace", "show", str(p)]) == 0
    assert "SCV 2" in capsys.readouterr().out


@pytest.mark.parametrize("scv", [0.5, 10.0, 100.0])
def test_renewal_gaps_have_the_asked_scv_and_rate(scv):
    gaps = renewal_gaps(2.0, 400_000, scv, np.random.Generator(np.random.PCG64(0)))
    assert gaps.mean() == pytest.approx(0.5, rel=0.03)
    assert interarrival_scv(np.cumsum(gaps)) == pytest.approx(scv, rel=0.1)


def test_burst_probability_solves_the_scv():
    for scv in (1.2, 10.0, 170.0, 10_000.0):
        p = burst_probability(scv)
        a = BURST_GAP_SHARE
        assert 2.0 * ((1 - p) * a * a + (1 - (1 - p) * a) ** 2 / p) - 1.0 == pytest.approx(scv, rel=1e-9)
    assert burst_probability(1.0) == 1.0


def test_generated_bursty_hour_same_seed_same_bytes_and_near_the_asked_scv(tmp_path, capsys):
    out = tmp_path / "b.csv"
    args = ["trace", "generate", "--out", str(out), "--requests", "9360", "--hours", "1",
            "--arrival-scv", "100", "--seed", "3"]
    assert main(args) == 0
    first = out.read_bytes()
    out.unlink()
    assert main(args) == 0
    assert out.read_bytes() == first
    capsys.readouterr()
    assert main(["trace", "show", str(out), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    hour = d["arrivals"][0]
    assert hour["requests"] == 9360 and hour["mean_qps"] == 2.6
    assert 70.0 < hour["arrival_scv"] < 140.0  # one hour of bursts of ~50: the sample's SCV scatters
    assert hour["peak_qps_10s"] > 5 * hour["mean_qps"]


def test_the_default_generator_is_the_original_draw():
    # arrival SCV 1 and no --hours keep the sample trace's bytes (examples/traces/chat-week.csv)
    a, i, o = generate(500, 7, TraceShape(days=1))
    b, j, p = generate(500, 7, TraceShape(days=1, arrival_scv=1.0))
    assert np.array_equal(a, b) and np.array_equal(i, j)


def test_bad_arrival_scv_flag_exits_2_naming_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["trace", "generate", "--out", str(tmp_path / "x.csv"), "--arrival-scv", "-1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--arrival-scv" in err[0] and not (tmp_path / "x.csv").exists()

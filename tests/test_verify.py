"""Plans that hold on bursty traffic: the ``arrival_scv`` field, ``simulate --arrival-scv``, and a
plan from a trace replayed on the trace's own arrivals and tightened until it holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fleetplan.main import main
from fleetplan.models.queueing import ServiceTime
from fleetplan.optimizer.percentiles import Targets, pool_utilisation_cap

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_a_stated_arrival_scv_lowers_the_pool_utilisation_cap():
    service = ServiceTime.of_mix((0.1, 0.6), (0.8, 0.2))
    poisson = Targets([(0.99, 3.0)])
    bursty = Targets([(0.99, 3.0)])
    bursty.arrival_scv = 10.0
    assert pool_utilisation_cap(service, 0.0, poisson) == pool_utilisation_cap(service, 0.0, [(0.99, 3.0)])
    assert 0.0 < pool_utilisation_cap(service, 0.0, bursty) < 0.8 * pool_utilisation_cap(service, 0.0, poisson)


def scenario_with(tmp_path: Path, name: str, **fields) -> Path:
    d = yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))
    d["products"][0].update(fields)
    p = tmp_path / name
    p.write_text(yaml.safe_dump(d), encoding="utf-8")
    return p


def test_a_bad_arrival_scv_is_one_line_naming_the_field(tmp_path, capsys):
    p = scenario_with(tmp_path, "mix-conversational.yaml", arrival_scv=-1)
    assert main(["plan", str(p), "--no-alternatives"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "arrival_scv" in err[0] and "Traceback" not in err[0]


def test_bursty_arrivals_in_simulate_same_seed_same_bytes(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert main(["plan", str(EXAMPLES / "mix-conversational.yaml"), "--out", str(plan), "--no-alternatives"]) == 0
    capsys.readouterr()
    args = ["simulate", str(plan), "--requests", "2000", "--arrival-scv", "200", "--json"]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == first
    assert main(["simulate", str(plan), "--requests", "2000", "--json"]) == 0
    poisson = json.loads(capsys.readouterr().out)["products"][0]
    bursty = json.loads(first)["products"][0]
    # the same requests and rate, arriving in bursts of ~100: the tail of TTFT grows (133 ms to 1.3 s)
    assert bursty["requests"] == poisson["requests"] == 2000
    assert bursty["ttft_ms"]["p99"] > 5 * poisson["ttft_ms"]["p99"]
    assert main(["simulate", str(plan), "--trace", str(EXAMPLES / "traces" / "chat-week.csv"),
                 "--arrival-scv", "5"]) == 2
    assert "--arrival-scv" in capsys.readouterr().err

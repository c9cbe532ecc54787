"""``fleetplan sweep``: grid and Monte-Carlo points, each row the plan of its point (checked
against a plan made here), the same bytes from local workers and from a Dask LocalCluster, and
one-line errors for bad paths, values and schedulers."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from fleetplan.catalogs import load_catalog
from fleetplan.main import main
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.explanation.results import plan_to_dict
from fleetplan.optimizer.traffic.scenario import load_scenario
from fleetplan.optimizer.decisions.sweep import grid_points, parse_axis, sampled_points
from fleetplan.optimizer.decisions.whatif import apply_edits

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
OPEN = str(EXAMPLES / "seed-chat-70b-open.yaml")
GRID = ["--set", "products.chat.peak_qps=100:300:100", "--set", "options.gpu_hour_usd.h100-sxm=1.5,2.5"]


def rows_of(out: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((out / "sweep.csv").read_text(encoding="utf-8"))))


def test_grids_include_both_ends_and_combine_with_the_last_axis_fastest():
    assert parse_axis("options.gpu_hour_usd.h100-sxm=0.1:0.3:0.1").values == (0.1, 0.2, 0.3)
    assert parse_axis("products.chat.peak_qps=50:500:50").values == tuple(range(50, 501, 50))
    assert parse_axis("preset=seed,default").values == ("seed", "default")
    points = grid_points([parse_axis("a.x=1,2"), parse_axis("b.y=3:4:1")])
    assert points == [{"a.x": 1, "b.y": 3}, {"a.x": 1, "b.y": 4}, {"a.x": 2, "b.y": 3}, {"a.x": 2, "b.y": 4}]


def test_draws_follow_the_seed_and_stay_within_their_distribution():
    axes = [parse_axis("products.chat.peak_qps=uniform(50,500)"), parse_axis("preset=choice(seed,default)")]
    a, b = sampled_points(axes, 50, 7), sampled_points(axes, 50, 7)
    assert a == b and a != sampled_points(axes, 50, 8)
    qps = [p["products.chat.peak_qps"] for p in a]
    assert all(50 <= q <= 500 for q in qps) and len(set(qps)) == 50
    assert {p["preset"] for p in a} == {"seed", "default"}


def test_each_row_is_the_plan_of_its_point(capsys, tmp_path):
    assert main(["sweep", OPEN, *GRID, "--out", str(tmp_path / "s"), "--jobs", "1"]) == 0
    assert "6 points, 0 failed" in capsys.readouterr().out
    rows = rows_of(tmp_path / "s")
    assert [(r["products.chat.peak_qps"], r["options.gpu_hour_usd.h100-sxm"]) for r in rows] == [
        ("100", "1.5"), ("100", "2.5"), ("200", "1.5"), ("200", "2.5"), ("300", "1.5"), ("300", "2.5")]
    scenario, folder = load_scenario(OPEN)
    catalog = load_catalog()
    for r in (rows[0], rows[5]):
        edits = {"products.chat.peak_qps": int(r["products.chat.peak_qps"]),
                 "options.gpu_hour_usd.h100-sxm": float(r["options.gpu_hour_usd.h100-sxm"])}
        d = plan_to_dict(make_plan(apply_edits(scenario, edits), catalog, alternatives=False, folder=folder))
        assert float(r["monthly_cost_usd"]) == d["monthly_cost_usd"] and int(r["gpus"]) == d["totals"]["all_gpus"]
        assert r["status"] == d["status"] and r["error"] == ""
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "s" / "sweep.parquet").to_pylist()
    assert [t["monthly_cost_usd"] for t in table] == [float(r["monthly_cost_usd"]) for r in rows]
    assert (tmp_path / "s" / "sweep.svg").read_text(encoding="utf-8").startswith("<svg")


@pytest.mark.slow
def test_a_dask_local_cluster_gives_the_same_bytes_as_local_workers(capsys, tmp_path):
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        assert main(["sweep", OPEN, *GRID, "--out", str(tmp_path / "dask"), "--scheduler", cluster.scheduler_address]) == 0
    assert main(["sweep", OPEN, *GRID, "--out", str(tmp_path / "local"), "--jobs", "2"]) == 0
    capsys.readouterr()
    for name in ("sweep.csv", "sweep.parquet", "sweep.svg"):
        assert (tmp_path / "dask" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()


@pytest.mark.parametrize("argv, words", [
    (["--set", "products.chat.peak_qsp=1,2"], "--set products.chat.peak_qsp: unknown field 'peak_qsp' of products "
                                             "(nearest valid choice: peak_qps)"),
    (["--set", "products.chta.peak_qps=1,2"], "unknown product 'chta' (nearest valid choice: chat)"),
    (["--set", "optoins.tp=1,2"], "unknown section 'optoins' (nearest valid choice: options)"),
    (["--set", "products.chat.peak_qps=-5,10"], "--set: products[chat].peak_qps: must be a number from 0"),
    (["--set", "products.chat.peak_qps=300:100:50"], "a grid needs a step above 0 and stop >= start"),
    (["--set", "products.chat.peak_qps=1,2", "--set", "products.chat.peak_qps=3"], "given twice"),
    (["--set", "products.chat.peak_qps=normal(100,10)"], "a distribution needs --samples N"),
    (["--set", "products.chat.peak_qps=gauss(1,2)", "--samples", "3"], "unknown distribution 'gauss' (valid choices"),
    (["--set", "products.chat.peak_qps=1,2", "--scheduler", "tcp://127.0.0.1:9"], "--scheduler tcp://127.0.0.1:9: no Dask "
                                                                                 "scheduler answers"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(capsys, tmp_path, argv, words):
    code = main(["sweep", OPEN, *argv, "--out", str(tmp_path / "s")])
    _, err = capsys.readouterr()
    assert code == 2 and words in err and err.count("\n") == 1
    assert not (tmp_path / "s").exists()


def test_a_sample_count_out_of_range_is_a_flag_error(capsys, tmp_path):
    with pytest.raises(SystemExit) as stop:
        main(["sweep", OPEN, "--set", "products.chat.peak_qps=1,2", "--samples", "0", "--out", str(tmp_path / "s")])
    _, err = capsys.readouterr()
    assert stop.value.code == 2 and "--samples: must be a whole number from 1" in err and err.count("\n") == 1
    assert not (tmp_path / "s").exists()

"""Batches on a Dask cluster: the same plan and summary files, byte for byte, as planned here,
and one line (exit 2) when no scheduler answers."""

from __future__ import annotations

import shutil
from pathlib import Path

from fleetplan.main import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_a_batch_on_a_local_cluster_writes_the_same_files(capsys, tmp_path):
    from distributed import LocalCluster

    batch = tmp_path / "in"
    batch.mkdir()
    for name in ("seed-chat-70b.yaml", "seed-chat-70b-colocated.yaml"):
        shutil.copy(EXAMPLES / name, batch / name)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        assert main(["plan", str(batch), "--out", str(tmp_path / "dask"), "--scheduler", cluster.scheduler_address]) == 0
    assert main(["plan", str(batch), "--out", str(tmp_path / "here")]) == 0
    capsys.readouterr()
    names = sorted(p.name for p in (tmp_path / "here").iterdir())
    assert names == ["seed-chat-70b-colocated.json", "seed-chat-70b.json", "summary.csv", "summary.json"]
    assert sorted(p.name for p in (tmp_path / "dask").iterdir()) == names
    for name in names:
        assert (tmp_path / "dask" / name).read_bytes() == (tmp_path / "here" / name).read_bytes()


def test_a_batch_with_no_scheduler_listening_exits_2_and_writes_nothing(capsys, tmp_path):
    code = main(["plan", str(EXAMPLES / "seed-chat-70b.yaml"), str(EXAMPLES / "rag-20k.yaml"), "--out",
                 str(tmp_path / "out"), "--scheduler", "tcp://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 2 and "--scheduler tcp://127.0.0.1:9: no Dask scheduler answers" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()

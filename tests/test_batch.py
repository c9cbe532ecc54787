"""Batch planning: many scenarios in one run, failures collected, deterministic summary files."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from fleetplan.main import main

GOOD = ("seed-chat-70b.yaml", "seed-chat-70b-pool.yaml")
UNKNOWN_MODEL = """preset: seed
products:
  - name: chat
    model: llama-9-70b
    peak_qps: 5
    input_tokens: 2000
    output_tokens: 400
    min_tokens_per_s_per_user: 30
"""
INFEASIBLE = UNKNOWN_MODEL.replace("llama-9-70b", "llama-3.1-70b").replace(": 30", ": 5000") + "options:\n  gpus: [h100-sxm]\n"

# (scenario, product, status, monthly_cost_usd, gpu, tp, batch, precision, replicas, gpus, prefill_mode, prefill_gpus)
EXPECTED_ROWS = [
    ("bad-model", "", "error", "", "", "", "", "", "", "", "", ""),
    ("seed-chat-70b", "", "optimal", "295650.0", "", "", "", "", "81", "162", "", "0"),
    ("seed-chat-70b", "chat", "optimal", "295650.0", "h100-sxm", "2", "64", "fp8", "81", "162", "headroom", ""),
    ("seed-chat-70b-pool", "", "optimal", "751900.0", "", "", "", "", "81", "162", "", "250"),
    ("seed-chat-70b-pool", "chat", "optimal", "751900.0", "h100-sxm", "2", "64", "fp8", "81", "162", "pool", "250"),
]
KEYS = ("scenario", "product", "status", "monthly_cost_usd", "gpu", "tp", "batch", "precision", "replicas", "gpus",
        "prefill_mode", "prefill_gpus")


@pytest.fixture
def batch_dir(tmp_path: Path, examples: Path) -> Path:
    """Two shipped examples and a scenario naming an unknown model, in one directory."""
    d = tmp_path / "scenarios"
    d.mkdir()
    for name in GOOD:
        shutil.copy(examples / name, d / name)
    (d / "bad-model.yaml").write_text(UNKNOWN_MODEL, encoding="utf-8")
    (d / "notes.txt").write_text("not a scenario", encoding="utf-8")
    return d


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_batch_of_files_reports_failure_and_solves_the_rest(capsys, batch_dir, tmp_path):
    out = tmp_path / "out"
    files = [str(batch_dir / n) for n in ("seed-chat-70b-pool.yaml", "bad-model.yaml", "seed-chat-70b.yaml")]
    code, stdout, err = run(capsys, ["plan", *files, "--out", str(out)])
    assert code == 2
    # one line per failed scenario, naming its file; no progress output off a terminal
    assert err.splitlines() == [
        f"fleetplan: error: {batch_dir / 'bad-model.yaml'}: products[chat].model: unknown model id 'llama-9-70b' "
        "(nearest valid choice: llama-3-70b)"
    ]
    assert "seed-chat-70b-pool" in stdout and "295,650" in stdout and "751,900" in stdout

    seed = json.loads((out / "seed-chat-70b.json").read_text(encoding="utf-8"))
    assert seed["status"] == "optimal" and seed["monthly_cost_usd"] == 295_650
    assert (seed["products"][0]["replicas"], seed["products"][0]["gpus"]) == (81, 162)
    pool = json.loads((out / "seed-chat-70b-pool.json").read_text(encoding="utf-8"))
    assert pool["monthly_cost_usd"] == 751_900 and pool["products"][0]["prefill"]["gpus"] == 250
    assert not (out / "bad-model.json").exists()
    assert sorted(p.name for p in out.iterdir()) == ["seed-chat-70b-pool.json", "seed-chat-70b.json", "summary.csv", "summary.json"]

    rows = read_csv(out / "summary.csv")
    assert [tuple(r[k] for k in KEYS) for r in rows] == EXPECTED_ROWS
    assert rows[0]["error"] == "products[chat].model: unknown model id 'llama-9-70b' (nearest valid choice: llama-3-70b)"
    assert all(r["error"] == "" for r in rows[1:])
    assert [r["api_fraction"] for r in rows] == ["", "", "0.0", "", "0.0"]
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))[2] == {
        "scenario": "seed-chat-70b", "product": "chat", "status": "optimal", "error": "", "monthly_cost_usd": 295650.0,
        "gpu": "h100-sxm", "tp": 2, "batch": 64, "precision": "fp8", "replicas": 81, "gpus": 162,
        "prefill_mode": "headroom", "prefill_gpus": None, "api_fraction": 0.0, "pooled_in": "",
    }


def test_batch_plan_file_is_the_single_scenario_json(capsys, batch_dir, tmp_path):
    out = tmp_path / "out"
    run(capsys, ["plan", str(batch_dir / "seed-chat-70b.yaml"), str(batch_dir / "seed-chat-70b-pool.yaml"), "--out", str(out)])
    code, single, _ = run(capsys, ["plan", str(batch_dir / "seed-chat-70b.yaml"), "--json"])
    assert code == 0 and (out / "seed-chat-70b.json").read_text(encoding="utf-8") == single


def test_directory_argument_byte_identical_and_jobs_independent(capsys, batch_dir, tmp_path):
    outs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    codes = [run(capsys, ["plan", str(batch_dir), "--out", str(outs[0])])[0],
             run(capsys, ["plan", str(batch_dir), "--out", str(outs[1])])[0],
             run(capsys, ["plan", str(batch_dir), "--out", str(outs[2]), "--jobs", "2"])[0]]
    assert codes == [2, 2, 2]
    assert [tuple(r[k] for k in KEYS) for r in read_csv(outs[0] / "summary.csv")] == EXPECTED_ROWS
    for name in ("summary.csv", "summary.json", "seed-chat-70b.json", "seed-chat-70b-pool.json"):
        first = (outs[0] / name).read_bytes()
        assert (outs[1] / name).read_bytes() == first
        assert (outs[2] / name).read_bytes() == first


def test_batch_json_prints_summary_and_passes_when_all_solve(capsys, batch_dir, tmp_path):
    (batch_dir / "bad-model.yaml").unlink()
    code, stdout, err = run(capsys, ["plan", str(batch_dir), "--json", "--no-alternatives"])
    assert code == 0 and err == ""
    rows = json.loads(stdout)
    assert [(r["scenario"], r["product"], r["monthly_cost_usd"]) for r in rows] == [
        ("seed-chat-70b", "", 295650.0), ("seed-chat-70b", "chat", 295650.0),
        ("seed-chat-70b-pool", "", 751900.0), ("seed-chat-70b-pool", "chat", 751900.0),
    ]
    assert not list(tmp_path.glob("**/*.json")), "without --out a batch writes no files"


def test_every_kind_of_failure_is_one_row_and_one_line(capsys, tmp_path, examples):
    d = tmp_path / "s"
    d.mkdir()
    shutil.copy(examples / "seed-chat-70b.yaml", d / "ok.yaml")
    (d / "infeasible.yml").write_text(INFEASIBLE, encoding="utf-8")
    (d / "malformed.yaml").write_text("products: [\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "malformed.json").write_text("{}", encoding="utf-8")  # a file from before this run
    code, _, err = run(capsys, ["plan", str(d), str(tmp_path / "missing.yaml"), "--out", str(out)])
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(f"fleetplan: error: {d / 'infeasible.yml'}: ") and "infeasible" in lines[0]
    assert lines[1].startswith(f"fleetplan: error: {d / 'malformed.yaml'}: ") and "malformed YAML" in lines[1]
    assert lines[1].endswith(f"({out}/malformed.json, from before this run, was left as it was)")
    assert lines[2].startswith(f"fleetplan: error: {tmp_path / 'missing.yaml'}: scenario file not found")
    rows = read_csv(out / "summary.csv")
    assert [(r["scenario"], r["status"]) for r in rows] == [
        ("infeasible", "error"), ("malformed", "error"), ("missing", "error"), ("ok", "optimal"), ("ok", "optimal"),
    ]
    assert all("\n" not in r["error"] for r in rows)
    # a failed scenario removes nothing: the earlier plan file is kept byte for byte
    assert sorted(p.name for p in out.iterdir()) == ["malformed.json", "ok.json", "summary.csv", "summary.json"]
    assert (out / "malformed.json").read_text(encoding="utf-8") == "{}"


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("same-stem", "have the same name 'seed-chat-70b'"),
        ("summary-stem", "would overwrite"),
        ("out-is-file", "--out: with several scenarios --out is a directory"),
        ("empty-dir", "no *.yaml or *.yml scenario files in directory"),
    ],
)
def test_batch_usage_errors_stop_before_solving(capsys, tmp_path, examples, setup, expected):
    d = tmp_path / "s"
    d.mkdir()
    seed = examples / "seed-chat-70b.yaml"
    out = tmp_path / "out"
    argv = ["plan", "--out", str(out), str(seed), str(examples / "seed-chat-70b-pool.yaml")]
    if setup == "same-stem":
        shutil.copy(seed, d / "seed-chat-70b.yml")
        argv.append(str(d / "seed-chat-70b.yml"))
    elif setup == "summary-stem":
        shutil.copy(seed, d / "summary.yaml")
        argv.append(str(d))
    elif setup == "out-is-file":
        out.write_text("", encoding="utf-8")
    else:
        argv.append(str(d))
    code, stdout, err = run(capsys, argv)
    assert code == 2 and expected in err and err.count("\n") == 1 and stdout == ""
    assert not out.is_dir()

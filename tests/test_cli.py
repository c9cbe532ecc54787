"""The command line as a user runs it: JSON keys, exit codes, one-line errors, no partial files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fleetplan.main import main
from fleetplan.models.presets import DEFAULT

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ESTIMATE = ["estimate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "2", "--batch", "64",
            "--precision", "fp8", "--input-tokens", "2000", "--output-tokens", "400", "--preset", "seed", "--json"]


def run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_estimate_json_keys_and_seed_values(capsys):
    code, out, _ = run(capsys, ESTIMATE)
    assert code == 0
    d = json.loads(out)
    for key in ("bytes_per_step", "memory_time_ms", "compute_time_ms", "step_time_ms", "bound",
                "per_user_tokens_per_s", "replica_tokens_per_s", "memory_needed_bytes", "memory_usable_bytes"):
        assert key in d
    assert d["bytes_per_step"] / 1e9 == pytest.approx(121, abs=0.5)
    assert d["memory_time_ms"] == pytest.approx(25.8, abs=0.05)
    assert d["compute_time_ms"] == pytest.approx(9.1, abs=0.1)
    assert d["bound"] == "memory"
    assert d["per_user_tokens_per_s"] == pytest.approx(39, abs=0.5)
    assert d["replica_tokens_per_s"] == pytest.approx(2480, abs=10)
    assert d["memory_usable_bytes"] == pytest.approx(144e9)


def test_plan_json_seed_example(capsys, examples):
    code, out, _ = run(capsys, ["plan", str(examples / "seed-chat-70b.yaml"), "--json"])
    assert code == 0
    d = json.loads(out)
    assert d["status"] == "optimal"
    assert d["monthly_cost_usd"] == pytest.approx(295_650)
    (p,) = d["products"]
    for key in ("name", "gpu", "tp", "batch", "precision", "replicas", "gpus", "per_user_tokens_per_s",
                "replica_tokens_per_s", "monthly_cost_usd"):
        assert key in p
    assert (p["replicas"], p["gpus"]) == (81, 162)


def test_plan_table_prints_reason(capsys, examples):
    code, out, _ = run(capsys, ["plan", str(examples / "seed-chat-70b-open.yaml")])
    assert code == 0
    assert "usable tokens/s per replica" in out and "cheapest plan on each other GPU type" in out


def test_plan_json_byte_identical_across_runs(capsys, examples):
    a = run(capsys, ["plan", str(examples / "seed-chat-70b-open.yaml"), "--json"])[1]
    b = run(capsys, ["plan", str(examples / "seed-chat-70b-open.yaml"), "--json"])[1]
    assert a == b


def write(tmp_path, text):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    return str(f)


BASE = """preset: seed
products:
  - name: chat
    model: {model}
    peak_qps: {qps}
    input_tokens: 2000
    output_tokens: 400
    min_tokens_per_s_per_user: {target}
"""


@pytest.mark.parametrize(
    ("argv_or_yaml", "expected"),
    [
        (["estimate", "--model", "llama-3.1-70", "--gpu", "h100-sxm", "--input-tokens", "1", "--output-tokens", "1"],
         "unknown model id 'llama-3.1-70' (nearest valid choice: llama-3.1-70b)"),
        (["estimate", "--model", "llama-3.1-70b", "--gpu", "h100", "--input-tokens", "1", "--output-tokens", "1"],
         "unknown GPU id 'h100' (nearest valid choice: h10"),
        (["estimate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "0", "--input-tokens", "1", "--output-tokens", "1"],
         "--tp: must be a whole number from 1 to 1024 GPUs"),
        (["estimate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "3", "--input-tokens", "1", "--output-tokens", "1"],
         "--tp: tp 3 does not divide"),
        (["estimate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--precision", "int4", "--input-tokens", "1", "--output-tokens", "1"],
         "invalid choice: 'int4'"),
        (["plan", "missing.yaml"], "scenario file not found"),
        (["plan", "x.yaml", "--solver", "cplex"], "invalid choice: 'cplex'"),
        (BASE.format(model="llama-3.1-70b", qps=-5, target=30), "products[chat].peak_qps: must be a number from 0 to 1e+07 queries per second"),
        (BASE.format(model="lama-3.1-70b", qps=5, target=30), "products[chat].model: unknown model id 'lama-3.1-70b' (nearest valid choice: llama-3.1-70b)"),
        (BASE.format(model="llama-3.1-70b", qps=5, target=30) + "    colour: red\n", "products[chat].colour: unknown field"),
        (BASE.format(model="llama-3.1-70b", qps="many", target=30), "products[chat].peak_qps: must be a number from 0 to"),
        ("products: [\n", "malformed YAML"),
        (BASE.format(model="llama-3.1-70b", qps=5, target=30).replace("    model: llama-3.1-70b\n", ""), "products[chat].model: Field required"),
        (BASE.format(model="llama-3.1-70b", qps=5, target=30) + "options:\n  gpus: [h200]\n", "options.gpus: unknown GPU id 'h200'"),
        (BASE.format(model="llama-3.1-70b", qps=5, target=30) + "options:\n  tp: [3]\n", "options.tp: 3 is not a power of two (nearest valid choice: 2)"),
        (BASE.format(model="llama-3.1-70b", qps=5, target=5000), "min_tokens_per_s_per_user: infeasible"),
    ],
)
def test_bad_input_exit_2_one_line(capsys, tmp_path, argv_or_yaml, expected):
    argv = argv_or_yaml if isinstance(argv_or_yaml, list) else ["plan", write(tmp_path, argv_or_yaml), "--json"]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse errors
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2
    assert expected in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert out == ""


def test_failed_plan_writes_no_output_file(capsys, tmp_path):
    out_file = tmp_path / "plan.json"
    code = main(["plan", write(tmp_path, BASE.format(model="llama-3.1-70b", qps=5, target=5000)), "--out", str(out_file)])
    assert code == 2 and not out_file.exists()


def test_infeasible_speed_names_best_reachable(capsys, tmp_path):
    code = main(["plan", write(tmp_path, BASE.format(model="llama-3.1-70b", qps=5, target=5000))])
    err = capsys.readouterr().err
    assert code == 2 and "the best reachable is" in err and "tokens/s (" in err


def test_catalog_list_shows_sources(capsys):
    for kind in ("gpus", "models", "prices", "api"):
        code, out, _ = run(capsys, ["catalog", "list", kind, "--json"])
        assert code == 0
        rows = json.loads(out)
        assert rows and all(r["source"] and r["as_of"] for r in rows)


def test_console_script_runs_outside_repo(tmp_path):
    """As installed: the entry point and the one import namespace work from any folder."""
    r = subprocess.run([sys.executable, "-c", "import fleetplan, fleetplan.models, fleetplan.optimizer, fleetplan.catalogs"],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "fleetplan.main", *ESTIMATE], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["bound"] == "memory"


def test_portfolio_table_shows_shared_limits(capsys):
    """The table of a portfolio: GPUs per type against availability and instances, the
    components, and the joint plan's saving against first come, first served (from its JSON)."""
    code, out, _ = run(capsys, ["plan", str(EXAMPLES / "portfolio-3.yaml"), "--no-alternatives"])
    assert code == 0
    code, js, _ = run(capsys, ["plan", str(EXAMPLES / "portfolio-3.yaml"), "--no-alternatives", "--json"])
    d = json.loads(js)
    h100 = d["gpu_usage"]["h100-sxm"]
    assert re.search(rf"h100-sxm\s*│\s*{h100['gpus']}\s*│ on_demand {h100['gpus']}\s*│ 64\s*│\s*{h100['instances']}\s*│", out)
    assert "components: 1 (1 planned jointly: chat, rag, code)" in out
    saving = d["first_come_monthly_cost_usd"] - d["monthly_cost_usd"]
    assert f"the joint plan saves ${saving:,.0f}" in out


def test_all_alternatives_searches_what_the_default_lists_by_bound(capsys, monkeypatch):
    """``--all-alternatives`` searches a large long mix's runner-ups (here chat-trace, made large
    by lowering the size threshold): the default lists each GPU type by bound, unsearched, and
    both give the same plan; with ``--no-alternatives`` it is one line and exit 2."""
    from fleetplan.optimizer.explanation import runner_ups as R

    monkeypatch.setattr(R, "RUNNER_UP_SEARCH_SIZE", 1)
    path = str(EXAMPLES / "chat-trace.yaml")
    code, js, _ = run(capsys, ["plan", path, "--json"])
    default = json.loads(js)["products"][0]
    code_all, js, _ = run(capsys, ["plan", path, "--json", "--all-alternatives"])
    every = json.loads(js)["products"][0]
    assert code == code_all == 0 and default["monthly_cost_usd"] == every["monthly_cost_usd"]
    assert [a["reason"] for a in default["runner_ups_left_out"]] == ["not_searched"]
    assert [a.get("single_configuration") for a in default["alternatives"]] == [True]
    searched = {a["gpu"]: a["monthly_cost_usd"] for a in every["alternatives"] if not a.get("single_configuration")}
    for a in default["runner_ups_left_out"]:
        assert a["monthly_cost_at_least_usd"] <= searched[a["gpu"]]
    with pytest.raises(SystemExit) as stop:
        main(["plan", path, "--no-alternatives", "--all-alternatives"])
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--all-alternatives" in err


def test_estimate_ttft_pays_the_named_engines_fixed_latency(capsys):
    """The planner names no engine and pays its shared fixed latency (95.5 ms); an estimate
    for vLLM pays vLLM's (20.7 ms) and for ATOM ATOM's (14.8 ms), with the same step (the same 16-token KV
    pages); SGLang pays its own (123 ms) and reads its KV cache in one-token pages, a longer step."""
    base = [a for a in ESTIMATE if a != "seed"]
    base[base.index("--preset") + 1:base.index("--preset") + 1] = ["default"]
    got = {}
    for engine in (None, "vllm", "atom", "sglang"):
        code, out, _ = run(capsys, base + (["--engine", engine] if engine else []))
        assert code == 0
        got[engine] = json.loads(out)
    for engine, latency_ms in (("vllm", 20.7), ("atom", 14.8)):
        assert got[engine]["step_time_ms"] == pytest.approx(got[None]["step_time_ms"])
        assert got[engine]["ttft_ms"] - got[None]["ttft_ms"] == pytest.approx(latency_ms - 95.5, abs=0.01)
    # 2,200 tokens read per sequence: 138 pages of 16 + c against 2,200 pages of 1 + c
    c = DEFAULT.physics.kv_page_overhead
    assert got["sglang"]["kv_time_ms"] / got[None]["kv_time_ms"] == pytest.approx((1 + c) * 2200 / (138 * (16 + c)))
    assert got["sglang"]["ttft_ms"] - got[None]["ttft_ms"] > 123 - 95.5

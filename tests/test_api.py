"""The Python API (``import fleetplan``): the same bytes as the commands, any scenario form,
immutable results, one-line errors, and a library that writes nothing and changes no global state."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

import fleetplan
from fleetplan.main import main
from fleetplan.optimizer.traffic.scenario import load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SEED = EXAMPLES / "seed-chat-70b.yaml"
TRACED = EXAMPLES / "chat-trace.yaml"


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What ``fleetplan ARGV`` writes on stdout, run in this process."""
    capsys.readouterr()
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_the_three_line_plan_is_the_command_s_json_byte_for_byte(capsys):
    p = fleetplan.plan(str(SEED))
    assert p.to_json() == cli_json(capsys, "plan", str(SEED), "--json")
    # the seed document's worked example: 81 replicas of 2 H100 (162 GPUs), $295,650 a month
    assert p.status == "optimal" and p.monthly_cost_usd == 295650.0 and p.products == ("chat",)
    assert p.to_dict()["totals"]["all_gpus"] == 162


def test_a_traced_scenario_given_as_a_dict_plans_as_its_file_does(capsys):
    raw = yaml.safe_load(TRACED.read_text(encoding="utf-8"))
    p = fleetplan.plan(raw, folder=EXAMPLES)
    assert p.to_json() == cli_json(capsys, "plan", str(TRACED), "--json")
    d = p.to_dict()
    assert d["verification"]["meets_targets"] is True  # replayed, as the command does by default
    assert d["products"][0]["input_tokens"] > 0


def test_a_dict_s_trace_is_read_relative_to_the_current_folder_by_default(monkeypatch):
    raw = yaml.safe_load(TRACED.read_text(encoding="utf-8"))
    monkeypatch.chdir(EXAMPLES)
    from_dict = parse_scenario(raw, "dict")
    from_file, _ = load_scenario(TRACED)
    assert from_dict == from_file  # peak, mean lengths and the trace's size mix filled in, as from the file
    [product] = from_dict.products
    assert product.input_tokens is not None and product.output_tokens is not None and len(product.requests) == 4


def test_a_dict_whose_trace_is_not_there_fails_in_one_line_naming_the_field(tmp_path):
    raw = yaml.safe_load(TRACED.read_text(encoding="utf-8"))
    with pytest.raises(fleetplan.InputError) as err:
        fleetplan.plan(raw, folder=tmp_path)
    assert str(err.value).startswith("products[chat].trace: ") and "\n" not in str(err.value)


def test_a_scenario_object_plans_as_its_file_does():
    scenario = fleetplan.load_scenario(SEED)
    assert isinstance(scenario, fleetplan.Scenario)
    assert fleetplan.plan(scenario).to_json() == fleetplan.plan(SEED).to_json()


def test_results_are_immutable():
    p = fleetplan.plan(SEED, alternatives="none")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.json_text = "{}"  # type: ignore[misc]
    d = p.to_dict()
    d["monthly_cost_usd"] = 0
    assert p.monthly_cost_usd == 295650.0 and p.to_dict() != d


@pytest.mark.parametrize(("call", "start"), [
    (lambda: fleetplan.plan(SEED, solver="higs"), "solver: 'higs' is not one of highs, ortools"),
    (lambda: fleetplan.plan(SEED, alternatives="al"), "alternatives: 'al' is not one of none, default, all"),
    (lambda: fleetplan.plan(SEED, jobs=0), "jobs: 0 is not a whole number"),
    (lambda: fleetplan.plan(SEED, time_limit_s=-1), "time_limit_s: options.time_limit_s"),
    (lambda: fleetplan.plan(42), "scenario: a path, a dict or a fleetplan.Scenario, not int"),
    (lambda: fleetplan.plan({"products": [{"name": "c", "model": "llama-3.1-70b"}]}), "scenario.products[c]: peak_qps: required"),
    (lambda: fleetplan.simulate({"status": "optimal"}), "plan: not a plan file"),
])
def test_bad_input_raises_one_line_naming_the_field(call, start):
    with pytest.raises(fleetplan.InputError) as err:
        call()
    assert str(err.value).startswith(start) and "\n" not in str(err.value)


def test_the_nearest_solver_is_named():
    with pytest.raises(fleetplan.InputError, match=r"\(nearest valid choice: highs\)$"):
        fleetplan.plan(SEED, solver="higs")


def test_simulate_takes_a_plan_or_its_json_and_matches_the_command(capsys, tmp_path):
    p = fleetplan.plan(SEED, alternatives="none")
    s = fleetplan.simulate(p, requests=2000, seed=3)
    assert s.to_json() == fleetplan.simulate(json.loads(p.to_json()), requests=2000, seed=3).to_json()
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(p.to_json(), encoding="utf-8")
    assert s.to_json() == cli_json(capsys, "simulate", str(plan_file), "--requests", "2000", "--seed", "3", "--json")
    [row] = s.to_dict()["products"]
    assert row["replicas"] == 81 and row["requests"] == 2000 and s.meets_targets is True


def test_the_notebook_view_shows_the_report_s_tables():
    html = fleetplan.plan(SEED, alternatives="none")._repr_html_()
    assert 'data-usd="295650.00"' in html and "<h3>Configuration per product</h3>" in html
    assert "<svg" not in html and "<script" not in html  # tables only: nothing drawn, nothing run


# Run in a fresh interpreter: HiGHS prints its banner once per process, so only a new one shows it.
HYGIENE = textwrap.dedent("""
    import os, sys
    import matplotlib
    matplotlib.use("svg")  # a notebook's own choice, which the library must leave alone
    redirected = []
    os.dup2 = lambda *fds, **kw: redirected.append(fds)  # a library never points a descriptor elsewhere
    os.chdir(sys.argv[1])
    import fleetplan
    p = fleetplan.plan({"products": [{"name": "chat", "model": "llama-3.1-8b", "peak_qps": 5, "input_tokens": 500,
                                      "output_tokens": 200, "min_tokens_per_s_per_user": 20}]})
    fleetplan.simulate(p, requests=500)
    p._repr_html_()
    b = fleetplan.breakeven(sys.argv[2], scales=[1])
    from fleetplan.optimizer.decisions.breakeven import BreakevenPoint, BreakevenResult, plot_bytes
    plot_bytes(BreakevenResult(points=(BreakevenPoint(1.0, 2.0, 3.0, 2.0),), stopped=()), "curves")
    assert matplotlib.get_backend() == "svg", matplotlib.get_backend()
    assert os.listdir(".") == [], os.listdir(".")
    assert redirected == [], redirected
""")


def test_the_library_prints_nothing_writes_nothing_and_leaves_global_state(tmp_path):
    run = subprocess.run([sys.executable, "-c", HYGIENE, str(tmp_path), str(EXAMPLES / "build-vs-buy.yaml")],
                         capture_output=True, text=True, timeout=300)
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")


def test_plan_and_simulate_write_nothing_on_the_file_descriptors(capfd):
    p = fleetplan.plan(SEED, alternatives="none")
    fleetplan.simulate(p, requests=500)
    p._repr_html_()
    assert capfd.readouterr() == ("", "")


def test_breakeven_curves_draw_without_pyplot():
    import matplotlib

    from fleetplan.optimizer.decisions.breakeven import BreakevenPoint, BreakevenResult, plot_bytes

    backend = matplotlib.get_backend()  # (the hygiene test above sets one and checks it in a fresh process)
    points = [BreakevenPoint(scale=s, all_api_usd=100.0 * s, self_host_usd=150.0, blend_usd=min(100.0 * s, 150.0))
              for s in (0.5, 1.0, 2.0)]
    result = BreakevenResult(points=tuple(points), stopped=())
    png = plot_bytes(result, "curves")
    assert png.startswith(b"\x89PNG") and matplotlib.get_backend() == backend
    assert plot_bytes(result, "curves", "svg").lstrip().startswith(b"<?xml")


def test_python_dash_m_fleetplan_is_the_command():
    run = subprocess.run([sys.executable, "-m", "fleetplan", "--version"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout == f"fleetplan {fleetplan.__version__}\n"
    run = subprocess.run([sys.executable, "-m", "fleetplan", "plan", str(EXAMPLES / "nope.yaml")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and len(run.stderr.splitlines()) == 1 and "nope.yaml" in run.stderr


def test_the_package_is_typed_and_exports_what_it_names():
    import fleetplan as package

    assert (Path(package.__file__).parent / "py.typed").is_file()
    for name in package.__all__:
        assert getattr(package, name) is not None
    with pytest.raises(AttributeError):
        package.no_such_name  # noqa: B018


def test_the_readme_s_python_quick_start_runs(monkeypatch):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Quick start: Python\n"):]
    code = section[section.index("```python\n") + len("```python\n"):section.index("```\n", section.index("```python"))]
    monkeypatch.chdir(ROOT)
    scope: dict[str, object] = {"print": lambda *a: None}
    exec(compile(code, "README.md", "exec"), scope)  # noqa: S102 - the README's own example
    assert scope["p"].monthly_cost_usd == 295650.0 and scope["sim"].meets_targets is True


def test_a_sweep_gives_the_command_s_table(tmp_path, capsys):
    axes = ["products.chat.peak_qps=100:300:100", "options.gpu_hour_usd.h100-sxm=1.5,2.5"]
    table = fleetplan.sweep(EXAMPLES / "seed-chat-70b-open.yaml", axes)
    assert main(["sweep", str(EXAMPLES / "seed-chat-70b-open.yaml"), *(x for a in axes for x in ("--set", a)),
                 "--out", str(tmp_path / "s"), "--jobs", "1"]) == 0
    assert table.to_csv() == (tmp_path / "s" / "sweep.csv").read_text(encoding="utf-8")
    rows = table.rows
    assert [(r["products.chat.peak_qps"], r["options.gpu_hour_usd.h100-sxm"]) for r in rows] == [
        (100, 1.5), (100, 2.5), (200, 1.5), (200, 2.5), (300, 1.5), (300, 2.5)]
    # more traffic never costs less at the same price
    assert rows[0]["monthly_cost_usd"] < rows[2]["monthly_cost_usd"] < rows[4]["monthly_cost_usd"]
    with pytest.raises(fleetplan.InputError, match="^samples: "):
        fleetplan.sweep(EXAMPLES / "seed-chat-70b-open.yaml", axes, samples=0)


def test_an_estimate_is_the_command_s_json(capsys):
    e = fleetplan.estimate("llama-3.1-70b", "h100-sxm", tp=2, batch=64, precision="fp8", input_tokens=2000,
                           output_tokens=500)
    assert e.to_json() == cli_json(capsys, "estimate", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "2",
                                   "--batch", "64", "--precision", "fp8", "--input-tokens", "2000",
                                   "--output-tokens", "500", "--json")
    d = e.to_dict()
    assert (d["gpus_per_replica"], d["batch"], d["precision"]) == (2, 64, "fp8") and d["memory_per_gpu_bytes"] > 35e9
    with pytest.raises(fleetplan.InputError, match=r"^batch: must be"):
        fleetplan.estimate("llama-3.1-70b", "h100-sxm", batch=0, input_tokens=1, output_tokens=1)
    with pytest.raises(fleetplan.InputError, match=r"^precision: 'fp9' is not one of"):
        fleetplan.estimate("llama-3.1-70b", "h100-sxm", precision="fp9", input_tokens=1, output_tokens=1)


def test_validate_is_the_command_s_json(capsys):
    data = ROOT / "benchmarks" / "data" / "public-measurements.csv"
    v = fleetplan.validate(data)
    assert v.to_json() == cli_json(capsys, "validate", str(data), "--json")
    d = v.to_dict()
    assert d["file"] == "public-measurements.csv" and d["preset"] == "default" and len(d["rows"]) > 30
    # the fidelity keys survive the API: each row's running batch and engine, the model errors counted
    assert all(1 <= r["running_batch"] <= r["batch"] and r["engine_known"] in (True, False) for r in d["rows"])
    # one row runs fewer than its batch: Llama-2-7B FP8 at batch 120 on one H100 (115 run); the
    # batch-64 L40S run fits whole once TensorRT-LLM's cache takes 0.9 of the memory the weights leave
    assert sum(r["running_batch"] < r["batch"] for r in d["rows"]) == 1
    assert len(d["model_errors"]) == d["summary"]["model_error_rows"]
    with pytest.raises(fleetplan.InputError, match=r"^preset: 'sed' is not one of .*nearest valid choice: seed"):
        fleetplan.validate(data, preset="sed")


def test_simulate_refuses_a_document_json_cannot_hold_and_a_bad_number():
    p = fleetplan.plan(SEED, alternatives="none")
    with pytest.raises(fleetplan.InputError, match=r"^plan: not a plan's JSON document"):
        fleetplan.simulate({**p.to_dict(), "monthly_cost_usd": float("nan")})
    with pytest.raises(fleetplan.InputError, match=r"^arrival_scv: must be"):
        fleetplan.simulate(p, arrival_scv=-1)
    with pytest.raises(fleetplan.InputError, match=r"^requests: must be"):
        fleetplan.simulate(p, requests=0)
    with pytest.raises(fleetplan.InputError, match=r"^trace_rate: must be 'logged' or 'plan', not 'scaled'$"):
        fleetplan.simulate(p, trace_rate="scaled")
    with pytest.raises(fleetplan.InputError, match=r"^trace_rate: 'plan' scales a trace's arrivals; give trace too$"):
        fleetplan.simulate(p, trace_rate="plan")

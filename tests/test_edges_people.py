"""Output for people: tables that fit the terminal, --version, messages that name the user's field.

The width tests render the reference plan of every shipped example (``data/plans/*.json``,
rewritten by ``python tests/data/make_references.py``) at several widths, so they run
without a solver.
"""

from __future__ import annotations

import io
import json
import re
from importlib.metadata import version
from pathlib import Path

import pytest
from rich.console import Console

from fleetplan.rendering import table_fit
from fleetplan.catalogs.schema import GPU, LLM, MoE, APIPrice, BenchmarkHarness, GPUPrice, ReferencePrice
from fleetplan.main import main
from fleetplan.rendering.tables import print_plan

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
PLANS = {f"{p.stem}.yaml": json.loads(p.read_text(encoding="utf-8"))
         for p in sorted((Path(__file__).resolve().parent / "data" / "plans").glob("*.json"))}
WIDTHS = (60, 80, 100, 160, 200)
MAX_ERROR_LINES = 12


def run(capsys, argv):
    """``main(argv)`` in process: (exit code, stdout, stderr); argparse exits count as codes."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def render(d, width):
    con = Console(width=width, record=True, highlight=False, file=io.StringIO())
    print_plan(d, con)
    return con.export_text()


# ---------------------------------------------------------------- width
def test_saved_plans_cover_every_shipped_example():
    assert sorted(PLANS) == sorted(p.name for p in EXAMPLES.glob("*.yaml"))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", sorted(PLANS))
def test_plan_output_fits_the_width_without_cutting_numbers(name, width):
    """No line is wider than the terminal, nothing is cut short, and every product's cost,
    GPU count and the plan's total appear whole (not split across lines)."""
    d = PLANS[name]
    text = render(d, width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert "…" not in text
    assert f"{round(d['monthly_cost_usd']):,}" in text
    cells = re.findall(r"\d+(?:,\d{3})*", text)
    gpus = (d.get("totals") or {}).get("all_gpus")
    if gpus is not None:
        assert f"{gpus:,}" in cells
    for p in d["products"]:
        assert p["name"] in text
        if p["gpu"]:
            assert p["gpu"] in text


def test_build_vs_buy_is_a_table_at_80_and_100_columns():
    """The widest shipped plan keeps its table (stacked) at 100 columns and shows every column of the
    160-column table, with the same numbers; at 80 (its launch product's tp2·ep2 cell too wide for a
    table) every product is a list of labelled values with those numbers."""
    d = PLANS["build-vs-buy.yaml"]
    wide = render(d, 160)
    for width in (80, 100):
        text = render(d, width)
        if width == 100:
            assert "┃ product" in text and "tok/s/replica" in text and "$/M output tok" in text
        else:
            assert "summariser · decode (colocated): gpu b200" in text and "tokens/s per replica 1,104" in " ".join(text.split())
        for number in ("460,331", "403,605", "431,286", "1,104", "8,521", "0.441", "113"):
            assert number in wide and number in text
    header = next(line for line in wide.splitlines() if "┃ product" in line)
    for label in ("tp", "prec", "batch", "replicas", "GPUs", "$/month"):
        assert f" {label} " in header


def test_narrowest_plan_is_a_list_of_labelled_values():
    text = render(PLANS["seed-chat-70b.yaml"], 40)
    assert "┃" not in text
    assert "chat · decode (headroom):" in text and "replicas 81" in text and "GPUs 162" in text
    assert max(len(line) for line in text.splitlines()) <= 40


def test_plan_columns_are_labelled_with_units():
    header = " ".join(render(PLANS["seed-chat-70b.yaml"], 200).split())
    for label in ("tokens/s per user", "tokens/s per replica", "TTFT ms", "$/month", "$ per million output tokens"):
        assert all(word in header for word in label.split())
    text = render(PLANS["seed-chat-70b.yaml"], 200)
    assert re.search(r"┃\s+\$ per million\s+┃", text) and re.search(r"┃\s+output tokens\s+┃", text)


@pytest.mark.parametrize(("columns", "expected"), [
    ("abc", table_fit.PIPE_COLUMNS), ("-5", table_fit.PIPE_COLUMNS), ("0", table_fit.PIPE_COLUMNS), ("", table_fit.PIPE_COLUMNS),
    ("1e3", table_fit.PIPE_COLUMNS), ("120", 120), ("7", table_fit.MIN_COLUMNS), (" 90 ", 90),
])
def test_terminal_width_on_a_pipe(monkeypatch, columns, expected):
    monkeypatch.setenv("COLUMNS", columns)
    assert table_fit.terminal_width(io.StringIO()) == expected


class _FakeTerminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize(("columns", "expected"), [("abc", 80), ("-1", 80), ("0", 80), ("132", 132)])
def test_terminal_width_on_a_terminal_that_cannot_say(monkeypatch, columns, expected):
    """A bad COLUMNS on a terminal that cannot report its size gives 80, never an error."""
    import os
    import shutil

    monkeypatch.setenv("COLUMNS", columns)
    monkeypatch.setattr(shutil, "get_terminal_size", lambda fallback=(80, 24): os.terminal_size(fallback))
    assert table_fit.terminal_width(_FakeTerminal()) == expected


@pytest.mark.parametrize("columns", ["abc", "-3", "0", "45"])
def test_plan_with_odd_columns_prints_a_plan(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    code, out, err = run(capsys, ["plan", str(EXAMPLES / "seed-chat-70b.yaml"), "--no-alternatives"])
    width = table_fit.terminal_width(io.StringIO())
    assert code == 0 and err == ""
    assert "295,650" in out and max(len(line) for line in out.splitlines()) <= width


def test_batch_summary_fits_and_drops_only_the_error_it_repeats_on_stderr(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "100")
    (tmp_path / "bad.yaml").write_text("products: [\n", encoding="utf-8")
    (tmp_path / "ok.yaml").write_text((EXAMPLES / "seed-chat-70b.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    code, out, err = run(capsys, ["plan", str(tmp_path), "--no-alternatives"])
    assert code == 2
    assert max(len(line) for line in out.splitlines()) <= 100 and "…" not in out
    assert "295,650" in out and "error" in out
    assert "malformed YAML" in err and err.count("\n") == 1


# ---------------------------------------------------------------- --version
def test_version(capsys):
    code, out, err = run(capsys, ["--version"])
    assert code == 0 and err == ""
    assert out == f"fleetplan {version('fleetplan')}\n"
    assert re.fullmatch(r"fleetplan \d+\.\d+\.\d+\S*\n", out)


# ---------------------------------------------------------------- messages
SCENARIO = """preset: {preset}
products:
  - name: chat
    model: llama-3.1-70b
    peak_qps: 5
    input_tokens: {input_tokens}
    output_tokens: 400
    min_tokens_per_s_per_user: 10
"""
PROFILE = """fleetplan_calibration: 1
preset: default
factors:
- {gpu: null, engine: null, bandwidth_scale: 1.0, compute_scale: 1.0, overhead_scale: 1.0, comm_scale: 1.0}
"""
BAD_CATALOG = """gpus:
  - id: my-gpu
    name: My GPU
    vendor: me
    family: mine
    mem_bandwidth_bytes_per_s: -1
    colour: red
models:
  - id: my-model
    name: M
"""


def _scenario(tmp_path, text, name="s.yaml"):
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    return str(f)


def _case_context_window(tmp_path):
    return ["plan", _scenario(tmp_path, SCENARIO.format(preset="seed", input_tokens=10_000_000))]


def _case_context_memory(tmp_path):
    text = SCENARIO.format(preset="seed", input_tokens=120_000) + "options:\n  gpus: [l40s]\n  tp: [1]\n"
    return ["plan", _scenario(tmp_path, text)]


def _case_spot_only(tmp_path):
    return ["plan", _scenario(tmp_path, SCENARIO.format(preset="seed", input_tokens=2000) + "options:\n  tiers: [spot]\n")]


def _case_spot_only_half(tmp_path):
    text = SCENARIO.format(preset="seed", input_tokens=2000) + "options:\n  tiers: [spot]\n  spot_max_share: 0.5\n"
    return ["plan", _scenario(tmp_path, text)]


def _case_calibration_preset(tmp_path):
    (tmp_path / "profile.yaml").write_text(PROFILE, encoding="utf-8")
    return ["plan", _scenario(tmp_path, SCENARIO.format(preset="seed", input_tokens=2000)),
            "--calibration", str(tmp_path / "profile.yaml")]


def _case_calibration_preset_batch(tmp_path):
    (tmp_path / "profile.yaml").write_text(PROFILE, encoding="utf-8")
    d = tmp_path / "scenarios"
    d.mkdir()
    _scenario(d, SCENARIO.format(preset="seed", input_tokens=2000))
    return ["plan", str(d), "--calibration", str(tmp_path / "profile.yaml")]


def _case_shadowed_model(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text("{}", encoding="utf-8")
    return ["catalog", "add-model", str(cfg), "--id", "llama-3.1-8b", "--out", str(tmp_path / "mine.yaml")]


def _case_catalog_problems(tmp_path):
    (tmp_path / "mine.yaml").write_text(BAD_CATALOG, encoding="utf-8")
    return ["catalog", "list", "gpus", "--catalog", str(tmp_path / "mine.yaml")]


def _case_catalog_huge_value(tmp_path):
    (tmp_path / "mine.yaml").write_text("gpus:\n  - id: h100-sxm\n    memory_bytes: '" + "9" * 200_000 + "x'\n"
                                        "    scaleup_domain_gpus: many\n", encoding="utf-8")
    return ["plan", str(EXAMPLES / "seed-chat-70b.yaml"), "--catalog", str(tmp_path / "mine.yaml")]


def _case_catalog_as_scenario(tmp_path):
    return ["plan", _scenario(tmp_path, BAD_CATALOG, "mygpus.yaml")]


def _case_catalog_in_batch_directory(tmp_path):
    d = tmp_path / "scenarios"
    d.mkdir()
    _scenario(d, BAD_CATALOG, "mygpus.yaml")
    _scenario(d, SCENARIO.format(preset="seed", input_tokens=2000), "chat.yaml")
    return ["plan", str(d), "--no-alternatives"]


MESSAGE_CASES = {
    "catalog file given as a scenario": (
        _case_catalog_as_scenario, ["mygpus.yaml:2: a catalog file", "gpus, models", "--catalog"]),
    # name: (argv builder, words stderr must hold)
    "context longer than the model's window": (
        _case_context_window, ["products[chat].input_tokens", "input_tokens + output_tokens = 10,000,400",
                               "llama-3.1-70b", "131,072", "at most 130,672 input_tokens"]),
    "context fitting on no allowed GPU": (
        _case_context_memory, ["products[chat].input_tokens", "120,400 tokens", "do not fit in memory", "output_tokens"]),
    "spot-only tiers, default spot_max_share": (
        _case_spot_only, ["options.spot_max_share", "spot_max_share is 0", "spot_max_share: 1", "options.tiers"]),
    "spot-only tiers, spot_max_share 0.5": (
        _case_spot_only_half, ["options.spot_max_share", "spot_max_share is 0.5", "spot_max_share: 1"]),
    "calibration for another preset (plan)": (
        _case_calibration_preset, ["profile.yaml", "fitted for preset 'default'", "'preset: default'", "scenario"]),
    "calibration for another preset (batch)": (
        _case_calibration_preset_batch, ["fitted for preset 'default'", "'preset: default'"]),
    "add-model with a shipped id": (
        _case_shadowed_model, ["--id", "'llama-3.1-8b'", "shipped", "--replace", "llama-3.1-8b-custom"]),
    "user catalog with several problems": (
        _case_catalog_problems, ["mine.yaml: gpus[my-gpu]", "missing source, as_of, memory_bytes, dense_flops_per_s",
                                 "scaleup_domain_gpus", "network_bandwidth_bytes_per_s", "unknown field colour",
                                 "mem_bandwidth_bytes_per_s: must be a number above 0", "(got -1)",
                                 "mine.yaml: models[my-model]: missing", "num_layers", "active_params"]),
    "user catalog echoing a huge value": (
        _case_catalog_huge_value, ["gpus[h100-sxm]", "memory_bytes", "scaleup_domain_gpus", "(got '9999"]),
}


@pytest.mark.parametrize("case", sorted(MESSAGE_CASES))
def test_bad_input_names_the_field(capsys, tmp_path, case):
    """Exit 2, every named word in the message, no traceback, one short line on stderr (the
    limit is 12), nothing on stdout but a batch's summary."""
    build, words = MESSAGE_CASES[case]
    code, out, err = run(capsys, build(tmp_path))
    assert code == 2, err
    for word in words:
        assert word in err, (word, err)
    assert "Traceback" not in err and "internal error" not in err
    assert len(err.splitlines()) <= MAX_ERROR_LINES and len(err) < 2000
    assert len(err.splitlines()) == 1 and err.startswith("fleetplan: error: ")
    assert "--preset default" not in err
    assert out == "" or case.endswith("(batch)")


def test_add_model_replace_is_allowed_on_purpose(capsys, tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 131072,
    }), encoding="utf-8")
    out_file = tmp_path / "mine.yaml"
    code, out, err = run(capsys, ["catalog", "add-model", str(cfg), "--id", "llama-3.1-8b", "--out", str(out_file),
                                  "--replace"])
    assert code == 0, err
    assert "added llama-3.1-8b" in out and out_file.exists()
    code, _, err = run(capsys, ["catalog", "add-model", str(cfg), "--id", "my-8b", "--out", str(tmp_path / "b.yaml")])
    assert code == 0, err


def test_validate_json_echoes_numbers_as_numbers(capsys, tmp_path):
    f = tmp_path / "m.csv"
    f.write_text("model,gpu,precision,tp,batch,input_tokens,output_tokens,engine,measured_tpot_ms,measured_ttft_ms,note\n"
                 "llama-3.1-8b,h100-sxm,bf16,2,16,1000,200.5,vllm,9.5,,x\n", encoding="utf-8")
    code, out, err = run(capsys, ["validate", str(f), "--json"])
    assert code == 0, err
    (row,) = json.loads(out)["rows"]
    assert row["tp"] == 2 and isinstance(row["tp"], int)
    assert row["batch"] == 16 and isinstance(row["batch"], int)
    assert row["input_tokens"] == 1000 and isinstance(row["input_tokens"], int)
    assert row["output_tokens"] == 200.5
    assert row["measured_tpot_ms"] == 9.5 and row["measured_ttft_ms"] is None
    assert row["note"] == "x" and row["engine"] == "vllm" and row["model"] == "llama-3.1-8b"


def test_context_at_the_window_still_plans(capsys, tmp_path):
    """The largest request the window allows is valid: input 130,672 + output 400 = 131,072."""
    code, out, err = run(capsys, ["plan", _scenario(tmp_path, SCENARIO.format(preset="seed", input_tokens=130_672)),
                                  "--json", "--no-alternatives"])
    assert code == 0, err
    assert json.loads(out)["products"][0]["replicas"] > 0


# ---------------------------------------------------------------- the catalogs page
def _catalog_section() -> str:
    """The hand-written opening of the documentation's catalogs page (before its examples and
    the tables generated from the schema)."""
    text = (ROOT / "docs" / "catalogs.md").read_text(encoding="utf-8")
    start = text.index("# Catalogs")
    return text[start:text.index("\n## ", start + 1)]


@pytest.mark.parametrize("schema", [GPU, LLM, MoE, GPUPrice, ReferencePrice, APIPrice, BenchmarkHarness], ids=lambda s: s.__name__)
def test_the_catalogs_page_names_every_field(schema):
    """Every field of each entry kind, required or not, is named in the catalogs page's opening,
    and the required ones in the row of their entry: the page cannot drift from the schema."""
    section = _catalog_section()
    names = set(re.findall(r"[a-z_0-9]+", section))
    for name in schema.model_fields:
        assert name in names, name
    rows = {"GPU": "GPU (`gpus`)", "LLM": "model (`models`)", "MoE": "model (`models`)", "GPUPrice": "GPU price (`prices`)",
            "ReferencePrice": "reference price (`reference`)", "APIPrice": "API price (`api_prices`)",
            "BenchmarkHarness": "benchmark harness (`harnesses`)"}
    row = next(line for line in section.splitlines() if line.startswith(f"| {rows[schema.__name__]}"))
    for name, info in schema.model_fields.items():
        if info.is_required():
            assert re.search(rf"\b{name}\b", row), (schema.__name__, name)


# ---------------------------------------------------------------- user text is not markup
def test_names_that_look_like_markup_print_as_written(capsys, monkeypatch, tmp_path):
    """A product, scenario or catalog source written with square brackets is shown as written,
    in the plan table, the batch summary and the catalog listing."""
    monkeypatch.setenv("COLUMNS", "200")
    name = "chat[/b] [bold]x"
    text = SCENARIO.format(preset="seed", input_tokens=2000).replace("name: chat", f'name: "{name}"')
    code, out, err = run(capsys, ["plan", _scenario(tmp_path, text), "--no-alternatives"])
    assert code == 0, err
    assert f"{name} total" in out and f"{name}: " in out
    d = tmp_path / "batch"
    d.mkdir()
    _scenario(d, text, "[red]odd.yaml")
    code, out, err = run(capsys, ["plan", str(d), "--no-alternatives"])
    assert code == 0, err
    assert "[red]odd" in out and name in out
    (tmp_path / "mine.yaml").write_text("reference:\n  - gpu: h100-sxm\n    usd_per_gpu_hour: 2.0\n"
                                        "    source: '[/i] my contract [bold]'\n    as_of: 2026-11-01\n", encoding="utf-8")
    code, out, err = run(capsys, ["catalog", "list", "prices", "--catalog", str(tmp_path / "mine.yaml")])
    assert code == 0, err
    assert "[/i] my contract [bold]" in " ".join(out.split())


def test_progress_line_is_shorter_than_the_terminal():
    """The progress line never wraps (a wrapped line cannot be cleared with one carriage return)."""
    from fleetplan.rendering.progress import ProgressLine

    stream = io.StringIO()
    progress = ProgressLine(enabled=True, stream=stream, width=40, start=0.0)
    progress.update("searching configurations of a product with a rather long name", 3, 10, 1e6, 9e5, force=True)
    line = stream.getvalue().replace("\r\x1b[2K", "")
    assert 0 < len(line) <= 39 and line.startswith("fleetplan: searching")


def test_fit_table_stacks_in_order_then_lists():
    """Stacking keeps every value once, under a header naming each stacked column in order; a
    column that carries others moves with them; a width nothing fits gives a list."""
    cols = (table_fit.Col("name", "left", lead=True), table_fit.Col("a"), table_fit.Col("b", give_way=1, under="a"),
            table_fit.Col("c", give_way=3, under="name"), table_fit.Col("d", give_way=2, under="c"))
    rows = [("alpha", "1", "22", "333", "4444"), None, ("beta", "5", "", "", "")]

    def text(width):
        con = Console(width=width, record=True, highlight=False, file=io.StringIO())
        con.print(table_fit.fit_table(con, "t", cols, rows))
        return con.export_text()

    wide = text(200)
    assert re.search(r"┃ name\s+┃\s+a ┃\s+b ┃\s+c ┃\s+d ┃", wide)
    narrow = text(20)
    assert max(len(line) for line in narrow.splitlines()) <= 20 and "┃" in narrow
    header = [line for line in narrow.splitlines() if line.startswith("┃")]
    assert [h.split("┃")[1].strip() for h in header] == ["name", "c", "d"]
    assert [h.split("┃")[2].strip() for h in header] == ["a", "b", ""]
    for value in ("alpha", "1", "22", "333", "4444", "beta", "5"):
        assert sum(value == cell.strip() for line in narrow.splitlines() for cell in line.split("│")) == 1, value
    listed = text(12)
    assert "┃" not in listed
    assert "alpha: a 1, b 22, c 333, d 4444" in " ".join(listed.split())
    assert "beta: a 5" in listed

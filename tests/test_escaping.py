"""Hostile names and values reach every output as text: the launch script, a LeaderWorkerSet's
``sh -c`` command and a SkyPilot run script are run by ``sh`` with stub engines that record
their arguments (no injected command runs; every argument arrives as written); Kubernetes and
file names are valid and confined; HTML, CSV, terminal and chart text are escaped by their rule."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fleetplan.commands.deploy import ENGINE_NAMES, ReplicaSet, launch_script, manifest, skypilot_run
from fleetplan.rendering.escape import (
    DNS_LABEL_MAX_CHARS, ShellExpansion, chart_text, confined, csv_cell, dns_label, label_value, printable,
    shell_join, unique_names,
)
from fleetplan.main import main

SH = shutil.which("sh")
PLANS = Path(__file__).resolve().parent / "data" / "plans"
# Values that run a command, end a word or a line if a writer interpolates them into shell text.
HOSTILE = (
    "meta-llama/x$(touch PWNED)",
    "x`touch PWNED`",
    'x"; touch PWNED; "',
    "x'; touch PWNED; '",
    'x\\"$(touch PWNED)\\"',
    "x ; touch PWNED #",
    "$HOME/${PATH}",
)
# Names that end a comment line, forge a line or escape a directory when written carelessly.
HOSTILE_NAMES = ("chat\ntouch PWNED", "x/../../victim", "a$(touch PWNED)`touch PWNED`;b", "q'\"\r\x1b[2J")
# The engines' executables the commands start; each stub writes its arguments, NUL-separated.
STUBS = ("vllm", "python", "trtllm-serve", "mpirun")
RANK, LEADER, HOSTS = "1", "10.0.0.7", "10.0.0.7,10.0.0.8"


@pytest.fixture()
def stubs(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working directory and an environment whose PATH starts with the stub engines."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    calls.mkdir()
    for name in STUBS:
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\nprintf "%s\\0" "{name}" "$@" > "{calls}/$$"\n', encoding="utf-8")
        stub.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    return work, {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}


def _calls(work: Path) -> list[list[str]]:
    """Every recorded call of a stub engine (its name and arguments), in a stable order."""
    calls = work.parent / "calls"
    return sorted(f.read_bytes().decode("utf-8").split("\0")[:-1] for f in calls.iterdir())


def _run(work: Path, env: dict[str, str], argv: list[str]) -> None:
    """Run ``argv`` in ``work``; it must succeed and create no file there."""
    subprocess.run(argv, cwd=work, env=env, check=True, capture_output=True, timeout=30)
    assert not list(work.iterdir()), "an injected command ran"


def _expected(cmd: list[str]) -> list[str]:
    """``cmd`` as the stub receives it on node ``RANK``: the rendezvous expansions evaluated."""
    out = []
    for w in cmd:
        if isinstance(w, ShellExpansion):
            w = re.sub(r"\$\(\(\$NODE_RANK \* (\d+)\)\)", lambda m: str(int(RANK) * int(m.group(1))), w)
            w = w.replace("$NODE_RANK", RANK).replace("$LEADER_ADDRESS", LEADER).replace("$HOSTS", HOSTS)
        out.append(w)
    return out


def hostile_set(repo: str, name: str, nodes: int, dp: int = 1, context: object = 4096) -> ReplicaSet:
    """A replica set of one node or of ``nodes`` nodes of 4 GPUs, with hostile text."""
    return ReplicaSet(name=name, model="m", repo=repo, gpu="g$(touch PWNED)", vendor="nvidia",
                      tp=4 * nodes // dp, batch=64, precision="fp8", kv_precision="bf16",
                      context_tokens=context, replicas=2, node_gpus=4, ep=dp, dp_attention=dp)  # type: ignore[arg-type]


def _engine_calls(engine: str, r: ReplicaSet) -> list[list[str]]:
    """The calls a node should make: the engine command (vLLM's headless one too), evaluated."""
    from fleetplan.commands.deploy import command

    cmds = [command(engine, r)] + ([command(engine, r, worker=True)] if r.nodes > 1 and engine == "vllm" else [])
    return sorted(_expected(c) for c in cmds)


CASES = [(engine, repo, name, nodes, dp) for engine in ENGINE_NAMES for repo in HOSTILE
         for name, nodes, dp in ((HOSTILE_NAMES[len(repo) % len(HOSTILE_NAMES)], 1, 1),
                                 (HOSTILE_NAMES[0], 2, 1), (HOSTILE_NAMES[2], 2, 8))]


@pytest.mark.skipif(SH is None, reason="needs a POSIX sh")
@pytest.mark.parametrize("engine,repo,name,nodes,dp", CASES)
def test_launch_script_runs_only_the_engine_with_the_arguments_as_written(stubs, engine, repo, name, nodes, dp):
    work, env = stubs
    r = hostile_set(repo, name, nodes, dp, context="4096$(touch PWNED)" if nodes == 1 else 4096)
    script = work.parent / "launch.sh"
    script.write_text(launch_script(engine, [r]), encoding="utf-8")
    subprocess.run([SH, "-n", str(script)], check=True, timeout=30)
    _run(work, {**env, "NODE_RANK": RANK, "LEADER_ADDRESS": LEADER, "HOSTS": HOSTS}, [SH, str(script)])
    calls = _calls(work)
    assert calls == _engine_calls(engine, r)
    assert repo in calls[0]  # the checkpoint id arrives byte for byte


@pytest.mark.skipif(SH is None, reason="needs a POSIX sh")
@pytest.mark.parametrize("engine", ENGINE_NAMES)
@pytest.mark.parametrize("repo", HOSTILE)
def test_leader_worker_set_and_skypilot_commands_run_only_the_engine(stubs, engine, repo):
    work, env = stubs
    r = hostile_set(repo, HOSTILE_NAMES[2], 2)
    group = manifest(engine, r)["spec"]["leaderWorkerTemplate"]
    lws_env = {**env, "LWS_WORKER_INDEX": RANK, "LWS_LEADER_ADDRESS": LEADER, "HOSTS": HOSTS}
    worker = group["workerTemplate"]["spec"]["containers"][0]["command"]
    assert worker[:2] == ["sh", "-c"]
    _run(work, lws_env, [SH, "-c", worker[2]])
    headless = engine == "vllm"
    from fleetplan.commands.deploy import command

    assert _calls(work) == [_expected(command(engine, r, worker=headless))]
    run = skypilot_run(engine, r)
    subprocess.run([SH, "-n", "-c", run], check=True, timeout=30)
    for f in (work.parent / "calls").iterdir():
        f.unlink()
    _run(work, {**env, "SKYPILOT_NODE_RANK": RANK, "SKYPILOT_NODE_IPS": f"{LEADER}\n10.0.0.8", "HOSTS": HOSTS},
         [SH, "-c", run])
    assert _calls(work) == [_expected(command(engine, r, worker=headless))]


def test_a_name_with_a_line_break_stays_in_its_comment():
    r = hostile_set("org/m", "chat\ntouch PWNED\r\x1b[2J", 1)
    script = launch_script("vllm", [r])
    assert "touch PWNED" not in "".join(line for line in script.splitlines() if not line.startswith("#"))
    assert "# chat\\ntouch PWNED\\r\\x1b[2J: 2 replicas" in script
    assert "\x1b" not in script and "\r" not in script


def test_a_word_with_a_control_character_or_a_flag_for_a_repo_is_refused():
    from fleetplan.catalogs.loader import InputError
    from fleetplan.commands.deploy import _repo, command

    with pytest.raises(InputError, match=r"control character"):
        command("vllm", hostile_set("org/m\x1b[2J", "chat", 1))
    with pytest.raises(InputError, match=r"hf_repo '--trust-remote-code' begins with '-'"):
        _repo(type("M", (), {"id": "m", "hf_repo": "--trust-remote-code"})())


def test_a_shell_expansion_accepts_only_what_the_code_builds():
    assert shell_join(["a b", ShellExpansion("$NODE_RANK"), "$(x)"]) == "'a b' \"$NODE_RANK\" '$(x)'"
    for bad in ('$(touch PWNED)"', "`id`", "$x;y", "a\nb"):
        with pytest.raises(ValueError):
            ShellExpansion(bad)


# ---------------------------------------------------------------- names
DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")


@pytest.mark.parametrize("text", ["chat-decode", "Chat Decode", "x/../../victim", "ünïcode-名前", "-a-", "..", "",
                                  "a" * 200, "A" * 70 + "-" * 10, "$(touch PWNED)", "chat\ndecode", "70b-chat", "0"])
def test_names_are_valid_rfc_1123_labels_and_label_values(text):
    name, value = dns_label(text), label_value(text)
    assert DNS_LABEL.fullmatch(name) and len(name) <= DNS_LABEL_MAX_CHARS
    assert LABEL_VALUE.fullmatch(value) and 0 < len(value) <= DNS_LABEL_MAX_CHARS
    if DNS_LABEL.fullmatch(text):
        assert name == text  # a valid name is kept as it is
    else:
        assert name.endswith(dns_label.__globals__["hash_suffix"](text))  # a changed one names its original


def test_derived_names_are_stable_and_unique():
    assert dns_label("Chat") == dns_label("Chat") == "chat-" + __import__("hashlib").sha256(b"Chat").hexdigest()[:8]
    names = unique_names(["chat", "Chat", "CHAT", "chat", "a" * 100, "a" * 100 + "b"], dns_label)
    assert len(set(names)) == 6 and names[0] == "chat"
    forged = dns_label("Chat")  # a name chosen to equal another's derived name is told apart
    assert len(set(unique_names(["Chat", forged], dns_label))) == 2


def test_confined_refuses_separators_dot_dot_and_links_out(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    assert confined(out, "launch.sh") == out.resolve() / "launch.sh"
    for bad in ("../victim", "a/b", "..", ".", ""):
        assert confined(out, bad) is None
    (out / "link.yaml").symlink_to(tmp_path / "victim.yaml")
    assert confined(out, "link.yaml") is None


def _hostile_plan(tmp_path: Path, name: str, repo: str) -> tuple[Path, Path]:
    """The pool example's plan with its product renamed ``name`` on a model whose hf_repo is
    ``repo`` (a user catalog), and that catalog."""
    models = yaml.safe_load((Path(__file__).resolve().parents[1] / "catalogs" / "data" / "models.yaml")
                            .read_text(encoding="utf-8"))["models"]
    entry = {**next(m for m in models if m["id"] == "llama-3.1-70b"), "id": "evil-70b", "hf_repo": repo}
    catalog = tmp_path / "evil.yaml"
    catalog.write_text(yaml.safe_dump({"models": [entry]}), encoding="utf-8")
    d = json.loads((PLANS / "seed-chat-70b-pool.json").read_text(encoding="utf-8"))
    for p in d["products"]:
        p["name"], p["model"] = name, "evil-70b"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(d), encoding="utf-8")
    return plan, catalog


def test_deploy_keeps_every_file_inside_out_and_names_valid(capsys, tmp_path):
    plan, catalog = _hostile_plan(tmp_path / "", "x/../../victim", "meta-llama/x$(touch PWNED)")
    victim = tmp_path / "victim-decode.yaml"
    victim.write_text("mine\n", encoding="utf-8")
    out = tmp_path / "a" / "b" / "o"
    out.mkdir(parents=True)
    assert main(["deploy", str(plan), "--engine", "vllm", "--skypilot", "--out", str(out), "--catalog", str(catalog)]) == 0
    assert victim.read_text(encoding="utf-8") == "mine\n"
    files = sorted(p.name for p in out.iterdir())
    assert files == ["launch.sh", f"skypilot-{dns_label('x/../../victim-decode')}.yaml",
                     f"skypilot-{dns_label('x/../../victim-prefill')}.yaml"]
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == sorted([*files, "evil.yaml", "plan.json",
                                                                                 "victim-decode.yaml"])
    service = yaml.safe_load((out / files[1]).read_text(encoding="utf-8"))
    assert service["name"] == files[1][len("skypilot-"):-len(".yaml")]
    assert "'meta-llama/x$(touch PWNED)'" in service["run"]
    capsys.readouterr()
    k = tmp_path / "k"
    k.mkdir()
    assert main(["deploy", str(plan), "--engine", "sglang", "--k8s", "--out", str(k), "--catalog", str(catalog)]) == 0
    docs = list(yaml.safe_load_all((k / "k8s.yaml").read_text(encoding="utf-8")))
    assert [doc["metadata"]["annotations"]["fleetplan/name"] for doc in docs] == ["x/../../victim-decode",
                                                                                 "x/../../victim-prefill"]
    for doc in docs:
        assert DNS_LABEL.fullmatch(doc["metadata"]["name"]) and doc["metadata"]["labels"]["app"] == doc["metadata"]["name"]
        assert doc["spec"]["selector"]["matchLabels"]["app"] == doc["metadata"]["name"]


def test_deploy_refuses_an_output_that_links_outside_out(capsys, tmp_path):
    plan = PLANS / "seed-chat-70b.json"
    out = tmp_path / "o"
    out.mkdir()
    victim = tmp_path / "victim.sh"
    victim.write_text("mine\n", encoding="utf-8")
    (out / "launch.sh").symlink_to(victim)
    assert main(["deploy", str(plan), "--engine", "vllm", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetplan: error: --out:") and "outside" in err and err.count("\n") == 1
    assert victim.read_text(encoding="utf-8") == "mine\n"


# ---------------------------------------------------------------- text rules
def test_printable_escapes_every_control_character_and_keeps_the_rest():
    assert printable("a\nb\r\tc\x1b[31m\x9b\x00\u202e\u2028é名") == "a\\nb\\r\\tc\\x1b[31m\\x9b\\x00\\u202e\\u2028é名"
    assert printable(12.5) == "12.5"


@pytest.mark.parametrize("value,cell", [("=HYPERLINK(\"http://x\",\"y\")", "'=HYPERLINK(\"http://x\",\"y\")"),
                                        ("+cmd", "'+cmd"), ("-2+3", "'-2+3"), ("@SUM(A1)", "'@SUM(A1)"),
                                        ("\tx", "'\tx"), ("\rx", "'\rx"), ("chat", "chat"), ("", ""), (None, ""),
                                        (-5, -5), (-0.25, -0.25), (0, 0)])
def test_csv_cells_that_a_spreadsheet_would_evaluate_are_text(value, cell):
    assert csv_cell(value) == cell


def test_chart_text_escapes_every_dollar_and_control_character():
    assert chart_text("premium $\\foo$ tier\n") == "premium \\$\\foo\\$ tier\\n"


# ---------------------------------------------------------------- HTML
PAYLOAD = "<script>alert(1)</script>\"onerror=alert(2) '><img src=x onerror=alert(3)>&amp;"
# Numbers the report writes as they are (no arithmetic on them): a hand-edited plan may hold a string there.
NUMBER_FIELDS = ("tp", "batch", "replicas", "gpus", "ttft_ms", "per_user_tokens_per_s")


def _poisoned(data: object) -> object:
    """``data`` with the payload appended to every string value and to the GPU ids keying ``gpu_usage``."""
    if isinstance(data, str):
        return data + PAYLOAD
    if isinstance(data, dict):
        return {k: ({_poisoned(g): _poisoned(u) for g, u in v.items()} if k == "gpu_usage" and v else _poisoned(v))
                for k, v in data.items()}
    if isinstance(data, list):
        return [_poisoned(v) for v in data]
    return data


def _poison_numbers(d: dict) -> dict:
    """Plan ``d`` with the payload in place of the numbers it shows as they are."""
    d["hours"], d["totals"]["all_gpus"], d["mip_gap"] = PAYLOAD, PAYLOAD, None
    for p in d["products"]:
        p.update({k: PAYLOAD for k in NUMBER_FIELDS})
        for a in p.get("alternatives") or []:
            a.update({k: PAYLOAD for k in ("tp", "batch", "replicas", "gpus")})
    for u in (d.get("gpu_usage") or {}).values():
        u.update({k: PAYLOAD for k in ("gpus", "instances", "stranded_gpus", "available")})
    for b in d.get("binding_limits") or []:
        b["step_unit"] = PAYLOAD
    return d


def _structure(page: str) -> list[tuple[str, tuple[str, ...]]]:
    """Every element of ``page``, in order, with its attribute names (not their values)."""
    from html.parser import HTMLParser

    found: list[tuple[str, tuple[str, ...]]] = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list) -> None:
            found.append((tag, tuple(name for name, _ in attrs)))

    Tags().feed(page)
    return found


@pytest.mark.parametrize("plan", sorted(PLANS.glob("*.json")), ids=lambda p: p.stem)
def test_no_value_of_a_plan_file_becomes_markup(plan):
    from fleetplan.rendering.html import Figures, page

    clean = json.loads(plan.read_text(encoding="utf-8"))
    hostile = _poison_numbers(_poisoned(clean))
    no_charts = Figures(None, None, "", None)
    expected = _structure(page(clean, None, "fleetplan: plan.json", no_charts))
    text = page(hostile, None, "fleetplan: " + PAYLOAD, no_charts)
    assert _structure(text) == expected  # the same elements and attributes: none came from the plan
    assert "<script" not in text.lower() and "<img" not in text.lower()
    assert text.count("&lt;script&gt;alert(1)&lt;/script&gt;&quot;onerror=alert(2)") >= 10


def test_chart_labels_are_text_in_the_svg():
    from fleetplan.rendering.charts import cost_chart, tornado_chart

    names = ["premium $\\foo$ tier", "a$b", PAYLOAD, "x\x1by"]
    d = {"products": [{"name": n, "monthly_cost_usd": 100.0 * (i + 1)} for i, n in enumerate(names)]}
    svg = cost_chart(d)
    assert "premium $\\foo$ tier" in svg and "a$b" in svg and "x\\x1by" in svg
    assert "<script" not in svg and "&lt;script&gt;" in svg
    rows = [{"input": n, "low_monthly_cost_usd": 90.0, "high_monthly_cost_usd": 120.0, "low_factor": 0.8,
             "high_factor": 1.2} for n in names]
    svg = tornado_chart(rows, 100.0)
    assert "premium $\\foo$ tier" in svg and "<script" not in svg


# ---------------------------------------------------------------- CSV and terminal
FORMULAS = ("=HYPERLINK(\"evil.example\",\"x\")", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)", "\t=1", "\r=1")


def test_summary_csv_writes_formulas_as_text_and_numbers_as_numbers():
    import csv
    import io

    from fleetplan.commands.batch import Outcome, summary_csv, summary_rows

    d = json.loads((PLANS / "portfolio-3.json").read_text(encoding="utf-8"))
    for p, name in zip(d["products"], FORMULAS):
        p["name"] = name
    outcomes = [Outcome(f"{FORMULAS[0]}.yaml", d, None), Outcome("@x.yaml", None, "-bad input")]
    rows = list(csv.DictReader(io.StringIO(summary_csv(summary_rows(outcomes)))))
    assert rows[0]["scenario"] == "'" + FORMULAS[0] and rows[-1]["scenario"] == "'@x"
    assert rows[-1]["error"] == "'-bad input"
    assert [r["product"] for r in rows[1:4]] == ["'" + n for n in FORMULAS[:3]]
    assert float(rows[0]["monthly_cost_usd"]) == pytest.approx(d["monthly_cost_usd"], abs=0.01)
    assert not any(v.startswith(("=", "+", "-", "@", "\t", "\r")) for r in rows for v in r.values())


def test_sweep_csv_keeps_negative_numbers_and_quotes_formula_text():
    from fleetplan.commands.sweep import table_csv

    text = table_csv([{"point": 0, "x": -1.5, "main_gpu": "=cmd", "error": None},
                      {"point": 1, "x": "+2", "main_gpu": "h100-sxm", "error": "@bad"}],
                     ["point", "x", "main_gpu", "error"])
    assert text == "point,x,main_gpu,error\n0,-1.5,'=cmd,\n1,'+2,h100-sxm,'@bad\n"


def test_an_error_line_stays_one_line_without_escape_sequences(capsys):
    import argparse

    from fleetplan.catalogs.loader import InputError
    from fleetplan.commands.io import run_command

    def fail(args: argparse.Namespace) -> int:
        raise InputError("products[chat\nfleetplan: error: forged\x1b[2J\x1b]8;;http://x\x07]: unknown model")

    assert run_command(argparse.Namespace(func=fail)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.count("fleetplan: error:") == 2 and err.startswith("fleetplan: error: ")
    assert "\x1b" not in err and "\x07" not in err and "\\x1b[2J\\x1b]8;;http://x\\x07" in err


def test_a_failed_scenario_with_a_line_break_in_its_file_name_prints_one_line(capsys):
    from fleetplan.commands.batch import Outcome, _report_failures

    assert _report_failures([Outcome("a\nfleetplan: error: forged\x1b[31m.yaml", None, "bad")], set(), None) == 2
    err = capsys.readouterr().err
    assert err == "fleetplan: error: a\\nfleetplan: error: forged\\x1b[31m.yaml: bad\n"


def test_plan_tables_show_names_escaped_and_never_as_markup():
    import io

    from rich.console import Console

    from fleetplan.rendering.tables import print_plan

    d = json.loads((PLANS / "portfolio-3.json").read_text(encoding="utf-8"))
    d["products"][0]["name"] = "chat\nfleetplan: error: forged\x1b]8;;http://x\x07[bold red]x[/]\x9b"
    buf = io.StringIO()
    print_plan(d, Console(file=buf, width=200, highlight=False, force_terminal=False))
    text = buf.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert "chat\\nfleetplan: error: forged\\x1b]8;;http://x\\x07[bold red]x[/]\\x9b" in text
    assert not any(line.startswith("fleetplan: error") for line in text.splitlines())


def test_batch_and_sweep_refuse_an_output_that_links_outside_out(tmp_path):
    from fleetplan.commands.batch import BatchSettings, check_outputs
    from fleetplan.catalogs.loader import InputError
    from fleetplan.commands.io import output_in

    out = tmp_path / "o"
    out.mkdir()
    victim = tmp_path / "victim.csv"
    victim.write_text("mine\n", encoding="utf-8")
    (out / "summary.csv").symlink_to(victim)
    with pytest.raises(InputError, match=r"^--out: .*summary.csv would be written outside"):
        check_outputs(str(out), [str(tmp_path / "a.yaml")], BatchSettings())
    with pytest.raises(InputError, match=r"outside"):
        output_in(out, "../victim.csv", "--out")
    assert output_in(out, "sweep.csv", "--out") == out.resolve() / "sweep.csv"


@pytest.mark.parametrize("stem", ["chat-diurnal-blend", "portfolio-3"])
def test_report_of_a_plan_with_hostile_product_names_draws_them_as_text(capsys, tmp_path, stem):
    names = ["premium $\\foo$ tier <script>alert(1)</script>", "<script>alert(1)</script>", "a\"onerror=alert(1) $x$"]
    d = json.loads((PLANS / f"{stem}.json").read_text(encoding="utf-8"))
    for p, name in zip(d["products"], names):
        p["name"] = name
    plan, page = tmp_path / "plan.json", tmp_path / "report.html"
    plan.write_text(json.dumps(d), encoding="utf-8")
    assert main(["report", str(plan), "--out", str(page)]) == 0
    capsys.readouterr()
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "premium $\\foo$ tier" in text  # in the table and, drawn as written, in the cost chart
    assert text.count("premium $\\foo$ tier") >= 2

"""Edges of files and outputs: bad input files, output paths, lost files and interrupts.

Every bad case runs the command as a user would (in-process ``main``), expects exit code 2, one
short line naming the file or flag, no traceback, and every file in the working folder
unchanged (bytes and modification time). Interrupt cases run a real process and send it a
signal.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from fleetplan.catalogs.files import MAX_INPUT_BYTES, parse_yaml, read_text
from fleetplan.catalogs.loader import DATA_DIR, InputError
from fleetplan.main import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
SEED = (EXAMPLES / "seed-chat-70b.yaml").read_text(encoding="utf-8")
SEED_COST = 295_650
MEASUREMENTS = ("model,gpu,precision,tp,batch,input_tokens,output_tokens,engine,measured_tpot_ms\n"
                "llama-3.1-70b,h100-sxm,fp8,2,64,2000,400,vllm,30\n")
CATALOG = "gpus:\n  - id: h100-sxm\n    memory_bytes: 80.0e+9\n"
# a flat day: 24 rows at the peak, so a plan with it costs what the plan without it costs
FLAT_DAY = "hour,multiplier\n" + "".join(f"{h},1.0\n" for h in range(24))


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(folder: Path) -> dict[str, tuple[bytes, int, int]]:
    """Bytes, modification time and mode of every regular file under ``folder`` (links not followed)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        if stat.S_ISREG(st.st_mode):
            out[str(p.relative_to(folder))] = (p.read_bytes(), st.st_mtime_ns, st.st_mode)
    return out


@contextmanager
def alarm(seconds: int) -> Iterator[None]:
    """Fail instead of hanging: SIGALRM after ``seconds`` raises in the test."""
    def fire(signum: int, frame: object) -> None:
        raise TimeoutError(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def scenario(tmp: Path, extra: str = "", name: str = "s.yaml", text: str = SEED) -> Path:
    p = tmp / name
    p.write_text(text + extra, encoding="utf-8")
    return p


def with_profile(tmp: Path, profile: str = "day.csv") -> Path:
    return scenario(tmp, text=SEED.replace("    headroom: 0.30\n", f"    headroom: 0.30\n    demand_profile: {profile}\n"))


# ---------------------------------------------------------------- the corpus of bad inputs
# each case: build files in the folder, return (argv, fragments the one error line must contain)
Case = Callable[[Path], tuple[list[str], list[str]]]


def scenario_links_to_dev_zero(t: Path):
    (t / "z.yaml").symlink_to("/dev/zero")
    return ["plan", str(t / "z.yaml")], ["z.yaml", "is a device", "not a regular file"]


def scenario_is_a_fifo(t: Path):
    os.mkfifo(t / "p.yaml")
    return ["plan", str(t / "p.yaml")], ["p.yaml", "named pipe"]


def catalog_links_to_dev_urandom(t: Path):
    (t / "c.yaml").symlink_to("/dev/urandom")
    return ["plan", str(scenario(t)), "--catalog", str(t / "c.yaml")], ["--catalog", "c.yaml", "is a device"]


def catalog_is_a_directory(t: Path):
    (t / "cat").mkdir()
    return ["catalog", "list", "gpus", "--catalog", str(t / "cat")], ["--catalog", "cat", "is a directory"]


def scenario_catalog_is_a_fifo(t: Path):
    os.mkfifo(t / "c.yaml")
    return ["plan", str(scenario(t, "catalogs: [c.yaml]\n"))], ["c.yaml", "named pipe"]


def demand_profile_is_a_fifo(t: Path):
    os.mkfifo(t / "day.csv")
    return ["plan", str(with_profile(t))], ["products[chat].demand_profile", "day.csv", "named pipe"]


def demand_profile_links_to_dev_zero(t: Path):
    (t / "day.csv").symlink_to("/dev/zero")
    return ["plan", str(with_profile(t))], ["products[chat].demand_profile", "is a device"]


def calibration_links_to_dev_zero(t: Path):
    (t / "cal.yaml").symlink_to("/dev/zero")
    return ["plan", str(scenario(t)), "--calibration", str(t / "cal.yaml")], ["--calibration", "is a device"]


def measurements_are_a_fifo(t: Path):
    os.mkfifo(t / "m.csv")
    return ["validate", str(t / "m.csv")], ["measurement file", "m.csv", "named pipe"]


def hf_config_links_to_dev_zero(t: Path):
    (t / "config.json").symlink_to("/dev/zero")
    return (["catalog", "add-model", str(t / "config.json"), "--id", "m", "--out", str(t / "cat.yaml")],
            ["config.json", "is a device"])


def scenario_too_large(t: Path):
    p = t / "big.yaml"
    with p.open("wb") as fh:  # sparse: the size is checked before a byte is read
        fh.truncate(MAX_INPUT_BYTES + 1)
    return ["plan", str(p)], ["big.yaml", "limited to 16 MiB"]


def duplicate_key_in_scenario(t: Path):
    return (["plan", str(scenario(t, "  time_limit_s: 5\n  time_limit_s: 600\n"))],
            ["s.yaml", "line 19", "'time_limit_s' appears twice", "first on line 18"])


def duplicate_key_in_catalog(t: Path):
    (t / "c.yaml").write_text(CATALOG + "    memory_bytes: 94.0e+9\n", encoding="utf-8")
    return ["catalog", "list", "gpus", "--catalog", str(t / "c.yaml")], ["c.yaml", "line 4", "'memory_bytes' appears twice"]


def duplicate_key_in_hf_config(t: Path):
    (t / "config.json").write_text('{"hidden_size": 8192, "hidden_size": 1}', encoding="utf-8")
    return (["catalog", "add-model", str(t / "config.json"), "--id", "m", "--out", str(t / "cat.yaml")],
            ["config.json", "'hidden_size' appears twice"])


def set_tag_in_scenario(t: Path):
    text = SEED.replace("peak_qps: 350", "peak_qps: !!set {350}")
    return ["plan", str(scenario(t, text=text))], ["s.yaml", "line 8", "tag !!set is not allowed"]


def python_tag_in_scenario(t: Path):
    text = SEED.replace("peak_qps: 350", "peak_qps: !!python/object/apply:os.system [touch pwned]")
    return ["plan", str(scenario(t, text=text))], ["s.yaml", "line 8", "!!python/object/apply:os.system", "not allowed"]


def custom_tag_in_calibration(t: Path):
    (t / "cal.yaml").write_text("fleetplan_calibration: 1\npreset: !fit default\n", encoding="utf-8")
    return ["plan", str(scenario(t)), "--calibration", str(t / "cal.yaml")], ["cal.yaml", "line 2", "tag !fit is not allowed"]


def binary_tag_in_catalog(t: Path):
    (t / "c.yaml").write_text(CATALOG.replace("80.0e+9", "!!binary AAAA"), encoding="utf-8")
    return ["catalog", "list", "gpus", "--catalog", str(t / "c.yaml")], ["c.yaml", "line 3", "!!binary"]


def scenario_not_utf8(t: Path):
    p = t / "s.yaml"
    p.write_bytes(SEED.replace("name: chat", "name: caf\xe9").encode("latin-1"))
    return ["plan", str(p)], ["s.yaml", "line 5", "not UTF-8"]


def huge_repeated_product_name(t: Path):
    name = "x" * 5_000_000
    text = "products:\n" + "".join(
        f"  - {{name: {name}, model: llama-3.1-70b, peak_qps: 1, input_tokens: 100, output_tokens: 10}}\n" for _ in range(2))
    return ["plan", str(scenario(t, text=text))], ["s.yaml", "is used twice", "xxxxx…"]


def out_is_the_scenario(t: Path):
    s = scenario(t)
    return ["plan", str(s), "--out", str(s)], ["--out", "s.yaml", "one of this command's input files"]


def out_links_to_the_scenario(t: Path):
    s = scenario(t)
    (t / "link.json").symlink_to(s)
    return ["plan", str(s), "--out", str(t / "link.json")], ["--out", "one of this command's input files"]


def out_is_the_scenario_catalog(t: Path):
    (t / "c.yaml").write_text(CATALOG.replace("80.0e+9", "81.0e+9"), encoding="utf-8")
    s = scenario(t, "catalogs: [c.yaml]\n")
    return ["plan", str(s), "--out", str(t / "c.yaml")], ["--out", "c.yaml", "one of this command's input files"]


def out_is_the_demand_profile(t: Path):
    (t / "day.csv").write_text(FLAT_DAY, encoding="utf-8")
    return ["plan", str(with_profile(t)), "--out", str(t / "day.csv")], ["--out", "day.csv", "input files"]


def out_is_the_calibration(t: Path):
    (t / "cal.yaml").write_text("fleetplan_calibration: 1\n", encoding="utf-8")
    return (["plan", str(scenario(t)), "--calibration", str(t / "cal.yaml"), "--out", str(t / "cal.yaml")],
            ["--out", "cal.yaml", "input files"])


def out_is_a_directory(t: Path):
    (t / "plans").mkdir()
    return ["plan", str(scenario(t)), "--out", str(t / "plans")], ["--out", "plans", "is a directory"]


def out_parent_missing(t: Path):
    return ["plan", str(scenario(t)), "--out", str(t / "no" / "p.json")], ["--out", "does not exist"]


def out_parent_not_writable(t: Path):
    # /proc refuses new files for every user, root included
    return ["plan", str(scenario(t)), "--out", "/proc/fleetplan-plan.json"], ["--out", "cannot write to directory /proc"]


def out_is_a_device(t: Path):
    return ["plan", str(scenario(t)), "--out", "/dev/null"], ["--out", "/dev/null", "is a device"]


def plot_is_a_directory(t: Path):
    (t / "curves.png").mkdir()
    return (["breakeven", str(EXAMPLES / "build-vs-buy.yaml"), "--plot", str(t / "curves.png")],
            ["--plot", "curves.png", "is a directory"])


def plot_parent_missing(t: Path):
    return (["breakeven", str(EXAMPLES / "build-vs-buy.yaml"), "--plot", str(t / "no" / "c.svg")],
            ["--plot", "does not exist"])


def calibrate_out_is_the_measurements(t: Path):
    (t / "m.csv").write_text(MEASUREMENTS, encoding="utf-8")
    return ["calibrate", str(t / "m.csv"), "--out", str(t / "m.csv")], ["--out", "m.csv", "input files"]


def add_model_out_is_the_config(t: Path):
    (t / "config.json").write_text("{}", encoding="utf-8")
    return (["catalog", "add-model", str(t / "config.json"), "--id", "m", "--out", str(t / "config.json")],
            ["--out", "config.json", "input files"])


def batch_plan_file_is_a_directory(t: Path):
    (t / "out" / "s.json").mkdir(parents=True)
    return ["plan", str(scenario(t)), str(scenario(t, name="u.yaml")), "--out", str(t / "out")], ["--out", "s.json", "is a directory"]


def batch_plan_file_is_an_input(t: Path):
    (t / "out").mkdir()
    s = scenario(t / "out", name="s.json")  # a scenario whose plan file would be itself
    return ["plan", str(s), str(scenario(t, name="u.yaml")), "--out", str(t / "out")], ["--out", "s.json", "input files"]


def batch_out_is_a_file(t: Path):
    (t / "out").write_text("notes", encoding="utf-8")
    return ["plan", str(scenario(t)), str(scenario(t, name="u.yaml")), "--out", str(t / "out")], ["--out", "is a file"]


def schema_error_names_file_line_and_field(t: Path):
    text = SEED.replace("peak_qps: 350", "peak_qps: -3")
    return ["plan", str(scenario(t, text=text))], [f"{t / 's.yaml'}:8: products[chat].peak_qps:", "(got -3)"]


def unknown_option_names_its_line(t: Path):
    return ["plan", str(scenario(t, "  colour: red\n"))], [f"{t / 's.yaml'}:18: options.colour: unknown field"]


def integer_of_a_million_digits(t: Path):
    text = SEED.replace("peak_qps: 350", "peak_qps: " + "9" * 1_000_000)
    return ["plan", str(scenario(t, text=text))], ["s.yaml", "line 8", "cannot read the value 999", "1000000 digits"]


def impossible_date_in_catalog(t: Path):
    (t / "c.yaml").write_text(CATALOG + "    as_of: 2025-13-45\n", encoding="utf-8")
    return ["catalog", "list", "gpus", "--catalog", str(t / "c.yaml")], ["c.yaml", "line 4", "2025-13-45", "month"]


def add_model_out_is_the_shipped_catalog(t: Path):
    (t / "config.json").write_text("{}", encoding="utf-8")
    return (["catalog", "add-model", str(t / "config.json"), "--id", "m", "--out", str(DATA_DIR / "models.yaml")],
            ["--out", "models.yaml", "input files"])


CASES: list[Case] = [
    add_model_out_is_the_shipped_catalog,
    integer_of_a_million_digits, impossible_date_in_catalog,
    schema_error_names_file_line_and_field, unknown_option_names_its_line,
    scenario_links_to_dev_zero, scenario_is_a_fifo, catalog_links_to_dev_urandom, catalog_is_a_directory,
    scenario_catalog_is_a_fifo, demand_profile_is_a_fifo, demand_profile_links_to_dev_zero,
    calibration_links_to_dev_zero, measurements_are_a_fifo, hf_config_links_to_dev_zero, scenario_too_large,
    duplicate_key_in_scenario, duplicate_key_in_catalog, duplicate_key_in_hf_config, set_tag_in_scenario,
    python_tag_in_scenario, custom_tag_in_calibration, binary_tag_in_catalog, scenario_not_utf8,
    huge_repeated_product_name, out_is_the_scenario, out_links_to_the_scenario, out_is_the_scenario_catalog,
    out_is_the_demand_profile, out_is_the_calibration, out_is_a_directory, out_parent_missing,
    out_parent_not_writable, out_is_a_device, plot_is_a_directory, plot_parent_missing,
    calibrate_out_is_the_measurements, add_model_out_is_the_config, batch_plan_file_is_a_directory,
    batch_plan_file_is_an_input, batch_out_is_a_file,
]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_bad_file_or_output_exits_2_with_one_line_and_changes_nothing(case: Case, tmp_path: Path, capsys,
                                                                      monkeypatch) -> None:
    argv, fragments = case(tmp_path)
    before = snapshot(tmp_path)
    from fleetplan.optimizer.mip.solvers import Session

    def no_solve(*args: object, **kwargs: object) -> None:
        raise AssertionError("a bad file or output must be refused before any solve")

    # output paths are checked before any solving: a solve here would show as an internal error
    monkeypatch.setattr(Session, "solve", no_solve)
    with alarm(30):
        code, out, err = run(capsys, argv)
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err
    lines = err.splitlines()
    assert 1 <= len(lines) <= 12 and lines[-1].startswith("fleetplan: error: ")
    assert len(lines[-1]) <= 700, "echoed values are capped"
    for fragment in fragments:
        assert fragment in lines[-1]
    assert out == ""
    assert snapshot(tmp_path) == before, "no input or unrelated file is changed, created or removed"
    assert not (tmp_path / "pwned").exists()


# ---------------------------------------------------------------- valid edges
def test_utf8_bom_is_accepted_in_every_user_file(tmp_path: Path, capsys) -> None:
    bom = "\ufeff"
    (tmp_path / "day.csv").write_text(bom + FLAT_DAY, encoding="utf-8")
    (tmp_path / "c.yaml").write_text(bom + "gpus:\n  - id: h100-sxm\n    tdp_watts: 700\n", encoding="utf-8")
    s = with_profile(tmp_path)
    s.write_text(bom + s.read_text(encoding="utf-8") + "catalogs: [c.yaml]\n", encoding="utf-8")
    code, out, err = run(capsys, ["plan", str(s), "--json", "--no-alternatives"])
    assert code == 0, err
    assert json.loads(out)["monthly_cost_usd"] == pytest.approx(SEED_COST)


def test_reader_refuses_by_name_and_parses_plain_yaml(tmp_path: Path) -> None:
    p = tmp_path / "ok.yaml"
    p.write_text("a: 2025-01-01\nb: [1, 2.5, true, null]\nbase: &b {x: 1}\nmerged: {<<: *b, y: 2}\n", encoding="utf-8")
    doc = parse_yaml(read_text(p), p)
    assert doc["b"] == [1, 2.5, True, None] and doc["merged"] == {"x": 1, "y": 2} and str(doc["a"]) == "2025-01-01"
    with pytest.raises(InputError, match=r"^--x: thing not found: .*missing\.yaml$"):
        read_text(tmp_path / "missing.yaml", "thing", InputError, "--x: ")
    with pytest.raises(InputError, match="line 2: key 'k' appears twice"):
        parse_yaml("k: 1\nk: 2\n", "f.yaml")
    with pytest.raises(InputError, match="line 1: key 1 appears twice"):
        parse_yaml("{1: a, 1: b}", "f.yaml")


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_output_file_mode_follows_umask(tmp_path: Path, capsys, mask: int) -> None:
    s = scenario(tmp_path)
    old = os.umask(mask)
    try:
        code, _, err = run(capsys, ["plan", str(s), "--out", str(tmp_path / "p.json"), "--no-alternatives"])
    finally:
        os.umask(old)
    assert code == 0, err
    assert stat.S_IMODE((tmp_path / "p.json").stat().st_mode) == 0o666 & ~mask
    assert json.loads((tmp_path / "p.json").read_text(encoding="utf-8"))["monthly_cost_usd"] == SEED_COST
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "s.yaml"], "no temporary file left"


def test_out_through_a_symlink_writes_the_target(tmp_path: Path, capsys) -> None:
    s = scenario(tmp_path)
    (tmp_path / "real.json").write_text("old", encoding="utf-8")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    code, _, err = run(capsys, ["plan", str(s), "--out", str(tmp_path / "link.json"), "--no-alternatives"])
    assert code == 0, err
    assert (tmp_path / "link.json").is_symlink()
    assert json.loads((tmp_path / "real.json").read_text(encoding="utf-8"))["monthly_cost_usd"] == SEED_COST


def test_batch_keeps_a_file_it_did_not_write_and_skips_a_catalog(tmp_path: Path, capsys) -> None:
    d = tmp_path / "scenarios"
    d.mkdir()
    (d / "bigger.yaml").write_text(CATALOG.replace("80.0e+9", "81.0e+9"), encoding="utf-8")  # a catalog, not a scenario
    scenario(d, "catalogs: [bigger.yaml]\n", name="ok.yaml")
    scenario(d, name="broken.yaml", text=SEED.replace("llama-3.1-70b", "llama-9"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "broken.json").write_text("my notes", encoding="utf-8")
    (out / "other.txt").write_text("unrelated", encoding="utf-8")
    kept = snapshot(out)
    inputs = snapshot(d)
    code, _, err = run(capsys, ["plan", str(d), "--out", str(out), "--no-alternatives"])
    assert code == 2
    lines = err.splitlines()
    assert lines[0] == f"fleetplan: note: skipped {d / 'bigger.yaml'} is a catalog, not a scenario (no 'products')"
    assert lines[1].startswith(f"fleetplan: error: {d / 'broken.yaml'}: products[chat].model: unknown model id 'llama-9'")
    assert lines[1].endswith(f"({out}/broken.json, from before this run, was left as it was)")
    assert len(lines) == 2
    after = snapshot(out)
    assert after["broken.json"] == kept["broken.json"] and after["other.txt"] == kept["other.txt"]
    assert sorted(after) == ["broken.json", "ok.json", "other.txt", "summary.csv", "summary.json"]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert [(r["scenario"], r["status"]) for r in summary] == [("broken", "error"), ("ok", "optimal"), ("ok", "optimal")]
    assert snapshot(d) == inputs


# ---------------------------------------------------------------- interrupts (real processes)
def slow_scenario(folder: Path, name: str = "slow.yaml") -> Path:
    """The 50-product portfolio of the stress cases: about a minute of solving."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("stress_cases", ROOT / "benchmarks" / "stress_cases.py")
    assert spec is not None and spec.loader is not None
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    p = folder / name
    p.write_text(yaml.safe_dump(cases.portfolio_50(folder), sort_keys=False), encoding="utf-8")
    return p


def fleetplan(*args: str) -> subprocess.Popen[str]:
    exe = shutil.which("fleetplan") or str(Path(sys.executable).parent / "fleetplan")
    return subprocess.Popen([exe, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FLEETPLAN_DEBUG": ""})


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` has used: how far it got, whatever the load."""
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def working(proc: subprocess.Popen[str], cpu_s: float) -> bool:
    """Whether ``proc`` has ended or used ``cpu_s`` CPU seconds (a busy loop: no sleep races it)."""
    try:
        return proc.poll() is not None or cpu_seconds(proc.pid) >= cpu_s
    except (FileNotFoundError, ProcessLookupError):
        return True


def wait_for(cond: Callable[[], bool], timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code", "word"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_interrupted_plan_one_line_no_file(tmp_path: Path, sig: int, code: int, word: str) -> None:
    s = slow_scenario(tmp_path)
    before = snapshot(tmp_path)
    proc = fleetplan("plan", str(s), "--out", str(tmp_path / "plan.json"))
    # past the imports (about 1 CPU second) and inside the search, however loaded the machine
    wait_for(lambda: working(proc, 2.0), 300)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == code
    assert err.splitlines() == [f"fleetplan: {word}"]
    assert snapshot(tmp_path) == before, "no plan file, no temporary file"


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code", "word", "jobs"),
                         [(signal.SIGINT, 130, "interrupted", "1"), (signal.SIGTERM, 143, "terminated", "2")])
def test_interrupted_batch_writes_the_summary_of_what_finished(tmp_path: Path, sig: int, code: int, word: str,
                                                               jobs: str) -> None:
    d = tmp_path / "s"
    d.mkdir()
    scenario(d, name="a-fast.yaml")
    slow_scenario(d, "b-slow.yaml")
    slow_scenario(d, "c-slow.yaml")
    out = tmp_path / "out"
    proc = fleetplan("plan", str(d), "--out", str(out), "--jobs", jobs)
    wait_for(lambda: (out / "a-fast.json").exists() or proc.poll() is not None, 60)
    time.sleep(0.5)
    assert proc.poll() is None
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert err.splitlines() == [f"fleetplan: {word}: 1 of 3 scenarios finished; their plans and the summary of them are in {out}"]
    assert "leaked" not in err and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == ["a-fast.json", "summary.csv", "summary.json"]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert [(r["scenario"], r["product"], r["monthly_cost_usd"]) for r in summary] == [
        ("a-fast", "", SEED_COST), ("a-fast", "chat", SEED_COST)]


@pytest.mark.slow
def test_signal_while_the_main_thread_is_stuck_in_c_ends_the_process(tmp_path: Path) -> None:
    # pbkdf2 runs for minutes in C without returning to the interpreter, as a solver call can;
    # the watchdog runs the last-resort step, prints the one line and exits 143
    marker = tmp_path / "last-resort.txt"
    code = ("import hashlib, pathlib\n"
            "from fleetplan.commands.interrupts import install_handlers, on_hard_exit\n"
            "install_handlers()\n"
            f"with on_hard_exit(lambda: pathlib.Path({str(marker)!r}).write_text('ran')):\n"
            "    print('ready', flush=True)\n"
            "    hashlib.pbkdf2_hmac('sha256', b'x', b'y', 10**9)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    start = cpu_seconds(proc.pid)
    wait_for(lambda: working(proc, start + 0.3), 120)  # inside the C call
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 143 and err == "fleetplan: terminated\n"
    assert marker.read_text(encoding="utf-8") == "ran"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_while_the_command_loads_is_one_line_too(sig: int, code: int) -> None:
    # the console script's first step handles both signals, before the commands' modules load:
    # the same line and exit code as a signal the command takes later, no traceback
    from fleetplan.commands.interrupts import message

    script = ("import sys, time\n"
              "from fleetplan import main\n"
              "main.install_early_handlers()\n"
              "assert 'fleetplan.commands.plan' not in sys.modules\n"
              "print('ready', flush=True)\n"
              "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == code
    assert err == message(code) + "\n"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_a_copy_of_the_process_leaves_the_parent_running(sig: int) -> None:
    # a worker copied from the command (fork) inherits its handlers and its watchdog's pipe; a
    # signal the copy takes (a stopped pool terminates its workers) must end the copy (SIGTERM) or
    # be ignored by it (SIGINT), and must never reach the parent's watchdog, which would end the
    # parent as terminated GRACE_S later
    script = ("import os, signal, sys, time\n"
              "from fleetplan.commands.interrupts import GRACE_S, install_handlers\n"
              "restore = install_handlers()\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    assert signal.set_wakeup_fd(-1) == -1\n"
              f"    os.kill(os.getpid(), {int(sig)})\n"
              "    time.sleep(0.5)\n"
              "    os._exit(7)\n"
              "_, status = os.waitpid(pid, 0)\n"
              "time.sleep(GRACE_S + 1.0)\n"
              "restore()\n"
              "print(os.waitstatus_to_exitcode(status), flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == ("-15\n" if sig == signal.SIGTERM else "7\n")

"""The library speaks of its parameters, the command line of its flags: no message raised in
``optimizer/``, ``models/`` or ``catalogs/`` names a flag; a command shows the parameters a
message marks as its flags (:data:`fleetplan.commands.io.FLAG_OF`), also for an error from a worker."""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path

import pytest

from fleetplan.catalogs.files import InputError
from fleetplan.commands.io import FLAG_OF, error_text

ROOT = Path(__file__).resolve().parents[1]
FLAG = re.compile(r"--[a-z]")


def _strings(node: ast.AST) -> list[str]:
    """Every string constant under ``node`` (an f-string's literal parts included)."""
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def flag_messages(path: Path) -> list[str]:
    """``file:line: text`` for each string naming a flag in an error raised or built in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name.endswith("Error") or name in ("too_many", "_error"):
                found += [f"{path.name}:{node.lineno}: {s}" for s in _strings(node) if FLAG.search(s)]
    return found


def library_files() -> list[Path]:
    return [p for d in ("optimizer", "models", "catalogs") for p in sorted((ROOT / d).rglob("*.py"))]


def test_no_library_message_names_a_flag():
    assert [m for p in library_files() for m in flag_messages(p)] == []


def test_the_scan_finds_a_flag_in_a_message(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('def f(hour):\n    raise InputError(f"--hour: {hour} is outside the plan")\n', encoding="utf-8")
    assert flag_messages(probe) == ["probe.py:2: --hour: "]


def test_a_message_shows_parameters_to_the_library_and_flags_to_a_command():
    err = InputError("`hour`: 30 is outside the plan's hours 0..23; give `hour` below 24 (hour of day)",
                     parameters=("hour",))
    assert str(err) == "hour: 30 is outside the plan's hours 0..23; give hour below 24 (hour of day)"
    assert error_text(err) == "--hour: 30 is outside the plan's hours 0..23; give --hour below 24 (hour of day)"
    plain = InputError("products[chat].peak_qps: must be above 0 (`hour` unmarked)")
    assert error_text(plain) == str(plain) == "products[chat].peak_qps: must be above 0 (`hour` unmarked)"


def test_a_worker_s_error_keeps_its_marks():
    from fleetplan.optimizer.decisions.whatif import PathError

    err = PathError("`axes` a.b: unknown section 'a'", parameters=("axes",))
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is PathError and str(back) == "axes a.b: unknown section 'a'"
    assert error_text(back) == "--set a.b: unknown section 'a'"


@pytest.mark.parametrize("parameter", sorted(set(FLAG_OF) - {"plan_json"}))
def test_every_mapped_parameter_is_a_flag(parameter):
    assert FLAG_OF[parameter].startswith("--") and FLAG_OF[parameter][2:].replace("-", "_") in (
        parameter, "set", "id")


def test_a_plan_file_s_error_says_how_to_make_one_in_each_one_s_terms(catalog):
    from fleetplan.optimizer.explanation.plan_file import PlanFileError, validate_plan

    with pytest.raises(PlanFileError) as err:
        validate_plan({"products": []}, "p.json", catalog)
    assert "write one with fleetplan.plan(scenario).to_json(), or give the scenario" in str(err.value)
    assert "write one with fleetplan plan SCENARIO.yaml --json --out PLAN.json, or give" in error_text(err.value)
    back = pickle.loads(pickle.dumps(err.value))
    assert str(back) == str(err.value) and error_text(back) == error_text(err.value)


def test_the_simulate_command_names_its_flag_and_the_api_its_parameter(tmp_path, capsys):
    import fleetplan
    from fleetplan.main import main

    plan = fleetplan.plan(ROOT / "examples" / "seed-chat-70b.yaml")
    with pytest.raises(InputError, match=r"^hour: 5 is outside the plan's hours 0\.\.0$"):
        fleetplan.simulate(plan, hour=5)
    path = tmp_path / "plan.json"
    path.write_text(plan.to_json(), encoding="utf-8")
    assert main(["simulate", str(path), "--hour", "5"]) == 2
    assert capsys.readouterr().err == "fleetplan: error: --hour: 5 is outside the plan's hours 0..0\n"

"""The command line's shape: choices from the code's constants, shared helpers in one module,
short functions, no repeated runs of lines."""

from __future__ import annotations

import argparse
import ast
import io
import keyword
import tokenize
from collections import defaultdict
from pathlib import Path

import pytest

from fleetplan.catalogs.schema import PRECISIONS
from fleetplan.commands.catalog import LISTINGS
from fleetplan.main import build_parser
from fleetplan.models.presets import PRESETS
from fleetplan.optimizer.mip.solvers import SOLVERS

CLI = Path(__file__).resolve().parent.parent / "cli"
MAX_FUNCTION_LINES = 60
REPEATED_RUN = 6
LONG_FUNCTIONS_LEFT: set[tuple[str, str]] = set()


def _action(parser: argparse.ArgumentParser, *path: str) -> argparse.Action:
    """The action of the flag or positional ``path[-1]`` in the subcommand ``path[:-1]``."""
    for name in path[:-1]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return next(a for a in parser._actions if path[-1] in (*a.option_strings, a.dest))


@pytest.mark.parametrize(("path", "expected"), [
    (("estimate", "--precision"), PRECISIONS),
    (("estimate", "--kv-precision"), PRECISIONS),
    (("estimate", "--preset"), tuple(PRESETS)),
    (("validate", "--preset"), tuple(PRESETS)),
    (("calibrate", "--preset"), tuple(PRESETS)),
    (("plan", "--solver"), SOLVERS),
    (("breakeven", "--solver"), SOLVERS),
    (("catalog", "list", "kind"), tuple(LISTINGS)),
])
def test_choices_are_the_constants_the_code_uses(path, expected):
    assert tuple(_action(build_parser(), *path).choices) == tuple(expected)


def test_solver_defaults_to_the_first_solver_highs():
    assert build_parser().parse_args(["plan", "s.yaml"]).solver == SOLVERS[0] == "highs"


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_batch_and_fidelity_import_neither_main_nor_each_other():
    for name, others in (("batch", {"fleetplan.main", "fleetplan.commands.fidelity"}),
                         ("fidelity", {"fleetplan.main", "fleetplan.commands.batch"})):
        imported = _imports(CLI / "commands" / f"{name}.py")
        assert not imported & others, (name, imported & others)
        assert "fleetplan.commands.io" in imported


def test_no_function_in_cli_is_longer_than_60_lines():
    long = {}
    for path in sorted(CLI.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES and (path.name, node.name) not in LONG_FUNCTIONS_LEFT:
                    long[f"{path.name}:{node.name}"] = lines
    assert long == {}


def _code_lines(path: Path) -> list[tuple[int, str, str]]:
    """(line number, text, shape) of every line that holds code other than an import; the shape
    has every name replaced by N and every literal by L."""
    text = path.read_text(encoding="utf-8")
    shape: dict[int, list[str]] = defaultdict(list)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NAME:
            shape[tok.start[0]].append(tok.string if keyword.iskeyword(tok.string) else "N")
        elif tok.type in (tokenize.STRING, tokenize.NUMBER):
            shape[tok.start[0]].append("L")
        elif tok.type == tokenize.OP:
            shape[tok.start[0]].append(tok.string)
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if shape.get(n) and not s.startswith(("import ", "from ")) and shape[n] not in (["L"], [")"], ["]"], ["}"]):
            out.append((n, s, " ".join(shape[n])))
    return out


@pytest.mark.parametrize("field", [1, 2], ids=["same lines", "same shape"])
def test_no_run_of_six_lines_repeats_in_cli(field):
    seen: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for path in sorted(CLI.rglob("*.py")):
        lines = _code_lines(path)
        for i in range(len(lines) - REPEATED_RUN + 1):
            window = tuple(line[field] for line in lines[i:i + REPEATED_RUN])
            seen[window].append(f"{path.name}:{lines[i][0]}")
    assert {w[0]: where for w, where in seen.items() if len(where) > 1} == {}

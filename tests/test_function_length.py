"""Every function of the package is at most 60 lines (its ``def`` line to its last line, docstring
included), so each reads on one screen: a longer one is split into named steps."""

from __future__ import annotations

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("cli", "optimizer", "catalogs", "models")
MAX_LINES = 60


def function_lengths(path: Path) -> dict[str, int]:
    """Every function and method of ``path`` by ``Class.name`` (or ``name``): its length in lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[prefix + child.name] = (child.end_lineno or child.lineno) - child.lineno + 1
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def long_functions() -> dict[str, int]:
    """``folder/file.py:function`` -> lines, for every function over :data:`MAX_LINES`."""
    found = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name, lines in function_lengths(path).items():
                if lines > MAX_LINES:
                    found[f"{path.relative_to(ROOT).as_posix()}:{name}"] = lines
    return found


def test_the_counter_measures_a_function_from_def_to_its_last_line(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def a():\n    x = 1\n    return x\n\n\nclass C:\n    def b(self):\n" + "        pass\n" * 61)
    assert function_lengths(f) == {"a": 3, "C.b": 62}


def test_no_function_is_over_60_lines():
    long = long_functions()
    assert long == {}

"""mypy passes on the public API: the package root, :mod:`fleetplan.commands.api` with its result types,
and the progress events, checked strictly (the modules they import are read, not reported on).

The package maps several folders into one namespace (``cli/`` is ``fleetplan``), so the check
runs on a tree of links laid out as the installed package is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each check starts mypy on the package (about a minute here)
ROOT = Path(__file__).resolve().parents[1]
CHECKED = ("__init__.py", "commands/api.py", "rendering/progress.py", "optimizer/runtime/deadline.py")


def package_tree(into: Path) -> Path:
    """``into/fleetplan`` laid out as installed: ``cli/`` files at the root, the other folders below."""
    pkg = into / "fleetplan"
    pkg.mkdir()
    for f in (ROOT / "cli").iterdir():
        if f.suffix in (".py", ".typed") or (f.is_dir() and (f / "__init__.py").exists()):
            (pkg / f.name).symlink_to(f, target_is_directory=f.is_dir())
    for sub in ("optimizer", "models", "catalogs"):
        (pkg / sub).symlink_to(ROOT / sub, target_is_directory=True)
    return pkg


def run_mypy(pkg: Path, files: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """mypy --strict on ``files`` of the tree, with the project's configuration."""
    env = {**os.environ, "MYPYPATH": str(pkg.parent)}
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--config-file", str(ROOT / "pyproject.toml"),
                           "--cache-dir", str(pkg.parent / ".mypy_cache"), *(str(pkg / f) for f in files)],
                          capture_output=True, text=True, env=env, cwd=pkg.parent, timeout=600)


def test_the_public_api_type_checks(tmp_path):
    pytest.importorskip("mypy", reason="mypy comes with the test extra: pip install '.[test]'")
    run = run_mypy(package_tree(tmp_path), CHECKED)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_check_catches_a_type_error(tmp_path):
    pytest.importorskip("mypy", reason="mypy comes with the test extra: pip install '.[test]'")
    pkg = package_tree(tmp_path)
    (pkg / "probe.py").write_text("import fleetplan\n\ncost: str = fleetplan.plan('x.yaml').monthly_cost_usd\n",
                                  encoding="utf-8")
    run = run_mypy(pkg, ("probe.py",))
    assert run.returncode == 1 and 'incompatible types in assignment (expression has type "float"' in run.stdout.lower()

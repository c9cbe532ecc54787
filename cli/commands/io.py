"""What every command shares at its edges: inputs named, JSON written, errors turned into exit codes.

Owns: strict deterministic JSON (:func:`dumps`), the atomic write every output goes through
(:func:`write_atomically`, from :mod:`fleetplan.catalogs.files`), the files a command reads
(so no output is one of them), the preset a command plans with, the console tables are printed
on, printing a result as JSON or as a table (:func:`emit`) and the wrapper that turns an error
into one line on stderr and an exit code (:func:`run_command`); a message's control characters
are shown escaped (:func:`fleetplan.rendering.escape.terminal`), so no value in it can forge a line or
send an escape sequence. ``main``, ``batch`` and
``fidelity`` import this module and never each other. It holds no planning rule and no table
layout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fleetplan.catalogs.files import one_line, write_atomically
from fleetplan.rendering.escape import terminal

__all__ = [
    "EXIT_SOLVER_ERROR", "EXIT_USER_ERROR", "SCENARIO_PRESET_HINT", "catalog_inputs", "console", "dumps", "emit",
    "output_in", "resolve_preset", "run_command", "scenario_inputs", "write_atomically",
]

EXIT_USER_ERROR = 2
EXIT_SOLVER_ERROR = 3

# How a scenario chooses its preset, for a calibration profile fitted for another one.
SCENARIO_PRESET_HINT = ("the scenario sets preset {used!r}: write 'preset: {fitted}' in the scenario file, "
                        "or calibrate with --preset {used}")


def dumps(data: Any) -> str:
    """Canonical JSON: sorted keys are NOT used so the documented key order is kept; stable floats.

    Strict JSON: a non-finite number (which JSON cannot hold) raises ``ValueError`` instead of
    being written as ``Infinity`` or ``NaN``."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def console() -> Any:
    """A rich console as wide as the output (:func:`fleetplan.rendering.table_fit.terminal_width`), no highlighting."""
    from rich.console import Console

    from fleetplan.rendering.table_fit import terminal_width

    return Console(width=terminal_width(), highlight=False)


def emit(data: Any, as_json: bool, show: Callable[[Any, Any], None]) -> int:
    """Print ``data`` as JSON on stdout, or hand it to ``show`` with a console; exit code 0."""
    if as_json:
        sys.stdout.write(dumps(data))
    else:
        show(data, console())
    return 0


# ---------------------------------------------------------------- inputs
def catalog_inputs(catalogs: Sequence[str] = ()) -> list[Path]:
    """The shipped catalog files and the ``--catalog`` files: inputs of every command."""
    from fleetplan.catalogs.loader import DATA_DIR, SHIPPED_FILES

    return [*(DATA_DIR / name for name in SHIPPED_FILES), *(Path(c) for c in catalogs)]


def scenario_inputs(path: str | Path, scenario: Any, folder: Path, catalogs: Sequence[str] = (),
                    calibration: str | None = None) -> list[Path]:
    """Every file a plan of the scenario at ``path`` reads: the scenario, its catalogs, demand
    profiles and traces, the ``--catalog`` files and the calibration profile (no output may be one of them)."""
    files = [Path(path), *(folder / c for c in scenario.catalogs), *catalog_inputs(catalogs)]
    files += [folder / p.demand_profile for p in scenario.products if p.demand_profile]
    files += [folder / p.trace for p in scenario.products if getattr(p, "trace", None)]
    return files + ([Path(calibration)] if calibration else [])


def output_in(directory: Path, name: str, flag: str, inputs: Sequence[Path | str] = ()) -> Path:
    """The checked path of output file ``name`` in ``directory`` (:func:`check_output_file`), which
    must be a file directly inside it: a name with a separator or ``..``, or a link there that
    points elsewhere, is refused, so a command never replaces a file outside its output directory."""
    from fleetplan.catalogs.files import check_output_file
    from fleetplan.catalogs.loader import InputError
    from fleetplan.rendering.escape import confined

    if confined(directory, name) is None:
        raise InputError(f"{flag}: {directory / name} would be written outside {directory} (a link or a separator "
                         "in the name); remove it or choose another directory")
    return check_output_file(directory / name, flag, inputs)


def resolve_preset(name: str, calibration: str | None, preset_hint: str = "use --preset {fitted}") -> Any:
    """The named preset, adjusted by a calibration profile file when one is given; ``preset_hint``
    tells the user how to choose the preset a profile was fitted for."""
    from fleetplan.models.presets import get_preset

    preset = get_preset(name)
    if calibration:
        from fleetplan.models.calibration import apply_profile

        preset = apply_profile(preset, Path(calibration), preset_hint)
    return preset


def read_plan(path: Path | str, catalog: Any) -> dict[str, Any]:
    """The plan file a command is given (:func:`fleetplan.optimizer.explanation.plan_file.read_plan`); a
    scenario given instead is refused with the command that plans it."""
    from fleetplan.optimizer.explanation.plan_file import PlanFileError
    from fleetplan.optimizer.explanation.plan_file import read_plan as read

    path = Path(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        raise PlanFileError(f"{path}: a scenario, not a plan; plan it first with 'fleetplan plan {path} --json --out "
                            f"plan.json' and give plan.json")
    return read(path, catalog)


# ---------------------------------------------------------------- errors
# The command-line flag of each library parameter an error message may name (see
# :class:`~fleetplan.catalogs.files.InputError`): the library speaks of parameters, a command of its flags.
FLAG_OF = {
    "axes": "--set", "calibration": "--calibration", "catalog": "--catalog", "hour": "--hour",
    "max_points": "--max-points", "model_id": "--id", "replace": "--replace", "samples": "--samples",
    "scales": "--scales", "trace": "--trace",
    "plan_json": "fleetplan plan SCENARIO.yaml --json --out PLAN.json",  # how a plan file is made
}


def error_text(exc: BaseException) -> str:
    """An error's message as a command shows it: the parameters it names as their flags."""
    from fleetplan.catalogs.loader import InputError

    return exc.render(FLAG_OF) if isinstance(exc, InputError) else str(exc)


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed subcommand ``args.func``; every error except an interrupt becomes one line
    on stderr: a user error exit code 2, a solver error 3, anything else 1 (``FLEETPLAN_DEBUG=1``
    lets it through with its traceback)."""
    from fleetplan.catalogs.loader import InputError

    try:
        return int(args.func(args))
    except InputError as exc:
        print(f"fleetplan: error: {terminal(one_line(error_text(exc)))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:  # pragma: no cover - e.g. piped into head
        return 0
    except Exception as exc:  # noqa: BLE001 - reported as one line; FLEETPLAN_DEBUG=1 shows the traceback
        if os.environ.get("FLEETPLAN_DEBUG"):
            raise
        from fleetplan.optimizer.common.errors import SolverError

        if isinstance(exc, SolverError):
            print(f"fleetplan: error: {terminal(one_line(str(exc)))}", file=sys.stderr)
            return EXIT_SOLVER_ERROR
        print(f"fleetplan: internal error: {type(exc).__name__}: {terminal(one_line(str(exc)))} "
              "(FLEETPLAN_DEBUG=1 shows details)", file=sys.stderr)
        return 1


def out_dir(path: str, files: Sequence[str]) -> Path:
    """The ``--out`` directory for ``files``, created when missing (its parent must exist); a file
    there is refused."""
    from fleetplan.catalogs.loader import InputError

    out = Path(path)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out: {out} is not a directory; give a directory for {', '.join(files)}")
    if not out.parent.is_dir():
        raise InputError(f"--out: {out.parent} does not exist; create it or give an existing directory's path")
    try:
        out.mkdir(exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out: cannot create {out}: {exc.strerror}") from None
    return out

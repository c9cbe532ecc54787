"""Command-line flags: the parser every subcommand uses and the flags several of them share.

Owns argparse plumbing only: one-line parse errors (exit 2), numbers checked against the
ranges the files' schemas use (:mod:`fleetplan.catalogs.fields`), and every ``choices`` taken
from the constant the code itself uses (precisions, presets, solvers), never a repeated
literal. It decides nothing about a plan.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from typing import Any, NoReturn, overload

from fleetplan.catalogs.fields import Range
from fleetplan.catalogs.schema import PRECISIONS
from fleetplan.models.presets import DEFAULT, PRESETS

EXIT_USAGE = 2
PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)
DEFAULT_PRESET = DEFAULT.name
CATALOG_HELP = "extra catalog YAML file merged over the shipped one (repeatable)"
CALIBRATION_HELP = "calibration profile YAML (from `fleetplan calibrate`)"


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) instead of usage dumps."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"fleetplan: error: {message} (see '{self.prog} --help')\n")


class LazyChoices(Sequence[str]):
    """The names in ``module.name``, read the first time argparse needs them (to check a value or
    print help), so a command that is not given the flag never imports ``module``.

    The solver names live beside the solvers, whose import takes about 0.1 s (pyomo); commands
    such as ``estimate`` and ``catalog list`` should not pay for it.
    """

    def __init__(self, module: str, name: str) -> None:
        self._module = module
        self._name = name

    def _values(self) -> tuple[str, ...]:
        return tuple(getattr(importlib.import_module(self._module), self._name))

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._values()[index]

    def __len__(self) -> int:
        return len(self._values())


SOLVER_CHOICES = LazyChoices("fleetplan.optimizer.solvers", "SOLVERS")


def number_flag(valid: Range) -> Any:
    """An argparse type: the flag's text as a number in the range ``valid`` (shared with the
    files' schemas), whole when the range is."""
    def parse(text: str) -> float | int:
        try:
            v = valid.check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return int(v) if valid.integer else v

    return parse


def solver_of(args: argparse.Namespace) -> str:
    """The ``--solver`` given, else the first of the solvers (HiGHS), the planner's default."""
    return str(args.solver) if args.solver else SOLVER_CHOICES[0]


def add_solver_flag(parser: argparse.ArgumentParser) -> None:
    """``--solver``: one of the solvers the planner runs (default: the first, see :func:`solver_of`)."""
    parser.add_argument("--solver", choices=SOLVER_CHOICES, default=None)


def add_catalog_flag(parser: argparse.ArgumentParser) -> None:
    """``--catalog FILE``, repeatable: user catalogs merged over the shipped one."""
    parser.add_argument("--catalog", action="append", default=[], help=CATALOG_HELP)


def add_preset_flags(parser: argparse.ArgumentParser, calibration: bool = True) -> None:
    """``--preset`` (one of the model presets) and, unless ``calibration`` is false, ``--calibration``."""
    parser.add_argument("--preset", choices=PRESET_NAMES, default=DEFAULT_PRESET)
    if calibration:
        parser.add_argument("--calibration", help=CALIBRATION_HELP)


def add_precision_flags(parser: argparse.ArgumentParser) -> None:
    """``--precision`` of the weights (default the first, bf16) and ``--kv-precision`` of the KV cache."""
    parser.add_argument("--precision", choices=PRECISIONS, default=PRECISIONS[0])
    parser.add_argument("--kv-precision", choices=PRECISIONS, default=None)

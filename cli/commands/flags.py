"""Command-line flags: the parser every subcommand uses and the flags several of them share.

Owns argparse plumbing only: one-line parse errors (exit 2), numbers checked against the
ranges the files' schemas use (:mod:`fleetplan.catalogs.fields`), and every ``choices`` taken
from the constant the code itself uses (precisions, presets, solvers), never a repeated
literal. It decides nothing about a plan.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from fleetplan.catalogs.fields import Range
from fleetplan.catalogs.schema import PRECISIONS
from fleetplan.models.presets import DEFAULT, PRESETS
from fleetplan.commands.io import EXIT_USER_ERROR
from fleetplan.optimizer.mip.solvers import SOLVERS

PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)
DEFAULT_PRESET = DEFAULT.name
CATALOG_HELP = "extra catalog YAML file merged over the shipped one (repeatable)"
CALIBRATION_HELP = "calibration profile YAML (from `fleetplan calibrate`)"


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) instead of usage dumps."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"fleetplan: error: {message} (see '{self.prog} --help')\n")


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


def add_solver_flag(parser: argparse.ArgumentParser) -> None:
    """``--solver``: one of the solvers the planner runs, HiGHS (the first) by default."""
    parser.add_argument("--solver", choices=SOLVERS, default=SOLVERS[0])


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

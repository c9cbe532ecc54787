"""Calibration profiles: efficiency factors and overheads fitted to measurements."""

from __future__ import annotations

from pathlib import Path

from fleetplan.models.presets import Preset


def apply_profile(preset: Preset, path: Path) -> Preset:
    """``preset`` adjusted by the calibration profile at ``path``."""
    raise NotImplementedError("calibration profiles are not supported yet")

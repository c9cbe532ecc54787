"""The calibration profile file: one pydantic schema that `calibrate` writes and every reader checks.

A profile is YAML: its version (``fleetplan_calibration: 1``), the preset it was fitted for, the
measurement file and row counts, how it was fitted (``method``), the factor entries (one per GPU
id or family, engine and model kind, most general first) and its error uncalibrated, in sample
and cross-validated by configuration group. :func:`profile_document` builds the document to
write, :func:`read_profile` validates a file's document; both go through
:class:`CalibrationProfile`, so what is written can always be read back. This module does no I/O.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.loader import format_validation_error

PROFILE_VERSION = 1

Scale = Annotated[float, F.CALIBRATION_SCALE]


class FactorEntry(BaseModel):
    """Multipliers for one GPU (id or family), engine and model kind; None matches any."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str | None = Field(default=None, description="GPU id or family, or any")
    engine: str | None = Field(default=None, description="normalised engine name, or any")
    kind: Literal["dense", "moe"] | None = Field(default=None, description="model kind, or any")
    unnamed_engine: bool = Field(default=False, description="applies only where no engine is named (the "
                                 "planner): factors pooled over the engines measured on the GPU")
    rows: int = Field(default=0, ge=0, description="measured rows this entry's levels were fitted on")
    bandwidth_scale: Scale = Field(description="divides memory times")
    compute_scale: Scale = Field(description="divides compute times")
    overhead_scale: Scale = Field(description="multiplies the fixed per-step and per-layer overhead")
    comm_scale: Scale = Field(description="multiplies communication time")


class CalibrationProfile(BaseModel):
    """A whole profile document."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fleetplan_calibration: Literal[1] = Field(description="profile format version")
    preset: str = Field(description="the preset the factors were fitted for")
    measurements: str = Field(default="", description="file name of the measurements fitted")
    rows: int = Field(default=0, ge=0, description="rows fitted")
    skipped_rows: int = Field(default=0, ge=0, description="rows skipped (the planner would not run them)")
    groups: int = Field(default=0, ge=0, description="configuration groups fitted")
    forced: bool = Field(default=False, description="written with --force although cross-validation "
                         "found it worse than uncalibrated")
    method: dict[str, Any] = Field(default_factory=dict, description="how the factors were fitted")
    factors: list[FactorEntry] = Field(min_length=1, description="factor entries, most general first")
    error: dict[str, Any] = Field(default_factory=dict, description="uncalibrated, in-sample and "
                                  "cross-validated error statistics")


def profile_document(profile: CalibrationProfile) -> dict[str, Any]:
    """The plain document to write as YAML (field order as in the schema)."""
    return profile.model_dump(mode="json")


def read_profile(doc: Any, where: str) -> CalibrationProfile:
    """The profile in the parsed YAML ``doc``; ``ValueError`` with one line naming ``where`` and
    the field when it is not a valid profile."""
    if not isinstance(doc, dict) or doc.get("fleetplan_calibration") != PROFILE_VERSION:
        raise ValueError(f"{where}: not a fleetplan calibration profile (expected 'fleetplan_calibration: {PROFILE_VERSION}')")
    try:
        return CalibrationProfile.model_validate(doc)
    except ValidationError as err:
        raise ValueError(format_validation_error(err, where, CalibrationProfile)) from None

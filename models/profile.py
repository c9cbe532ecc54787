"""The calibration profile file: the pydantic schemas that `calibrate` writes and every reader checks.

A profile is YAML. The current format (``fleetplan_calibration: 2``) holds the preset it was
fitted for, the measurement file and row counts, how it was fitted (``method``), and for time per
output token (``tpot``) and time to first token (``ttft``) apart: whether cross-validation kept
the quantity, and per level of the hierarchy (all, kind, engine, family, engine x family, setup)
the shrinkage cross-validation chose (``shrink_groups``, null when the level was left out), the
held-out error without and with the level, and the multiplier of every cell measured
(``offsets``); then its error uncalibrated, in sample and cross-validated. The factor a
configuration gets is the product of its cells' multipliers over the levels
(:func:`fleetplan.models.calibration.factors_of`).

The earlier format (``fleetplan_calibration: 1``: one factor entry per GPU, engine and kind,
the most specific applying) is still read (:class:`ProfileV1`); any other version is refused in
one line. :func:`profile_document` builds the document to write, :func:`read_profile` validates
a file's document; both go through the schema, so what is written can always be read back.
This module does no I/O.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.loader import format_validation_error

PROFILE_VERSION: Literal[2] = 2
READABLE_VERSIONS = (1, 2)

Scale = Annotated[float, F.CALIBRATION_SCALE]
Level = Literal["all", "kind", "engine", "family", "engine_family", "setup", "model"]
Kind = Literal["dense", "moe"]


class FactorEntry(BaseModel):
    """Multipliers for one GPU (id or family), engine and model kind; None matches any (format 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str | None = Field(default=None, description="GPU id or family, or any")
    engine: str | None = Field(default=None, description="normalised engine name, or any")
    kind: Kind | None = Field(default=None, description="model kind, or any")
    unnamed_engine: bool = Field(default=False, description="applies only where no engine is named (the "
                                 "planner): factors pooled over the engines measured on the GPU")
    rows: int = Field(default=0, ge=0, description="measured rows this entry's levels were fitted on")
    bandwidth_scale: Scale = Field(description="divides memory times")
    compute_scale: Scale = Field(description="divides compute times")
    overhead_scale: Scale = Field(description="multiplies the fixed per-step and per-layer overhead")
    comm_scale: Scale = Field(description="multiplies communication time")


class _Header(BaseModel):
    """What every profile format opens with (a format overrides the version and may reword ``forced``;
    an overridden field keeps its place, so the version stays first)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fleetplan_calibration: int = Field(description="profile format version")
    preset: str = Field(description="the preset the factors were fitted for")
    measurements: str = Field(default="", description="file name of the measurements fitted")
    rows: int = Field(default=0, ge=0, description="rows fitted")
    skipped_rows: int = Field(default=0, ge=0, description="rows skipped (the planner would not run them)")
    groups: int = Field(default=0, ge=0, description="configuration groups fitted")
    forced: bool = Field(default=False, description="written with --force although cross-validation "
                         "found it worse than uncalibrated")
    method: dict[str, Any] = Field(default_factory=dict, description="how the factors were fitted")


ERROR_DESCRIPTION = "uncalibrated, in-sample and cross-validated error statistics"


class ProfileV1(_Header):
    """A profile of the earlier format: one factor entry per scope, the most specific applying."""

    fleetplan_calibration: Literal[1] = Field(description="profile format version")
    factors: list[FactorEntry] = Field(min_length=1, description="factor entries, most general first")
    error: dict[str, Any] = Field(default_factory=dict, description=ERROR_DESCRIPTION)


class LevelOffset(BaseModel):
    """The multiplier of one cell of a level: the fields that name the cell are set, the others null."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = Field(default=None, description="model catalog id (level model)")
    gpu: str | None = Field(default=None, description="GPU id (levels setup, model)")
    family: str | None = Field(default=None, description="GPU family (levels family, engine_family, setup, model)")
    engine: str | None = Field(default=None,
                               description="normalised engine (levels engine, engine_family, setup, model)")
    kind: Kind | None = Field(default=None, description="model kind (levels kind, setup, model)")
    scale: Scale = Field(description="multiplier of this cell, on top of the levels above it")
    groups: int = Field(default=0, ge=0, description="configuration groups measured in the cell")
    rows: int = Field(default=0, ge=0, description="measured rows in the cell")


class LevelFit(BaseModel):
    """One level of the hierarchy for one quantity: its shrinkage, its held-out error and offsets."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    level: Level = Field(description="the level's name")
    shrink_groups: float | None = Field(default=None, ge=0, description="groups' worth of no change the cells "
                                        "are shrunk by (weight n / (n + k)); null: left out by cross-validation")
    cv_error_without: float | None = Field(default=None, ge=0, description="held-out error before the level")
    cv_error_with: float | None = Field(default=None, ge=0, description="held-out error with the level at its "
                                        "chosen shrinkage (null: left out)")
    offsets: list[LevelOffset] = Field(default_factory=list, description="multiplier per measured cell")


class QuantityFit(BaseModel):
    """The hierarchy fitted for TPOT or TTFT."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kept: bool = Field(description="whether cross-validation kept this quantity's calibration (else no change)")
    kinds: list[Kind] | None = Field(default=None, description="model kinds the calibration applies to (each "
                                     "kept only where it predicts that kind's held-out groups better); null: "
                                     "every kind (profiles written before the field)")
    error_measure: str = Field(default="", description="the held-out error the levels were chosen by")
    levels: list[LevelFit] = Field(default_factory=list, description="levels, most general first")


class CalibrationProfile(_Header):
    """A whole profile document (current format)."""

    fleetplan_calibration: Literal[2] = Field(description="profile format version")
    forced: bool = Field(default=False, description="written with --force although cross-validation "
                         "kept no level")
    tpot: QuantityFit = Field(description="time per output token: scales every term of the step")
    ttft: QuantityFit = Field(description="time to first token of a benchmark, on top of the step's scale")
    error: dict[str, Any] = Field(default_factory=dict, description=ERROR_DESCRIPTION)


AnyProfile = CalibrationProfile | ProfileV1


def profile_document(profile: AnyProfile) -> dict[str, Any]:
    """The plain document to write as YAML (field order as in the schema)."""
    return profile.model_dump(mode="json")


def read_profile(doc: Any, where: str) -> AnyProfile:
    """The profile in the parsed YAML ``doc`` (either format); ``ValueError`` with one line naming
    ``where`` and the field when it is not a valid profile."""
    version = doc.get("fleetplan_calibration") if isinstance(doc, dict) else None
    if version is None:
        raise ValueError(f"{where}: not a fleetplan calibration profile "
                         f"(expected 'fleetplan_calibration: {PROFILE_VERSION}')")
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise ValueError(f"{where}.fleetplan_calibration: profile format {version!r} is not one this fleetplan "
                         f"reads ({' or '.join(map(str, READABLE_VERSIONS))}); run `fleetplan calibrate` again")
    schema: type[AnyProfile] = ProfileV1 if version == 1 else CalibrationProfile
    try:
        return schema.model_validate(doc)
    except ValidationError as err:
        raise ValueError(format_validation_error(err, where, schema)) from None

"""The commitment-term price catalog (``data/commitments.yaml``): USD per GPU-hour of committing a
GPU type for a term, each row with its source and date.

Owns reading and validating that file; it knows nothing of plans."""

from __future__ import annotations

from importlib import resources
from typing import Any, Literal

import yaml
from fleetplan.catalogs.loader import CatalogError, format_validation_error
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class CommitmentRow(BaseModel):
    """One GPU type's price for one commitment term."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str = Field(min_length=1)
    term: Literal["1y", "3y"]
    usd_per_gpu_hour: float = Field(gt=0.0, lt=1000.0)
    source: str = Field(min_length=1)
    as_of: str = Field(min_length=10)
    notes: str = ""


class CommitmentFile(BaseModel):
    """The file: a list of rows, at most one per (gpu, term)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    commitments: list[CommitmentRow]


def load_commitments() -> list[dict[str, Any]]:
    """The shipped commitment rows as dicts (gpu, term, usd_per_gpu_hour, source, as_of)."""
    text = resources.files("fleetplan.catalogs").joinpath("data/commitments.yaml").read_text(encoding="utf-8")
    where = "catalogs/data/commitments.yaml"
    try:
        parsed = CommitmentFile.model_validate(yaml.safe_load(text))
    except ValidationError as err:
        raise CatalogError(format_validation_error(err, where, CommitmentFile)) from None
    seen: set[tuple[str, str]] = set()
    for row in parsed.commitments:
        if (row.gpu, row.term) in seen:
            raise CatalogError(f"{where}: {row.gpu} {row.term} is listed twice")
        seen.add((row.gpu, row.term))
    return [row.model_dump() for row in parsed.commitments]

"""The power catalog (``data/power.yaml``): each GPU's idle and busy draw, server overhead per
node, default PUE, carbon intensity, energy and colocation prices, server capex and measured
tokens per joule. Read and validated once; owns no formula (see :mod:`fleetplan.models.power`)."""

from __future__ import annotations

import datetime as dt
from functools import lru_cache
from importlib import resources
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.files import parse_yaml
from fleetplan.catalogs.loader import CatalogError, format_validation_error


class _Sourced(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    as_of: dt.date
    notes: str = ""


class GPUPower(_Sourced):
    """Draw of one GPU type: idle, busy (full load) and the server overhead per node."""

    gpu: str
    idle_power_w: Annotated[float, F.WATTS]
    busy_power_w: Annotated[float, F.WATTS]
    server_overhead_w_per_node: Annotated[float, F.WATTS]
    gpus_per_node: Annotated[int, F.INSTANCE_GPUS] = 8

    @property
    def overhead_w_per_gpu(self) -> float:
        """Each GPU's share of its node's overhead, in watts."""
        return self.server_overhead_w_per_node / self.gpus_per_node


class ServerCapex(_Sourced):
    """Purchase price of one server of a GPU type."""

    gpu: str
    capex_usd_per_server: float = Field(gt=0, le=1e9)
    gpus_per_server: Annotated[int, F.INSTANCE_GPUS]


class MeasuredEfficiency(_Sourced):
    """A published measurement of output tokens per joule of GPU energy for one configuration."""

    gpu: str
    model: str
    precision: str
    tp: Annotated[int, F.TP]
    batch: Annotated[int, F.BATCH]
    output_tokens_per_joule: float = Field(gt=0)


class PowerDefaults(BaseModel):
    """Figures used where a site gives none, with their sources."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pue: float = Field(ge=1.0)
    pue_source: str
    carbon_gco2_per_kwh: float = Field(ge=0)
    carbon_source: str
    energy_usd_per_kwh: float = Field(ge=0)
    energy_source: str
    colocation_usd_per_kw_month: float = Field(ge=0)
    colocation_source: str
    as_of: dt.date


class PowerCatalog(BaseModel):
    """The whole power catalog."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    defaults: PowerDefaults
    gpus: list[GPUPower]
    servers: list[ServerCapex] = Field(default_factory=list)
    measured_efficiency: list[MeasuredEfficiency] = Field(default_factory=list)

    def gpu(self, gpu_id: str) -> GPUPower | None:
        """The draw of ``gpu_id`` (None: not in the catalog)."""
        return next((g for g in self.gpus if g.gpu == gpu_id), None)

    def server(self, gpu_id: str) -> ServerCapex | None:
        """The sourced server capex of ``gpu_id`` (None: none listed)."""
        return next((s for s in self.servers if s.gpu == gpu_id), None)


@lru_cache(maxsize=1)
def power_catalog() -> PowerCatalog:
    """The shipped power catalog, validated (a broken file stops with its field)."""
    name = "catalogs/data/power.yaml"
    text = resources.files("fleetplan.catalogs").joinpath("data/power.yaml").read_text(encoding="utf-8")
    raw = parse_yaml(text, name, CatalogError)
    try:
        return PowerCatalog.model_validate(raw)
    except ValidationError as err:
        raise CatalogError(format_validation_error(err, name, PowerCatalog)) from None

"""Sites and owned hardware in a scenario: the ``sites:`` schema and what it does to GPU-hour
prices (an owned GPU type's all-month price, a carbon price on every GPU-hour).

Owns the schema and the prices; the MIP rows are built from :mod:`fleetplan.optimizer.problem_data.site_power` in :mod:`fleetplan.optimizer.mip.formulation`, the power report is :mod:`fleetplan.optimizer.explanation.power`.
Imports only the catalogs and the pure formulas of :mod:`fleetplan.models.power`: the scenario
and the candidates read it, so it must import neither."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.power import PowerCatalog, power_catalog
from fleetplan.models.power import (
    energy_usd_per_gpu_hour,
    it_draw_w_per_gpu,
    owned_usd_per_gpu_hour,
    tonnes_co2,
)
from fleetplan.optimizer.common.enums import Tier

# the lengths an hourly energy price or carbon intensity list may have: one day or one week
HOURLY_LENGTHS = (24, 168)
DEFAULT_GPUS_PER_SERVER = 8
# the step a site's power limit is valued in (see :mod:`fleetplan.optimizer.explanation.binding`): one megawatt
POWER_STEP_W = 1e6
# the name of a site's power limit in a plan's ``binding_limits``: this and the site's name
SITE_LIMIT = "power of site "


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _hourly(v: Any, r: F.Range) -> Any:
    """One number or 24/168 hourly values, each in ``r``."""
    if v is None:
        return v
    if not isinstance(v, list):
        return r.check(v)
    if len(v) not in HOURLY_LENGTHS:
        raise ValueError(f"{len(v)} values; give one number, or 24 (a day) or 168 (a week) hourly values")
    return [r.check(x, f"hour {h}") for h, x in enumerate(v)]


class Owned(_Strict):
    """Owned servers of one GPU type on a site: bought, amortised and paid every hour."""

    capex_usd_per_server: Annotated[float | None, F.USD_PER_SERVER] = Field(
        default=None, description="purchase price of one server, USD; left out: the power catalog's sourced price")
    gpus_per_server: Annotated[int | None, F.INSTANCE_GPUS] = Field(
        default=None, description="GPUs per server; left out: the catalog's, else 8")
    amortisation_years: Annotated[float, F.YEARS] = Field(default=4.0, description="years the capex is repaid over")
    cost_of_capital: Annotated[float, F.RATE_PER_YEAR] = Field(default=0.08, description="interest rate a year, 0.08 = 8%")
    colocation_usd_per_kw_month: Annotated[float | None, F.USD_PER_KW_MONTH] = Field(
        default=None, description="colocation price per kW of IT capacity and month; left out: the catalog's")


class Site(_Strict):
    """A site: a power limit, its PUE, energy price and carbon intensity, what it hosts."""

    name: str = Field(min_length=1, max_length=200)
    limit_mw: Annotated[float, F.SITE_MW] = Field(description="most facility power in any hour, MW")
    pue: Annotated[float | None, F.PUE] = Field(default=None, description="power usage effectiveness; left out: the catalog's")
    energy_usd_per_kwh: float | list[float] | None = Field(
        default=None, description="USD per kWh: one number or 24/168 hourly values; left out: the catalog's")
    carbon_gco2_per_kwh: float | list[float] | None = Field(
        default=None, description="gCO2 per kWh: one number or 24/168 hourly values; left out: the catalog's")
    gpus: list[str] | None = Field(default=None, description="GPU types hosted; left out: every type no other site lists")
    tiers: list[Tier] | None = Field(default=None, description="pricing tiers hosted; left out: every tier")
    owned: dict[str, Owned] = Field(default_factory=dict, description="owned servers per GPU type")

    @field_validator("energy_usd_per_kwh", mode="before")
    @classmethod
    def _energy(cls, v: Any) -> Any:
        return _hourly(v, F.USD_PER_KWH)

    @field_validator("carbon_gco2_per_kwh", mode="before")
    @classmethod
    def _carbon(cls, v: Any) -> Any:
        return _hourly(v, F.GCO2_PER_KWH)

    def hosts_tier(self, tier: str) -> bool:
        """Whether GPUs of this site's types bought in ``tier`` stand on the site."""
        return self.tiers is None or tier in self.tiers


def _mean(v: float | list[float]) -> float:
    return sum(v) / len(v) if isinstance(v, list) else v


def hourly_value(v: float | list[float], hours: int, h: int) -> float:
    """The value of ``v`` (a number or 24/168 hourly values) in hour ``h`` of a ``hours``-hour
    horizon: the number; the hour's value when the lengths agree; the mean of the hours it stands
    for when the list is longer (a week over a day); repeated when shorter (a day over a week)."""
    if not isinstance(v, list):
        return v
    if len(v) == hours:
        return v[h]
    if len(v) > hours:
        same = [v[j] for j in range(len(v)) if j % hours == h]
        return sum(same) / len(same)
    return v[h % len(v)]


@dataclass(frozen=True)
class SiteFigures:
    """A site's figures with the catalog's defaults filled in (each with where it comes from)."""

    site: Site
    pue: float
    energy_usd_per_kwh: float | list[float]
    carbon_gco2_per_kwh: float | list[float]


def figures(site: Site | None, cat: PowerCatalog | None = None) -> SiteFigures | None:
    """``site``'s PUE, energy price and carbon intensity, the catalog's where it gives none."""
    if site is None:
        return None
    d = (cat or power_catalog()).defaults
    return SiteFigures(site, site.pue if site.pue is not None else d.pue,
                       site.energy_usd_per_kwh if site.energy_usd_per_kwh is not None else d.energy_usd_per_kwh,
                       site.carbon_gco2_per_kwh if site.carbon_gco2_per_kwh is not None else d.carbon_gco2_per_kwh)


def site_of(sites: list[Site], gpu: str) -> Site | None:
    """The site hosting GPU type ``gpu``: the one that lists it, else the first that lists no
    types, else None (rented outside any site)."""
    for s in sites:
        if s.gpus is not None and gpu in s.gpus:
            return s
    return next((s for s in sites if s.gpus is None), None)


def full_load_w_per_gpu(gpu: str, cat: PowerCatalog | None = None) -> float | None:
    """IT draw of one GPU of ``gpu`` at full load with its share of the node (None: no figures)."""
    p = (cat or power_catalog()).gpu(gpu)
    if p is None:
        return None
    return it_draw_w_per_gpu(p.idle_power_w, p.busy_power_w, p.server_overhead_w_per_node, p.gpus_per_node, 1.0)


@dataclass(frozen=True)
class OwnedPrice:
    """The all-month price of an owned GPU type, its parts (USD per GPU-hour) and sources."""

    gpu: str
    site: str
    amortised_usd_per_gpu_hour: float  # capex and colocation, energy excluded
    energy_usd_per_gpu_hour: float  # full-load facility energy at the site's mean price
    source: str

    @property
    def usd_per_gpu_hour(self) -> float:
        """What an owned GPU-hour costs in the plan: amortised plus full-load energy."""
        return self.amortised_usd_per_gpu_hour + self.energy_usd_per_gpu_hour


def owned_price(site: Site, gpu: str, entry: Owned, cat: PowerCatalog | None = None) -> OwnedPrice:
    """The owned price of ``gpu`` on ``site`` (see :func:`fleetplan.models.power.owned_usd_per_gpu_hour`);
    ValueError naming the field when a figure is missing."""
    cat = cat or power_catalog()
    where = f"sites[{site.name}].owned.{gpu}"
    server = cat.server(gpu)
    capex = entry.capex_usd_per_server if entry.capex_usd_per_server is not None else (server.capex_usd_per_server if server else None)
    if capex is None:
        raise ValueError(f"{where}.capex_usd_per_server: the power catalog has no sourced server price for {gpu} "
                         f"(it has: {', '.join(s.gpu for s in cat.servers) or 'none'}); give the price you pay")
    n = entry.gpus_per_server or (server.gpus_per_server if server else DEFAULT_GPUS_PER_SERVER)
    full_w = full_load_w_per_gpu(gpu, cat)
    if full_w is None:
        raise ValueError(f"{where}: the power catalog has no draw for {gpu} "
                         f"(it has: {', '.join(g.gpu for g in cat.gpus)})")
    fig = figures(site, cat)
    assert fig is not None
    colo = entry.colocation_usd_per_kw_month if entry.colocation_usd_per_kw_month is not None \
        else cat.defaults.colocation_usd_per_kw_month
    amortised = owned_usd_per_gpu_hour(capex, n, entry.cost_of_capital, entry.amortisation_years, colo, full_w / 1000.0)
    energy = energy_usd_per_gpu_hour(full_w, fig.pue, _mean(fig.energy_usd_per_kwh))
    capex_from = "scenario" if entry.capex_usd_per_server is not None else f"{server.source} (as of {server.as_of})"  # type: ignore[union-attr]
    source = (f"owned on site {site.name}: capex ${capex:,.0f} per {n}-GPU server ({capex_from}) over "
              f"{entry.amortisation_years:g} years at {entry.cost_of_capital:.1%}, colocation ${colo:g}/kW-month, "
              f"energy at full load ${energy:.4f}/GPU-hour")
    return OwnedPrice(gpu, site.name, amortised, energy, source)


def owned_prices(sites: list[Site], cat: PowerCatalog | None = None) -> dict[str, OwnedPrice]:
    """The owned price of every GPU type a site owns, by GPU type."""
    return {g: owned_price(s, g, e, cat) for s in sites for g, e in s.owned.items()}


def carbon_usd_per_gpu_hour(sites: list[Site], gpu: str, usd_per_tco2: float, cat: PowerCatalog | None = None) -> float:
    """The carbon price of one GPU-hour of ``gpu`` at full load: USD per tCO2 x facility kWh x the
    mean carbon intensity of its site (the catalog's PUE and intensity outside any site)."""
    cat = cat or power_catalog()
    full_w = full_load_w_per_gpu(gpu, cat)
    if full_w is None or usd_per_tco2 <= 0:
        return 0.0
    fig = figures(site_of(sites, gpu), cat)
    pue = fig.pue if fig else cat.defaults.pue
    intensity = _mean(fig.carbon_gco2_per_kwh) if fig else cat.defaults.carbon_gco2_per_kwh
    return usd_per_tco2 * tonnes_co2(full_w / 1000.0 * pue, intensity)


def check_sites(sites: list[Site], tiers: list[str]) -> None:
    """One rule per check: names unique, a GPU type on one site only, an owned type listed on (or
    hosted by) its site, owned prices computable, and ``reserved`` in the tiers when anything is
    owned (an owned type is held all month in the reserved tier's place). ValueError names the field."""
    names: set[str] = set()
    listed: dict[str, str] = {}
    for s in sites:
        if s.name in names:
            raise ValueError(f"sites: the name {s.name!r} is used twice")
        names.add(s.name)
        for g in s.gpus or []:
            if g in listed:
                raise ValueError(f"sites[{s.name}].gpus: {g} is already hosted by site {listed[g]}; a GPU type stands on one site")
            listed[g] = s.name
    for s in sites:
        for g in s.owned:
            if site_of(sites, g) is not s:
                raise ValueError(f"sites[{s.name}].owned.{g}: {g} is not hosted by this site; add it to sites[{s.name}].gpus")
            if not s.hosts_tier(Tier.RESERVED):
                raise ValueError(f"sites[{s.name}].tiers: owned {g} servers are held all month on the site; add reserved")
    if any(s.owned for s in sites) and Tier.RESERVED not in tiers:
        owned = ", ".join(g for s in sites for g in s.owned)
        raise ValueError(f"options.tiers: owned {owned} is held all month in the reserved tier's place; "
                         f"add reserved to options.tiers")
    owned_prices(sites)


def site_prices(sites: list[Site], usd_per_tco2: float) -> dict[str, tuple[tuple[str, float, str], ...]]:
    """The GPU-hour prices sites set, by GPU type: ``("reserved", USD, source)`` for an owned type
    (its all-month price) and ``("carbon", USD, source)`` added to every tier under a carbon price."""
    cat = power_catalog()
    out: dict[str, list[tuple[str, float, str]]] = {}
    for g, p in owned_prices(sites, cat).items():
        out.setdefault(g, []).append((Tier.RESERVED.value, p.usd_per_gpu_hour, p.source))
    if usd_per_tco2 > 0:
        for gp in cat.gpus:
            usd = carbon_usd_per_gpu_hour(sites, gp.gpu, usd_per_tco2, cat)
            out.setdefault(gp.gpu, []).append(
                ("carbon", usd, f"carbon at ${usd_per_tco2:g}/tCO2, full load (options.carbon_usd_per_tco2)"))
    return {g: tuple(v) for g, v in sorted(out.items())}


def with_site_prices(tiers: list[tuple[str, float]], sources: list[tuple[str, str]], usd: float,
                     adjust: tuple[tuple[str, float, str], ...]) -> tuple[list[tuple[str, float]], list[tuple[str, str]], float]:
    """A GPU's tier prices and sources with ``adjust`` (see :func:`site_prices`) applied: an owned
    price replaces the reserved one, a carbon price is added to every tier and the plain price."""
    price, source = dict(tiers), dict(sources)
    for tier, value, why in adjust:
        if tier == Tier.RESERVED.value:
            price[tier], source[tier] = value, why
    for tier, value, why in adjust:
        if tier == "carbon":
            price = {t: v + value for t, v in price.items()}
            source = {t: f"{s} + {why}" for t, s in source.items()}
            usd += value
    return list(price.items()), list(source.items()), usd

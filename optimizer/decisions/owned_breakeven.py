"""Owned against rented, as a GPU's utilisation grows: the monthly cost of one GPU owned on a
site (amortised capex and colocation every hour, energy at the hour's load) against the same GPU
rented on demand (paid only in the hours it is used) and reserved (paid every hour), and the
utilisation above which owning costs less than each.

With u the share of the month's hours a GPU is busy, per GPU and month (730 hours):

    owned(u)     = 730 x (amortised + PUE x (P_idle + overhead + (P_busy - P_idle) x u) / 1000 x USD per kWh)
    on_demand(u) = 730 x on-demand USD per GPU-hour x u
    reserved     = 730 x reserved USD per GPU-hour

Owns the curves only; prices come from :func:`fleetplan.optimizer.problem_data.candidates.resolve_gpu_price` without the sites'
prices (the rented ones) and from :mod:`fleetplan.optimizer.traffic.sites` (the owned one). Prints and draws nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetplan.catalogs.loader import Catalog
from fleetplan.catalogs.power import power_catalog
from fleetplan.models.power import HOURS_PER_MONTH, energy_usd_per_gpu_hour, it_draw_w_per_gpu
from fleetplan.optimizer.problem_data.candidates import resolve_gpu_price
from fleetplan.optimizer.common.enums import Tier
from fleetplan.optimizer.traffic.scenario import Scenario
from fleetplan.optimizer.traffic.sites import figures, owned_prices

UTILISATIONS: tuple[float, ...] = tuple(i / 20 for i in range(21))  # 0, 5%, ..., 100%


@dataclass(frozen=True)
class OwnedCurve:
    """One owned GPU type: USD per GPU-month owned, on demand and reserved at each utilisation,
    and the utilisations above which owning costs less (None: never within 0-100%)."""

    gpu: str
    site: str
    utilisation: tuple[float, ...]
    owned_usd: tuple[float, ...]
    on_demand_usd: tuple[float, ...]
    reserved_usd: float
    owned_beats_on_demand_above: float | None
    owned_beats_reserved_above: float | None

    def as_dict(self) -> dict[str, Any]:
        """The curve as JSON (dollars to cents, utilisations to 4 digits)."""
        return {"gpu": self.gpu, "site": self.site, "utilisation": list(self.utilisation),
                "owned_usd_per_gpu_month": [round(x, 2) for x in self.owned_usd],
                "on_demand_usd_per_gpu_month": [round(x, 2) for x in self.on_demand_usd],
                "reserved_usd_per_gpu_month": round(self.reserved_usd, 2),
                "owned_beats_on_demand_above": _r(self.owned_beats_on_demand_above),
                "owned_beats_reserved_above": _r(self.owned_beats_reserved_above)}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _crossing(fixed: float, slope: float, rent_fixed: float, rent_slope: float) -> float | None:
    """The least u in [0, 1] with fixed + slope u <= rent_fixed + rent_slope u (None: none)."""
    if fixed <= rent_fixed:
        return 0.0
    if rent_slope <= slope:
        return None
    u = (fixed - rent_fixed) / (rent_slope - slope)
    return u if u <= 1.0 else None


def owned_curves(scenario: Scenario, catalog: Catalog) -> tuple[OwnedCurve, ...]:
    """The owned-versus-rented curve of every GPU type a site of ``scenario`` owns."""
    cat = power_catalog()
    rented = scenario.options.model_copy()
    rented._site_prices = {}  # the catalog's (or the scenario's) rented prices, without the sites'
    out = []
    for gpu, price in owned_prices(scenario.sites, cat).items():
        site = next(s for s in scenario.sites if gpu in s.owned)
        fig = figures(site, cat)
        rent = resolve_gpu_price(catalog, rented, gpu)
        p = cat.gpu(gpu)
        if rent is None or p is None or fig is None:
            continue
        mean_usd = (sum(fig.energy_usd_per_kwh) / len(fig.energy_usd_per_kwh)
                    if isinstance(fig.energy_usd_per_kwh, list) else fig.energy_usd_per_kwh)
        idle = energy_usd_per_gpu_hour(
            it_draw_w_per_gpu(p.idle_power_w, p.busy_power_w, p.server_overhead_w_per_node, p.gpus_per_node, 0.0),
            fig.pue, mean_usd)
        busy = energy_usd_per_gpu_hour(
            it_draw_w_per_gpu(p.idle_power_w, p.busy_power_w, p.server_overhead_w_per_node, p.gpus_per_node, 1.0),
            fig.pue, mean_usd)
        fixed, slope = HOURS_PER_MONTH * (price.amortised_usd_per_gpu_hour + idle), HOURS_PER_MONTH * (busy - idle)
        on_demand, reserved = HOURS_PER_MONTH * rent.tier(Tier.ON_DEMAND), HOURS_PER_MONTH * rent.tier(Tier.RESERVED)
        out.append(OwnedCurve(
            gpu, site.name, UTILISATIONS, tuple(fixed + slope * u for u in UTILISATIONS),
            tuple(on_demand * u for u in UTILISATIONS), reserved,
            _crossing(fixed, slope, 0.0, on_demand), _crossing(fixed, slope, reserved, 0.0)))
    return tuple(out)

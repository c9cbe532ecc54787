"""The power, energy and carbon a plan reports, overall, per product and per site.

The report (:func:`power_report`) measures the plan at its load: each GPU draws
P_idle + (P_busy - P_idle) x u in the hour (:mod:`fleetplan.models.power`), u the share of the
hour's usable capacity its replicas use; the MIP row that holds a site's limit at full load is
in :mod:`fleetplan.optimizer.mip.formulation`. Never changes a plan it reads, prints nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetplan.catalogs.power import PowerCatalog, power_catalog
from fleetplan.models.power import it_draw_w_per_gpu, tokens_per_joule, tonnes_co2
from fleetplan.optimizer.traffic.sites import Site, figures, full_load_w_per_gpu, hourly_value, owned_prices, site_of

if TYPE_CHECKING:
    from fleetplan.optimizer.mip.solution import Fleet, Plan, ProductPlan
    from fleetplan.optimizer.traffic.scenario import Scenario


def _utilisation(pp: ProductPlan, f: Fleet, h: int, pool: bool) -> float:
    """Share of the hour's usable capacity the fleet's replicas use (0 with no replica)."""
    n = f.in_hour(h)
    if n == 0 or f.part is None:
        return 0.0
    if pool:
        return pp.prefill_flops_per_s(h) / (n * f.part.usable_flops_per_s)  # type: ignore[union-attr]
    if pp.mix is not None:
        return pp.mix.consumed(f.part.key, h) / n
    return pp.served_tokens_per_s()[h] / (n * f.part.usable_tokens_per_s)  # type: ignore[union-attr]


@dataclass
class _Hourly:
    """IT watts per hour, by site (None: outside any site), and tokens/s per hour."""

    it_w: dict[str | None, list[float]]
    tokens_per_s: list[float]


def _product_hours(pp: ProductPlan, sites: list[Site], hours: int, cat: PowerCatalog) -> _Hourly:
    """The IT draw of one product's replicas per site and hour, at the hour's load."""
    it: dict[str | None, list[float]] = {}
    for f, pool in [(f, False) for f in pp.fleets] + [(pp.prefill_pool, True)]:
        if f.part is None:
            continue
        p = cat.gpu(f.part.gpu)
        if p is None:
            continue
        site = site_of(sites, f.part.gpu)
        for h in range(hours):
            u = _utilisation(pp, f, h, pool)
            w = it_draw_w_per_gpu(p.idle_power_w, p.busy_power_w, p.server_overhead_w_per_node, p.gpus_per_node, u)
            for tier, n in f.by_tier(h).items():
                where = site.name if site is not None and site.hosts_tier(tier) else None
                it.setdefault(where, [0.0] * hours)[h] += n * f.part.gpus_per_replica * w
    return _Hourly(it, pp.served_tokens_per_s())


def _block(hourly: list[_Hourly], sites: list[Site], hours: int, hour_weight: float, cat: PowerCatalog) -> dict[str, Any]:
    """The ``power`` block of a plan or a product from its hourly draws."""
    by_site = {s.name: s for s in sites}
    it_h, fac_h = [0.0] * hours, [0.0] * hours
    kwh = tco2 = tokens = 0.0
    for x in hourly:
        for where, row in x.it_w.items():
            fig = figures(by_site.get(where) if where else None, cat)
            pue = fig.pue if fig else cat.defaults.pue
            for h, w in enumerate(row):
                intensity = hourly_value(fig.carbon_gco2_per_kwh, hours, h) if fig else cat.defaults.carbon_gco2_per_kwh
                it_h[h] += w
                fac_h[h] += w * pue
                e = w * pue / 1000.0 * hour_weight
                kwh += e
                tco2 += tonnes_co2(e, intensity)
        tokens += sum(x.tokens_per_s) * 3600.0 * hour_weight
    it_j = sum(it_h) * 3600.0 * hour_weight
    return {"it_kw_peak": round(max(it_h, default=0.0) / 1000.0, 3),
            "facility_kw_peak": round(max(fac_h, default=0.0) / 1000.0, 3),
            "energy_mwh_per_month": round(kwh / 1000.0, 3),
            "tokens_per_joule": round(tokens_per_joule(tokens, it_j), 4),
            "tco2_per_month": round(tco2, 3)}


def power_report(plan: Plan, cat: PowerCatalog | None = None) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The plan's ``power`` block and each product's, by product name (see the module docstring:
    IT power at the hour's load, facility power with the site's PUE or the catalog's, energy per
    month, output tokens per joule of IT energy, tonnes of CO2 per month)."""
    cat = cat or power_catalog()
    sites = plan.scenario.sites
    hours, weight = plan.hours, plan.problem.hour_weight
    each = {pp.product.name: _product_hours(pp, sites, hours, cat) for pp in plan.products}
    per_product = {n: _block([x], sites, hours, weight, cat) for n, x in each.items()}
    return _block(list(each.values()), sites, hours, weight, cat), per_product


def site_mw_by_hour(plan: Plan, site: Site, cat: PowerCatalog | None = None) -> list[float]:
    """Facility MW the plan's GPUs on ``site`` hold in each hour at full load (the quantity the
    MIP row bounds)."""
    cat = cat or power_catalog()
    fig = figures(site, cat)
    assert fig is not None
    out = [0.0] * plan.hours
    for pp in plan.products:
        for f in list(pp.fleets) + [pp.prefill_pool]:
            if f.part is None or site_of(plan.scenario.sites, f.part.gpu) is not site:
                continue
            w = full_load_w_per_gpu(f.part.gpu, cat) or 0.0
            for h in range(plan.hours):
                n = sum(k for t, k in f.by_tier(h).items() if site.hosts_tier(t))
                out[h] += n * f.part.gpus_per_replica * w * fig.pue / 1e6
    return out


def smallest_step_mw(plan: Plan, site: Site, cat: PowerCatalog | None = None) -> float:
    """Facility MW of the smallest replica the plan runs on ``site`` at full load (0: none)."""
    cat = cat or power_catalog()
    fig = figures(site, cat)
    assert fig is not None
    steps = [f.part.gpus_per_replica * (full_load_w_per_gpu(f.part.gpu, cat) or 0.0) * fig.pue / 1e6
             for pp in plan.products for f in list(pp.fleets) + [pp.prefill_pool]
             if f.part is not None and site_of(plan.scenario.sites, f.part.gpu) is site]
    return min(steps, default=0.0)


def site_tiers(scenario: Scenario, tiers: list[str]) -> list[str]:
    """The plan's pricing tiers with ``owned`` after them when a site owns hardware (owned GPU
    types are held all month in the reserved tier's place)."""
    return tiers + ["owned"] if any(s.owned for s in scenario.sites) else tiers


def sites_report(plan: Plan, cat: PowerCatalog | None = None) -> list[dict[str, Any]]:
    """Per site: its limit, the peak facility MW the plan holds and the hours a month at the limit
    (hours in which the plan's smallest replica on the site would not fit in what is left), and
    each owned GPU type's amortised and energy USD per GPU-hour."""
    out = []
    prices = owned_prices(plan.scenario.sites, cat)
    for s in plan.scenario.sites:
        row = site_mw_by_hour(plan, s, cat)
        step = smallest_step_mw(plan, s, cat)
        weight = plan.problem.hour_weight
        at = sum(weight for mw in row if step > 0 and mw + step > s.limit_mw + 1e-9)
        owned = [{"gpu": g, "amortised_usd_per_gpu_hour": round(prices[g].amortised_usd_per_gpu_hour, 6),
                  "energy_usd_per_gpu_hour": round(prices[g].energy_usd_per_gpu_hour, 6),
                  "usd_per_gpu_hour": round(prices[g].usd_per_gpu_hour, 6), "source": prices[g].source}
                 for g in sorted(s.owned)]
        out.append({"name": s.name, "limit_mw": s.limit_mw, "peak_mw": round(max(row, default=0.0), 4),
                    "hours_at_limit": round(at, 2), "owned": owned})
    return out

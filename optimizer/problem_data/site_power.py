"""Sites in the MIP and in the plan: the power limit of each site, hour by hour, and the power,
energy and carbon a plan reports.

The MIP row (:func:`define_site_power`), shared by every product on the site as GPU availability
is: in every hour h, the facility power of the GPUs standing on site s stays within its limit,

    PUE_s x sum_{g on s, t hosted by s} P_full[g] x GPUs[g,t,h] <= limit_s      (MW)

with P_full[g] the full-load IT draw of one GPU with its share of the node (busy power plus
node overhead / GPUs per node): a running replica may take its full load at any moment of the
hour, so the site holds it. The report (:func:`power_report`) measures the plan at its load:
each GPU draws P_idle + (P_busy - P_idle) x u in the hour (:mod:`fleetplan.models.power`).

Owns the site rows and the report; never changes a plan it reads, prints nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetplan.catalogs.power import PowerCatalog, power_catalog
from fleetplan.models.power import it_draw_w_per_gpu, tokens_per_joule, tonnes_co2
from fleetplan.optimizer.traffic.scenario import ScenarioError
from fleetplan.optimizer.traffic.sites import POWER_STEP_W, SITE_LIMIT, Site, figures, full_load_w_per_gpu, hourly_value, owned_prices, site_of
from pyomo.core import Constraint

if TYPE_CHECKING:
    from pyomo.core import ConcreteModel

    from fleetplan.optimizer.problem_data.problem import FleetProblem
    from fleetplan.optimizer.traffic.scenario import Scenario
    from fleetplan.optimizer.mip.solution import Fleet, Plan, ProductPlan


@dataclass(frozen=True)
class SiteRow:
    """What the MIP needs of a site: its limit (MW), PUE, the full-load facility MW of one GPU of
    each type it hosts, and the tiers it hosts (None: all)."""

    name: str
    limit_mw: float
    mw_per_gpu: tuple[tuple[str, float], ...]
    tiers: tuple[str, ...] | None

    def hosts(self, tier: str) -> bool:
        """Whether GPUs bought in ``tier`` stand on the site."""
        return self.tiers is None or tier in self.tiers


def site_rows(scenario: Scenario, gpu_ids: list[str], cat: PowerCatalog | None = None) -> tuple[SiteRow, ...]:
    """One :class:`SiteRow` per site of ``scenario`` over the GPU types ``gpu_ids`` it hosts;
    :class:`ScenarioError` naming the site when a hosted type has no power figures."""
    cat = cat or power_catalog()
    rows = []
    for s in scenario.sites:
        fig = figures(s, cat)
        assert fig is not None
        per_gpu = []
        for g in gpu_ids:
            if site_of(scenario.sites, g) is not s:
                continue
            w = full_load_w_per_gpu(g, cat)
            if w is None:
                raise ScenarioError(f"sites[{s.name}].gpus: the power catalog has no draw for {g} (it has "
                                    f"{', '.join(p.gpu for p in cat.gpus)}); list the site's GPU types")
            per_gpu.append((g, fig.pue * w / 1e6))
        rows.append(SiteRow(s.name, s.limit_mw, tuple(per_gpu), tuple(s.tiers) if s.tiers is not None else None))
    return tuple(rows)


def site_mw_expression(m: ConcreteModel, prob: FleetProblem, row: SiteRow, h: int, types: set[str]) -> Any:
    """Expression: the facility MW the GPUs on the site of ``row`` hold in hour ``h`` at full load."""
    from fleetplan.optimizer.mip.formulation import gpus_in_tier  # the formulation imports this module

    return sum(mw * gpus_in_tier(m, prob, g, t, h) for g, mw in row.mw_per_gpu if g in types
               for t in prob.tiers if row.hosts(t))


def define_site_power(m: ConcreteModel, prob: FleetProblem) -> None:
    """In every hour, the facility power of each site's GPUs at full load stays within its limit
    (MW): PUE x sum_{g,t on the site} P_full[g] x GPUs[g,t,h] <= limit (see the module docstring)."""
    from fleetplan.optimizer.mip.formulation import _gpu_types

    types = set(_gpu_types(prob))
    rows = [r for r in prob.site_power if any(g in types for g, _ in r.mw_per_gpu)]
    if not rows:
        return
    by_name = {r.name: r for r in rows}
    m.site_power = Constraint(
        [(r.name, h) for r in rows for h in range(prob.hours)],
        rule=lambda m, s, h: site_mw_expression(m, prob, by_name[s], h, types) <= by_name[s].limit_mw)


# ---- the report


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



def site_relaxations(plan: Plan, scenario: Scenario) -> list[Any]:
    """Each site whose limit binds the plan (some hour leaves less than its smallest replica's
    full-load draw free), raised by one MW (:data:`fleetplan.optimizer.traffic.sites.POWER_STEP_W`): the relaxations
    :mod:`fleetplan.optimizer.explanation.binding` values by planning again."""
    from fleetplan.optimizer.explanation.binding import Relaxation  # binding reads plans, which import this module

    out = []
    step = POWER_STEP_W / 1e6
    for i, s in enumerate(scenario.sites):
        row, least = site_mw_by_hour(plan, s), smallest_step_mw(plan, s)
        if least <= 0 or all(mw + least <= s.limit_mw + 1e-9 for mw in row):
            continue
        sites = list(scenario.sites)
        sites[i] = s.model_copy(update={"limit_mw": s.limit_mw + step})
        out.append(Relaxation(f"{SITE_LIMIT}{s.name}", step, s.limit_mw + step,
                              scenario.model_copy(update={"sites": sites}), "", None, "MW"))
    return out

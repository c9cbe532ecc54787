"""Sites as the MIP needs them: each site's power limit and the full-load facility MW of one GPU
of each type it hosts, and the tiers it hosts.

The MIP row built from them (:func:`fleetplan.optimizer.mip.formulation.define_site_power`), shared
by every product on the site as GPU availability is: in every hour h, the facility power of the GPUs
standing on site s stays within its limit,

    PUE_s x sum_{g on s, t hosted by s} P_full[g] x GPUs[g,t,h] <= limit_s      (MW)

with P_full[g] the full-load IT draw of one GPU with its share of the node (busy power plus
node overhead / GPUs per node): a running replica may take its full load at any moment of the
hour, so the site holds it. The plan's power at its load is reported by
:mod:`fleetplan.optimizer.explanation.power`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetplan.catalogs.power import PowerCatalog, power_catalog
from fleetplan.optimizer.traffic.scenario import ScenarioError
from fleetplan.optimizer.traffic.sites import figures, full_load_w_per_gpu, site_of

if TYPE_CHECKING:
    from fleetplan.optimizer.traffic.scenario import Scenario


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

"""Build vs buy as volume scales: all-API, self-host only and the optimal blend, with crossovers.

Owns the costs of the three strategies at each multiple of a scenario's demand, the choice of
the cheapest one per scale (:attr:`BreakevenPoint.cheapest`) and the crossover scales, as a
typed :class:`BreakevenResult`, and the plot of the curves. It prints nothing: the table and
the progress lines are the command line's (:mod:`fleetplan.rendering.tables`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.loader import Catalog, InputError
from fleetplan.models.presets import Preset, get_preset
from fleetplan.optimizer.problem_data.api import resolve_api
from fleetplan.optimizer.runtime.deadline import DEFAULT_TIME_LIMIT_S, Deadline, DeadlinePassed
from fleetplan.optimizer.traffic.demand import hourly_qps
from fleetplan.optimizer.common.errors import InfeasibleError, SolverError
from fleetplan.optimizer.decisions.owned_breakeven import OwnedCurve, owned_curves
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.problem_data.problem import SECONDS_PER_HOUR
from fleetplan.optimizer.traffic.scenario import Scenario
from fleetplan.optimizer.mip.solvers import Solver
from fleetplan.catalogs.files import write_atomically
import io

DEFAULT_SCALES: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


# The three strategies, as named in the table. The cheapest is chosen on costs rounded to
# cents, as the JSON shows them; on a tie the earlier strategy here is named.
ALL_API = "all API"
BLEND = "blend"
SELF_HOST = "self-host"
STRATEGIES: tuple[str, ...] = (ALL_API, BLEND, SELF_HOST)
# The file types the curves can be written as (by the output file's extension).
PLOT_SUFFIXES: tuple[str, ...] = (".png", ".svg")


def _cents(usd: float | None) -> float | None:
    """``usd`` rounded to cents, as the JSON shows it (None stays None)."""
    return None if usd is None else round(usd, 2)


@dataclass(frozen=True)
class BreakevenPoint:
    """Monthly cost of the three strategies at one multiple of the scenario's demand.

    ``self_host_usd`` or ``blend_usd`` is None when no plan of that strategy exists (infeasible,
    or stopped by the time limit before a plan was found); ``proven_optimal`` is false when a
    plan of this scale stopped at the time limit with the best found.
    """

    scale: float
    all_api_usd: float
    self_host_usd: float | None
    blend_usd: float | None
    proven_optimal: bool = True

    def costs_usd(self) -> dict[str, float | None]:
        """Each strategy's monthly cost in USD, rounded to cents, in :data:`STRATEGIES` order."""
        costs = {ALL_API: self.all_api_usd, BLEND: self.blend_usd, SELF_HOST: self.self_host_usd}
        return {name: _cents(costs[name]) for name in STRATEGIES}

    @property
    def cheapest(self) -> str:
        """The strategy with the lowest cost at this scale (all-API always has one)."""
        return min((cost, name) for name, cost in self.costs_usd().items() if cost is not None)[1]

    def as_dict(self) -> dict[str, Any]:
        """The point as a JSON row: costs in USD rounded to cents."""
        return {"scale": self.scale, "all_api_usd": _cents(self.all_api_usd), "self_host_usd": _cents(self.self_host_usd),
                "blend_usd": _cents(self.blend_usd), "proven_optimal": self.proven_optimal}


@dataclass(frozen=True)
class BreakevenResult:
    """The points computed (in the order of the scales asked for), what the deadline stopped
    and the scales at which self-hosting and the blend first cost less than all-API."""

    points: tuple[BreakevenPoint, ...]
    stopped: tuple[str, ...]
    owned: tuple[OwnedCurve, ...] = ()  # owned against rented per owned GPU type (sites only)

    @property
    def self_host_beats_api_at_scale(self) -> float | None:
        """The smallest scale where self-hosting alone costs less than all-API (None: none tried)."""
        return _crossing(list(self.points), "self_host_usd")

    @property
    def blend_beats_api_at_scale(self) -> float | None:
        """The smallest scale where the blend costs less than all-API (None: none tried)."""
        return _crossing(list(self.points), "blend_usd")

    def as_dict(self) -> dict[str, Any]:
        """The result as the ``breakeven --json`` document."""
        out: dict[str, Any] = {
            "scales": [p.scale for p in self.points],
            "points": [p.as_dict() for p in self.points],
            "stopped": list(self.stopped),
            "crossovers": {
                "self_host_beats_api_at_scale": self.self_host_beats_api_at_scale,
                "blend_beats_api_at_scale": self.blend_beats_api_at_scale,
            },
        }
        if self.owned:
            out["owned_vs_rented"] = [c.as_dict() for c in self.owned]
        return out


def scaled(scenario: Scenario, factor: float) -> Scenario:
    """The scenario with every product's ``peak_qps`` multiplied by ``factor`` (its hourly demand is
    :func:`scaled_demand`)."""
    raw = scenario.model_dump(mode="python")
    for p in raw["products"]:
        p["peak_qps"] = p["peak_qps"] * factor
        if not F.QPS.contains(p["peak_qps"]):
            raise InputError(f"`scales`: scale {factor:g} takes products[{p['name']}].peak_qps to {p['peak_qps']:g}; "
                             f"it must be {F.QPS.describe()} ({F.QPS.reason})", parameters=("scales",))
    return Scenario.model_validate(raw)


def scaled_demand(demand: dict[str, list[float]], factor: float) -> dict[str, list[float]]:
    """Every product's hourly queries per second multiplied by ``factor`` (whatever kind of
    profile it came from: multiples of ``peak_qps`` or absolute queries per second)."""
    return {name: [q * factor for q in qps] for name, qps in demand.items()}


def check_scales(scenario: Scenario, demand: dict[str, list[float]], scales: tuple[float, ...]) -> None:
    """Refuse, before any solve, a scale that takes a product's demand out of its valid range
    (its peak or, with a demand profile, its busiest hour)."""
    for s in scales:
        scaled(scenario, s)  # every peak_qps in range
        for name, qps in scaled_demand(demand, s).items():
            if not F.QPS.contains(max(qps)):
                raise InputError(f"`scales`: at scale {s:g}, products[{name}]: the busiest hour reaches {max(qps):g} "
                                 f"queries per second; it must be {F.QPS.describe()} ({F.QPS.reason})",
                                 parameters=("scales",))


def all_api_cost(scenario: Scenario, catalog: Catalog, qps: dict[str, list[float]], preset: Preset) -> float:
    """Monthly cost of sending every product's tokens (``qps``: queries per second hour by hour)
    to its API (fixed self-hosting costs avoided)."""
    total = 0.0
    for p in scenario.products:
        offer = resolve_api(p, catalog)
        if offer is None:
            raise InputError(f"products[{p.name}].api: breakeven needs an API for every product (add api: {{model: {p.model}}})")
        hours = qps[p.name]
        tokens = sum(q * p.output_tokens for q in hours) * SECONDS_PER_HOUR * preset.hours_per_month / len(hours)
        total += tokens * offer.usd_per_output_token
    return total


def breakeven(
    scenario: Scenario, catalog: Catalog, folder: Path, scales: tuple[float, ...] = DEFAULT_SCALES, solver: Solver = "highs",
    deadline: Deadline | None = None, on_point: Callable[[BreakevenPoint], None] | None = None,
) -> BreakevenResult:
    """Costs of all-API, self-host only and the blend at each scale, and the crossover volumes.

    All scales share one ``deadline`` (by default ``options.time_limit_s`` or
    :data:`DEFAULT_TIME_LIMIT_S` from now): each scale gets an equal share of what is left, its
    plans stop at their share with the best found (``proven_optimal`` false), and scales not
    reached are left out (``stopped`` says so). ``on_point`` is called with each scale's point as
    it finishes."""
    preset = get_preset(scenario.preset)
    if deadline is None:
        deadline = Deadline.after(scenario.options.time_limit_s or DEFAULT_TIME_LIMIT_S)
    demand = hourly_qps(scenario.products, folder)  # profiles read once for every scale
    check_scales(scenario, demand, scales)
    points: list[BreakevenPoint] = []
    for i, s in enumerate(scales):
        if deadline.expired:
            deadline.note(f"scales from {s:g} on")
            break
        share = deadline.share(1.0 / (len(scales) - i))
        sc, qps = scaled(scenario, s), scaled_demand(demand, s)
        points.append(_point(sc, catalog, folder, solver, s, all_api_cost(sc, catalog, qps, preset), share, qps))
        if on_point is not None:
            on_point(points[-1])
    return BreakevenResult(tuple(points), tuple(deadline.stopped), owned_curves(scenario, catalog))


def _point(scenario: Scenario, catalog: Catalog, folder: Path, solver: Solver, scale: float, all_api_usd: float,
           share: Deadline, demand: dict[str, list[float]]) -> BreakevenPoint:
    """Plan ``scenario`` and its ``demand`` (both already scaled) self-hosted only, in half of
    ``share``, then with the API, in what is left of it; a strategy without a plan (infeasible,
    solver error, no configuration found before the deadline) costs None."""
    proven = True
    costs: list[float | None] = []
    for with_api, part in ((False, share.share(0.5)), (True, share)):
        try:
            plan = make_plan(scenario, catalog, solver, alternatives=False, folder=folder, with_api=with_api,
                             compare_first_come=False, deadline=part, demand=demand)
            costs.append(plan.monthly_cost_usd)
            proven = proven and plan.solve_result.optimal
        except (InfeasibleError, SolverError, DeadlinePassed):
            costs.append(None)
    return BreakevenPoint(scale, all_api_usd, costs[0], costs[1], proven)


def _crossing(points: list[BreakevenPoint], field: str) -> float | None:
    """Smallest scale where ``field`` drops below all-API, interpolated in log-scale between grid points."""
    prev = None
    for p in points:
        v = getattr(p, field)
        if v is None:
            prev = None
            continue
        diff = v - p.all_api_usd
        if diff < -1e-6:
            if prev is None:
                return p.scale if p is points[0] else p.scale
            s0, d0 = prev
            if d0 <= 0:
                return s0
            t = d0 / (d0 - diff)
            return round(math.exp(math.log(s0) + t * (math.log(p.scale) - math.log(s0))), 4)
        prev = (p.scale, diff)
    return None


def plot(result: BreakevenResult, path: Path, title: str) -> None:
    """Write the three cost curves (:func:`plot_bytes`) to ``path``, a PNG or SVG file by its
    extension (:data:`PLOT_SUFFIXES`), atomically: the one write of this module, asked for by path."""
    write_atomically(path, plot_bytes(result, title, path.suffix.lower().lstrip(".") or "png"))


def plot_bytes(result: BreakevenResult, title: str, fmt: str = "png") -> bytes:
    """The three cost curves (costs rounded to cents, as in the JSON) as a ``fmt`` image (``png``
    or ``svg``). Drawn on a :class:`matplotlib.figure.Figure` of its own: no pyplot, so neither
    matplotlib's backend nor its list of open figures changes (a notebook keeps its own)."""
    from matplotlib.figure import Figure

    pts = [p.as_dict() for p in result.points]
    xs = [p["scale"] for p in pts]
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    ax.plot(xs, [p["all_api_usd"] for p in pts], marker="o", label="all API")
    ax.plot(xs, [p["self_host_usd"] if p["self_host_usd"] is not None else float("nan") for p in pts], marker="s",
            label="self-host only")
    ax.plot(xs, [p["blend_usd"] if p["blend_usd"] is not None else float("nan") for p in pts], marker="^",
            label="optimal blend")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("demand (multiple of the scenario)")
    ax.set_ylabel("USD per month")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt)
    return buf.getvalue()

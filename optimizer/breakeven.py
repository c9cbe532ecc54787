"""Build vs buy as volume scales: all-API, self-host only and the optimal blend, with crossovers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.loader import Catalog, InputError
from fleetplan.models.presets import Preset, get_preset
from fleetplan.optimizer.api import resolve_api
from fleetplan.optimizer.demand import hourly_qps
from fleetplan.optimizer.problem import SECONDS_PER_HOUR
from fleetplan.optimizer.deadline import DEFAULT_TIME_LIMIT_S, Deadline
from fleetplan.optimizer.errors import InfeasibleError, SolverError
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.scenario import Scenario

DEFAULT_SCALES: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


@dataclass(frozen=True)
class BreakevenPoint:
    """Monthly cost of the three strategies at one multiple of the scenario's demand."""

    scale: float
    all_api_usd: float
    self_host_usd: float | None
    blend_usd: float | None


def scaled(scenario: Scenario, factor: float) -> Scenario:
    """The scenario with every product's QPS multiplied by ``factor`` (profiles scale with it)."""
    raw = scenario.model_dump(mode="python")
    for p in raw["products"]:
        p["peak_qps"] = p["peak_qps"] * factor
        if not F.QPS.contains(p["peak_qps"]):
            raise InputError(f"--scales: scale {factor:g} takes products[{p['name']}].peak_qps to {p['peak_qps']:g}; "
                             f"it must be {F.QPS.describe()} ({F.QPS.reason})")
    return Scenario.model_validate(raw)


def check_scales(scenario: Scenario, folder: Path, scales: tuple[float, ...]) -> None:
    """Refuse, before any solve, a scale that takes a product's demand out of its valid range
    (its peak or, with a demand profile, its busiest hour)."""
    for s in scales:
        try:
            hourly_qps(scaled(scenario, s).products, folder)
        except InputError as exc:
            raise InputError(f"--scales: at scale {s:g}, {exc}") from None


def all_api_cost(scenario: Scenario, catalog: Catalog, folder: Path, preset: Preset) -> float:
    """Monthly cost of sending every product's tokens to its API (fixed self-hosting costs avoided)."""
    qps = hourly_qps(scenario.products, folder)
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
    scenario: Scenario, catalog: Catalog, folder: Path, scales: tuple[float, ...] = DEFAULT_SCALES, solver: str = "highs",
    deadline: Deadline | None = None, on_point: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Costs of all-API, self-host only and the blend at each scale, and the crossover volumes.

    All scales share one ``deadline`` (by default ``options.time_limit_s`` or
    :data:`DEFAULT_TIME_LIMIT_S` from now): each scale gets an equal share of what is left, its
    plans stop at their share with the best found (``proven_optimal`` false), and scales not
    reached are left out (``stopped`` says so). ``on_point`` is called with each scale's row as it
    finishes."""
    preset = get_preset(scenario.preset)
    if deadline is None:
        deadline = Deadline.after(scenario.options.time_limit_s or DEFAULT_TIME_LIMIT_S)
    check_scales(scenario, folder, scales)
    points: list[BreakevenPoint] = []
    rows: list[dict[str, Any]] = []
    for i, s in enumerate(scales):
        if deadline.expired:
            deadline.note(f"scales from {s:g} on")
            break
        share = deadline.share(1.0 / (len(scales) - i))
        sc = scaled(scenario, s)
        api = all_api_cost(sc, catalog, folder, preset)
        proven = True
        costs: list[float | None] = []
        for with_api, part in ((False, share.share(0.5)), (True, share)):
            try:
                plan = make_plan(sc, catalog, solver, alternatives=False, folder=folder, with_api=with_api,
                                 compare_first_come=False, deadline=part)
                costs.append(plan.monthly_cost_usd)
                proven = proven and plan.solve_result.optimal
            except (InfeasibleError, SolverError):
                costs.append(None)
        points.append(BreakevenPoint(s, api, costs[0], costs[1]))
        p = points[-1]
        rows.append({"scale": p.scale, "all_api_usd": round(p.all_api_usd, 2),
                     "self_host_usd": None if p.self_host_usd is None else round(p.self_host_usd, 2),
                     "blend_usd": None if p.blend_usd is None else round(p.blend_usd, 2),
                     "proven_optimal": proven})
        if on_point is not None:
            on_point(rows[-1])
    return {
        "scales": [p.scale for p in points],
        "points": rows,
        "stopped": list(deadline.stopped),
        "crossovers": {
            "self_host_beats_api_at_scale": _crossing(points, "self_host_usd"),
            "blend_beats_api_at_scale": _crossing(points, "blend_usd"),
        },
    }


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


def plot(result: dict[str, Any], path: Path, title: str) -> None:
    """Write the three cost curves to ``path`` (PNG or SVG, by extension), atomically."""
    import io

    from fleetplan.catalogs.files import write_atomically

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = result["points"]
    xs = [p["scale"] for p in pts]
    fig, ax = plt.subplots(figsize=(7, 4.5))
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
    fig.savefig(buf, format=path.suffix.lower().lstrip(".") or "png")
    plt.close(fig)
    write_atomically(path, buf.getvalue())

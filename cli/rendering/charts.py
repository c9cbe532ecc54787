"""Charts of a plan as inline SVG (matplotlib), for the HTML report.

Owns the pictures only: every number drawn is read from the plan JSON (or the tornado rows)
it is given; nothing is computed that the plan does not hold. Text stays text in the SVG (no
embedded font files), ids and hashes are fixed and the file carries no date, so the same plan
draws the same bytes. Every label from the plan (product names, GPU ids, tornado inputs) is
drawn as written (:func:`fleetplan.rendering.escape.chart_text`: no mathtext, no control characters)."""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from fleetplan.rendering.escape import chart_text

# Tier colours, in stacking order (bottom first), and the demand line's.
TIER_COLOURS = {"reserved": "#1b6ca8", "on_demand": "#5fa8d3", "spot": "#f4a259", "api": "#8cb369"}
DEMAND_COLOUR = "#222222"
WIDTH_IN, HEIGHT_IN = 8.0, 3.2
P = ParamSpec("P")
R = TypeVar("R")


# Settings that make the SVG output stable and the charts compact; applied only while a chart is
# drawn (matplotlib.rc_context), so the caller's matplotlib settings stay as they were.
STYLE = {"svg.fonttype": "none", "svg.hashsalt": "fleetplan", "font.size": 9,
         "axes.spines.top": False, "axes.spines.right": False}


def styled(draw: Callable[P, R]) -> Callable[P, R]:
    """``draw`` run with :data:`STYLE` in force (and the previous settings back afterwards)."""
    @functools.wraps(draw)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        import matplotlib

        with matplotlib.rc_context(STYLE):
            return draw(*args, **kwargs)
    return run


def new_figure(width_in: float, height_in: float) -> tuple[Any, Any]:
    """A figure of its own and its axes: no pyplot, so neither matplotlib's backend nor its list
    of open figures changes (a notebook keeps its own)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in))
    return fig, fig.subplots()


def load() -> None:
    """Import matplotlib now rather than at the first chart: a report does it while it waits for
    the re-plans of its worker."""
    import matplotlib.figure  # noqa: F401


def to_svg(fig: Any) -> str:
    """The figure as an SVG element (no XML prolog, no date)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    return re.sub(r"^.*?(<svg)", r"\1", text, count=1, flags=re.S)


def hourly_tiers(d: dict[str, Any]) -> tuple[list[float], dict[str, list[float]]]:
    """Demand and the capacity bought per tier, in output tokens/s, hour by hour, summed over the
    products that list their hours (replicas × usable tokens/s of a replica; the API's tokens)."""
    rows = [p for p in d["products"] if p.get("hourly")]
    hours = len(rows[0]["hourly"]) if rows else 0
    demand = [0.0] * hours
    tiers = {k: [0.0] * hours for k in TIER_COLOURS}
    for p in rows:
        usable = p["usable_replica_tokens_per_s"] or 0.0
        for h, row in enumerate(p["hourly"]):
            demand[h] += row["demand_tokens_per_s"]
            tiers["reserved"][h] += row["reserved_replicas"] * usable
            tiers["on_demand"][h] += row["on_demand_replicas"] * usable
            tiers["spot"][h] += row["spot_replicas"] * usable
            tiers["api"][h] += row["api_tokens_per_s"]
    return demand, tiers


@styled
def fleet_chart(d: dict[str, Any]) -> str | None:
    """The hourly fleet against demand: capacity stacked by tier (reserved, on demand, spot) and
    the API's tokens, with demand as a line; None for a one-hour plan."""
    demand, tiers = hourly_tiers(d)
    if len(demand) < 2:
        return None
    fig, ax = new_figure(WIDTH_IN, HEIGHT_IN)
    hours = list(range(len(demand)))
    shown = {k: v for k, v in tiers.items() if any(v)}
    ax.stackplot(hours, *shown.values(), labels=[k.replace("_", " ") for k in shown], step="post",
                 colors=[TIER_COLOURS[k] for k in shown], alpha=0.85)
    ax.step(hours, demand, where="post", color=DEMAND_COLOUR, linewidth=1.2, label="demand")
    ax.set_xlabel("hour of the horizon")
    ax.set_ylabel("output tokens/s")
    ax.set_xlim(0, len(demand) - 1)
    ax.legend(loc="upper left", ncol=5, frameon=False, fontsize=8)
    return to_svg(fig)


def _hbar(labels: list[str], series: dict[str, list[float]], xlabel: str, colours: list[str]) -> str:
    """Horizontal bars, one group per label and one bar per series."""
    fig, ax = new_figure(WIDTH_IN, 0.5 + 0.45 * len(labels) * max(1, len(series)))
    n = len(series)
    height = 0.8 / n
    for i, ((name, values), colour) in enumerate(zip(series.items(), colours)):
        ys = [y + i * height for y in range(len(labels))]
        ax.barh(ys, values, height=height, label=name, color=colour)
    ax.set_yticks([y + (n - 1) * height / 2 for y in range(len(labels))], [chart_text(t) for t in labels])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    if n > 1:
        ax.legend(frameon=False, fontsize=8)
    return to_svg(fig)


@styled
def cost_chart(d: dict[str, Any]) -> str:
    """The monthly cost per product, one bar each, largest first."""
    rows = sorted(d["products"], key=lambda p: (-p["monthly_cost_usd"], p["name"]))
    return _hbar([p["name"] for p in rows], {"$/month": [p["monthly_cost_usd"] for p in rows]}, "USD per month",
                 [TIER_COLOURS["on_demand"]])


@styled
def usage_chart(d: dict[str, Any]) -> str | None:
    """GPUs of each type at its busiest hour against what is available (None without GPUs)."""
    usage = d.get("gpu_usage") or {}
    if not usage:
        return None
    gpus = sorted(usage)
    series = {"used (busiest hour)": [usage[g]["gpus"] for g in gpus],
              "bought (whole instances)": [(usage[g]["instances"] or 0) * (usage[g]["gpus_per_instance"] or 0)
                                           or usage[g]["gpus"] for g in gpus],
              "available": [usage[g]["available"] or 0 for g in gpus]}
    return _hbar(gpus, series, "GPUs (available 0: no limit)", ["#1b6ca8", "#5fa8d3", "#cccccc"])


@styled
def tornado_chart(rows: list[dict[str, Any]], base: float) -> str | None:
    """The tornado: each input's monthly cost at -20% and +20%, as bars from the plan's cost (a
    side with no plan is left out; inputs sorted by their widest bar)."""
    def delta(r: dict[str, Any], side: str) -> float | None:
        cost = r[f"{side}_monthly_cost_usd"]
        return None if cost is None else cost - base

    rows = [r for r in rows if delta(r, "low") is not None or delta(r, "high") is not None]
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: -max(abs(delta(r, s) or 0.0) for s in ("low", "high")))
    fig, ax = new_figure(WIDTH_IN, 0.6 + 0.5 * len(rows))
    labelled: set[str] = set()
    for y, r in enumerate(rows):
        for side, colour in (("low", "#8cb369"), ("high", "#e76f51")):
            d = delta(r, side)
            if d is None:
                continue
            label = None if side in labelled else f"{side} ({r[f'{side}_factor']:.0%})"
            labelled.add(side)
            ax.barh(y, d, left=base, color=colour, label=label)
    ax.axvline(base, color=DEMAND_COLOUR, linewidth=1)
    ax.set_yticks(range(len(rows)), [chart_text(r["input"]) for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("USD per month (line: this plan)")
    ax.legend(frameon=False, fontsize=8)
    return to_svg(fig)

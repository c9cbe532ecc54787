"""The plan as one self-contained HTML page: summary, configuration, costs, the hourly fleet,
GPU usage, runner-ups, binding limits and sensitivities.

Owns the page's markup; charts come from :mod:`fleetplan.rendering.charts`, every figure from the plan
JSON (:mod:`fleetplan.optimizer.explanation.results`) and the tornado rows
(:mod:`fleetplan.optimizer.decisions.sensitivity`). Styles are inlined and charts are inline SVG: the
page loads nothing (no script, no font, no image from anywhere) and prints as it reads. Every
value, a number read from a plan file included, enters the page through
:func:`fleetplan.rendering.escape.render`, which escapes it unless it is markup this module wrote."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fleetplan.rendering import charts
from fleetplan.rendering.escape import Markup, render
from fleetplan.optimizer.explanation.binding import binding_sentence
from fleetplan.optimizer.common.enums import LeftOut
from fleetplan.optimizer.common.text import gap_split, pct

# What the performance model is worth, as measured: python benchmarks/bench_fidelity.py on the
# measured configurations of silicon-train.csv (784 rows the planner would run; default: the
# physics fitted without each row's configuration group, python benchmarks/fit_physics.py --cv)
# and on benchmarks/data/public-measurements.csv (measured 2026-12-03). Quoted, not recomputed,
# so the report stays fast.
FIDELITY = {
    "seed": "the seed document's first-order roofline: TPOT within 1.5x on 42% of 784 measured "
            "configurations (MAPE 48.3%) and 54% of 37 public measurements (MAPE 34.1%)",
    "default": "roofline with communication, overheads and prefill interference, fitted to measurements: "
               "TPOT within 1.5x on 97% of 784 measured configurations it was not fitted on (MAPE 12.5%) "
               "and 95% of 42 public measurements (MAPE 15.2%)",
}
FIDELITY_SOURCE = "README, Fidelity on measured configurations (benchmarks/bench_fidelity.py)"

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:62rem;margin:1.5rem auto;padding:0 1rem;
color:#1d1d1d;line-height:1.4}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;border-bottom:1px solid #ccc;margin-top:1.8rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
th,td{vertical-align:top;padding:.2rem .5rem;border-bottom:1px solid #e4e4e4}
th{text-align:left;background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:flex;flex-wrap:wrap;gap:.8rem}.card{border:1px solid #ddd;border-radius:.4rem;padding:.5rem .8rem;min-width:9rem}
.card b{display:block;font-size:1.3rem}.note{color:#555;font-size:.85rem}svg{max-width:100%;height:auto}
@media print{body{max-width:none;margin:0}h2{break-after:avoid}table,svg{break-inside:avoid}}
"""


def _fmt(x: Any, spec: str) -> str:
    """``x`` formatted by ``spec``; a value that is not a number (a hand-edited plan) as it is
    written, to be escaped like every other value."""
    try:
        return format(x, spec)
    except (TypeError, ValueError):
        return str(x)


def _money(x: float | None) -> str:
    return "-" if x is None else "$" + _fmt(x, ",.0f")


def _table(head: list[str], rows: list[list[Any]], numeric: set[int] = frozenset()) -> Markup:  # type: ignore[assignment]
    """An HTML table; every cell escaped (:func:`fleetplan.rendering.escape.render`), columns in ``numeric`` right-aligned."""
    th = "".join(render("<th>{}</th>", h) for h in head)
    body = "".join(
        "<tr>" + "".join(render("<td class=n>{}</td>" if i in numeric else "<td>{}</td>", c) for i, c in enumerate(r))
        + "</tr>"
        for r in rows)
    return Markup(f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>")


def cost_per_million(d: dict[str, Any]) -> float | None:
    """The plan's cost per million output tokens: total cost over the tokens of every product
    (each product's tokens are its cost over its own cost per million)."""
    tokens = sum(p["monthly_cost_usd"] / p["cost_per_million_tokens_usd"] for p in d["products"]
                 if p.get("cost_per_million_tokens_usd"))
    return d["monthly_cost_usd"] / tokens if tokens else None


def summary(d: dict[str, Any]) -> Markup:
    """The cards: monthly cost, GPUs, cost per million tokens, status and gap; preset,
    calibration and the model's stated fidelity."""
    cpm = cost_per_million(d)
    gap = "-" if d.get("mip_gap") is None else _fmt(d["mip_gap"], ".4%")
    cards = [
        render('<div class=card>monthly cost<b id="total-cost" data-usd="{}">{}</b></div>',
               _fmt(d["monthly_cost_usd"], ".2f"), _money(d["monthly_cost_usd"])),
        render('<div class=card>GPUs<b id="total-gpus">{}</b></div>', _fmt(d["totals"]["all_gpus"], ",")),
        render("<div class=card>$ per million output tokens<b>{}</b></div>", "-" if cpm is None else "$" + _fmt(cpm, ",.3f")),
        render("<div class=card>status<b>{}</b>gap {}</div>", d["status"], gap),
    ]
    if d.get("power"):  # cost and carbon side by side (plan files written before power have none)
        pw = d["power"]
        cards.insert(1, render('<div class=card>carbon<b id="total-carbon">{} tCO2</b>a month; {} MWh, '
                               "{} kW facility peak</div>", _fmt(pw["tco2_per_month"], ",.1f"),
                               _fmt(pw["energy_mwh_per_month"], ",.1f"), _fmt(pw["facility_kw_peak"], ",.0f")))
    preset = d["preset"]
    split = (render('<p class=note id="gap-split">gap {}: {}.</p>', gap, gap_split(d["gap_breakdown_usd"]))
             if d.get("gap_breakdown_usd") and d.get("mip_gap") else "")
    note = render("<p class=note>preset <b>{}</b>, calibration {}; {} hour(s) modelled, tiers {}. Model fidelity: {} ({}).</p>",
                  preset, d.get("calibration") or "none", d["hours"], ", ".join(map(str, d["tiers"])),
                  FIDELITY.get(preset, ""), FIDELITY_SOURCE)
    from fleetplan.rendering.tables import verification_line

    replay = verification_line(d.get("verification"))
    verified = render('<p class=note id="verification">{}.</p>', replay) if replay else ""
    return Markup(f'<div class=cards>{"".join(cards)}</div>{note}{split}{verified}')


def configuration(d: dict[str, Any]) -> Markup:
    """One row per product (configuration, replicas, GPUs, speed, TTFT, cost), then why each runs it."""
    rows = [[p["name"], p["model"], p.get("pooled_in") or "", p["gpu"] or "API", p["tp"] or "", p["precision"] or "",
             p["batch"] or "", p["replicas"], p["gpus"], p["prefill"]["mode"] or "",
             "-" if p["per_user_tokens_per_s"] is None else _fmt(p["per_user_tokens_per_s"], ",.1f"),
             "-" if p["ttft_ms"] is None else _fmt(p["ttft_ms"], ",.0f"), _money(p["monthly_cost_usd"]),
             pct(p["api_fraction"])]
            for p in d["products"]]
    head = ["product", "model", "pooled in", "GPU", "TP", "precision", "batch", "replicas", "GPUs", "prefill",
            "tokens/s per user", "TTFT ms", "$/month", "API share"]
    why = "".join(render("<li><b>{}</b>: {}</li>", p["name"], p["why"]) for p in d["products"] if p.get("why"))
    return Markup(_table(head, rows, {4, 6, 7, 8, 10, 11, 12}) + (f"<ul class=note>{why}</ul>" if why else ""))


@dataclass(frozen=True)
class Figures:
    """The page's charts as inline SVG (None where a chart does not apply). They read the plan's
    products, hours and GPU usage and the tornado rows, never its binding limits, so they can be
    drawn while those are still being valued."""

    fleet: str | None
    usage: str | None
    cost: str
    tornado: str | None


def figures(d: dict[str, Any], tornado: list[dict[str, Any]] | None) -> Figures:
    """The charts of plan ``d`` and its tornado rows."""
    return Figures(charts.fleet_chart(d), charts.usage_chart(d), charts.cost_chart(d),
                   None if tornado is None else charts.tornado_chart(tornado, d["monthly_cost_usd"]))


def breakdown(d: dict[str, Any], chart: str) -> Markup:
    """The cost by kind (reserved, on demand, spot, API, fixed, stranded) and by product, and
    ``chart`` (:func:`figures`)."""
    b = d["monthly_cost_breakdown_usd"]
    rows = [[k.replace("_", " "), _money(v), pct(v / d["monthly_cost_usd"]) if d["monthly_cost_usd"] else "-"]
            for k, v in b.items() if v]
    rows.append(["total", _money(d["monthly_cost_usd"]), "100%"])
    return Markup(_table(["kind", "$/month", "share"], rows, {1, 2}) + chart)


def runner_ups(d: dict[str, Any]) -> Markup:
    """The cheapest plan on each other GPU type, per product."""
    rows = [[p["name"], a["gpu"], a["tp"], a["precision"], a["batch"], a["replicas"], a["gpus"],
             _money(a["monthly_cost_usd"]), f"+{_money(a['cost_difference_usd'])}"]
            for p in d["products"] for a in p.get("alternatives") or []]
    if not rows:
        return Markup("<p class=note>No runner-ups: each product runs on the only GPU type it may use, or products "
                      "share limits and were planned together.</p>")
    note = ""
    for reason, why in ((LeftOut.OUTRANKED, "as no plan on them can be among the cheapest GPU types"),
                        (LeftOut.NOT_SEARCHED, "each as long a search as the plan's own (<code>--all-alternatives</code> "
                                               "searches them)")):
        left = [f"{p['name']}: {a['gpu']} at least {_money(a['monthly_cost_at_least_usd'])}"
                for p in d["products"] for a in p.get("runner_ups_left_out") or [] if a["reason"] == reason]
        if left:
            note += render("<p class=note>The mix on each GPU type, not searched, {} (lower bound, $/month): {}.</p>",
                           Markup(why), "; ".join(left))
    return Markup(_table(["product", "GPU", "TP", "precision", "batch", "replicas", "GPUs", "$/month", "vs chosen"],
                         rows, {2, 4, 5, 6, 7, 8}) + note)


def binding(d: dict[str, Any]) -> Markup:
    """Each binding limit and what one more step of it is worth."""
    rows = [[b["limit"], f"+{b['step']} {b['step_unit']}", _money(b["value_usd_per_month"]),
             _money(b["relaxed_monthly_cost_usd"]), "yes" if b["proven"] else "no", binding_sentence(b)]
            for b in d.get("binding_limits") or []]
    if not rows:
        return Markup("<p class=note>No shared limit binds: every availability limit leaves at least one instance "
                      "free (a budget never binds a plan that exists: the plan is already the cheapest).</p>")
    return _table(["limit", "step", "saving $/month", "cost with the step", "proven", "in words"], rows, {2, 3})


def sensitivities(rows: list[dict[str, Any]] | None, chart: str | None) -> Markup:
    """The tornado ``chart`` (:func:`figures`) and its table; a note when the report was made from
    a plan file."""
    if rows is None:
        return Markup("<p class=note>Not computed: the report was made from a plan file; give the scenario to "
                      "re-plan with each input moved by ±20%.</p>")
    table = _table(["input", "-20% $/month", "+20% $/month", "swing", "note"], [
        [r["input"], _money(r["low_monthly_cost_usd"]), _money(r["high_monthly_cost_usd"]),
         "-" if None in (r["low_monthly_cost_usd"], r["high_monthly_cost_usd"])
         else _money(abs(r["high_monthly_cost_usd"] - r["low_monthly_cost_usd"])), _tornado_note(r)]
        for r in rows], {1, 2, 3})
    method = ("<p class=note>Each input is moved by ±20% for every product and the plan's configurations are kept "
              "(GPU type, TP, precision and prefill mode per product): batch, replicas, tiers and API share are "
              "chosen again. A full re-plan can only cost less; an empty bar means the kept configurations cannot "
              "serve the moved input.</p>")
    return Markup(method + (chart or "") + table)


def _tornado_note(r: dict[str, Any]) -> str:
    """Why a tornado bar is missing or not proven."""
    notes = [f"{side}: {r[f'{side}_error']}" for side in ("low", "high") if r.get(f"{side}_error")]
    notes += [f"{side}: not proven optimal" for side in ("low", "high")
              if r[f"{side}_monthly_cost_usd"] is not None and not r[f"{side}_proven"]]
    return "; ".join(notes)


def page(d: dict[str, Any], tornado: list[dict[str, Any]] | None, title: str, drawn: Figures | None = None) -> str:
    """The whole report for plan ``d`` with its tornado rows (None: not computed) and their
    charts (drawn here unless given: :func:`figures` of the same plan and rows)."""
    drawn = drawn or figures(d, tornado)
    fleet = drawn.fleet or "<p class=note>A one-hour plan: the fleet is the configuration table.</p>"
    sections = [
        ("Summary", summary(d)),
        ("Configuration per product", configuration(d)),
        ("Cost breakdown", breakdown(d, drawn.cost)),
        ("Hourly fleet against demand", fleet),
        ("GPU usage against availability", (drawn.usage or "") + _usage_table(d)),
        ("Runner-ups", runner_ups(d)),
        ("Binding limits", binding(d)),
        ("Sensitivities (±20%)", sensitivities(tornado, drawn.tornado)),
    ]
    body = "".join(render("<section><h2>{}</h2>{}</section>", h, Markup(s)) for h, s in sections)
    return render('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
                  '<meta name="viewport" content="width=device-width, initial-scale=1"><style>{style}</style></head>'
                  "<body><h1>{title}</h1>{body}</body></html>\n", title=title, style=Markup(STYLE), body=Markup(body))


def _usage_table(d: dict[str, Any]) -> Markup:
    """GPUs per type at the busiest hour, instances, stranded GPUs and availability."""
    rows = [[g, u["gpus"], "-" if u["instances"] is None else u["instances"], u["stranded_gpus"],
             "no limit" if u["available"] is None else u["available"]]
            for g, u in sorted((d.get("gpu_usage") or {}).items())]
    return _table(["GPU", "GPUs", "instances", "stranded GPUs", "available"], rows, {1, 2, 3, 4}) if rows else Markup()

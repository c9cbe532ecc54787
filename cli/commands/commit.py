"""``fleetplan commit SCENARIO.yaml``: the reserved commitment to make when demand, spot
availability and prices are uncertain (the scenario's ``uncertainty:`` block).

Prints the commitment, the cost distribution and each outcome's regret as a table, or the plan
as JSON (``--json``); ``--out DIR`` also writes ``commit.json`` and ``commit.html`` (a cost
distribution chart and the regret table). Outcome MIPs run in ``--jobs`` local worker processes
or on an existing Dask cluster (``--scheduler``): the same plan either way.

Owns this command's flags, table and files; the planning is :mod:`fleetplan.optimizer.decisions.stochastic`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fleetplan.rendering.escape import Markup, render, terminal
from fleetplan.optimizer.common.defaults import DEFAULT_TIME_LIMIT_S
from fleetplan.rendering.charts import new_figure, styled, to_svg
from fleetplan.rendering.progress import ProgressLine

FILES = ("commit.json", "commit.html")


def read_stochastic_scenario(path: str) -> tuple[Any, Any, Path]:
    """The scenario file at ``path`` as (scenario without its uncertainty block, the block
    validated, folder); a file without the block is refused with one line."""
    from fleetplan.optimizer.traffic.scenario import load_scenario_taking
    from fleetplan.optimizer.traffic.uncertainty import UncertaintyError, parse_uncertainty

    scenario, block, folder = load_scenario_taking(path, "uncertainty")
    if block is None:
        raise UncertaintyError(f"{path}: no uncertainty: block; add one (outcomes: or sample:), or plan one forecast "
                               f"with `fleetplan plan`")
    return scenario, parse_uncertainty(block, str(path), scenario.products, folder), folder


def _usd(x: float | None) -> str:
    return "-" if x is None else f"${x:,.0f}"


def show_table(data: dict[str, Any], console: Any) -> None:
    """The plan as rich tables: the commitment, the cost figures, each outcome's cost and regret."""
    from rich.table import Table

    from fleetplan.rendering.escape import rich_text

    t = Table(title="commitment (GPUs held every month of the term)")
    for c in ("gpu", "term", "GPUs", "$/GPU-hour", "source"):
        t.add_column(c, justify="right" if c in ("GPUs", "$/GPU-hour") else "left")
    for row in data["commitment"]:
        t.add_row(rich_text(row["gpu"]), row["term"], str(row["gpus"]), f"{row['usd_per_gpu_hour']:.2f}",
                  rich_text(row["source"] + (f" (as of {row['as_of']})" if row["as_of"] else "")))
    console.print(t)
    p = data["cost_percentiles_usd"]
    console.print(f"expected cost {_usd(data['expected_cost_usd'])}/month (proven gap {data['gap']:.2%}, "
                  f"{data['method']}); P50 {_usd(p['p50'])}, P95 {_usd(p['p95'])}, worst {_usd(p['worst'])}")
    if data["risk_weight"] > 0:
        console.print(f"objective {_usd(data['objective_usd'])}/month: expected cost + {data['risk_weight']:g} x "
                      f"CVaR {data['cvar_alpha']:g} of the outcomes' costs (the proven gap is this objective's)")
    console.print(f"value of the stochastic solution {_usd(data['vss_usd'])}/month (against committing to the mean "
                  f"forecast's plan, {_usd(data['mean_forecast']['expected_cost_usd'])}); expected value of perfect "
                  f"information {_usd(data['evpi_usd'])}/month")
    s = Table(title="outcomes")
    for c in ("outcome", "probability", "cost $/month", "own optimum", "regret"):
        s.add_column(c, justify="left" if c == "outcome" else "right")
    for o in data["scenarios"]:
        s.add_row(rich_text(o["name"]), f"{o['probability']:.3f}", f"{o['cost_usd']:,.0f}",
                  f"{o['own_optimum_usd']:,.0f}", f"{o['regret_usd']:,.0f}")
    console.print(s)
    for note in data["notes"]:
        console.print(rich_text(f"note: {note}"))


@styled
def distribution_svg(data: dict[str, Any]) -> str:
    """The outcomes' costs as a probability-weighted histogram, with the expected cost and P95 marked."""
    fig, ax = new_figure(7.0, 3.0)
    costs = [o["cost_usd"] for o in data["scenarios"]]
    weights = [o["probability"] for o in data["scenarios"]]
    bins = max(1, min(30, len(costs)))
    ax.hist(costs, bins=bins, weights=weights, color="#4c78a8")
    ax.axvline(data["expected_cost_usd"], color="#222222", linestyle="--", label="expected")
    ax.axvline(data["cost_percentiles_usd"]["p95"], color="#e45756", linestyle=":", label="P95")
    ax.set_xlabel("USD per month with the commitment")
    ax.set_ylabel("probability")
    ax.legend(frameon=False, fontsize=8)
    return to_svg(fig)


def html_section(data: dict[str, Any]) -> Markup:
    """The report section: commitment, cost figures, the distribution chart and the regret table."""
    rows = "".join(render("<tr><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td>{}</td></tr>",
                          r["gpu"], r["term"], r["gpus"], f"{r['usd_per_gpu_hour']:.2f}", r["source"])
                   for r in data["commitment"])
    regret = "".join(render("<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td>"
                            "<td class=n>{}</td></tr>", o["name"], f"{o['probability']:.3f}", f"{o['cost_usd']:,.0f}",
                            f"{o['own_optimum_usd']:,.0f}", f"{o['regret_usd']:,.0f}") for o in data["scenarios"])
    p = data["cost_percentiles_usd"]
    return Markup(
        render("<section id=commitment><h2>Commitment under uncertainty</h2>"
               "<p>Expected cost {} per month (proven gap {}); P50 {}, P95 {}, worst {}. "
               "Value of the stochastic solution {}; expected value of perfect information {}.</p>",
               _usd(data["expected_cost_usd"]), f"{data['gap']:.2%}", _usd(p["p50"]), _usd(p["p95"]), _usd(p["worst"]),
               _usd(data["vss_usd"]), _usd(data["evpi_usd"]))
        + "<table><tr><th>GPU</th><th>term</th><th>GPUs</th><th>$/GPU-hour</th><th>source</th></tr>" + rows
        + "</table><figure>" + distribution_svg(data) + "</figure>"
        + "<h3>Regret by outcome</h3><table><tr><th>outcome</th><th>probability</th><th>cost $/month</th>"
          "<th>own optimum</th><th>regret</th></tr>" + regret + "</table></section>")


def html_page(data: dict[str, Any]) -> str:
    """A self-contained HTML page holding :func:`html_section`."""
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto}table{border-collapse:collapse}"
             "td,th{padding:2px 8px;border-bottom:1px solid #ddd}td.n{text-align:right}")
    return ("<!doctype html><html><head><meta charset=utf-8><title>fleetplan commitment</title><style>" + style
            + "</style></head><body>" + html_section(data) + "</body></html>\n")


def cmd_commit(args: argparse.Namespace) -> int:
    """Plan the commitment, then print it and write the files asked for."""
    from fleetplan.catalogs.commitments import load_commitments
    from fleetplan.catalogs.loader import load_catalog
    from fleetplan.commands.cluster import check_reachable, connected
    from fleetplan.catalogs.files import write_atomically
    from fleetplan.commands.io import console, dumps, out_dir, output_in
    from fleetplan.models.presets import get_preset
    from fleetplan.optimizer.decisions.stochastic import plan_under_uncertainty

    scenario, unc, folder = read_stochastic_scenario(args.scenario)
    catalog = load_catalog(args.catalog)
    if args.scheduler:
        check_reachable(args.scheduler)
    paths: list[Path] = []
    if args.out:
        out = out_dir(args.out, FILES)
        paths = [output_in(out, name, "--out", [args.scenario, *args.catalog]) for name in FILES]

    line = ProgressLine.for_terminal(quiet=args.json)

    def progress(stage: str, done: int, total: int) -> None:
        if args.progress:  # a line each, for logs
            print(f"fleetplan: commit: {stage} {done}/{total}", file=sys.stderr)
        else:
            line.update(stage, done, total)

    time_limit_s = args.time_limit or scenario.options.time_limit_s or DEFAULT_TIME_LIMIT_S
    kwargs: dict[str, Any] = dict(commitment_rows=load_commitments(), time_limit_s=time_limit_s, progress=progress)
    try:
        if args.scheduler:
            with connected(args.scheduler) as client:
                plan = plan_under_uncertainty(scenario, unc, catalog, get_preset(scenario.preset), folder,
                                              args.solver, client=client, **kwargs)
        else:
            plan = plan_under_uncertainty(scenario, unc, catalog, get_preset(scenario.preset), folder, args.solver,
                                          workers=args.jobs, **kwargs)
    finally:
        line.close()
    data = plan.to_dict()
    if paths:  # both made before either is written: no half-written output
        contents = [dumps(data), html_page(data)]
        for path, text in zip(paths, contents):
            write_atomically(path, text)
    if args.json:
        sys.stdout.write(dumps(data))
    else:
        show_table(data, console())
        if paths:
            print(terminal(f"wrote {', '.join(str(p) for p in paths)}"))
    return 0


def register(sub: Any) -> None:
    """Add ``commit`` to the CLI's subparsers."""
    from fleetplan.catalogs import fields as F
    from fleetplan.commands.cluster import SCHEDULER_HELP
    from fleetplan.commands.flags import add_catalog_flag, add_solver_flag, number_flag

    s = sub.add_parser("commit", help="reserved commitment under uncertain demand, spot and prices",
                       description="Plan the reserved GPUs to commit to (per GPU type and term) against every "
                                   "outcome of the scenario's uncertainty: block, each outcome meeting every "
                                   "product's targets with on-demand, spot and API recourse.")
    s.add_argument("scenario")
    s.add_argument("--json", action="store_true", help="print the plan as JSON")
    s.add_argument("--out", help="directory for commit.json and commit.html (created if needed)")
    s.add_argument("--jobs", type=number_flag(F.JOBS), default=1, help="local worker processes (default 1)")
    s.add_argument("--scheduler", help=SCHEDULER_HELP)
    s.add_argument("--time-limit", type=number_flag(F.TIME_LIMIT_S), default=None,
                   help="seconds for the solves (default: the scenario's options.time_limit_s, else 60); the best "
                        "commitment found and its proven gap are reported")
    s.add_argument("--progress", action="store_true", help="a progress line each step on stderr (a terminal gets one redrawn line without it)")
    add_solver_flag(s)
    add_catalog_flag(s)
    s.set_defaults(func=cmd_commit)

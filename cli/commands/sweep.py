"""``fleetplan sweep SCENARIO.yaml --set PATH=VALUES ... [--samples N --seed S] --out DIR``.

Plans every point of a grid or of Monte-Carlo draws (:mod:`fleetplan.optimizer.decisions.sweep`) in
local worker processes (``--jobs``), or on an existing Dask cluster (``--scheduler ADDRESS``):
the same rows either way, byte for byte. Writes ``DIR/sweep.csv``, ``DIR/sweep.parquet`` (one
tidy row per point: the inputs, the plan's key outputs, the error of a failed point) and
``DIR/sweep.svg`` (cost against the first swept field, coloured by the GPU type with most
GPUs). Every file is checked before any planning and written atomically.

Owns this command's flags, files and plot; the sweep itself is in ``optimizer/``."""

from __future__ import annotations

import argparse
import csv
import io
import sys
from typing import Any

from fleetplan.rendering.escape import terminal

FILES = ("sweep.csv", "sweep.parquet", "sweep.svg")


def table_csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """The rows as CSV (empty cells for None), in ``columns`` order; a text cell (or a swept path in
    the header) a spreadsheet would read as a formula starts with ``'`` (:func:`fleetplan.rendering.escape.csv_cell`)."""
    from fleetplan.rendering.escape import csv_cell

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([csv_cell(c) for c in columns])
    for r in rows:
        w.writerow([csv_cell(r.get(c)) for c in columns])
    return buf.getvalue()


def table_parquet(rows: list[dict[str, Any]], columns: list[str]) -> bytes:
    """The rows as one Parquet file (pyarrow; a column of whole and fractional numbers is float64)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrays = {}
    for c in columns:
        values = [r.get(c) for r in rows]
        numbers = [v for v in values if v is not None]
        if numbers and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers) \
                and not all(isinstance(v, int) for v in numbers):
            values = [None if v is None else float(v) for v in values]
        arrays[c] = pa.array(values)
    buf = io.BytesIO()
    pq.write_table(pa.table(arrays), buf)
    return buf.getvalue()


def plot_svg(rows: list[dict[str, Any]], x: str) -> str:
    """Cost against the swept field ``x``, one colour per winning GPU type (failed points left out)."""
    from fleetplan.rendering.charts import styled

    return str(styled(_draw_plot)(rows, x))


def _draw_plot(rows: list[dict[str, Any]], x: str) -> str:
    """:func:`plot_svg`'s drawing, run with the charts' settings in force."""
    from fleetplan.rendering.charts import new_figure, to_svg
    from fleetplan.rendering.escape import chart_text

    fig, ax = new_figure(8.0, 3.6)
    ok = [r for r in rows if r["monthly_cost_usd"] is not None and isinstance(r[x], (int, float))]
    for gpu in sorted({r["main_gpu"] for r in ok}):
        pts = sorted((r[x], r["monthly_cost_usd"]) for r in ok if r["main_gpu"] == gpu)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", markersize=4, label=chart_text(gpu))
    ax.set_xlabel(chart_text(x))
    ax.set_ylabel("USD per month")
    ax.set_title("cost against the swept value; colour: the GPU type with most GPUs", fontsize=9)
    if ok:
        ax.legend(frameon=False, fontsize=8)
    return to_svg(fig)


def _rows(args: argparse.Namespace, sweep: Any, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every point planned: on the Dask cluster of ``--scheduler``, else in ``--jobs`` local workers."""
    from fleetplan.commands.cluster import connected, map_in_order
    from fleetplan.optimizer.decisions.sweep import local_runner, run_points

    if not args.scheduler:
        return run_points(sweep, points, local_runner(args.jobs))
    with connected(args.scheduler) as client:
        return run_points(sweep, points, lambda fn, tasks: map_in_order(client, fn, tasks))


def cmd_sweep(args: argparse.Namespace) -> int:
    """Plan every point, then write the table, the Parquet file and the plot."""
    from fleetplan.commands.io import FLAG_OF, out_dir, output_in, scenario_inputs, write_atomically
    from fleetplan.optimizer.traffic.scenario import load_scenario
    from fleetplan.commands.cluster import check_reachable
    from fleetplan.optimizer.decisions.sweep import OUTPUTS, Sweep, check_axes, check_points, grid_points, parse_axis, sampled_points

    axes = [parse_axis(s, args.max_points) for s in args.set]
    sweep = Sweep(args.scenario, tuple(args.catalog), args.calibration, args.solver, tuple(FLAG_OF.items()))
    check_axes(sweep, axes)
    points = sampled_points(axes, args.samples, args.seed, args.max_points) if args.samples \
        else grid_points(axes, args.max_points)
    check_points(sweep, points)
    scenario, folder = load_scenario(args.scenario)
    if args.scheduler:
        check_reachable(args.scheduler)  # before the output directory is made
    out = out_dir(args.out, FILES)
    inputs = scenario_inputs(args.scenario, scenario, folder, args.catalog, args.calibration)
    paths = [output_in(out, name, "--out", inputs) for name in FILES]
    print(f"fleetplan: sweep: {len(points):,} points to plan", file=sys.stderr)
    rows = _rows(args, sweep, points)
    columns = ["point", *(a.path for a in axes), *OUTPUTS, "error"]
    write_atomically(paths[0], table_csv(rows, columns))
    write_atomically(paths[1], table_parquet(rows, columns))
    write_atomically(paths[2], plot_svg(rows, axes[0].path))
    failed = sum(r["error"] is not None for r in rows)
    print(terminal(f"wrote {', '.join(str(p) for p in paths)}: {len(rows)} points, {failed} failed"))
    for r in rows:
        if r["error"]:
            print(terminal(f"fleetplan: note: point {r['point']}: {r['error']}"), file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    """Add ``sweep`` to the CLI's subparsers."""
    from fleetplan.catalogs import fields as F
    from fleetplan.commands.cluster import SCHEDULER_HELP
    from fleetplan.catalogs.fields import Range
    from fleetplan.commands.flags import CALIBRATION_HELP, add_catalog_flag, add_solver_flag, number_flag
    from fleetplan.optimizer.common.defaults import DEFAULT_MAX_POINTS, MAX_POINTS  # not the sweep itself: every command builds this parser

    MAX_POINTS_FLAG = Range(1, MAX_POINTS, "points", "more plans than this is a batch queue's work, not one command's",
                            integer=True)

    s = sub.add_parser("sweep", help="plan a grid or Monte-Carlo draws of scenario fields",
                       description="Plan the scenario at every point of a grid (--set PATH=start:stop:step or "
                                   "PATH=a,b,c; every combination) or of --samples N draws (PATH=uniform(lo,hi), "
                                   "normal(mean,sd), lognormal(mu,sigma), choice(a,b)). PATH names a field as the "
                                   "scenario file does: products.NAME.FIELD (NAME * for every product), "
                                   "options.FIELD[.KEY], limits.FIELD[.KEY], preset.")
    s.add_argument("scenario")
    s.add_argument("--set", action="append", required=True, metavar="PATH=VALUES", help="a field and its values (repeatable)")
    s.add_argument("--samples", type=number_flag(F.SWEEP_SAMPLES), help="Monte-Carlo: this many draws")
    s.add_argument("--seed", type=number_flag(F.SEED), default=0, help="seed of the draws (default 0)")
    s.add_argument("--out", required=True, help="directory for sweep.csv, sweep.parquet and sweep.svg (created if needed)")
    s.add_argument("--max-points", type=number_flag(MAX_POINTS_FLAG), default=DEFAULT_MAX_POINTS,
                   help=f"run at most this many points (default {DEFAULT_MAX_POINTS:,}; up to {MAX_POINTS:,})")
    s.add_argument("--jobs", type=number_flag(F.JOBS), default=2, help="local worker processes (default 2)")
    s.add_argument("--scheduler", help=SCHEDULER_HELP)
    add_solver_flag(s)
    add_catalog_flag(s)
    s.add_argument("--calibration", help=CALIBRATION_HELP)
    s.set_defaults(func=cmd_sweep)

"""``fleetplan breakeven SCENARIO.yaml``: all-API, self-host only and the optimal blend as volume scales.

Owns this command's flags, table and plot file; the comparison is
:mod:`fleetplan.optimizer.decisions.breakeven`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.files import check_output_file
from fleetplan.rendering.escape import chart_text, terminal
from fleetplan.commands.flags import add_catalog_flag, add_solver_flag, number_flag
from fleetplan.commands.io import console, dumps, scenario_inputs


def cmd_breakeven(args: argparse.Namespace) -> int:
    """All-API vs self-host only vs the optimal blend as volume scales: each scale's costs on
    stderr as it finishes (unless ``--json``), then the table or the JSON document."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.optimizer.decisions.breakeven import DEFAULT_SCALES, PLOT_SUFFIXES, BreakevenPoint, breakeven, plot
    from fleetplan.optimizer.traffic.scenario import load_scenario
    from fleetplan.rendering.tables import breakeven_line, print_breakeven

    scenario, folder = load_scenario(args.scenario)
    plot_path = None
    if args.plot:
        plot_path = check_output_file(args.plot, "--plot", scenario_inputs(args.scenario, scenario, folder, args.catalog),
                                      suffixes=PLOT_SUFFIXES)
    catalog = load_catalog([*(folder / c for c in scenario.catalogs), *args.catalog])
    scales = tuple(args.scales) if args.scales else DEFAULT_SCALES

    def show(p: BreakevenPoint) -> None:
        if not args.json:
            print(breakeven_line(p), file=sys.stderr, flush=True)

    result = breakeven(scenario, catalog, folder, scales, solver=args.solver, on_point=show)
    for what in result.stopped:
        print(terminal(f"fleetplan: note: time limit reached: {what} not computed"), file=sys.stderr)
    if plot_path is not None:
        plot(result, plot_path, chart_text(f"build vs buy: {Path(args.scenario).name}"))
    if args.json:
        sys.stdout.write(dumps(result.as_dict()))
    else:
        print_breakeven(result, args.scenario, args.plot, console())
    return 0


def register(sub: Any) -> None:
    """The ``breakeven`` subcommand's flags."""
    be = sub.add_parser("breakeven", help="all-API vs self-host vs blend as demand scales")
    be.add_argument("scenario")
    be.add_argument("--scales", type=number_flag(F.DEMAND_SCALE), nargs="+", help="demand multiples to evaluate")
    add_solver_flag(be)
    add_catalog_flag(be)
    be.add_argument("--plot", help="write the curves to this PNG or SVG file")
    be.add_argument("--json", action="store_true", help="print JSON")
    be.set_defaults(func=cmd_breakeven)

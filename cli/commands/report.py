"""``fleetplan report SCENARIO.yaml|PLAN.json --out plan.html``: a plan as one HTML page.

From a scenario the command plans it (the re-plans that value its binding limits run in a
worker process meanwhile, :mod:`~fleetplan.optimizer.decisions.ahead`) and then prices the plan's
configurations with each tornado input moved by ±20%
(:meth:`~fleetplan.optimizer.decisions.sensitivity.Replanner.kept_cost`), all
within the one deadline of the command (``options.time_limit_s`` or the default);
from a plan file (``fleetplan plan ... --json`` output, checked field by field by
:mod:`~fleetplan.optimizer.explanation.plan_file`) it draws that plan and says the sensitivities need the
scenario. The page is written atomically, only when everything
succeeded. Owns this command's flow; the page is :mod:`fleetplan.rendering.html`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleetplan.rendering.html import Figures

HTML_SUFFIXES = (".html", ".htm")
PLAN_SUFFIXES = (".json",)


def plan_and_tornado(args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]], Figures, Path]:
    """Plan the scenario, then its tornado, in one deadline; (plan JSON, tornado rows, their
    charts, output). The charts are drawn while the binding limits' re-plans finish."""
    from fleetplan.rendering import charts
    from fleetplan.catalogs import load_catalog
    from fleetplan.catalogs.files import check_output_file
    from fleetplan.rendering.html import figures
    from fleetplan.commands.io import SCENARIO_PRESET_HINT, resolve_preset, scenario_inputs
    from fleetplan.models.presets import get_preset
    from fleetplan.optimizer.decisions.ahead import LimitsAhead
    from fleetplan.optimizer.explanation.binding import binding_limits, binding_relaxations
    from fleetplan.optimizer.runtime.deadline import DEFAULT_TIME_LIMIT_S, Deadline
    from fleetplan.rendering.progress import ProgressLine
    from fleetplan.optimizer.common.defaults import EXPLAIN_SHARE
    from fleetplan.optimizer.plan import make_plan
    from fleetplan.optimizer.simulation.verify import make_verified_plan
    from fleetplan.optimizer.problem_data.problem import CandidateMemo
    from fleetplan.optimizer.explanation.results import plan_to_dict
    from fleetplan.optimizer.traffic.scenario import load_scenario
    from fleetplan.optimizer.decisions.sensitivity import Replanner, tornado
    from fleetplan.optimizer.runtime.workers import worker_pool

    scenario, folder = load_scenario(args.input)
    inputs = scenario_inputs(args.input, scenario, folder, args.catalog, args.calibration)
    out = check_output_file(args.out, "--out", inputs, suffixes=HTML_SUFFIXES)
    catalog = load_catalog([*(folder / c for c in scenario.catalogs), *args.catalog])
    preset = resolve_preset(scenario.preset, args.calibration, SCENARIO_PRESET_HINT) if args.calibration else None
    progress = ProgressLine.for_terminal()
    deadline = Deadline.after(scenario.options.time_limit_s or DEFAULT_TIME_LIMIT_S, progress)
    try:
        memo = CandidateMemo()
        # the re-plans valuing the binding limits run in a worker while the plan and its tornado
        # are solved here; the worker is stopped once they are read (the rest is not wanted). It
        # is a copy of this process, made before anything is solved here (it needs no imports).
        with worker_pool(1, finish=False, copy=True) as pool:
            ahead = LimitsAhead(pool, scenario, catalog, args.solver, preset or get_preset(scenario.preset), folder,
                                deadline.share(0.5).left())
            plan = make_verified_plan(scenario, catalog, folder, deadline.share(0.5), make_plan, solver=args.solver,
                                      preset=preset, memo=memo, value_limits=False)
            ahead.keep(binding_relaxations(plan, scenario))
            rows = tornado(scenario, Replanner(catalog, preset, folder, args.solver, memo), deadline.share(0.5), plan)
            charts.load()
            drawn = figures(plan_to_dict(plan), rows)  # the JSON again at the end, with the limits' values
            seen = len(deadline.stopped)  # the plan's notes are in plan.stopped; add the binding limits'
            plan.binding_limits = binding_limits(plan, scenario, ahead.resolve, deadline.share(EXPLAIN_SHARE))
            plan.stopped += deadline.stopped[seen:]
    finally:
        progress.close()
    return plan_to_dict(plan), rows, drawn, out


def cmd_report(args: argparse.Namespace) -> int:
    """Write the HTML report of a scenario or of a plan file."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.catalogs.files import check_output_file
    from fleetplan.rendering.html import page
    from fleetplan.commands.io import catalog_inputs, write_atomically
    from fleetplan.commands.io import read_plan

    src = Path(args.input)
    if src.suffix.lower() in PLAN_SUFFIXES:
        out = check_output_file(args.out, "--out", [src, *catalog_inputs(args.catalog)], suffixes=HTML_SUFFIXES)
        d, rows, drawn = read_plan(src, load_catalog(args.catalog)), None, None
    else:
        d, rows, drawn, out = plan_and_tornado(args)
    write_atomically(out, page(d, rows, f"fleetplan: {src.name}", drawn))
    from fleetplan.rendering.escape import terminal

    print(terminal(f"wrote {args.out}: ${d['monthly_cost_usd']:,.2f} a month, {d['totals']['all_gpus']:,} GPUs, "
                   f"status {d['status']}"))
    return 0


def register(sub: Any) -> None:
    """Add ``report`` to the CLI's subparsers."""
    from fleetplan.commands.flags import CALIBRATION_HELP, add_catalog_flag, add_solver_flag

    r = sub.add_parser("report", help="the plan as one self-contained HTML page",
                       description="Plan a scenario (or read a plan file from `fleetplan plan --json`) and write one "
                                   "HTML page: summary, configuration, costs, hourly fleet, GPU usage, runner-ups, "
                                   "binding limits and a ±20% tornado (from a scenario only).")
    r.add_argument("input", help="scenario YAML, or a plan JSON file")
    r.add_argument("--out", required=True, help="HTML file to write")
    add_solver_flag(r)
    add_catalog_flag(r)
    r.add_argument("--calibration", help=CALIBRATION_HELP)
    r.set_defaults(func=cmd_report)

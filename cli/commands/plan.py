"""``fleetplan plan SCENARIO.yaml``: the cheapest fleet for a scenario, as tables or JSON (many
scenarios: :mod:`fleetplan.commands.batch`).

Owns this command's flags and output; the planning is :func:`fleetplan.optimizer.plan.make_plan`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.files import check_output_file
from fleetplan.commands.cluster import SCHEDULER_HELP
from fleetplan.rendering.escape import terminal
from fleetplan.optimizer.common.enums import Alternatives, Status
from fleetplan.optimizer.runtime.workers import MAX_DEFAULT_JOBS, default_jobs
from fleetplan.commands.flags import CALIBRATION_HELP, add_catalog_flag, add_solver_flag, number_flag
from fleetplan.commands.io import (
    SCENARIO_PRESET_HINT, console, dumps, emit, resolve_preset, scenario_inputs, write_atomically,
)


def cmd_plan(args: argparse.Namespace) -> int:
    """Cheapest fleet for a scenario; several scenarios, or a directory of them, as a batch."""
    from fleetplan.commands.batch import BatchSettings, is_batch, run_batch

    if is_batch(args.scenario):
        settings = BatchSettings(catalogs=tuple(args.catalog), solver=args.solver, calibration=args.calibration,
                            alternatives=_alternatives(args))
        return run_batch(args.scenario, settings, args.out, args.json, args.jobs or 1, console(), args.scheduler)
    return _plan_one(args)


def _alternatives(args: argparse.Namespace) -> Alternatives:
    """Which comparisons ``plan`` searches, from its flags."""
    return (Alternatives.NONE if args.no_alternatives else Alternatives.ALL if args.all_alternatives
            else Alternatives.DEFAULT)


def _plan_one(args: argparse.Namespace) -> int:
    """Plan one scenario file: notes on stderr, the JSON plan to ``--out``, JSON or tables on stdout."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.optimizer.runtime.deadline import DEFAULT_TIME_LIMIT_S, Deadline
    from fleetplan.rendering.progress import ProgressLine
    from fleetplan.optimizer.plan import make_plan
    from fleetplan.optimizer.explanation.results import plan_to_dict
    from fleetplan.optimizer.traffic.scenario import load_scenario
    from fleetplan.optimizer.simulation.verify import make_verified_plan
    from fleetplan.rendering.tables import print_plan

    scenario, folder = load_scenario(args.scenario[0])
    out = None
    if args.out:
        inputs = scenario_inputs(args.scenario[0], scenario, folder, args.catalog, args.calibration)
        out = check_output_file(args.out, "--out", inputs)
    catalog = load_catalog([*(folder / c for c in scenario.catalogs), *args.catalog])
    preset = resolve_preset(scenario.preset, args.calibration, SCENARIO_PRESET_HINT) if args.calibration else None
    progress = ProgressLine.for_terminal(quiet=args.json)
    deadline = Deadline.after(scenario.options.time_limit_s or DEFAULT_TIME_LIMIT_S, progress)
    keywords = dict(solver=args.solver, alternatives=_alternatives(args), preset=preset,
                    jobs=args.jobs or default_jobs())
    try:
        plan = make_verified_plan(scenario, catalog, folder, deadline, make_plan, verify=not args.no_verify,
                                  **keywords)
    finally:
        progress.close()
    d = plan_to_dict(plan)
    _plan_notes(d)
    text = dumps(d)  # strict JSON: a number JSON cannot hold fails here, before anything is written
    if out is not None:
        write_atomically(out, text)
    return emit(d, args.json, print_plan)


def _plan_notes(d: dict[str, Any]) -> None:
    """A warning on stderr when the plan is not proven optimal, a note per stage the time limit cut."""
    if d["status"] != Status.OPTIMAL:
        print(terminal(f"fleetplan: warning: {d['termination']}: not proven optimal"), file=sys.stderr)
    for what in d.get("stopped_by_time_limit", []):
        print(terminal(f"fleetplan: note: time limit ({d['time_limit_s']:g} s): {what} cut short"), file=sys.stderr)
    v = d.get("verification")
    if v is not None and v["meets_targets"] is None:
        print(terminal(f"fleetplan: note: unverified: {v['method']}"), file=sys.stderr)


PLAN_DESCRIPTION = (
    "Plan one scenario file, or a batch: several files and/or directories (every *.yaml and *.yml "
    "directly in a directory). A batch solves every scenario, sorted by file name without extension, even when some fail; "
    "it prints a summary table (one row per scenario and per product; --json prints it as JSON), "
    "names each failed scenario on stderr and then exits with code 2."
)


PLAN_OUT_HELP = (
    "one scenario: also write the JSON plan to this file; a batch: write each plan to OUT/<stem>.json and "
    "the summary to OUT/summary.csv and OUT/summary.json in this directory (created if needed; a failed "
    "scenario writes and removes nothing); without --out a batch writes no files. An output that is one "
    "of the inputs is refused"
)


def register(sub: Any) -> None:
    """The ``plan`` subcommand's flags."""
    pl = sub.add_parser("plan", help="cheapest fleet for a scenario file, or for a batch of them",
                        description=PLAN_DESCRIPTION)
    pl.add_argument("scenario", nargs="+", help="scenario YAML file(s) or directories of them")
    add_solver_flag(pl)
    add_catalog_flag(pl)
    pl.add_argument("--json", action="store_true", help="print JSON (a batch: the summary)")
    pl.add_argument("--out", help=PLAN_OUT_HELP)
    pl.add_argument("--jobs", type=number_flag(F.JOBS), default=None,
                    help="a batch: plan this many scenarios at once in worker processes (default 1); one scenario: "
                         "use this many worker processes for independent multi-hour components, a long request "
                         "mix's hours and the runner-ups (default: the CPUs here, at most "
                         f"{MAX_DEFAULT_JOBS}; the same plan for any value)")
    pl.add_argument("--calibration", help=CALIBRATION_HELP)
    pl.add_argument("--scheduler", help="a batch: " + SCHEDULER_HELP)
    pl.add_argument("--no-verify", action="store_true",
                    help="a scenario with a trace: return the plan without replaying the trace's peak hour on it "
                         "(the plan is then unverified)")
    which = pl.add_mutually_exclusive_group()
    which.add_argument("--no-alternatives", action="store_true",
                       help="skip the per-GPU-type runner-up solves (and, for a request mix, the mix kept to each "
                            "prefill mode)")
    which.add_argument("--all-alternatives", action="store_true",
                       help="also search the runner-ups and prefill-mode costs of a large request mix over 48 "
                            "distinct hours or more (each as long a search as the plan's own; by default they are "
                            "listed by lower bound, unsearched)")
    pl.set_defaults(func=cmd_plan)

"""``fleetplan simulate PLAN.json [--trace FILE.csv [--trace-rate plan] | --requests N [--arrival-scv X]] [--hour H] [--seed S] [--json]``.

Replays one hour of requests on a plan's replicas (:mod:`fleetplan.optimizer.simulation.simulate_plan`)
and prints the achieved TTFT and TPOT percentiles against the plan's targets, the replicas'
utilisation and the requests that missed. Bounded by ``--time-limit`` (a run past it ends with
one line and exit code 2); a progress line on stderr on a terminal, like the other commands.

Owns this command's flags, files and output only."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fleetplan.catalogs.fields import HOUR, Range
from fleetplan.catalogs.loader import InputError
from fleetplan.rendering.escape import for_terminal, terminal

REQUESTS = Range(1, 1e7, "requests", "ten million requests take hours in an event loop", integer=True)
TIME_LIMIT_S = Range(0, 86400, "seconds", "a day is beyond any interactive command", lo_open=True)
SIMULATE_TIME_LIMIT_S = 300.0  # a simulation of the default 20,000 requests takes seconds; a large one, minutes


def _progress_hook(progress: Any, deadline: Any, limit: float) -> Any:
    """A callback of simulated seconds: redraws the progress line, stops past the deadline."""
    def hook(now_s: float) -> None:
        progress.update(f"simulate: {now_s:,.0f} simulated s")
        if deadline.expired:
            raise InputError(f"--time-limit: {limit:g} s passed at simulated second {now_s:,.0f}; give fewer "
                             f"--requests or a longer --time-limit")
    return hook


SLOW_REPLAY = 0.5
"""A run whose requests arrive at less than this share of the hour's planned rate says so: a
trace replayed at its logged rate does not load the replicas the plan sized for a scaled one
(``--trace-rate plan`` replays it at the planned rate)."""
TRACE_RATES = ("logged", "plan")


def _arrived_slowly(p: dict[str, Any]) -> bool:
    """Whether product row ``p``'s requests arrived at less than :data:`SLOW_REPLAY` of its planned rate."""
    rate = p.get("arrival_rate_qps")
    return rate is not None and rate < SLOW_REPLAY * p["qps"]


def _print(d: dict[str, Any], con: Any) -> None:
    """One block per product: percentiles, targets, utilisation, misses, verdict."""
    d = for_terminal(d)
    for p in d["products"]:
        t, s = p["ttft_ms"], p["tpot_ms"]
        if _arrived_slowly(p):  # a logged trace replayed below the planned load
            arrived = (f"{p['requests']:,} requests arriving at {p['arrival_rate_qps']:g}/s "
                       f"(the plan's hour serves {p['qps']:g}/s)")
        else:
            arrived = f"{p['requests']:,} requests at {p['qps']:g}/s"
        con.print(f"{p['name']}: hour {p['hour']}, {arrived} on "
                  f"{p['replicas']} replicas" + (f" + {p['pool_replicas']} prefill" if p["pool_replicas"] else ""))
        con.print(f"  TTFT ms p50 {t['p50']}  p90 {t['p90']}  p99 {t['p99']}   targets {p['targets']['ttft_ms'] or '-'}")
        con.print(f"  TPOT ms p50 {s['p50']}  p90 {s['p90']}  p99 {s['p99']}   target {p['targets']['tpot_ms'] or '-'}")
        con.print(f"  utilisation {p['utilisation']:.1%}, {p['missed_requests']:,} requests missed, "
                  f"{'meets' if p['meets_targets'] else 'MISSES'} its targets")


def cmd_simulate(args: argparse.Namespace) -> int:
    """Read the plan (and trace), simulate the hour, print the result."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.commands.io import emit, resolve_preset
    from fleetplan.optimizer.runtime.deadline import Deadline
    from fleetplan.rendering.progress import ProgressLine
    from fleetplan.commands.io import read_plan
    from fleetplan.optimizer.simulation.simulate_plan import Settings, simulate_plan
    from fleetplan.optimizer.traffic.trace import read_trace

    catalog = load_catalog(args.catalog)
    plan = read_plan(args.plan, catalog)
    preset = resolve_preset(plan.get("preset") or "default", plan.get("calibration"))
    trace = read_trace(args.trace) if args.trace else None
    if trace is not None and args.arrival_scv is not None:
        raise InputError("--arrival-scv: a trace brings its own arrivals; give --trace or --arrival-scv, not both")
    if trace is None and args.trace_rate != "logged":
        raise InputError("--trace-rate: scales a trace's arrivals; give --trace too (drawn requests arrive "
                         "at the planned rate already)")
    settings = Settings(hour=args.hour, requests=args.requests, seed=args.seed, trace=trace,
                        arrival_scv=args.arrival_scv, trace_rate=args.trace_rate)
    progress = ProgressLine.for_terminal(quiet=args.json)
    deadline = Deadline.after(args.time_limit, progress)
    try:
        result = simulate_plan(plan, catalog, preset, settings, _progress_hook(progress, deadline, args.time_limit))
    finally:
        progress.close()
    for p in result["products"]:
        if result["trace_rate"] == "logged" and _arrived_slowly(p):
            print(terminal(f"fleetplan: note: {p['name']}: the trace hour's requests arrive at "
                           f"{p['arrival_rate_qps']:g}/s, below the "
                           f"{p['qps']:g}/s planned; --trace-rate plan replays them at the planned rate"), file=sys.stderr)
        if p["short_run"]:
            print(terminal(f"fleetplan: note: {p['name']}: {p['simulated_s']:g} simulated s is under three request lifetimes "
                  f"({p['mean_request_s']:g} s each): a queue may not have built up yet; give more --requests"),
                  file=sys.stderr)
    if result["skipped"]:
        print(terminal(f"fleetplan: note: not simulated (API only or pooled replicas): {', '.join(result['skipped'])}"),
              file=sys.stderr)
    return emit(result, args.json, _print)


def register(sub: Any) -> None:
    """Add ``simulate`` to the CLI's subparsers."""
    from fleetplan.catalogs import fields as F
    from fleetplan.commands.flags import add_catalog_flag, number_flag
    from fleetplan.optimizer.common.defaults import DEFAULT_REQUESTS  # not the simulator: every command builds this parser

    s = sub.add_parser("simulate", help="replay an hour of requests on a plan's replicas and check its targets",
                       description="Discrete-event simulation of a plan's replicas (continuous batching, chunked "
                                   "prefill or the prefill pool) over one hour's requests: from --trace (the busiest "
                                   "trace hour landing on the plan hour) or a Poisson sample of --requests at the "
                                   "hour's planned rate. Reports TTFT and TPOT percentiles against the targets.")
    s.add_argument("plan", help="a plan's JSON (fleetplan plan SCENARIO --out PLAN.json)")
    s.add_argument("--trace", help="request trace CSV (timestamp, input_tokens, output_tokens, or Azure/BurstGPT names)")
    s.add_argument("--trace-rate", choices=TRACE_RATES, default="logged",
                   help="a trace's arrivals as logged (default), or 'plan': scaled in time so that the hour's "
                        "requests arrive at the plan hour's rate, bursts kept in shape")
    s.add_argument("--requests", type=number_flag(REQUESTS), default=DEFAULT_REQUESTS,
                   help=f"requests to simulate (a trace hour: the first this many; default {DEFAULT_REQUESTS})")
    s.add_argument("--arrival-scv", type=number_flag(F.ARRIVAL_SCV), default=None,
                   help="inter-arrival SCV of the drawn requests (default: the product's arrival_scv, else 1: "
                        "Poisson; above 1: bursts)")
    s.add_argument("--hour", type=number_flag(HOUR), default=None, help="plan hour (default: the peak hour)")
    s.add_argument("--seed", type=number_flag(Range(0, 2**32 - 1, "", "seeds are unsigned 32-bit numbers",
                                                    integer=True)), default=0, help="seed (default 0)")
    s.add_argument("--time-limit", type=number_flag(TIME_LIMIT_S), default=SIMULATE_TIME_LIMIT_S,
                   help=f"seconds of wall clock at most (default {SIMULATE_TIME_LIMIT_S:g})")
    add_catalog_flag(s)
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_simulate)

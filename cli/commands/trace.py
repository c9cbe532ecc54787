"""``fleetplan trace generate --out FILE.csv`` and ``fleetplan trace show FILE.csv``.

``generate`` writes a seeded synthetic trace (:mod:`fleetplan.optimizer.traffic.synthetic`), the same
bytes for the same flags; ``show`` prints what a product planned from a trace takes from it
(:func:`fleetplan.optimizer.traffic.trace.product_fields`).

Owns these commands' flags and output only; reading and drawing traces live in ``optimizer/``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fleetplan.rendering.escape import terminal
from fleetplan.catalogs.fields import Range

# valid flag values
REQUESTS = Range(1, 1e8, "requests", "a hundred million requests is beyond a few GB of CSV", integer=True)
HOURS = Range(1, 168, "hours", "a synthetic trace spans at most a week", integer=True)
PERCENTILE = Range(0, 1, "", "a share of the hour's minutes, above 0 and at most 1", lo_open=True)


def cmd_generate(args: argparse.Namespace) -> int:
    """Draw the trace and write it atomically; one line on stdout says what was written."""
    from dataclasses import replace

    from fleetplan.catalogs.files import check_output_file
    from fleetplan.commands.io import write_atomically
    from fleetplan.optimizer.traffic.synthetic import TraceShape, generate, trace_csv

    out = check_output_file(args.out, "--out", [])
    shape = replace(TraceShape(), days=args.days, hours=args.hours, arrival_scv=args.arrival_scv)
    arrival, tokens_in, tokens_out = generate(args.requests, args.seed, shape)
    write_atomically(out, trace_csv(arrival, tokens_in, tokens_out))
    span = f"{args.hours} hours at a flat rate" if args.hours is not None else f"{args.days} days"
    print(terminal(f"wrote {out}: {args.requests:,} requests over {span}, inter-arrival SCV {args.arrival_scv:g} "
                   f"(seed {args.seed})"))
    return 0


def _print_fields(d: dict[str, Any], con: Any) -> None:
    """The derived demand and size mix as text."""
    con.print(f"peak {d['peak_qps']:.3f} requests/s over a {len(d['profile'])}-hour horizon; "
              f"mean {d['input_tokens']:,} input and {d['output_tokens']:,} output tokens")
    for b in d["requests"]:
        con.print(f"  {b['share']:7.2%}  {b['input_tokens']:>7,} in  {b['output_tokens']:>6,} out")
    _print_variability(d, con)


def _print_variability(d: dict[str, Any], con: Any) -> None:
    """Arrival variability of the busiest planned hour and of the burstiest one (``--json``: every hour)."""
    hours = d["arrivals"]
    peak = max(range(len(d["profile"])), key=lambda h: (d["profile"][h], -h))
    rows = [("busiest hour", peak)]
    burstiest = max(range(len(hours)), key=lambda h: (hours[h]["arrival_scv"], -h))
    if burstiest != peak:
        rows.append(("burstiest hour", burstiest))
    con.print(f"arrivals planned at inter-arrival SCV {d['arrival_scv']:g} (Poisson: 1)")
    for label, h in rows:
        r = hours[h]
        con.print(f"  {label} {h} (trace hour {r['trace_hour']}): {r['requests']:,} requests, mean "
                  f"{r['mean_qps']:g}/s, SCV {r['arrival_scv']:g}; peak {r['peak_qps_1s']:g}/s over 1 s, "
                  f"{r['peak_qps_10s']:g}/s over 10 s, {r['peak_qps_60s']:g}/s over 60 s; longest burst above "
                  f"the mean {r['longest_burst_s']:g} s")


def cmd_show(args: argparse.Namespace) -> int:
    """Print the peak, the mean sizes, the size mix, the arrival variability and (``--json``)
    the hourly profile and every hour's variability."""
    from fleetplan.commands.io import emit
    from fleetplan.optimizer.traffic.trace import product_fields

    d = product_fields(Path(args.trace), buckets=args.buckets, percentile=args.percentile)
    return emit(d, args.json, _print_fields)


def register(sub: Any) -> None:
    """Add ``trace generate`` and ``trace show`` to the CLI's subparsers."""
    from fleetplan.catalogs import fields as F
    from fleetplan.commands.flags import Parser, number_flag
    from fleetplan.optimizer.common.defaults import DEFAULT_BUCKETS, DEFAULT_PERCENTILE  # not the trace reader (numpy)

    t = sub.add_parser("trace", help="generate a synthetic request trace, or show what a plan takes from one")
    tsub = t.add_subparsers(dest="trace_command", required=True, parser_class=Parser)
    g = tsub.add_parser("generate", help="write a seeded synthetic trace (timestamp, input_tokens, output_tokens)",
                        description="Write a synthetic trace: a diurnal and weekly arrival profile with bursts, "
                                    "log-normal sizes with the medians of the Azure 2023 conversation trace.")
    g.add_argument("--out", required=True, help="CSV file to write")
    g.add_argument("--requests", type=number_flag(REQUESTS), default=100_000, help="requests (default 100000)")
    g.add_argument("--days", type=int, choices=range(1, 8), default=7, metavar="{1..7}", help="days (default 7)")
    g.add_argument("--hours", type=number_flag(HOURS), default=None,
                   help="a flat rate over this many hours instead of --days' diurnal profile")
    g.add_argument("--arrival-scv", type=number_flag(F.ARRIVAL_SCV), default=1.0,
                   help="squared coefficient of variation of the gaps between requests (default 1: Poisson; "
                        "above 1: bursts of geometric size, e.g. 170 like a bursty code-completion trace)")
    g.add_argument("--seed", type=number_flag(F.SEED), default=0, help="seed (default 0)")
    g.set_defaults(func=cmd_generate)
    s = tsub.add_parser("show", help="peak, hourly profile and size mix a product takes from a trace")
    s.add_argument("trace")
    s.add_argument("--buckets", type=int, choices=range(1, 65), default=DEFAULT_BUCKETS, metavar="{1..64}",
                   help=f"log-spaced size buckets (default {DEFAULT_BUCKETS})")
    s.add_argument("--percentile", type=number_flag(PERCENTILE), default=DEFAULT_PERCENTILE,
                   help=f"percentile of each hour's per-minute arrival rates (default {DEFAULT_PERCENTILE})")
    s.add_argument("--json", action="store_true", help="print JSON (with the hourly profile)")
    s.set_defaults(func=cmd_show)

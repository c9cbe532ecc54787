"""Benchmark planning a 168-hour product from a 1,000,000-request trace, trace reading included.

Generates a week of requests (:mod:`fleetplan.optimizer.traffic.synthetic`, seed 0) into a temporary
folder, then plans a Llama 3.1 70B chat product from it over the whole catalog several times,
with the trace read afresh each run (the trace cache cleared). Printed: the trace's figures, then
the median seconds of each stage (reading the CSV, the hourly profile and size mix, candidate
generation, the MIPs) and of the whole (scenario load with the trace, and the plan), then of the
command in a fresh process: as a user runs it (the plan, its best single configuration and each
GPU type's lower bound), with ``--no-alternatives`` (the plan alone) and, with ``--all``, with
``--all-alternatives`` (every runner-up searched, within the default time limit). The plan
takes the trace's size mix (4 buckets: a request mix over 168 distinct hours, solved hour by
hour); ``--mean-sizes`` plans the trace's mean sizes instead (``trace_buckets: 1``); ``--jobs``
is the worker processes, as the CLI's (default: the CPUs here, at most 4).

    python benchmarks/bench_trace.py [--runs 5] [--requests 1000000] [--mean-sizes] [--jobs N] [--all]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleetplan.catalogs import load_catalog
from fleetplan.optimizer.traffic import trace as T
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.traffic.scenario import load_scenario
from fleetplan.optimizer.traffic.synthetic import generate, trace_csv
from fleetplan.optimizer.runtime.workers import default_jobs

SCENARIO = """\
preset: default
products:
  - name: chat
    model: llama-3.1-70b
    trace: week.csv
    peak_qps: 200
    min_tokens_per_s_per_user: 30
    max_ttft_ms: 2000
"""


def _stages(path: Path) -> dict[str, float]:
    """Seconds to read the trace, and to derive its profile and size mix, once."""
    t0 = time.perf_counter()
    trace = T.read_trace(path)
    t1 = time.perf_counter()
    T.hourly_qps(trace, T.DEFAULT_PERCENTILE)
    T.size_histogram(trace, T.DEFAULT_BUCKETS)
    return {"read_s": t1 - t0, "derive_s": time.perf_counter() - t1}


def _plan_once(scenario_path: Path, catalog: object, jobs: int) -> dict[str, float]:
    """One end-to-end plan from the scenario file (trace read afresh); its stage times."""
    T._fields.cache_clear()
    t0 = time.perf_counter()
    scenario, folder = load_scenario(scenario_path)
    t1 = time.perf_counter()
    plan = make_plan(scenario, catalog, alternatives=False, folder=folder, jobs=jobs)
    t2 = time.perf_counter()
    assert plan.hours == 168, plan.hours
    return {"load_with_trace_s": t1 - t0, "candidates_s": plan.timings.candidates_s, "solve_s": plan.timings.solve_s,
            "plan_s": t2 - t1, "total_s": t2 - t0, "cost": plan.monthly_cost_usd,
            "status": f"{plan.solve_result.status} (gap {plan.solve_result.mip_gap or 0.0:.3%})"}


def _cli_once(scenario_path: Path, jobs: int, *extra: str) -> float:
    """Wall seconds of ``fleetplan plan SCENARIO --json --jobs N [extra]`` in a fresh process."""
    cmd = [str(Path(sys.executable).parent / "fleetplan"), "plan", str(scenario_path), "--json", "--jobs", str(jobs),
           *extra]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    """Generate the trace, time the stages and the plan, print the medians."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--mean-sizes", action="store_true", help="plan the trace's mean sizes (trace_buckets: 1)")
    ap.add_argument("--jobs", type=int, default=default_jobs(),
                    help=f"worker processes, as fleetplan plan --jobs (default here: {default_jobs()})")
    ap.add_argument("--all", action="store_true", help="also time the command with --all-alternatives")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        (folder / "week.csv").write_text(trace_csv(*generate(args.requests, 0)), encoding="utf-8")
        print(f"generated {args.requests:,} requests ({(folder / 'week.csv').stat().st_size / 1e6:.1f} MB) "
              f"in {time.perf_counter() - t0:.2f} s")
        scenario = SCENARIO + ("    trace_buckets: 1\n" if args.mean_sizes else "")
        (folder / "scenario.yaml").write_text(scenario, encoding="utf-8")
        catalog = load_catalog()
        stages = [_stages(folder / "week.csv") for _ in range(args.runs)]
        runs = [_plan_once(folder / "scenario.yaml", catalog, args.jobs) for _ in range(args.runs)]
        bare = [_cli_once(folder / "scenario.yaml", args.jobs, "--no-alternatives") for _ in range(args.runs)]
        walls = [_cli_once(folder / "scenario.yaml", args.jobs) for _ in range(args.runs)]
        every = [_cli_once(folder / "scenario.yaml", args.jobs, "--all-alternatives") for _ in range(args.runs)] \
            if args.all else []
    med = lambda rows, k: statistics.median(r[k] for r in rows)  # noqa: E731
    print(f"median of {args.runs} runs (seconds), {args.jobs} worker process(es):")
    for k in ("read_s", "derive_s"):
        print(f"  trace {k:<20} {med(stages, k):8.3f}")
    for k in ("load_with_trace_s", "candidates_s", "solve_s", "plan_s", "total_s"):
        print(f"  plan  {k:<20} {med(runs, k):8.3f}")
    print(f"  CLI   {'plan --no-alternatives':<20} {statistics.median(bare):8.3f}  (start-up, imports, the plan)")
    print(f"  CLI   {'plan':<20} {statistics.median(walls):8.3f}  (and the best single configuration, each GPU "
          f"type's lower bound)")
    if every:
        print(f"  CLI   {'plan --all-alternatives':<20} {statistics.median(every):8.3f}  (and the runner-ups: the mix on "
              f"each GPU type and in each prefill mode, within the default time limit)")
    print(f"monthly cost ${runs[-1]['cost']:,.2f} (same in every run: {len({r['cost'] for r in runs}) == 1}), "
          f"{runs[-1]['status']}")


if __name__ == "__main__":
    main()

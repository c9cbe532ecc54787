"""Benchmark the planner's deadline on the stress scenarios of ``stress_cases.py``.

For each scenario: wall time and peak memory of ``fleetplan plan FILE --json`` as a user runs it
(a fresh process, the default deadline unless the file sets one), status, gap, monthly cost and
what the deadline cut short; medians over ``--runs``.

    python benchmarks/bench_deadline.py [--runs 3] [--only portfolio-50]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from stress_cases import write_cases


def run_once(path: Path) -> tuple[float, float, dict]:
    """(wall seconds, peak resident GB of the child, plan JSON or {"error": ...}) of one run."""
    exe = str(Path(sys.executable).parent / "fleetplan")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run([exe, "plan", str(path), "--json"], capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) * 1024 / 1e9
    data = json.loads(proc.stdout) if proc.returncode == 0 else {"error": proc.stderr.strip().splitlines()[-1:]}
    return wall, peak, data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for path in write_cases(Path(tmp)):
            if args.only not in path.name:
                continue
            rows = [run_once(path) for _ in range(args.runs)]
            d = rows[-1][2]
            walls = [r[0] for r in rows]
            print(f"{path.name:32} wall median {statistics.median(walls):7.1f} s (min {min(walls):.1f}, max {max(walls):.1f}) "
                  f"peak {max(r[1] for r in rows):.2f} GB  " + (
                      f"status {d['status']} gap {d['mip_gap'] or 0:.3%} cost ${d['monthly_cost_usd']:,.0f} "
                      f"stopped {len(d['stopped_by_time_limit'])}" if "error" not in d else f"error {d['error']}"),
                  flush=True)
            if len(rows) > 1 and all("error" not in r[2] for r in rows):
                print(" " * 33 + "each run: " + ", ".join(
                    f"${r[2]['monthly_cost_usd']:,.0f} ({r[2]['mip_gap'] or 0:.2%})" for r in rows), flush=True)


if __name__ == "__main__":
    main()

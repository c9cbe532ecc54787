"""Benchmark ``fleetplan commit`` in parallel: two local workers against one (``--jobs``) and two
Dask workers against one (``--scheduler``), as whole processes, on the week of
``examples/uncertainty/commit-week-sampled.yaml`` with 200, 1,000 and 5,000 sampled outcomes.

Each case is timed from outside the process (start-up, imports and set-up included): one
warm-up each, then the two settings in turn (two workers, one worker, two, one, ...) for
``--runs`` pairs; the medians of the wall times and of the pairwise ratios are reported, with
their spread. Every run's JSON must be byte for byte the same as the first (the plan does not
depend on the workers); the script stops with the differing setting otherwise. The Dask clusters
(``distributed.LocalCluster``, one thread per worker, worker processes) are started before the
clock and warmed by one run, as an existing cluster would be.

The machine is shared: what two processes can gain on it at the moment is measured beside every
case (``machine_speed_up``: the same pure-Python loop run twice in turn against twice side by side
in two processes, the median of three), so a speed-up can be read against what the machine offered.

One JSON line per case on stdout; progress on stderr.

    python benchmarks/bench_commit_parallel.py                       # 200, 1000, 5000; jobs and dask; 5 runs
    python benchmarks/bench_commit_parallel.py --outcomes 200 --runs 7 --modes jobs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "uncertainty" / "commit-week-sampled.yaml"


def scenario_with(outcomes: int, folder: Path) -> Path:
    """The example with ``scenarios: outcomes`` written to ``folder`` (its profiles named by absolute path)."""
    text = EXAMPLE.read_text()
    text = text.replace("../profiles/", str(ROOT / "examples" / "profiles") + "/")
    text = text.replace("scenarios: 200", f"scenarios: {outcomes}")
    assert f"scenarios: {outcomes}" in text
    path = folder / f"commit-week-sampled-{outcomes}.yaml"
    path.write_text(text)
    return path


def command() -> list[str]:
    """The ``fleetplan`` entry point of this interpreter's environment."""
    here = Path(sys.executable).parent / "fleetplan"
    found = str(here) if here.exists() else shutil.which("fleetplan")
    if found is None:
        sys.exit("bench_commit_parallel: no fleetplan command on PATH")
    return [found]


def timed(args: list[str]) -> tuple[float, bytes]:
    """Wall seconds of one whole process and what it printed."""
    start = time.monotonic()
    done = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False, timeout=1800)
    wall = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"bench_commit_parallel: {' '.join(args)} failed: {done.stderr.decode()[-400:]}")
    return wall, done.stdout


def _spin(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def machine_speed_up(n: int = 3_000_000) -> float:
    """Two equal CPU-bound loops one after the other against side by side in two processes (the
    median of three): what two workers could gain on this machine now."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ratios = []
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        list(pool.map(_spin, [1000, 1000]))  # the workers started
        for _ in range(3):
            start = time.monotonic()
            _spin(n)
            _spin(n)
            serial = time.monotonic() - start
            start = time.monotonic()
            list(pool.map(_spin, [n, n]))
            ratios.append(serial / (time.monotonic() - start))
    return round(statistics.median(ratios), 2)


def spread(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 3), "min": round(min(xs), 3), "max": round(max(xs), 3)}


def compare(name: str, outcomes: int, two: list[str], one: list[str], runs: int) -> dict[str, Any]:
    """Two workers (``two``) against one (``one``), in turn, after a warm-up of each."""
    reference = timed(one)[1]
    if timed(two)[1] != reference:
        sys.exit(f"bench_commit_parallel: {name} {outcomes}: two workers' JSON differs from one's")
    a, b, ratio = [], [], []
    load, machine = os.getloadavg()[0], machine_speed_up()
    for k in range(runs):
        ta, out_a = timed(two)
        tb, out_b = timed(one)
        if out_a != reference or out_b != reference:
            sys.exit(f"bench_commit_parallel: {name} {outcomes}: a run's JSON differs")
        a.append(ta)
        b.append(tb)
        ratio.append(tb / ta)
        print(f"bench_commit_parallel: {name} {outcomes} run {k + 1}/{runs}: two {ta:.2f} s, one {tb:.2f} s",
              file=sys.stderr, flush=True)
    plan = json.loads(reference)
    return {"mode": name, "outcomes": outcomes, "runs": runs, "two_workers_wall_s": spread(a),
            "one_worker_wall_s": spread(b), "speed_up": spread(ratio), "machine_speed_up_before": machine,
            "machine_speed_up_after": machine_speed_up(), "same_json": True,
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2),
            "expected_cost_usd": plan["expected_cost_usd"], "gap": plan["gap"],
            "commitment": {f"{c['gpu']}/{c['term']}": c["gpus"] for c in plan["commitment"]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outcomes", default="200,1000,5000", help="sampled outcomes, comma-separated")
    ap.add_argument("--runs", type=int, default=5, help="timed pairs per case (after one warm-up each)")
    ap.add_argument("--modes", default="jobs,dask", help="jobs, dask or both (comma-separated)")
    args = ap.parse_args()
    modes = args.modes.split(",")
    base = command()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {n: scenario_with(n, Path(tmp)) for n in (int(x) for x in args.outcomes.split(","))}
        if "jobs" in modes:
            for n, path in paths.items():
                run = [*base, "commit", str(path), "--json"]
                print(json.dumps(compare("jobs", n, [*run, "--jobs", "2"], [*run, "--jobs", "1"], args.runs)),
                      flush=True)
        if "dask" in modes:
            from distributed import LocalCluster

            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c2, \
                    LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as c1:
                for n, path in paths.items():
                    run = [*base, "commit", str(path), "--json", "--scheduler"]
                    row = compare("dask", n, [*run, c2.scheduler_address], [*run, c1.scheduler_address], args.runs)
                    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

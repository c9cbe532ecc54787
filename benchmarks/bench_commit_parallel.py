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

``--modes cpu`` accounts the kernel's CPU time instead of walls (less sensitive to other jobs on
the machine): the command is run in a process of its own by a small wrapper (``CPU_WRAPPER``),
``--jobs 1`` and ``--jobs 2`` in turn, and reports the CPU of ``--jobs 1``; for ``--jobs 2`` the
command's own CPU before its workers start (the interpreter, imports, reading the scenario and
catalog, the set-up), after they end, and in all, and the workers' CPU (the split's checks, which
load the modeller, and the outcomes' runs). From these it predicts the wall on two idle cores (the
workers take the tasks in order, each the next free; the command's CPU after them added) and the
speed-up against ``--jobs 1``'s CPU.
``--modes dask-cpu`` does the same on the Dask clusters: the client's CPU, the workers' (their
processes' CPU times before and after each run) and client + workers / 2 as the two-core wall.

    python benchmarks/bench_commit_parallel.py                       # 200, 1000, 5000; jobs and dask; 5 runs
    python benchmarks/bench_commit_parallel.py --outcomes 200 --runs 7 --modes jobs
    python benchmarks/bench_commit_parallel.py --outcomes 200 --runs 8 --modes cpu,dask-cpu
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


# Runs ``fleetplan`` (argv after the script) in this process and prints one JSON line on stderr: its
# CPU (getrusage of the process and of its workers) and, with --jobs 2, the CPU when its workers
# start and when their results are in, and each worker task's CPU (the task's function wrapped in place).
CPU_WRAPPER = r"""
import contextlib, io, json, os, resource, sys, tempfile, time
from fleetplan.main import main, one_blas_thread
import fleetplan.optimizer.decisions.stochastic as S
import fleetplan.optimizer.runtime.workers as W
one_blas_thread()
T, marks, log = time.process_time, {}, tempfile.mkstemp(suffix=".jsonl")[1]
def note(task, cpu):
    with open(log, "a") as f:
        f.write(json.dumps({"task": task, "cpu": cpu}) + "\n")
def wrapped(module, name, task):
    inner = getattr(module, name)
    def fn(*a):
        t = T(); out = inner(*a); note(task(a), T() - t); return out
    fn.__module__, fn.__qualname__ = module.__name__, name
    setattr(module, name, fn)
wrapped(S, "_grids_in_copy", lambda a: "checks" if tuple(a) == S.SPLIT_CHECKS else "outcomes")
inner_map = W.map_in_copies
def mapped(fn, *a, **k):
    if fn.__qualname__ == "_grids_in_copy":
        marks["start"] = T()
    out = inner_map(fn, *a, **k)
    if fn.__qualname__ == "_grids_in_copy":
        marks["results"] = T()
    return out
S.map_in_copies = mapped
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
tasks = [json.loads(line) for line in open(log)]
os.unlink(log)
print(json.dumps({"code": code, "own_cpu_s": own.ru_utime + own.ru_stime, "workers_cpu_s": kids.ru_utime + kids.ru_stime,
                  "marks": marks, "tasks": tasks}), file=sys.stderr)
"""


def cpu_run(args: list[str]) -> dict[str, Any]:
    """One run of ``fleetplan ARGS`` under :data:`CPU_WRAPPER`: what it printed on stderr's last line."""
    done = subprocess.run([sys.executable, "-c", CPU_WRAPPER, *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, check=False, timeout=1800)
    row = json.loads(done.stderr.decode().strip().splitlines()[-1])
    if row["code"] != 0:
        sys.exit(f"bench_commit_parallel: {' '.join(args)} failed")
    return row


def two_core_wall(row: dict[str, Any]) -> float:
    """The wall of a ``--jobs 2`` run on two idle cores from its CPU (:data:`CPU_WRAPPER`): the
    command alone until its workers start; then the checks (first) and the runs, each to whichever
    worker is free first; the command's CPU after the runs is added."""
    m = row["marks"]
    free = [m["start"], m["start"]]
    for t in sorted(row["tasks"], key=lambda t: t["task"] != "checks"):  # the checks are submitted first
        free[free.index(min(free))] += t["cpu"]
    return max(free) + row["own_cpu_s"] - m["results"]


def cpu_case(outcomes: int, path: Path, runs: int) -> dict[str, Any]:
    """CPU accounting of ``--jobs 1`` and ``--jobs 2`` on ``path``, ``runs`` of each in turn; medians."""
    run = ["commit", str(path), "--json"]
    cpu_run([*run, "--jobs", "2"])  # warm-up
    one, two = [], []
    for k in range(runs):
        two.append(cpu_run([*run, "--jobs", "2"]))
        one.append(cpu_run([*run, "--jobs", "1"]))
        print(f"bench_commit_parallel: cpu {outcomes} run {k + 1}/{runs}", file=sys.stderr, flush=True)

    def med(xs: list[float]) -> float:
        return round(statistics.median(xs), 3)

    def task(r: dict[str, Any], name: str) -> float:
        return sum(t["cpu"] for t in r["tasks"] if t["task"] == name)

    single = med([r["own_cpu_s"] + r["workers_cpu_s"] for r in one])
    wall = med([two_core_wall(r) for r in two])
    return {"mode": "cpu", "outcomes": outcomes, "runs": runs, "one_worker_cpu_s": single,
            "two_workers": {"command_before_workers_s": med([r["marks"]["start"] for r in two]),
                            "command_after_workers_s": med([r["own_cpu_s"] - r["marks"]["results"] for r in two]),
                            "command_cpu_s": med([r["own_cpu_s"] for r in two]),
                            "workers_cpu_s": med([r["workers_cpu_s"] for r in two]),
                            "checks_s": med([task(r, "checks") for r in two]),
                            "outcomes_s": med([task(r, "outcomes") for r in two])},
            "predicted_two_core_wall_s": wall, "predicted_speed_up": round(single / wall, 2),
            "load_after": round(os.getloadavg()[0], 2)}


def dask_cpu_case(outcomes: int, path: Path, runs: int) -> dict[str, Any]:
    """CPU accounting on Dask clusters of two workers and one (started first, warmed by a run): the
    client's CPU (:data:`CPU_WRAPPER`) and the workers' (their processes' CPU times before and
    after), ``runs`` of each in turn; medians, and the wall that predicts on two idle cores."""
    import psutil
    from distributed import LocalCluster

    def workers_cpu(cluster: Any) -> float:
        total = 0.0
        for nanny in cluster.workers.values():
            for proc in (p := psutil.Process(nanny.process.process.pid), *p.children(recursive=True)):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    def once(cluster: Any) -> tuple[float, float]:
        before = workers_cpu(cluster)
        row = cpu_run(["commit", str(path), "--json", "--scheduler", cluster.scheduler_address])
        return row["own_cpu_s"], workers_cpu(cluster) - before

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c2, \
            LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as c1:
        once(c2)  # warm-up
        once(c1)
        two, one = [], []
        for k in range(runs):
            two.append(once(c2))
            one.append(once(c1))
            print(f"bench_commit_parallel: dask-cpu {outcomes} run {k + 1}/{runs}", file=sys.stderr, flush=True)

    def med(xs: list[float]) -> float:
        return round(statistics.median(xs), 3)

    client2, workers2 = med([a for a, _ in two]), med([b for _, b in two])
    client1, workers1 = med([a for a, _ in one]), med([b for _, b in one])
    return {"mode": "dask-cpu", "outcomes": outcomes, "runs": runs,
            "two_workers": {"client_cpu_s": client2, "workers_cpu_s": workers2},
            "one_worker": {"client_cpu_s": client1, "workers_cpu_s": workers1},
            "predicted_two_core_wall_s": round(client2 + workers2 / 2, 3),
            "predicted_speed_up": round((client1 + workers1) / (client2 + workers2 / 2), 2),
            "load_after": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outcomes", default="200,1000,5000", help="sampled outcomes, comma-separated")
    ap.add_argument("--runs", type=int, default=5, help="timed pairs per case (after one warm-up each)")
    ap.add_argument("--modes", default="jobs,dask", help="jobs, dask, cpu, dask-cpu (comma-separated)")
    args = ap.parse_args()
    modes = args.modes.split(",")
    base = command()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {n: scenario_with(n, Path(tmp)) for n in (int(x) for x in args.outcomes.split(","))}
        if "cpu" in modes:
            for n, path in paths.items():
                print(json.dumps(cpu_case(n, path, args.runs)), flush=True)
        if "dask-cpu" in modes:
            for n, path in paths.items():
                print(json.dumps(dask_cpu_case(n, path, args.runs)), flush=True)
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

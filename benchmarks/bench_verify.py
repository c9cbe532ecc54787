"""Benchmark plans that must hold on bursty traffic: the queueing model against the simulated
pool across arrival SCVs, and verified plans against the cheapest replica counts whose replay
meets the targets.

Part 1, the agreement grid (``--grid``): a first-come-first-served pool of ``c`` servers
(:func:`fleetplan.optimizer.simulation.simulate.fifo_pool`) takes 40,000 requests arriving in bursts
(:func:`fleetplan.optimizer.traffic.synthetic.renewal_gaps`, seed 1) at inter-arrival SCV 1-200,
1-64 servers, utilisation 0.1-0.9 and the three service mixes of
``tests/test_queueing_simulation.py``; the analytic P99 of TTFT
(:func:`fleetplan.models.queueing.ttft_quantile_s`) is compared with the simulated one. Printed:
the worst errors per SCV, and the agreement: over P99 targets of 0.25 s to 64 s, where the model
says a target holds, the share of cases whose simulation holds it too.

Part 2, the plans (``--plans``): the issue's scenario (Llama 3.1 70B, 20 tokens/s per user, P99
TTFT 2,000 ms, the whole catalog) on generated one-hour traces at 2.6 requests/s with SCV 1, 10,
100 and 170 (and at 170 with chunked prefill on the mean sizes, ``prefill: colocated``,
``trace_buckets: 1``: the issue's miss), and ``examples/chat-trace.yaml``: each planned with and without verification
(seconds of each), the verified plan's replay, and the cheapest replica counts of the verified
plan's configurations whose replay still meets the targets (one replica fewer at a time, of any
configuration or the pool, while the replay meets), with the verified plan's cost over it.

The seconds are the median of ``--runs`` runs (3 by default), unverified and verified in turn, so
both see the same load.

    python benchmarks/bench_verify.py [--grid] [--plans] [--requests 40000] [--runs 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fleetplan.catalogs import load_catalog
from fleetplan.commands.io import resolve_preset
from fleetplan.models.queueing import ServiceTime, ttft_quantile_s
from fleetplan.optimizer.simulation.simulate import fifo_pool
from fleetplan.optimizer.simulation.simulate_plan import Settings, simulate_product
from fleetplan.optimizer.traffic.synthetic import TraceShape, generate, renewal_gaps, trace_csv
from fleetplan.optimizer.traffic.trace import read_trace
from fleetplan.optimizer.simulation.verify import REPLAY_REQUESTS, SEED

ROOT = Path(__file__).resolve().parent.parent
MIXES = {"one length": ((0.2,), (1.0,)), "two lengths": ((0.1, 0.6), (0.8, 0.2)),
         "three lengths": ((0.05, 0.2, 1.0), (0.6, 0.3, 0.1))}
SCVS = (1.0, 10.0, 50.0, 100.0, 200.0)
SERVERS = (1, 4, 16, 64)
UTILISATIONS = (0.1, 0.3, 0.6, 0.9)
TARGETS_S = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
ISSUE_SCENARIO = """\
preset: default
products:
  - name: code
    model: llama-3.1-70b
    trace: {trace}
    min_tokens_per_s_per_user: 20
    max_ttft_ms: {{p99: 2000}}
"""
ISSUE_REQUESTS = 9_360  # one hour at 2.6 requests/s, the code-completion trace's mean rate


def grid(requests: int) -> None:
    """Part 1: the analytic P99 against the simulated pool; worst errors and agreement."""
    rows = []
    for scv in SCVS:
        for c in SERVERS:
            for rho in UTILISATIONS:
                for name, (times, shares) in MIXES.items():
                    rng = np.random.Generator(np.random.PCG64(1))
                    service = ServiceTime.of_mix(times, shares)
                    arrival = np.cumsum(renewal_gaps(rho * c / service.mean_s, requests, scv, rng))
                    s = rng.choice(np.array(times), size=requests, p=np.array(shares))
                    simulated = float(np.percentile(fifo_pool(arrival, s, c) + s - arrival, 99))
                    analytic = ttft_quantile_s(0.99, servers=c, utilisation=rho, service=service, arrival_scv=scv)
                    rows.append((scv, c, rho, name, analytic, simulated))
    print("| SCV | cases | worst low (analytic / simulated - 1) | where | worst high | where |")
    print("|---|---|---|---|---|---|")
    for scv in SCVS:
        mine = [r for r in rows if r[0] == scv]
        low = min(mine, key=lambda r: r[4] / r[5])
        high = max(mine, key=lambda r: r[4] / r[5])
        print(f"| {scv:g} | {len(mine)} | {low[4] / low[5] - 1:+.1%} | {low[1]} servers at {low[2]}, {low[3]} | "
              f"{high[4] / high[5] - 1:+.1%} | {high[1]} servers at {high[2]}, {high[3]} |")
    said = [(r, t) for r in rows for t in TARGETS_S if r[4] <= t]
    agree = sum(1 for r, t in said if r[5] <= t)
    at_model = sum(1 for r in rows if r[5] <= r[4])
    print(f"\nagreement: {agree} of {len(said)} (case, target) pairs where the model says the P99 target holds "
          f"also hold in simulation ({agree / len(said):.1%}; {len(rows)} cases x {len(TARGETS_S)} targets "
          f"{TARGETS_S[0]:g}-{TARGETS_S[-1]:g} s); at a target equal to the analytic P99 itself: "
          f"{at_model} of {len(rows)} ({at_model / len(rows):.1%})")


def _plan(scenario: Path, out: Path, *extra: str) -> float:
    """Seconds of ``fleetplan plan SCENARIO --out OUT [extra]`` in a fresh process."""
    cmd = [str(Path(sys.executable).parent / "fleetplan"), "plan", str(scenario), "--out", str(out), *extra]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def _counts(pd: dict[str, Any]) -> list[tuple[str, int, float]]:
    """(what, replicas, USD per month per replica) of a one-hour plan's decode configurations and pool."""
    pool = pd.get("prefill") or {}
    out = []
    if pd.get("configurations"):
        out += [(c["key"], c["peak_hour_replicas"], c["usd_per_month"] / c["replicas"]) for c in pd["configurations"]]
    else:
        decode = pd["monthly_cost_usd"] - (pool.get("monthly_cost_usd") or 0.0)
        out.append(("decode", pd["replicas"], decode / pd["replicas"]))
    if pool.get("replicas"):
        out.append(("pool", pool["replicas"], pool["monthly_cost_usd"] / pool["replicas"]))
    return out


def _with_counts(pd: dict[str, Any], counts: list[int]) -> dict[str, Any]:
    """``pd`` with the replica counts of :func:`_counts` replaced."""
    out = copy.deepcopy(pd)
    k = 0
    if out.get("configurations"):
        for conf in out["configurations"]:
            conf["peak_hour_replicas"] = counts[k]
            k += 1
    else:
        out["replicas"] = counts[k]
        k += 1
    if (out.get("prefill") or {}).get("replicas"):
        out["prefill"]["replicas"] = counts[k]
    return out


def cheapest_counts(pd: dict[str, Any], catalog: Any, preset: Any, settings: Settings) -> tuple[float, list[int]]:
    """The cheapest replica counts of ``pd``'s configurations whose replay meets the targets,
    by taking one replica off whichever part saves most while the replay still meets."""
    parts = _counts(pd)
    counts = [n for _, n, _ in parts]
    while True:
        order = sorted(range(len(parts)), key=lambda i: -parts[i][2])
        for i in order:
            if counts[i] <= (1 if parts[i][0] in ("decode", "pool") else 0):
                continue
            trial = counts[:i] + [counts[i] - 1] + counts[i + 1:]
            if sum(trial[:len(trial) - (1 if parts[-1][0] == "pool" else 0)]) == 0:
                continue
            if simulate_product(_with_counts(pd, trial), catalog, preset, 1, settings)["meets_targets"]:
                counts = trial
                break
        else:
            return sum(n * p for n, (_, _, p) in zip(counts, parts)), counts


def plans(runs: int = 3) -> None:
    """Part 2: verified plans on generated traces and the shipped example, against the cheapest counts."""
    catalog = load_catalog([])
    cases: list[tuple[str, Path, Path | None]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for scv in (1.0, 10.0, 100.0, 170.0):
            a, i, o = generate(ISSUE_REQUESTS, 1, TraceShape(hours=1, arrival_scv=scv))
            trace = folder / f"scv{scv:g}.csv"
            trace.write_text(trace_csv(a, i, o), encoding="utf-8")
            scenario = folder / f"scv{scv:g}.yaml"
            scenario.write_text(ISSUE_SCENARIO.format(trace=trace.name), encoding="utf-8")
            cases.append((f"1 h at 2.6/s, SCV {scv:g}", scenario, trace))
        colocated = folder / "scv170-colocated.yaml"
        colocated.write_text(ISSUE_SCENARIO.format(trace="scv170.csv") + "    prefill: colocated\n    trace_buckets: 1\n",
                             encoding="utf-8")
        cases.append(("1 h at 2.6/s, SCV 170, chunked prefill, mean sizes", colocated, folder / "scv170.csv"))
        cases.append(("examples/chat-trace.yaml", ROOT / "examples" / "chat-trace.yaml", None))
        print("| trace | unverified s | verified s | verified / unverified | rounds | P99 TTFT ms (target 2,000) | median TPOT ms | "
              "verified $/month | cheapest replay-feasible $/month | ratio | unverified $/month, its replay |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for label, scenario, trace in cases:
            _plan_row(label, scenario, trace, folder, catalog, runs)


def _plan_row(label: str, scenario: Path, trace: Path | None, folder: Path, catalog: Any, runs: int) -> None:
    """One row of part 2."""
    unverified, verified = folder / "u.json", folder / "v.json"
    times = [(_plan(scenario, unverified, "--no-verify"), _plan(scenario, verified)) for _ in range(runs)]
    t_u, t_v = (statistics.median(t[k] for t in times) for k in (0, 1))
    u, v = (json.loads(p.read_text(encoding="utf-8")) for p in (unverified, verified))
    preset = resolve_preset(v.get("preset") or "default", v.get("calibration"))
    check = v["verification"]
    pd = v["products"][0]
    if trace is not None:
        settings = Settings(requests=REPLAY_REQUESTS, seed=SEED, trace=read_trace(trace))
    else:
        scv = float(check["method"].split("SCV ")[1].split(" ")[0])
        settings = Settings(requests=REPLAY_REQUESTS, seed=SEED, arrival_scv=scv)
    replay_u = simulate_product(u["products"][0], catalog, preset, u.get("hours") or 1, settings)
    if (v.get("hours") or 1) == 1:
        cheapest, _ = cheapest_counts(pd, catalog, preset, settings)
        cheap = f"{cheapest:,.0f} | {pd['monthly_cost_usd'] / cheapest:.2f}"
    else:
        cheap = "- | - (a multi-hour plan: its peak hour only is replayed)"
    print(f"| {label} | {t_u:.1f} | {t_v:.1f} | {t_v / t_u:.2f} | {check['rounds']} | {check['ttft_ms']['p99']:,} | "
          f"{check['tpot_ms']['p50']} | {pd['monthly_cost_usd']:,.0f} | {cheap} | "
          f"{u['monthly_cost_usd']:,.0f}, P99 {replay_u['ttft_ms']['p99']:,} ms, "
          f"{'meets' if replay_u['meets_targets'] else 'misses'} |")


def main() -> None:
    """Run the parts asked for (both by default)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", action="store_true", help="the queueing model against the simulated pool")
    ap.add_argument("--plans", action="store_true", help="verified plans against the cheapest replay-feasible counts")
    ap.add_argument("--requests", type=int, default=40_000, help="requests per grid case (default 40000)")
    ap.add_argument("--runs", type=int, default=3, help="plans of each case timed, the median kept (default 3)")
    args = ap.parse_args()
    both = not args.grid and not args.plans
    if args.grid or both:
        grid(args.requests)
    if args.plans or both:
        plans(args.runs)


if __name__ == "__main__":
    main()

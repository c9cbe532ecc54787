"""Benchmark `plan` on the shipped examples over the full catalog.

For every single-product example the GPU/TP/batch/precision restrictions are lifted (all GPUs,
TP 1-8, every precision, batch 1-512) and the planner is run several times. Printed per
example: candidates generated, feasible, after pruning, MIP size, and median seconds of
candidate generation and of the MIPs (build, export and solve). Then the end-to-end wall time of the
CLI (interpreter start-up and imports included) on the worked example, median of several runs.

    python benchmarks/bench_plan.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from fleetplan.catalogs import load_catalog
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.traffic.scenario import load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parent.parent
FULL_OPTIONS = {"tp": [1, 2, 4, 8], "precisions": ["bf16", "fp8", "fp4"], "max_batch": 512}


def full_catalog(scenario_path: Path) -> tuple[object, Path]:
    """The scenario with its search restrictions lifted (price overrides kept), and its folder."""
    scenario, folder = load_scenario(scenario_path)
    raw = scenario.model_dump(mode="python")
    opts = raw["options"]
    for key in ("gpus", "tp", "batch", "precisions"):
        opts[key] = None
    opts.update(FULL_OPTIONS)
    for p in raw["products"]:
        p["precision"] = None
    return parse_scenario(raw, str(scenario_path)), folder


def candidate_counts(plan: Any) -> tuple[int, int, int]:
    """Candidates generated, feasible and left after pruning, summed over the plan's products."""
    sets = plan.candidate_sets.values()
    return sum(cs.generated for cs in sets), sum(cs.feasible for cs in sets), sum(cs.after_pruning for cs in sets)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--examples", nargs="*", default=None)
    args = ap.parse_args()
    catalog = load_catalog()
    paths = [Path(p) for p in args.examples] if args.examples else sorted((ROOT / "examples").glob("*.yaml"))
    print(f"{'example':32} {'products':>8} {'generated':>10} {'feasible':>9} {'pruned':>7} {'vars':>6} {'rows':>6} "
          f"{'cands_s':>8} {'solve_s':>8} {'total_s':>8}")
    for path in paths:
        try:
            scenario, folder = full_catalog(path)
        except Exception as exc:  # noqa: BLE001 - a benchmark row per example, whatever happens
            print(f"{path.name:32} skipped: {exc}")
            continue
        if len(scenario.products) > 5:
            print(f"{path.name:32} skipped: a large portfolio, see benchmarks/bench_portfolio.py (as shipped)")
            continue
        rows = []
        plan = None
        for _ in range(args.runs):
            t0 = time.perf_counter()
            plan = make_plan(scenario, catalog, alternatives=False, folder=folder)
            rows.append((plan.timings, time.perf_counter() - t0))
        assert plan is not None
        med = lambda f: statistics.median(f(r) for r in rows)  # noqa: E731
        gen, feas, kept = candidate_counts(plan)
        print(
            f"{path.name:32} {len(plan.products):>8} {gen:>10,} {feas:>9,} {kept:>7,} {plan.model_size[0]:>6} {plan.model_size[1]:>6} "
            f"{med(lambda r: r[0].candidates_s):>8.4f} {med(lambda r: r[0].solve_s):>8.4f} {med(lambda r: r[1]):>8.4f}"
        )

    worked = ROOT / "examples" / "seed-chat-70b-open.yaml"
    cmd = [str(Path(sys.executable).parent / "fleetplan"), "plan", str(worked), "--json"]
    walls = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        walls.append(time.perf_counter() - t0)
    print(f"\nCLI wall time, `fleetplan plan {worked.relative_to(ROOT)} --json` (full catalog, start-up included): "
          f"median {statistics.median(walls):.3f} s, min {min(walls):.3f} s over {args.runs} runs")


if __name__ == "__main__":
    main()

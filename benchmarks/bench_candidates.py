"""Benchmark candidate generation of one scenario: configurations generated and kept after
pruning, CPU and wall seconds, and the candidate memo's hits (sets reused by products alike but
for name and demand) and misses (sets generated). No planner deadline: every set is generated
whole; the benchmark as a whole stops at ``--time-limit`` seconds (default 600) with what it has.

    python benchmarks/bench_candidates.py [--case portfolio-50 | --scenario FILE] [--runs 3] [--per-name]
                                          [--time-limit 600]

``--case`` names a scenario of ``stress_cases.py`` (written to a temporary folder); ``--per-name``
keys the memo by product name too, as it was before products shared sets (the figure to compare
with). Medians over ``--runs`` fresh builds (each with a new memo) in this process.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from stress_cases import write_cases

from fleetplan.catalogs.loader import InputError, load_catalog
from fleetplan.models.presets import get_preset
from fleetplan.optimizer.problem_data.problem import CandidateMemo, build_problem
from fleetplan.optimizer.traffic.scenario import load_scenario


class PerNameMemo(CandidateMemo):
    """The memo keyed by product name as well: one generation per product."""

    def key(self, product: Any, catalog: Any, scenario: Any, preset: Any) -> tuple[Any, ...]:
        return (product.name, *super().key(product, catalog, scenario, preset))


def build_once(path: Path, per_name: bool) -> dict[str, float]:
    """One build of ``path``'s problem with a new memo: counts and seconds."""
    scenario, folder = load_scenario(path)
    catalog = load_catalog()
    memo = PerNameMemo() if per_name else CandidateMemo()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    _, sets, _ = build_problem(scenario, catalog, get_preset(scenario.preset), folder, memo=memo)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {"products": len(sets), "generated": sum(cs.generated for cs in sets.values()),
            "after_pruning": sum(cs.after_pruning + cs.pool_after_pruning for cs in sets.values()),
            "hits": memo.hits, "misses": memo.misses, "cpu_s": cpu, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="portfolio-50", help="a scenario of stress_cases.py (file stem)")
    ap.add_argument("--scenario", type=Path, help="a scenario file instead of --case")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--per-name", action="store_true", help="one generation per product name (the old key)")
    ap.add_argument("--time-limit", type=float, default=600.0, help="seconds for the whole benchmark (default 600)")
    args = ap.parse_args()
    if args.runs < 1 or not args.time_limit > 0:
        sys.exit("bench_candidates: --runs must be 1 or more and --time-limit above 0")
    rows: list[dict[str, float]] = []

    def stop(*_: Any) -> None:
        raise TimeoutError

    signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, args.time_limit)
    with tempfile.TemporaryDirectory() as tmp:
        if args.scenario is not None:
            path = args.scenario
        else:
            found = [p for p in write_cases(Path(tmp)) if p.stem == args.case]
            if not found:
                sys.exit(f"--case: no stress case {args.case!r}")
            path = found[0]
        try:
            for i in range(args.runs):
                print(f"bench_candidates: {path.stem} run {i + 1}/{args.runs}", file=sys.stderr, flush=True)
                rows.append(build_once(path, args.per_name))
        except InputError as e:
            sys.exit(f"bench_candidates: {e}")
        except TimeoutError:
            if not rows:
                sys.exit(f"bench_candidates: no run finished within --time-limit {args.time_limit:g} s")
            print(f"bench_candidates: --time-limit {args.time_limit:g} s reached, {len(rows)} of {args.runs} runs",
                  file=sys.stderr)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    r = rows[-1]
    cpu, wall = [x["cpu_s"] for x in rows], [x["wall_s"] for x in rows]
    print(f"{path.stem}{' (per name)' if args.per_name else ''}: {r['products']} products, "
          f"{r['generated']:,} configurations generated, {r['after_pruning']:,} candidates after pruning, "
          f"memo {r['hits']} hits / {r['misses']} misses; CPU median {statistics.median(cpu):.2f} s "
          f"(min {min(cpu):.2f}, max {max(cpu):.2f}), wall median {statistics.median(wall):.2f} s over {len(rows)} runs")


if __name__ == "__main__":
    main()

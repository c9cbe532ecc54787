"""Benchmark coupled portfolio plans: examples/portfolio-20.yaml as shipped and its scaling.

For each case: products, candidates generated / feasible / after pruning, configurations and
modelled hours left after the exact reductions (configurations beaten in every hour dropped,
hours that ask the same of every product merged), MIP size, status, gap, and the median
seconds of candidate generation, of the MIP (build, export, solve) and in all, over ``--runs``.
Cases: the first 5, 10 and 20 products of portfolio-20; the 20 products twice over (40
products, availability doubled); the shipped 20 with every demand hour made distinct by a
seeded +-5% jitter (merging then saves little). ``--no-reduce`` measures the same without the
reductions (``--time-limit`` bounds each such solve; the gap reached is printed).

    python benchmarks/bench_portfolio.py [--runs 3] [--no-reduce] [--time-limit 600]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench_plan import candidate_counts
from fleetplan.catalogs import load_catalog
from fleetplan.models.presets import get_preset
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.problem_data.problem import build_problem
from fleetplan.optimizer.problem_data.reductions import reduced
from fleetplan.optimizer.traffic.scenario import load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parent.parent
PORTFOLIO = ROOT / "examples" / "portfolio-20.yaml"


def jittered_profiles(folder: Path, out: Path, seed: int = 1) -> None:
    """Copies of the example's profiles over 168 hours with every hour scaled by U(0.95, 1.0)."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted((folder / "profiles").glob("*.csv")):
        rows = [r.split(",") for r in path.read_text().splitlines()[1:] if r.strip()]
        values = [float(v) for _, v in rows]
        values = (values * 7)[:168] if len(values) == 24 else values
        text = "".join(f"{h},{v * rng.uniform(0.95, 1.0):.5f}\n" for h, v in enumerate(values))
        (out / path.name).write_text("hour,multiplier\n" + text)


def cases(tmp: Path) -> list[tuple[str, object, Path]]:
    base, folder = load_scenario(PORTFOLIO)
    raw = base.model_dump(mode="python")
    out = []
    for n in (5, 10, 20):
        sub = {**raw, "products": raw["products"][:n]}
        out.append((f"portfolio-20, first {n}", parse_scenario(sub, f"first-{n}"), folder))
    twice = {**raw, "products": raw["products"] + [{**p, "name": p["name"] + "-b"} for p in raw["products"]],
             "limits": {**raw["limits"], "gpu_availability": {g: 2 * v for g, v in raw["limits"]["gpu_availability"].items()}}}
    out.append(("portfolio-20 twice (40)", parse_scenario(twice, "twice"), folder))
    jitter = tmp / "jitter"
    jittered_profiles(folder, jitter / "profiles")
    out.append(("portfolio-20, distinct hours", parse_scenario(raw, "jitter"), jitter))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-reduce", action="store_true")
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--only", default=None, help="run only cases whose name contains this text")
    args = ap.parse_args()
    catalog = load_catalog()
    print(f"{'case':30} {'prod':>4} {'generated':>9} {'feasible':>8} {'pruned':>6} {'configs':>7} {'hours':>5} "
          f"{'vars':>6} {'rows':>6} {'status':>10} {'gap':>7} {'cost_usd':>10} {'cands_s':>7} {'mip_s':>7} {'total_s':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, scenario, folder in cases(Path(tmp)):
            if args.only and args.only not in name:
                continue
            scenario = scenario.model_copy(update={"options": scenario.options.model_copy(
                update={"time_limit_s": args.time_limit})})
            prob, _, _ = build_problem(scenario, catalog, get_preset(scenario.preset), folder,
                                       reductions=not args.no_reduce)
            small = reduced(prob)
            rows = []
            plan = None
            for _ in range(args.runs):
                t0 = time.perf_counter()
                plan = make_plan(scenario, catalog, alternatives=False, folder=folder, compare_first_come=False,
                                 reductions=not args.no_reduce)
                rows.append((plan.timings, time.perf_counter() - t0))
            assert plan is not None
            med = lambda f: statistics.median(f(r) for r in rows)  # noqa: E731
            gen, feas, kept = candidate_counts(plan)
            gap = plan.solve_result.mip_gap
            print(
                f"{name:30} {len(plan.products):>4} {gen:>9,} {feas:>8,} {kept:>6,} {len(small.all_candidates()):>7} "
                f"{small.hours:>5} {plan.model_size[0]:>6} {plan.model_size[1]:>6} {plan.solve_result.status:>10} "
                f"{'-' if gap is None else f'{gap:.3%}':>7} {plan.monthly_cost_usd:>10,.0f} "
                f"{med(lambda r: r[0].candidates_s):>7.3f} {med(lambda r: r[0].solve_s):>7.2f} {med(lambda r: r[1]):>7.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()

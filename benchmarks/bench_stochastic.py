"""Benchmark two-stage commitment plans (``fleetplan commit``) on examples/uncertainty/commit-day.yaml.

Cases:
  10   the example's ten listed outcomes: the extensive form and the decomposition (their costs,
       the decomposition's proven gap, seconds each)
  N    N outcomes sampled from the example's products (demand lognormal around the forecast,
       spot availability and API prices drawn), solved by decomposition with ``--jobs`` workers

Each solve runs under ``--deadline`` seconds (the best plan and its proven gap are printed when
it is cut short); progress goes to stderr. One JSON line per case on stdout.

    python benchmarks/bench_stochastic.py 10 [--deadline 600]
    python benchmarks/bench_stochastic.py 200 --jobs 2 [--deadline 600]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from fleetplan.catalogs.commitments import load_commitments
from fleetplan.catalogs.loader import load_catalog
from fleetplan.commands.commit import read_stochastic_scenario
from fleetplan.models.presets import get_preset
from fleetplan.optimizer.decisions.stochastic import plan_under_uncertainty
from fleetplan.optimizer.traffic.uncertainty import parse_uncertainty

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "uncertainty" / "commit-day.yaml"
SAMPLED = {
    "demand_scale": {"distribution": "lognormal", "mean": 0.0, "std": 0.35, "low": 0.3, "high": 3.0},
    "spot_max_share": {"distribution": "choice", "values": [0.0, 0.2], "weights": [0.2, 0.8]},
    "api_price_scale": {"distribution": "uniform", "low": 0.5, "high": 1.0},
}


def progress(stage: str, done: int, total: int) -> None:
    print(f"bench_stochastic: {stage} {done}/{total}", file=sys.stderr, flush=True)


def run(n: int, method: str, jobs: int, deadline: float, gap: float) -> dict[str, object]:
    scenario, unc, folder = read_stochastic_scenario(str(EXAMPLE))
    raw = unc.model_dump(mode="python", exclude_none=True)
    if n != 10:
        raw.pop("outcomes")
        raw["sample"] = {"scenarios": n, "seed": 1, **SAMPLED}
    raw.update(method=method, max_gap=gap, max_iterations=10_000)
    u = parse_uncertainty(raw, "bench", [p.name for p in scenario.products])
    start = time.monotonic()
    plan = plan_under_uncertainty(scenario, u, load_catalog(), get_preset(scenario.preset), folder,
                                  commitment_rows=load_commitments(), workers=jobs, time_limit_s=deadline,
                                  progress=progress)
    d = plan.to_dict()
    return {"outcomes": n, "method": method, "jobs": jobs, "seconds": round(time.monotonic() - start, 1),
            "expected_cost_usd": d["expected_cost_usd"], "lower_bound_usd": d["lower_bound_usd"], "gap": d["gap"],
            "rounds": d["iterations"], "vss_usd": d["vss_usd"], "evpi_usd": d["evpi_usd"],
            "commitment": {f"{c['gpu']}/{c['term']}": c["gpus"] for c in d["commitment"]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outcomes", type=int, help="10: the example's listed outcomes; any other: that many sampled")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--deadline", type=float, default=600.0, help="seconds each solve may take")
    ap.add_argument("--gap", type=float, default=0.01, help="proven relative gap to stop at")
    ap.add_argument("--method", choices=["both", "extensive", "decomposition"], default=None)
    args = ap.parse_args()
    method = args.method or ("both" if args.outcomes == 10 else "decomposition")
    for m in (["extensive", "decomposition"] if method == "both" else [method]):
        print(json.dumps(run(args.outcomes, m, args.jobs, args.deadline, args.gap)), flush=True)


if __name__ == "__main__":
    main()

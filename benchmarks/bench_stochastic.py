"""Benchmark two-stage commitment plans (``fleetplan commit``) on the shipped uncertainty examples.

Methods:
  split       the product split (exact: every commitment priced, each outcome product by product
              and hour by hour), in ``--jobs`` worker processes or on the Dask cluster at ``--scheduler``
  extensive   the extensive form as one MIP (every outcome's whole-horizon model side by side) under
              ``--deadline`` seconds: its best plan's expected cost and its proven bound
  lagrangian  the dual decomposition over whole-horizon outcome MIPs (``--deadline``, ``--gap``)
  both        split, then extensive, and how far apart their costs are

One JSON line per method on stdout; progress on stderr.

    python benchmarks/bench_stochastic.py examples/uncertainty/commit-week.yaml --method both --deadline 1200
    python benchmarks/bench_stochastic.py examples/uncertainty/commit-week-sampled.yaml --jobs 2
    python benchmarks/bench_stochastic.py examples/uncertainty/commit-week-sampled.yaml --scheduler tcp://127.0.0.1:8786
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from fleetplan.catalogs.commitments import load_commitments
from fleetplan.catalogs.loader import load_catalog
from fleetplan.commands.commit import read_stochastic_scenario
from fleetplan.models.presets import get_preset
from fleetplan.optimizer.decisions import stochastic as st
from fleetplan.optimizer.mip.solvers import solve


def progress(stage: str, done: int, total: int) -> None:
    print(f"bench_stochastic: {stage} {done}/{total}", file=sys.stderr, flush=True)


def planned(path: str, method: str, jobs: int, client: Any, deadline: float, gap: float) -> dict[str, Any]:
    """The plan by the product split (``split``) or the Lagrangian decomposition (``lagrangian``)."""
    scenario, unc, folder = read_stochastic_scenario(path)
    unc = unc.model_copy(update={"method": "decomposition", "max_gap": gap, "max_iterations": 10_000})
    start = time.monotonic()
    plan = st.plan_under_uncertainty(scenario, unc, load_catalog(), get_preset(scenario.preset), folder,
                                     commitment_rows=load_commitments(), workers=jobs, client=client,
                                     time_limit_s=deadline, progress=progress, separable=method == "split")
    d = plan.to_dict()
    return {"example": path, "method": method, "outcomes": len(d["scenarios"]), "jobs": jobs,
            "scheduler": client is not None, "seconds": round(time.monotonic() - start, 2),
            "expected_cost_usd": d["expected_cost_usd"], "lower_bound_usd": d["lower_bound_usd"], "gap": d["gap"],
            "rounds": d["iterations"], "vss_usd": d["vss_usd"], "evpi_usd": d["evpi_usd"],
            "commitment": {f"{c['gpu']}/{c['term']}": c["gpus"] for c in d["commitment"]}}


def extensive(path: str, deadline: float) -> dict[str, Any]:
    """The extensive form's best plan and proven bound within ``deadline`` seconds of HiGHS."""
    scenario, unc, folder = read_stochastic_scenario(path)
    start = time.monotonic()
    terms, _, models = st._outcome_models(scenario, unc, load_catalog(), get_preset(scenario.preset), folder,
                                          load_commitments(), progress)
    lp = st.extensive_form(models)
    built = time.monotonic() - start
    res = solve(lp, "highs", time_limit_s=deadline, mip_rel_gap=1e-4)
    obj = res.objective
    bound = None if obj is None else obj - (res.mip_gap or 0.0) * abs(obj)
    return {"example": path, "method": "extensive", "outcomes": len(models), "columns": lp.num_cols,
            "rows": lp.num_rows, "build_seconds": round(built, 1), "seconds": round(time.monotonic() - start, 1),
            "status": res.status, "expected_cost_usd": None if obj is None else round(obj, 2),
            "lower_bound_usd": None if bound is None else round(bound, 2), "gap": res.mip_gap,
            "commitment": {} if not res.values else {f"{t.gpu}/{t.term}": round(v) for t, v in
                                                     zip(terms, res.values[:len(terms)]) if round(v) > 0}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("example", help="a scenario file with an uncertainty: block")
    ap.add_argument("--method", choices=["split", "extensive", "lagrangian", "both"], default="split")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--scheduler", default=None, help="a running Dask scheduler's address")
    ap.add_argument("--deadline", type=float, default=600.0, help="seconds the extensive form or the Lagrangian may take")
    ap.add_argument("--gap", type=float, default=0.01, help="proven relative gap the Lagrangian stops at")
    args = ap.parse_args()
    client = None
    if args.scheduler:
        from distributed import Client

        client = Client(args.scheduler)
    rows = []
    for m in (["split", "extensive"] if args.method == "both" else [args.method]):
        row = (extensive(args.example, args.deadline) if m == "extensive"
               else planned(args.example, m, args.jobs, client, args.deadline, args.gap))
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.method == "both" and rows[1]["expected_cost_usd"] is not None:
        split, ef = rows[0], rows[1]
        print(json.dumps({"split_minus_extensive_usd": round(split["expected_cost_usd"] - ef["expected_cost_usd"], 2),
                          "relative": round((split["expected_cost_usd"] - ef["expected_cost_usd"])
                                            / ef["expected_cost_usd"], 6),
                          "split_minus_extensive_bound_usd": round(split["expected_cost_usd"] - ef["lower_bound_usd"], 2)}))
    if client is not None:
        client.close()


if __name__ == "__main__":
    main()

"""How far a joint MIP moves the gap of a group planned product by product.

    python benchmarks/bench_group_bound.py SCENARIO [--seconds 400]

plans SCENARIO (e.g. ``portfolio-50.yaml`` written by ``benchmarks/stress_cases.py``) as the CLI
does, then builds the joint MIP of its one coupled group *restricted to the configurations the
plan runs* (every product's decode and pool configuration fixed, replicas by tier and hour, API
shares and whole instances free) and solves it with HiGHS from the plan for ``--seconds``.

The restricted MIP is a much smaller problem than the group's (which holds every configuration):
its optimum is at least the group's. If HiGHS cannot lift its lower bound above the sum of the
products' own bounds, or find a cheaper plan, within minutes, then neither can a joint MIP of the
whole group; the figures show where the gap of ``fleetplan plan`` comes from. Prints the plan's
cost and bound, then the restricted MIP's size, build time, best plan and lower bound.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from fleetplan.catalogs import load_catalog
from fleetplan.optimizer.decomposition import portfolio
from fleetplan.optimizer.mip.formulation import build_model
from fleetplan.optimizer.mip.linear import to_linear_problem
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.problem_data.reductions import reduced
from fleetplan.optimizer.traffic.scenario import load_scenario
from fleetplan.optimizer.mip.solvers import solve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", type=Path)
    ap.add_argument("--seconds", type=float, default=400.0, help="HiGHS's time on the restricted MIP")
    args = ap.parse_args()

    kept: dict = {}
    chosen = portfolio._plans_on_chosen_types

    def keep_plans(whole, known, solver, deadline, gap):  # the group's plans, as the plan reads them
        plans = chosen(whole, known, solver, deadline, gap)
        kept.update(whole=whole, plans=plans)
        return plans

    portfolio._plans_on_chosen_types = keep_plans
    scenario, folder = load_scenario(args.scenario)
    t = time.perf_counter()
    plan = make_plan(scenario, load_catalog(), alternatives=False, folder=folder, compare_first_come=False)
    parts = plan.gap_breakdown_usd or {}
    print(f"plan: ${plan.monthly_cost_usd:,.0f}, {plan.solve_result.status}, gap {plan.solve_result.mip_gap:.2%}, "
          f"lower bound ${parts.get('lower_bound', 0):,.0f} ({time.perf_counter() - t:.1f} s)", flush=True)
    if "plans" not in kept:
        print("no group was planned product by product")
        return
    whole, plans = kept["whole"], kept["plans"]
    products, start = {}, {}
    for name, (res, lp, sub) in plans.items():
        pd = sub.products[name]
        decode = tuple(c for c in pd.candidates if (j := lp.find("use", c.key)) is not None and res.values[j] > 0.5)
        pool = tuple(k for k in pd.pool if (j := lp.find("pool_use", k.key)) is not None and res.values[j] > 0.5)
        products[name] = replace(whole.products[name], candidates=decode, pool=pool)
        start.update(zip(lp.col_keys, res.values))
    usage: dict[str, np.ndarray] = {}
    for name, found in plans.items():
        for g, row in portfolio.plan_gpus(found, name).items():
            usage[g] = usage.get(g, np.zeros(whole.hours)) + np.asarray(row, dtype=float)
    for g, row in usage.items():
        if g in whole.instance_gpus:
            for h, n in enumerate(row):
                start[("instances", (g, h))] = math.ceil(n / whole.instance_gpus[g] - 1e-9)
    t = time.perf_counter()
    lp = to_linear_problem(build_model(reduced(whole.derive(products=products))))
    print(f"restricted joint MIP: {sum(len(p.candidates) + len(p.pool) for p in products.values())} configurations, "
          f"{lp.num_cols:,} columns, {lp.num_rows:,} rows, built in {time.perf_counter() - t:.1f} s", flush=True)
    x = [start.get(k, 0.0) for k in lp.col_keys]
    print(f"the plan in it: ${lp.objective_constant + float(np.dot(lp.objective, x)):,.0f}", flush=True)
    t = time.perf_counter()
    res = solve(lp, "highs", time_limit_s=args.seconds, mip_rel_gap=1e-3, handover=False, start=x)
    cost = float(res.objective or math.nan)
    print(f"HiGHS {time.perf_counter() - t:.0f} s: {res.status}, best ${cost:,.0f}, "
          f"lower bound ${cost * (1 - (res.mip_gap or 0.0)):,.0f} (gap {res.mip_gap or 0.0:.2%})")


if __name__ == "__main__":
    main()

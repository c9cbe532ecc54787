"""A mix over many hours solved hour by hour: the same cost as the whole MIP on small cases (with
and without a prefill pool linking the hours), the cases it must leave to the whole MIP, and a
plan of a trace's size mix."""

from __future__ import annotations

import math

import pytest
import yaml

from fleetplan.models.presets import get_preset
from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.common.enums import Alternatives, LeftOut
from fleetplan.optimizer.mip.formulation import build_model
from fleetplan.optimizer.mip.linear import to_linear_problem
from fleetplan.optimizer.decomposition.mix_hours import best_hour_plans, separable, solve_hour, solve_mix_by_hour
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.problem_data.problem import build_problem
from fleetplan.optimizer.problem_data.reductions import mix_without_dominated, reduced
from fleetplan.optimizer.explanation.results import plan_to_dict
from fleetplan.optimizer.traffic.scenario import load_scenario, parse_scenario
from fleetplan.optimizer.mip.solvers import solve
from fleetplan.optimizer.traffic.synthetic import TraceShape, generate, trace_csv

MIX = [{"input_tokens": 96, "output_tokens": 192, "share": 0.7},
       {"input_tokens": 1500, "output_tokens": 300, "share": 0.25},
       {"input_tokens": 4000, "output_tokens": 400, "share": 0.05}]
# six distinct hours, each twice: merged to six modelled hours of weight 2
QPS = [4.0, 9.0, 17.0, 30.0, 55.0, 80.0] * 2


def small(prefill: str, **options: object) -> dict:
    """A mix on two GPU types, one TP, three batches."""
    return {
        "products": [{"name": "m", "model": "llama-3.1-8b", "peak_qps": max(QPS), "min_tokens_per_s_per_user": 20,
                      "precision": "fp8", "prefill": prefill, "max_ttft_ms": {"p99": 6000}, "requests": MIX}],
        "options": {"gpus": ["l40s", "h100-sxm"], "tp": [1], "batch": [16, 64, 256], **options},
    }


def problem(catalog, raw: dict):
    """The reduced problem of ``raw`` over the hours of :data:`QPS` and its mix."""
    prob, _, _ = build_problem(parse_scenario(raw, "small"), catalog, get_preset("default"), demand={"m": QPS})
    prob = reduced(prob)
    return prob, prob.products["m"]


def in_turn_and_in_workers(scenario, catalog, qps: list[float]) -> tuple[dict[int, str], dict[int, object]]:
    """The plan of ``scenario`` over the hours ``qps`` with every comparison searched, with one and
    with two worker processes: its JSON (without timings) and the plan, by the number of workers."""
    import json

    out, plans = {}, {}
    for jobs in (1, 2):
        plans[jobs] = make_plan(scenario, catalog, alternatives=Alternatives.ALL, demand={"m": qps}, jobs=jobs)
        d = plan_to_dict(plans[jobs])
        d.pop("timings", None)
        out[jobs] = json.dumps(d, sort_keys=True)
    return out, plans


@pytest.mark.parametrize("prefill", ["colocated", "pool", "auto"])
def test_hour_by_hour_costs_what_the_whole_mip_costs(catalog, prefill):
    prob, pd = problem(catalog, small(prefill))
    assert prob.hours == 6 and separable(prob, pd)
    whole = solve(to_linear_problem(build_model(prob)), "highs", mip_rel_gap=1e-9)
    assert whole.optimal
    res, lp, _ = solve_mix_by_hour(prob, pd, "highs", Deadline.after(None), 1e-9)
    assert res.optimal and res.mip_gap <= 1e-9
    assert res.objective == pytest.approx(whole.objective, rel=1e-7)
    # the plan (read from the model of the configurations it runs) is a solution of the whole
    # model: every integer column fixed to its value (0 where it runs nothing), the rest is an LP
    full = to_linear_problem(build_model(prob))
    value = dict(zip(lp.col_keys, res.values))
    fixed = [round(value.get(k, 0.0)) if full.col_integer[j] else None for j, k in enumerate(full.col_keys)]
    lower = [v if v is not None else lo for v, lo in zip(fixed, full.col_lower)]
    upper = [v if v is not None else up for v, up in zip(fixed, full.col_upper)]
    again = solve(full.with_bounds(lower, upper), "highs", mip_rel_gap=1e-9)
    assert again.optimal and again.objective == pytest.approx(res.objective, rel=1e-9)



@pytest.mark.parametrize("prefill", ["colocated", "auto"])
def test_configurations_beaten_across_gpu_types_leave_the_optimum_as_it_is(catalog, prefill):
    prob, pd = problem(catalog, small(prefill, gpus=["l4", "l40s", "a100-sxm-80gb", "h100-sxm"], batch=[16, 64, 128, 256]))
    cut = mix_without_dominated(prob, pd)
    assert len(cut.candidates) < len(pd.candidates) and {c.key for c in cut.candidates} < {c.key for c in pd.candidates}
    whole = solve(to_linear_problem(build_model(prob)), "highs", mip_rel_gap=1e-9)
    fewer = solve(to_linear_problem(build_model(prob.derive(products={"m": cut}))), "highs", mip_rel_gap=1e-9)
    assert whole.optimal and fewer.optimal
    assert fewer.objective == pytest.approx(whole.objective, rel=1e-9)
    # with a GPU limit the GPU type matters: nothing is dropped
    limited = prob.derive(gpu_availability={"h100-sxm": 64})
    assert mix_without_dominated(limited, pd) is pd


@pytest.mark.parametrize("pool", [None, "", "first"])
def test_an_hour_rescaled_from_the_busiest_is_the_model_built_for_it(catalog, pool):
    from fleetplan.optimizer.decomposition.mix_hours import HourModels, _hour_problem

    prob, pd = problem(catalog, small("auto", gpus=["l4", "l40s", "h100-sxm"]))
    pool = pd.pool[0].key if pool == "first" else pool
    models = HourModels(prob, pd)
    for h in range(prob.hours):
        got, built = models.lp(h, pool), to_linear_problem(build_model(_hour_problem(prob, pd, h, pool)))
        assert got.col_keys == built.col_keys and got.row_names == built.row_names
        assert got.col_lower == built.col_lower and got.col_upper == built.col_upper
        assert got.row_index == built.row_index and got.row_lower == built.row_lower
        for a, b in zip(got.row_value, built.row_value):
            assert a == pytest.approx(b, rel=1e-12)


@pytest.mark.parametrize("prefill", ["colocated", "auto"])
def test_a_mix_kept_to_one_configuration_is_priced_hour_by_hour_at_the_whole_mips_cost(catalog, prefill):
    from dataclasses import replace

    from fleetplan.optimizer.decomposition.mix_hours import cheapest_single_choice
    from fleetplan.optimizer.decomposition.search import solve_by_configuration

    prob, pd = problem(catalog, small(prefill, gpus=["l4", "l40s", "a100-sxm-80gb", "h100-sxm"]))
    every = tuple(c for c in pd.candidates if all(c.key in b.capacity for b in pd.buckets))
    single = replace(pd, single=True, candidates=every)
    sub = prob.derive(products={"m": single})
    assert cheapest_single_choice(sub, single, list(every)) is not None
    whole = solve(to_linear_problem(build_model(sub)), "highs", mip_rel_gap=1e-9)
    res, _, _ = solve_by_configuration(sub, "m", "highs", mip_rel_gap=1e-9)
    assert whole.optimal and res.optimal
    assert res.objective == pytest.approx(whole.objective, rel=1e-9)

def test_hours_that_disagree_on_the_pool_are_priced_per_pool(catalog):
    prob, pd = problem(catalog, small("pool", gpus=["l4", "l40s", "a100-sxm-80gb", "h100-sxm"]))
    free = [solve_hour(prob, pd, h, None, "highs", Deadline.after(None), 1e-9) for h in range(prob.hours)]
    # L4 pool in the three small hours, L40S in the next two, H100 in the largest
    assert [p.pool.split("/")[2] for p in free] == ["l4", "l4", "l4", "l40s", "l40s", "h100-sxm"]
    plans, lower = best_hour_plans(prob, pd, "highs", Deadline.after(None), 1e-9)
    assert len({p.pool for p in plans} - {""}) <= 1
    whole = solve(to_linear_problem(build_model(prob)), "highs", mip_rel_gap=1e-9)
    cost = sum(prob.count(h) / prob.horizon_hours * p.usd_per_month for h, p in enumerate(plans))
    assert cost == pytest.approx(whole.objective, rel=1e-7) and lower <= cost + 1e-6
    # the options after the first are priced in worker processes at once: the same plans and bound
    from fleetplan.optimizer.runtime.workers import allowed

    assert len(pd.pool) > 2
    with allowed(2):
        assert best_hour_plans(prob, pd, "highs", Deadline.after(None), 1e-9) == (plans, lower)


@pytest.mark.parametrize("change", [
    {"options": {"tiers": ["reserved", "on_demand"]}},
    {"product": {"api": {"model": "llama-3.1-8b", "max_fraction": 0.2}}},
])
def test_hours_linked_otherwise_go_to_the_whole_mip(catalog, change):
    raw = small("colocated")
    raw["options"].update(change.get("options", {}))
    raw["products"][0].update(change.get("product", {}))
    prob, pd = problem(catalog, raw)
    assert not separable(prob, pd)


def test_a_trace_plans_its_size_mix_unless_the_product_gives_one(catalog, tmp_path):
    (tmp_path / "t.csv").write_text(trace_csv(*generate(3000, 1, TraceShape(days=1))), encoding="utf-8")
    base = {"name": "m", "model": "llama-3.1-8b", "trace": "t.csv", "min_tokens_per_s_per_user": 20,
            "precision": "fp8", "prefill": "colocated", "max_ttft_ms": {"p99": 6000}}

    def planned(**product: object) -> list[dict] | None:
        raw = {"products": [{**base, **product}], "options": {"gpus": ["l40s", "h100-sxm"], "tp": [1, 2]}}
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw), encoding="utf-8")
        scenario, folder = load_scenario(tmp_path / "s.yaml")
        plan = make_plan(scenario, catalog, alternatives=False, folder=folder)
        return plan_to_dict(plan)["products"][0].get("requests")

    mixed = planned()
    assert mixed is not None and len(mixed) == 4 and abs(sum(b["share"] for b in mixed) - 1) < 1e-4
    assert mixed[-1]["input_tokens"] > 4 * mixed[0]["input_tokens"]
    assert planned(trace_buckets=1) is None
    own = planned(requests=[{**MIX[0], "share": 0.5}, {**MIX[1], "share": 0.5}])
    assert own is not None and [b["input_tokens"] for b in own] == [96, 1500]


def test_a_spent_deadline_still_plans_every_hour_and_states_its_gap(catalog):
    prob, pd = problem(catalog, small("pool", gpus=["l4", "l40s", "a100-sxm-80gb", "h100-sxm"]))
    whole = solve(to_linear_problem(build_model(prob)), "highs", mip_rel_gap=1e-9)
    res, _, _ = solve_mix_by_hour(prob, pd, "highs", Deadline.after(0.0), 1e-9)
    # the pool options are left unpriced: the likeliest is finished, the others bound the gap
    assert res.objective >= whole.objective * (1 - 1e-7)
    assert res.objective * (1 - res.mip_gap) <= whole.objective * (1 + 1e-7)
    assert res.status in ("optimal", "time_limit") and (res.status == "optimal") == (res.mip_gap <= 1e-9)


def test_hours_past_the_deadline_are_bracketed_by_solved_ones(catalog):
    """Cut short after a few hours, every hour still runs a plan that holds its demand and keeps
    a valid lower bound: the plan costs at least the whole MIP's optimum, and its bound is below it."""
    from fleetplan.optimizer.decomposition import mix_hours

    prob, pd = problem(catalog, small("colocated"))
    whole = solve(to_linear_problem(build_model(prob)), "highs", mip_rel_gap=1e-9)

    class ThreeHours(Deadline):
        solved = 0

        @property
        def expired(self) -> bool:
            return ThreeHours.solved >= 3

    real = mix_hours.solve_hour

    def counted(*a, **k):
        ThreeHours.solved += 1
        return real(*a, **k)

    mix_hours.solve_hour = counted
    try:
        res, _, _ = solve_mix_by_hour(prob, pd, "highs", ThreeHours(at=None), 1e-9)
    finally:
        mix_hours.solve_hour = real
    assert res.objective >= whole.objective * (1 - 1e-7)
    assert res.objective * (1 - res.mip_gap) <= whole.objective * (1 + 1e-7)
    assert 0 < res.mip_gap < 0.5  # bracketed by quieter hours' bounds, not left at 0


def test_a_long_horizon_is_solved_in_runs_the_same_in_turn_and_in_workers(catalog):
    """Sixty distinct hours go in runs of rising demand (busiest first): every hour gets its own
    optimum (its one-hour MIP's cost), and worker processes give exactly what solving in turn gives."""
    from fleetplan.optimizer.decomposition.mix_hours import HOUR_RUNS, HourModels, _runs, solve_hours
    from fleetplan.optimizer.runtime.workers import allowed

    qps = [3.0 + 1.37 * i for i in range(60)]
    raw = small("auto", gpus=["l4", "l40s", "h100-sxm"])
    prob, _, _ = build_problem(parse_scenario(raw, "long"), catalog, get_preset("default"), demand={"m": qps})
    prob = reduced(prob)
    pd = mix_without_dominated(prob, prob.products["m"])
    prob = prob.derive(products={"m": pd})
    assert prob.hours == 60 and separable(prob, pd)
    order = sorted(range(60), key=lambda h: pd.demand_tokens_per_s[h])
    assert len(_runs(order[:-1])) == HOUR_RUNS and sum(map(len, _runs(order[:-1]))) == 59
    found = {}
    for jobs in (1, 2):
        with allowed(jobs):
            found[jobs] = solve_hours(prob, pd, list(range(60)), None, "highs", Deadline.after(None), 1e-9,
                                      HourModels(prob, pd))
    assert found[1] == found[2] and sorted(found[1]) == list(range(60))
    for h in range(0, 60, 7):
        own = solve_hour(prob, pd, h, None, "highs", Deadline.after(None), 1e-9)
        assert found[1][h].usd_per_month == pytest.approx(own.usd_per_month, rel=1e-7)
    costs = [found[1][h].usd_per_month for h in order]
    assert all(b >= a - 1e-6 for a, b in zip(costs, costs[1:]))  # a busier hour never costs less (to rounding)


def test_runner_ups_and_mode_costs_in_workers_are_those_searched_in_turn(catalog):
    """A mix over sixty hours: the plan, its runner-ups on each GPU type and its cost in each
    prefill mode are the same, byte for byte, with two worker processes as in turn; each
    runner-up costs at least the plan, and a mode the plan runs alone costs what the plan costs."""
    from fleetplan.optimizer.traffic.scenario import parse_scenario as parse

    qps = [3.0 + 1.37 * i for i in range(60)]
    raw = small("auto", gpus=["l4", "l40s", "h100-sxm"])
    scenario = parse(raw, "long")
    out, plans = in_turn_and_in_workers(scenario, catalog, qps)
    assert out[1] == out[2] and plans[1].products[0].mode_costs == plans[2].products[0].mode_costs
    pp = plans[1].products[0]
    assert pp.alternatives and all(a["cost_difference_usd"] >= -0.01 for a in pp.alternatives)
    assert {a["gpu"] for a in pp.alternatives if not a.get("single_configuration")} == {"l40s", "h100-sxm"}  # L4: no plan
    costs = pp.mode_costs
    objective = float(plans[1].solve_result.objective)
    assert set(costs) == {"colocated", "pool"} and min(v for v in costs.values() if v is not None) >= objective - 0.01
    modes = {f.part.mode for f in pp.fleets if f.part is not None and (f.reserved or any(f.on_demand))}
    if len(modes) == 1:  # the mode the plan runs alone costs what the plan costs, unsearched
        assert costs[modes.pop()] == round(objective, 2)


def test_the_mode_a_proven_plan_runs_alone_costs_the_plan_without_a_search(catalog, examples):
    """rag-20k may prefill colocated or in a pool: the cost of the mode its proven plan
    runs is the plan's, known without a search, and the search restricted to that mode finds the
    same cost; the other mode is searched, and costs no less."""
    from fleetplan.optimizer.common.defaults import EXPLANATION_GAP
    from fleetplan.optimizer.explanation.runner_ups import UNKNOWN, Compared

    scenario, folder = load_scenario(examples / "rag-20k.yaml")
    plan = make_plan(scenario, catalog, folder=folder, alternatives=False)
    pp, objective = plan.products[0], float(plan.solve_result.objective)
    mode = pp.candidate.mode
    other = next(m for m in pp.mode_costs if m != mode)
    assert plan.solve_result.optimal and set(pp.mode_costs) == {"colocated", "pool"}
    assert pp.mode_costs[mode] == round(objective, 2) and pp.mode_costs[other] >= objective - 0.01
    cmp = Compared(plan.problem, pp, objective, "highs", proven=True)
    assert cmp.known(("mode", mode)) == round(objective, 2) and cmp.known(("mode", other)) is UNKNOWN
    assert Compared(plan.problem, pp, objective, "highs", proven=False).known(("mode", mode)) is UNKNOWN
    searched = cmp.search(("mode", mode), Deadline.after(None))
    assert searched == pytest.approx(objective, rel=EXPLANATION_GAP)


def test_what_the_deadline_cuts_in_a_worker_is_noted_in_the_command(catalog, examples, monkeypatch):
    """A search cut short in a worker says so in the plan's notes, as in turn; a search the
    deadline leaves unstarted is left out and noted."""
    from fleetplan.optimizer.explanation import runner_ups as R

    scenario, folder = load_scenario(examples / "rag-20k.yaml")
    plan = make_plan(scenario, catalog, folder=folder, alternatives=False)
    pp, objective = plan.products[0], float(plan.solve_result.objective)
    cmp = R.Compared(plan.problem, pp, objective, "highs", proven=False)
    tasks = cmp.gpus() + cmp.modes()
    assert len(tasks) >= 4

    def cut(self, task, deadline):
        deadline.note(f"cut in {task[1]}")
        return None

    monkeypatch.setattr(R.Compared, "search", cut)  # the forked workers are copies: they cut too
    deadline = Deadline.after(None)
    assert R._in_workers(cmp, tasks, deadline, 2) == dict.fromkeys(tasks)
    assert sorted(deadline.stopped) == sorted(f"cut in {t[1]}" for t in tasks)
    spent = Deadline.after(0.0)
    assert R._in_workers(cmp, tasks, spent, 2) == {}
    name = pp.product.name
    assert sorted(spent.stopped) == [f"{name}: cost of each prefill mode", f"{name}: runner-ups on other GPU types"]


def test_a_long_mixs_runner_ups_skip_only_gpu_types_that_cannot_be_among_the_cheapest(catalog, monkeypatch):
    """A mix over fifty hours on five GPU types: each type's lower bound is at most what the mix
    kept to that type costs (searched here for every type); the runner-ups list the types from
    the least bound up and leave out only a type whose bound is at least the third cheapest
    listed cost (here L40S; L4 is not among the types the mix runs), so no type left out is among the three cheapest; the same with two
    workers as in turn. By default a mix this small is searched the same way, and a large one
    lists every type by its bound, unsearched."""
    import json

    from fleetplan.optimizer.explanation import runner_ups as R
    from fleetplan.optimizer.common.defaults import RUNNER_UP_TYPES
    from fleetplan.optimizer.decomposition.mix_hours import gpu_type_bounds
    from fleetplan.optimizer.explanation.runner_ups import Compared

    qps = [3.0 + 1.9 * i for i in range(50)]
    # 29 tokens/s per user: L40S's bound (9,071.18 USD) is then above the third cheapest listed cost
    # (A100, 6,064.11), so it is left out (at 27 tokens/s its bound falls below and it is searched;
    # before the physics' bf16 work share slowed L40S's FP8 compute, 25 tokens/s left A100 out)
    raw = {"products": [{"name": "m", "model": "llama-3.1-8b", "peak_qps": max(qps), "min_tokens_per_s_per_user": 29,
                         "precision": "fp8", "prefill": "colocated",
                         "requests": [{"input_tokens": 96, "output_tokens": 192, "share": 0.7},
                                      {"input_tokens": 1000, "output_tokens": 300, "share": 0.3}]}],
           "options": {"gpus": ["l4", "l40s", "a100-sxm-80gb", "h100-sxm", "h200-sxm"], "tp": [1],
                       "batch": [16, 64, 256]}}
    scenario = parse_scenario(raw, "long")
    out, plans = in_turn_and_in_workers(scenario, catalog, qps)
    assert out[1] == out[2]
    pp = plans[1].products[0]
    listed = {a["gpu"]: a["monthly_cost_usd"] for a in pp.alternatives if not a.get("single_configuration")}
    left = {a["gpu"]: a["monthly_cost_at_least_usd"] for a in plan_to_dict(plans[1])["products"][0]["runner_ups_left_out"]}
    assert set(left) == {"l40s"} and set(listed) == {"a100-sxm-80gb", "h100-sxm", "h200-sxm"}
    third = sorted(listed.values())[RUNNER_UP_TYPES - 1]
    assert all(bound >= third for bound in left.values())

    # every type searched: its bound holds, the listed costs are the searches', L4 and L40S cost more
    # than the third
    full, _, _ = build_problem(scenario, catalog, get_preset("default"), demand={"m": qps})
    pd = full.products["m"]
    gpus = sorted({c.gpu for c in pd.candidates})
    bounds = gpu_type_bounds(full, pd, gpus, "highs")
    cmp = Compared(full, pp, plans[1].monthly_cost_usd, "highs")
    for g in gpus:
        found = cmp.search(("gpu", g), Deadline.after(None))
        if found is None:  # L4 cannot serve the 1,000-token bucket at 29 tokens/s: no runner-up, listed or not
            assert g == "l4" and g not in listed and g not in left
            continue
        assert bounds[g] <= found["monthly_cost_usd"] * (1 + 1e-6), (g, bounds[g], found)
        assert found["monthly_cost_usd"] == pytest.approx(listed.get(g, found["monthly_cost_usd"]), rel=2e-3)
        assert g not in left or found["monthly_cost_usd"] >= third
    # the table says which types were left out, and at least what each costs
    import io

    from rich.console import Console

    from fleetplan.rendering.tables import print_plan

    buf = io.StringIO()
    print_plan(json.loads(out[1]), Console(file=buf, width=200, force_terminal=False))
    line = next(x for x in buf.getvalue().splitlines() if "not searched" in x)
    assert f"l40s >= {left['l40s']:,.0f}" in line and "3 cheapest GPU types" in line
    # and so does the HTML report's runner-up section
    from fleetplan.rendering.html import runner_ups

    assert f"m: l40s at least ${left['l40s']:,.0f}" in runner_ups(json.loads(out[1]))

    # a mix this small (50 hours x 5 configurations) is searched by default too, as asked above
    size = full.hours * (len(pd.candidates) + len(pd.pool))
    assert size == 50 * 5 < R.RUNNER_UP_SEARCH_SIZE
    small = plan_to_dict(make_plan(scenario, catalog, demand={"m": qps}))
    small.pop("timings", None)
    assert json.dumps(small, sort_keys=True) == out[1]
    # a large one's runner-ups (here: the size threshold lowered) are not searched by default: every
    # type with a plan is listed with its bound (at least the proven plan's cost), which the search
    # above never undercuts; the best single configuration is still searched and no prefill mode
    # is priced; the same plan
    monkeypatch.setattr(R, "RUNNER_UP_SEARCH_SIZE", size)
    default = make_plan(scenario, catalog, demand={"m": qps})
    d = plan_to_dict(default)["products"][0]
    assert default.monthly_cost_usd == plans[1].monthly_cost_usd and default.solve_result.optimal
    unsearched = {a["gpu"]: a for a in d["runner_ups_left_out"]}
    assert set(unsearched) == set(gpus) - {"l4"} and all(a["reason"] == LeftOut.NOT_SEARCHED for a in unsearched.values())
    assert [a["gpu"] for a in d["runner_ups_left_out"]] == sorted(unsearched, key=lambda g: (unsearched[g]["monthly_cost_at_least_usd"], g))
    for g, a in unsearched.items():
        # to the cent; the plan's cost (3,713.875 USD) sits on a half cent, which the report's sum and
        # this one round to either side
        assert a["monthly_cost_at_least_usd"] == pytest.approx(max(bounds[g], default.monthly_cost_usd), abs=0.0051)
        assert a["cost_difference_at_least_usd"] >= 0
        assert a["monthly_cost_at_least_usd"] <= listed.get(g, math.inf) * (1 + 1e-6)
    assert [a.get("single_configuration") for a in d["alternatives"]] == [True] and d["mix_saving_usd"] >= 0
    assert d["alternatives"][0] == next(a for a in pp.alternatives if a.get("single_configuration"))
    assert default.products[0].mode_costs == {}
    buf = io.StringIO()
    print_plan(plan_to_dict(default), Console(file=buf, width=200, force_terminal=False))
    text = " ".join(buf.getvalue().split())  # the line wraps
    assert "not searched, each as long a search as the plan's own (--all-alternatives searches them)" in text
    assert f"a100-sxm-80gb >= {unsearched['a100-sxm-80gb']['monthly_cost_at_least_usd']:,.0f}" in text

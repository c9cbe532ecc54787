"""The product split of an outcome's recourse (optimizer/decisions/recourse.py) against the fleet
MIP it stands for: for fixed commitments its cost equals the outcome MIP's proven optimum, the plan
behind it holds in every row of that MIP and is priced by its objective as the split prices it, and
the two-stage plan built on it equals the extensive form's; outcomes the split does not model fall
back to the whole-horizon MIPs with the reason in the notes."""

from __future__ import annotations

import itertools
import math
import time
from pathlib import Path

import pytest

from fleetplan.catalogs.commitments import load_commitments
from fleetplan.catalogs.loader import load_catalog
from fleetplan.models.presets import get_preset
from fleetplan.optimizer.decisions import recourse as rc
from fleetplan.optimizer.decisions import stochastic as st
from fleetplan.optimizer.traffic.scenario import parse_scenario
from fleetplan.optimizer.traffic.uncertainty import parse_uncertainty

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# three products over a day: a chat with an API capped at 30% of its tokens, a flat summariser and a
# launch, on H100 and H200, reserved, on-demand and spot (at most 20% of replica-hours): both
# horizon caps can bind, and the API's share is a knapsack over the hours
DAY = {
    "preset": "default",
    "products": [
        {"name": "chat", "model": "llama-3.1-8b", "peak_qps": 40, "input_tokens": 1500, "output_tokens": 350,
         "min_tokens_per_s_per_user": 30, "prefill": "colocated", "demand_profile": "profiles/peak-hour-day.csv",
         "api": {"model": "llama-3.1-8b", "max_fraction": 0.3}},
        {"name": "summariser", "model": "llama-3.1-70b", "precision": "fp8", "peak_qps": 6, "input_tokens": 3000,
         "output_tokens": 250, "min_tokens_per_s_per_user": 15, "prefill": "colocated"},
        {"name": "launch", "model": "llama-3.1-8b", "peak_qps": 30, "input_tokens": 1200, "output_tokens": 500,
         "min_tokens_per_s_per_user": 50, "prefill": "colocated", "demand_profile": "profiles/peak-hour-day.csv"},
    ],
    "options": {"gpus": ["h100-sxm", "h200-sxm"], "tp": [1, 2], "tiers": ["reserved", "on_demand", "spot"],
                "spot_max_share": 0.2},
}
OUTCOMES = {"outcomes": [
    {"name": "slow", "probability": 0.3, "demand_scale": 0.7, "api_price_scale": 0.6},
    {"name": "forecast", "probability": 0.4},
    {"name": "boom", "probability": 0.3, "demand_scale": 1.9, "spot_max_share": 0.1, "spot_price_scale": 1.3},
]}


def _setup(raw: dict, unc: dict) -> tuple[object, object, st.SeparableSetup]:
    scenario = parse_scenario(raw, "test", EXAMPLES)
    u = parse_uncertainty(unc, "test", [p.name for p in scenario.products])
    setup = st.separable_setup(scenario, u, load_catalog(), get_preset("default"), EXAMPLES, load_commitments())
    assert not isinstance(setup, str), setup
    return scenario, u, setup


# (outcome, commitment) whose MIP HiGHS does not close to a millionth in its time limit: with the
# physics' bf16 work share its bound stalls 6e-5 (slow, no commitment) and 1.4e-3 (boom, (2, 1))
# below the incumbent after 20 s (slow's gap stays open at 300 s), the incumbent being the split's
# own plan; for these the MIP proves only that nothing cheaper turned up and the split is not
# below its bound
OPEN_MIPS = {("slow", (0, 0)), ("boom", (2, 1))}


def test_an_outcomes_cost_for_a_commitment_is_its_mips_optimum_and_its_plan_holds_in_the_mip():
    _, _, setup = _setup(DAY, OUTCOMES)
    ctx, terms = setup.ctx, setup.terms
    assert ctx.gpus == ("h100-sxm", "h200-sxm")
    checked = 0
    for i, case in enumerate(ctx.cases):
        prob = st.outcome_problem(ctx.scenario, ctx.catalog, ctx.preset, ctx.folder, case, ctx.qps, ctx.memo)
        model = st.outcome_model(case, prob, terms)
        rec = rc.outcome_recourse(prob, case.overrides)
        values = rc.recourse_grid(rec, ctx.gpus)[-1]
        for point in [(0, 0), (2, 1), (1, 4)]:
            x = st._as_terms(terms, ctx.gpus, point)
            open_mip = (case.name, point) in OPEN_MIPS
            mip = st.solve_outcome(model.lp, len(terms), st._costs([model]), (x, x), "highs", 1e-6, 20 if open_mip else 300)
            assert mip is not None
            split = st._at(values, point) + sum(u * r for u, r in zip(ctx.unit_usd, point))
            if open_mip:  # nothing cheaper than the split found, and the split is not below the bound
                assert mip.objective_usd == pytest.approx(split, rel=1e-9) and mip.bound_usd <= split + 1e-4
            else:
                assert mip.bound_usd >= mip.objective_usd * (1 - 1e-6) - 1e-6
            # the split is exact: within the MIP's proven interval, whose width is a millionth
            assert mip.bound_usd - 1e-4 <= split <= mip.objective_usd + 1e-4, (case.name, point)
            plans = [rc.recourse_plan(prob, case.overrides, ch) for ch in rc.split(rec, ctx.gpus, point)]
            column = rc.plan_columns(model.lp, prob, plans, st._commit_columns(terms, ctx.gpus, ctx.unit_usd, point))
            assert rc.violations(model.lp, column) == []
            priced = sum(a * b for a, b in zip(model.lp.objective, column)) + model.lp.objective_constant
            assert priced == pytest.approx(split, rel=1e-9)
            checked += 1
    assert checked == 9


def test_the_caps_bind_in_the_checked_outcomes():
    """The check above would be weak if no horizon cap bound: in the forecast with no commitment the
    chat's API share and the spot share are both at their caps."""
    _, _, setup = _setup(DAY, OUTCOMES)
    ctx = setup.ctx
    case = ctx.cases[1]
    prob = st.outcome_problem(ctx.scenario, ctx.catalog, ctx.preset, ctx.folder, case, ctx.qps, ctx.memo)
    rec = rc.outcome_recourse(prob, case.overrides)
    plans = {p.choice.product: p for p in (rc.recourse_plan(prob, case.overrides, ch)
                                           for ch in rc.split(rec, ctx.gpus, (0, 0)))}
    chat = prob.products["chat"]
    api = sum(plans["chat"].api_tokens_per_s)
    assert api == pytest.approx(0.3 * sum(chat.demand_tokens_per_s), rel=0.05) and api <= 0.3 * sum(chat.demand_tokens_per_s) + 1e-6
    for p in plans.values():
        spot, total = sum(p.spot), sum(p.spot) + sum(p.on_demand)
        if total:
            assert spot == math.floor(0.2 * total + 1e-9)


def _brute_force(setup: st.SeparableSetup, top: int) -> tuple[tuple[int, ...], float]:
    """The two-stage optimum by pricing every commitment up to ``top`` GPUs of each type with the
    outcomes' own MIPs (commitment fixed): the least expected cost and its commitment."""
    ctx, terms = setup.ctx, setup.terms
    models = []
    for case in ctx.cases:
        prob = st.outcome_problem(ctx.scenario, ctx.catalog, ctx.preset, ctx.folder, case, ctx.qps, ctx.memo)
        models.append(st.outcome_model(case, prob, terms))
    best: tuple[tuple[int, ...], float] = ((), math.inf)
    for point in itertools.product(range(top + 1), repeat=len(ctx.gpus)):
        x = st._as_terms(terms, ctx.gpus, point)
        total = 0.0
        for m in models:
            res = st.solve_outcome(m.lp, len(terms), st._costs([m]), (x, x), "highs", 1e-9, 60)
            assert res is not None
            total += m.case.probability * res.objective_usd
        if total < best[1] - 1e-6:
            best = (point, total)
    return best


ONE_HOUR = {**DAY, "products": [{k: v for k, v in p.items() if k != "demand_profile"} for p in DAY["products"]]}


def test_the_split_plan_is_the_brute_force_optimum_over_commitments():
    scenario, u, setup = _setup(ONE_HOUR, OUTCOMES)
    top = 8
    point, cost = _brute_force(setup, top)
    # the best commitment lies inside the box, not on its edge (2 H100s and 6 H200s), so a larger
    # commitment is priced too and found dearer
    assert max(point) < top
    plan = st.plan_under_uncertainty(scenario, u, load_catalog(), get_preset("default"), EXAMPLES,
                                     commitment_rows=load_commitments())
    assert plan.method == "decomposition" and plan.notes[0].startswith("exact by the product split")
    assert plan.expected_cost_usd == pytest.approx(cost, rel=1e-7)
    assert plan.gap == 0.0 and plan.lower_bound_usd <= plan.expected_cost_usd
    got = {t.gpu: n for t, n in plan.commitment}
    assert tuple(got.get(g, 0) for g in setup.ctx.gpus) == point


def test_the_split_equals_the_extensive_form_and_the_lagrangian_decomposition():
    scenario, u, _ = _setup(ONE_HOUR, OUTCOMES)
    kw = dict(commitment_rows=load_commitments())
    args = (load_catalog(), get_preset("default"), EXAMPLES)
    split = st.plan_under_uncertainty(scenario, u, *args, **kw)
    ef = st.plan_under_uncertainty(scenario, u.model_copy(update={"method": "extensive"}), *args, **kw)
    lag = st.plan_under_uncertainty(scenario, u.model_copy(update={"method": "decomposition", "max_gap": 0.001}),
                                    *args, separable=False, **kw)
    assert ef.method == "extensive" and lag.method == "decomposition" and not lag.notes
    for other in (ef, lag):
        assert split.expected_cost_usd == pytest.approx(other.expected_cost_usd, rel=1e-3)
        assert other.lower_bound_usd <= split.expected_cost_usd + 1e-6
    assert split.expected_cost_usd <= ef.expected_cost_usd + 1e-6
    assert split.wait_and_see_usd == pytest.approx(ef.wait_and_see_usd, rel=1e-4)
    assert split.mean_forecast_expected_cost_usd == pytest.approx(ef.mean_forecast_expected_cost_usd, rel=1e-4)


def test_outcomes_with_shared_limits_fall_back_to_the_whole_horizon_mips():
    raw = {**ONE_HOUR, "limits": {"gpu_availability": {"h100-sxm": 64}}}
    scenario = parse_scenario(raw, "test", EXAMPLES)
    u = parse_uncertainty({**OUTCOMES, "method": "decomposition", "max_iterations": 3}, "t", ["chat", "summariser", "launch"])
    plan = st.plan_under_uncertainty(scenario, u, load_catalog(), get_preset("default"), EXAMPLES,
                                     commitment_rows=load_commitments())
    assert plan.notes[0] == "outcomes solved as whole-horizon MIPs: GPU availability limits are shared by the products"


def test_a_week_of_sampled_outcomes_is_solved_in_seconds_with_no_gap():
    """The shipped week-long example with 40 of its sampled outcomes (the full 200 are the benchmark's)."""
    from fleetplan.commands.commit import read_stochastic_scenario

    scenario, u, folder = read_stochastic_scenario(str(EXAMPLES / "uncertainty" / "commit-week-sampled.yaml"))
    u = u.model_copy(update={"sample": u.sample.model_copy(update={"scenarios": 40})})
    start = time.monotonic()
    plan = st.plan_under_uncertainty(scenario, u, load_catalog(), get_preset("default"), folder,
                                     commitment_rows=load_commitments(), workers=1)
    assert plan.gap == 0.0 and len(plan.outcomes) == 40 and time.monotonic() - start < 300
    assert plan.vss_usd >= -1e-6 and plan.evpi_usd >= 0
    assert all(o.cost_usd >= o.own_optimum_usd - 1e-6 for o in plan.outcomes)


def test_the_split_is_not_trusted_where_the_fleet_mip_disagrees(monkeypatch):
    """The check before the split is used: a row family it does not model, or a plan that breaks a
    row or is priced otherwise, sends the plan back to the whole-horizon MIPs, with the reason."""
    scenario = parse_scenario(ONE_HOUR, "test", EXAMPLES)
    u = parse_uncertainty({**OUTCOMES, "method": "decomposition", "max_iterations": 3}, "t",
                          ["chat", "summariser", "launch"])

    def plan() -> st.StochasticPlan:
        return st.plan_under_uncertainty(scenario, u, load_catalog(), get_preset("default"), EXAMPLES,
                                         commitment_rows=load_commitments())

    monkeypatch.setattr(st, "SEPARABLE_ROWS", st.SEPARABLE_ROWS - {"spot_share_limit"})
    assert plan().notes[0] == ("outcomes solved as whole-horizon MIPs: the fleet MIP has rows the product split "
                               "does not model (spot_share_limit)")
    monkeypatch.undo()
    short = rc.recourse_plan

    def one_replica_more(prob, ov, choice):  # one on-demand replica more than the split counted
        p = short(prob, ov, choice)
        return rc.HourPlan(p.choice, (p.on_demand[0] + 1, *p.on_demand[1:]), p.spot, p.api_tokens_per_s)

    def one_reserved_short(prob, ov, choice):  # a reserved replica fewer than the split counted
        p = short(prob, ov, choice)
        return rc.HourPlan(rc.Choice(p.choice.product, p.choice.key, max(0, p.choice.reserved - 1)), p.on_demand,
                           p.spot, p.api_tokens_per_s)

    monkeypatch.setattr(st, "recourse_plan", one_replica_more)
    assert plan().notes[0] == ("outcomes solved as whole-horizon MIPs: the product split's plan does not hold in the "
                               "fleet MIP (its cost)")
    monkeypatch.setattr(st, "recourse_plan", one_reserved_short)
    note = plan().notes[0]
    assert note.startswith("outcomes solved as whole-horizon MIPs: the product split's plan does not hold in the "
                           "fleet MIP (") and "meets_demand" in note


def _cvar_by_scan(costs: list[float], probabilities: list[float], alpha: float) -> float:
    """Rockafellar-Uryasev's function minimised over a fine scan of eta (and every cost), in plain Python."""
    lo, hi = min(costs), max(costs)
    etas = [lo + (hi - lo) * k / 2000 for k in range(2001)] + list(costs)
    return min(eta + sum(p * max(0.0, c - eta) for c, p in zip(costs, probabilities)) / (1 - alpha) for eta in etas)


def test_cvar_by_hand():
    costs, probs = [100.0, 200.0, 400.0], [0.5, 0.3, 0.2]
    # the worst 30%: all of the 400 (0.2) and a third of the 200 (0.1)
    assert st.cvar(costs, probs, 0.7) == pytest.approx((0.2 * 400 + 0.1 * 200) / 0.3, rel=1e-12)
    assert st.cvar(costs, probs, 0.5) == pytest.approx((0.2 * 400 + 0.3 * 200) / 0.5, rel=1e-12)
    assert st.cvar(costs, probs, 0.9) == pytest.approx(400.0, rel=1e-12)
    assert st.cvar(costs, probs, 0.01) == pytest.approx((0.49 * 100 + 0.3 * 200 + 0.2 * 400) / 0.99, rel=1e-12)
    # columns: order and ties do not matter, and every column matches the scan
    grid = [[400.0, 5.0, 7.0], [100.0, 5.0, 1.0], [200.0, 5.0, 9.0]]
    got = st.cvar_columns(grid, [0.2, 0.5, 0.3], 0.7)
    for k in range(3):
        column = [row[k] for row in grid]
        assert got[k] == pytest.approx(_cvar_by_scan(column, [0.2, 0.5, 0.3], 0.7), rel=1e-9)
    assert got[1] == pytest.approx(5.0)


@pytest.mark.parametrize("weight, alpha", [(2.0, 0.6), (5.0, 0.5)])
def test_the_split_with_a_risk_term_is_exact_and_equals_the_extensive_form(weight, alpha):
    """E[cost] + w x CVaR: the split's commitment is the brute-force optimum of its own grids (every
    commitment priced, CVaR by a scan), equals the extensive form's objective, and proves gap 0;
    the risk term moves the commitment away from the risk-neutral one."""
    import numpy as np

    scenario, u, setup = _setup(ONE_HOUR, OUTCOMES)
    args = (load_catalog(), get_preset("default"), EXAMPLES)
    kw = dict(commitment_rows=load_commitments())
    risky = u.model_copy(update={"risk_weight": weight, "cvar_alpha": alpha})
    neutral = st.plan_under_uncertainty(scenario, u, *args, **kw)
    split = st.plan_under_uncertainty(scenario, risky, *args, **kw)
    ef = st.plan_under_uncertainty(scenario, risky.model_copy(update={"method": "extensive"}), *args, **kw)
    assert split.notes[0].startswith("exact by the product split") and ef.method == "extensive"
    assert split.gap == 0.0 and split.lower_bound_usd == pytest.approx(split.objective_usd, rel=1e-12)
    assert split.objective_usd == pytest.approx(ef.objective_usd, rel=1e-6)
    assert ef.lower_bound_usd <= split.objective_usd + 1e-6
    assert split.commitment == ef.commitment
    costs = [o.cost_usd for o in split.outcomes]
    probs = [o.probability for o in split.outcomes]
    assert split.objective_usd == pytest.approx(split.expected_cost_usd + weight * _cvar_by_scan(costs, probs, alpha),
                                                rel=1e-9)
    data = split.to_dict()
    assert data["objective_usd"] == round(split.objective_usd, 2) and data["objective_usd"] > data["expected_cost_usd"]
    # brute force over a box of commitments with the outcomes' grids: none is better
    grids, _ = st.outcome_grids(setup.ctx, None, 1, None)
    best = math.inf
    for point in itertools.product(range(16), range(8)):
        total = [sum(u_ * r for u_, r in zip(setup.ctx.unit_usd, point)) + st._at(g.values, point) for g in grids]
        value = sum(p * c for p, c in zip(probs, total)) + weight * _cvar_by_scan(total, probs, alpha)
        best = min(best, value)
    got = {t.gpu: n for t, n in split.commitment}
    point = tuple(got.get(g, 0) for g in setup.ctx.gpus)
    assert point[0] < 16 and point[1] < 8  # the optimum lies inside the box searched: it is the box's best
    assert split.objective_usd == pytest.approx(best, rel=1e-9)
    assert split.commitment != neutral.commitment and split.expected_cost_usd > neutral.expected_cost_usd
    assert split.percentiles()["worst"] <= neutral.percentiles()["worst"] + 1e-6
    assert np.isfinite(split.objective_usd)


def test_a_context_unpickled_elsewhere_reuses_the_configurations_built_once(monkeypatch):
    """What a Dask worker receives: the grids' context pickled and unpickled (new catalog and preset
    objects). Its memo is keyed to them again, so no product's configurations are generated anew,
    and the outcome's grid is the same as in the parent."""
    import pickle

    from fleetplan.optimizer.problem_data import problem

    _, _, setup = _setup(DAY, OUTCOMES)
    here = st.outcome_grid(setup.ctx, 2)
    there = pickle.loads(pickle.dumps(setup.ctx))
    assert there.catalog is not setup.ctx.catalog and there.memo.sets

    def generated(*args, **kwargs):
        raise AssertionError("configurations generated again")

    monkeypatch.setattr(problem, "generate_candidates", generated)
    grid = st.outcome_grid(there.bound_here(), 2)
    assert grid.reason is None and (grid.values == here.values).all() and grid.own_usd == here.own_usd
    with pytest.raises(AssertionError, match="generated again"):  # the memo without its keys rebound misses
        st.outcome_grid(pickle.loads(pickle.dumps(setup.ctx)), 2)


def test_the_risk_search_stops_at_its_bound_with_the_same_plan(monkeypatch):
    """Commitments priced a few at a time: the search stops once the lower bound passes the best
    objective, well before the whole grid, and finds the same commitment and objective."""
    scenario, u, _ = _setup(ONE_HOUR, OUTCOMES)
    risky = u.model_copy(update={"risk_weight": 2.0, "cvar_alpha": 0.6})
    args = (load_catalog(), get_preset("default"), EXAMPLES)
    whole = st.plan_under_uncertainty(scenario, risky, *args, commitment_rows=load_commitments())
    monkeypatch.setattr(st, "RISK_CHUNK", 5)
    chunked = st.plan_under_uncertainty(scenario, risky, *args, commitment_rows=load_commitments())
    assert chunked.to_dict()["commitment"] == whole.to_dict()["commitment"]
    assert chunked.objective_usd == whole.objective_usd and chunked.gap == 0.0
    priced, total = (int(w) for w in chunked.notes[-1].split("; ")[1].split(" commitments")[0].split(" of "))
    assert priced < total / 2 and priced % 5 == 0, chunked.notes[-1]

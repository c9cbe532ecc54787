"""One deadline per command, prefill sized by default, and the per-configuration search with one
model per product: plans stop at the deadline with a feasible plan and an honest gap."""

from __future__ import annotations

import io
import time

import pytest

from fleetplan.models.presets import get_preset
from fleetplan.rendering import progress as progress_module
from fleetplan.optimizer.decisions.breakeven import breakeven
from fleetplan.optimizer.runtime.deadline import Deadline, ProgressEvent
from fleetplan.rendering.progress import ProgressLine
from fleetplan.optimizer.mip.formulation import build_model
from fleetplan.optimizer.mip.linear import to_linear_problem
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.problem_data.reductions import reduced
from fleetplan.optimizer.problem_data.problem import build_problem
from fleetplan.optimizer.decomposition.search import fixing, on_demand_plan, solve_by_configuration
from fleetplan.optimizer.explanation.invariants import check_invariants
from fleetplan.optimizer.explanation.results import plan_to_dict
from fleetplan.optimizer.traffic.scenario import load_scenario, parse_scenario
from fleetplan.optimizer.mip.solvers import Session, solve

CHAT = {"name": "chat", "model": "llama-3.1-8b", "precision": "fp8", "peak_qps": 20, "input_tokens": 1000,
        "output_tokens": 300, "min_tokens_per_s_per_user": 20}


def test_prefill_is_computed_by_default_in_the_default_preset_only():
    default = parse_scenario({"products": [CHAT]}, "s")
    seed = parse_scenario({"preset": "seed", "products": [CHAT]}, "s")
    chosen = parse_scenario({"products": [{**CHAT, "prefill": "headroom"}]}, "s")
    assert default.products[0].prefill == "auto" and default.products[0].effective_headroom == pytest.approx(0.10)
    assert seed.products[0].prefill == "headroom" and seed.products[0].effective_headroom == pytest.approx(0.30)
    assert chosen.products[0].prefill == "headroom"


def test_default_plan_sizes_prefill_and_headroom_plans_say_when_they_miss(catalog, examples):
    """The worked example with nothing restricted, in the default preset: prefill is priced (a
    colocated or pool plan), and it costs more than the seed's flat 30% claims."""
    raw = {"products": [{"name": "chat", "model": "llama-3.1-70b", "precision": "fp8", "peak_qps": 350,
                         "input_tokens": 2000, "output_tokens": 400, "min_tokens_per_s_per_user": 30}],
           "options": {"gpus": ["h100-sxm"], "gpu_hour_usd": {"h100-sxm": 2.5}}}
    computed = plan_to_dict(make_plan(parse_scenario(raw, "s"), catalog, alternatives=False))
    raw["products"][0]["prefill"] = "headroom"
    flat = plan_to_dict(make_plan(parse_scenario(raw, "s"), catalog, alternatives=False))
    assert computed["products"][0]["prefill"]["mode"] in ("colocated", "pool")
    assert flat["products"][0]["prefill"]["mode"] == "headroom"
    check = flat["products"][0]["prefill_check"]
    assert not check["covered"] and check["replicas_with_prefill"] > check["replicas_by_rule"]
    assert computed["monthly_cost_usd"] > flat["monthly_cost_usd"]


def _day_with_api(examples):
    """A 24-hour product with reserved and on-demand replicas and an API capped at 30%."""
    raw = {"products": [{**CHAT, "name": "chat", "prefill": "colocated", "demand_profile": "profiles/peak-hour-day.csv",
                         "api": {"model": "llama-3.1-8b", "max_fraction": 0.3}}],
           "options": {"gpus": ["h100-sxm", "h200-sxm"], "tiers": ["reserved", "on_demand"]}}
    return parse_scenario(raw, "s"), examples


def test_fixing_by_bounds_equals_a_model_of_one_configuration(catalog, examples):
    """Each configuration fixed by bounds in the product's one model gives the optimum of a model
    built for that configuration alone (HiGHS on both, and OR-Tools on the fixed one)."""
    scenario, folder = _day_with_api(examples)
    prob, _, _ = build_problem(scenario, catalog, get_preset(scenario.preset), folder)
    prob = reduced(prob)
    pd = prob.products["chat"]
    lp = to_linear_problem(build_model(prob))
    session = Session(lp, "highs")
    for c in sorted(pd.candidates, key=lambda c: c.key)[:3]:
        own = to_linear_problem(build_model(prob.derive(products={"chat": pd.__class__(**{
            **pd.__dict__, "candidates": (c,), "pool": ()})})))
        j = own.col_index["self_host[chat]"]
        lower, upper = list(own.col_lower), list(own.col_upper)
        lower[j] = upper[j] = 1.0
        alone = solve(own.with_bounds(lower, upper))
        fixed = session.solve(*fixing(lp, pd, (c, None)))
        scip = Session(lp, "ortools").solve(*fixing(lp, pd, (c, None)))
        assert alone.optimal and fixed.optimal and scip.optimal
        assert fixed.objective == pytest.approx(alone.objective, rel=1e-6)
        assert scip.objective == pytest.approx(alone.objective, rel=1e-5)


def test_on_demand_plan_is_feasible_and_no_cheaper_than_the_optimum(catalog, examples):
    scenario, folder = _day_with_api(examples)
    prob, _, _ = build_problem(scenario, catalog, get_preset(scenario.preset), folder)
    res, _, _ = solve_by_configuration(prob, "chat", "highs")
    prob = reduced(prob)
    lp = to_linear_problem(build_model(prob))
    pd = prob.products["chat"]
    for c in pd.candidates:
        plan = on_demand_plan(lp, prob, pd, (c, None))
        assert plan is not None and plan.objective >= res.objective - 1e-6
        # every row holds at the constructed values
        for lo, hi, idx, val in zip(lp.row_lower, lp.row_upper, lp.row_index, lp.row_value):
            a = sum(v * plan.values[j] for j, v in zip(idx, val))
            assert lo - 1e-6 * max(1, abs(lo)) <= a <= hi + 1e-6 * max(1, abs(hi))


def test_a_short_deadline_returns_the_best_plan_with_its_gap(catalog, examples):
    """Prefill left to the planner (colocated or pool) on the 168-hour blend with one second: the
    command ends with a feasible plan, status time_limit, a gap > 0 and what was cut. An idle
    machine now and then proves this plan within the second: then it must say optimal, with a
    gap no wider than the search's dollar of slack (which comes first depends on the machine)."""
    scenario, folder = load_scenario(examples / "chat-diurnal-blend.yaml")
    raw = scenario.model_dump(mode="python")
    raw["products"][0]["prefill"] = "auto"
    raw["options"]["time_limit_s"] = 1.0
    raw["options"]["mip_rel_gap"] = 0.0  # nothing short of a full proof counts: the deadline ends the search
    plan = make_plan(parse_scenario(raw, "s"), catalog, folder=folder)
    d = plan_to_dict(plan)  # how long it takes is measured in benchmarks/bench_deadline.py
    if d["status"] == "optimal":  # proven: within the dollar of slack an optimal search allows
        from fleetplan.optimizer.common.defaults import ABS_GAP_USD

        assert (d["mip_gap"] or 0.0) * d["monthly_cost_usd"] <= ABS_GAP_USD + 1e-6
    else:
        assert d["status"] == "time_limit" and d["mip_gap"] > 0 and d["stopped_by_time_limit"]
    assert d["time_limit_s"] == 1.0
    assert check_invariants(plan) == []
    assert d["monthly_cost_usd"] > 0


def test_breakeven_shares_one_deadline_and_reports_each_scale(catalog, examples):
    scenario, folder = _day_with_api(examples)
    seen: list[float] = []
    r = breakeven(scenario, catalog, folder, scales=(0.5, 1.0), deadline=Deadline.after(120),
                  on_point=lambda p: seen.append(p.scale))
    assert seen == [0.5, 1.0] and r.stopped == ()
    assert all(p.proven_optimal for p in r.points)
    gone = breakeven(scenario, catalog, folder, scales=(0.5, 1.0), deadline=Deadline.after(0.0))
    assert gone.points == () and gone.stopped == ("scales from 0.5 on",)


def test_progress_shows_only_on_a_terminal_after_a_while(monkeypatch):
    out = io.StringIO()
    quiet = ProgressLine(enabled=False, stream=out)
    quiet(ProgressEvent("planning", 1, 2, force=True))
    assert out.getvalue() == ""
    monkeypatch.setattr(progress_module, "PROGRESS_AFTER_S", 0.0)
    shown = ProgressLine(enabled=True, stream=out)
    shown(ProgressEvent("p1: searching configurations", 3, 10, best_usd=1234.5, bound_usd=1200.0, force=True))
    line = out.getvalue()
    assert "p1: searching configurations 3/10" in line and "best $1,234" in line and "bound $1,200" in line
    shown.close()
    assert out.getvalue().endswith("\r\x1b[2K")
    assert ProgressLine.for_terminal(quiet=True).enabled is False
    monkeypatch.setenv("CI", "1")
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert ProgressLine.for_terminal().enabled is False


def test_the_library_reports_progress_to_a_callback_and_draws_nothing(catalog, examples, capfd):
    from fleetplan.optimizer.traffic.scenario import load_scenario

    scenario, folder = load_scenario(examples / "seed-chat-70b.yaml")
    events: list[ProgressEvent] = []
    plan = make_plan(scenario, catalog, folder=folder, progress=events.append)
    assert events, "no progress reported"
    assert all(isinstance(e, ProgressEvent) and e.stage and e.elapsed_s >= 0 for e in events)
    assert [e.elapsed_s for e in events] == sorted(e.elapsed_s for e in events)
    assert any(e.done is not None and e.total is not None and 0 <= e.done <= e.total for e in events)
    assert capfd.readouterr() == ("", "")
    assert plan.monthly_cost_usd > 0


def test_deadline_shares_what_is_left():
    d = Deadline.after(10.0)
    half = d.share(0.5)
    assert 4.5 < half.left() <= 5.0 and half.stopped is d.stopped
    half.note("x")
    half.note("x")
    assert d.stopped == ["x"]
    assert Deadline(at=None).share(0.5).left() is None and Deadline.after(0.0).expired

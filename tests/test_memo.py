"""The candidate memo of one command: a re-plan that changes only demand, limits or solver
settings reuses the candidates generated for the plan; anything generation reads makes new ones;
what a caller gets is its own copy."""

from __future__ import annotations

from pathlib import Path

from fleetplan.models.presets import get_preset
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.problem_data.problem import CandidateMemo, build_problem
from fleetplan.optimizer.traffic.scenario import load_scenario
from fleetplan.optimizer.decisions.sensitivity import demand, speed_target

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _build(scenario, catalog, folder, memo):
    return build_problem(scenario, catalog, get_preset(scenario.preset), folder, memo=memo)


def test_demand_and_solver_settings_reuse_candidates_and_give_the_same_data(catalog):
    scenario, folder = load_scenario(EXAMPLES / "portfolio-3.yaml")
    memo = CandidateMemo()
    fresh, _, _ = _build(scenario, catalog, folder, None)
    first, _, _ = _build(scenario, catalog, folder, memo)
    assert len(memo.sets) == len(scenario.products)
    assert first == fresh
    quicker = scenario.model_copy(update={"options": scenario.options.model_copy(
        update={"mip_rel_gap": 1e-3, "time_limit_s": 5.0})})
    more = demand(quicker, catalog, 1.2)
    again, _, _ = _build(more, catalog, folder, memo)
    assert len(memo.sets) == len(scenario.products)  # nothing generated again
    assert again == _build(more, catalog, folder, None)[0]
    assert again.products != fresh.products  # the demand moved


def test_a_changed_speed_target_generates_again(catalog):
    scenario, folder = load_scenario(EXAMPLES / "portfolio-3.yaml")
    memo = CandidateMemo()
    _build(scenario, catalog, folder, memo)
    faster, _, _ = _build(speed_target(scenario, catalog, 1.2), catalog, folder, memo)
    assert len(memo.sets) == 2 * len(scenario.products)
    plain, _, _ = _build(speed_target(scenario, catalog, 1.2), catalog, folder, None)
    assert faster == plain


def test_a_caller_cannot_change_what_the_memo_holds(catalog):
    scenario, folder = load_scenario(EXAMPLES / "seed-chat-70b.yaml")
    memo = CandidateMemo()
    product = scenario.products[0]
    llm = catalog.model(product.model, "model")
    preset = get_preset(scenario.preset)
    got = memo.generate(product, llm, catalog, scenario, preset)
    n = len(got.candidates)
    got.candidates.clear()
    assert len(memo.generate(product, llm, catalog, scenario, preset).candidates) == n > 0


def test_a_plan_with_a_shared_memo_is_the_plan_without_one(catalog):
    scenario, folder = load_scenario(EXAMPLES / "portfolio-3.yaml")
    memo = CandidateMemo()
    _build(demand(scenario, catalog, 0.8), catalog, folder, memo)
    with_memo = make_plan(scenario, catalog, folder=folder, alternatives=False, memo=memo)
    without = make_plan(scenario, catalog, folder=folder, alternatives=False)
    assert with_memo.monthly_cost_usd == without.monthly_cost_usd
    assert [pp.candidate for pp in with_memo.products] == [pp.candidate for pp in without.products]



def test_the_spot_share_cap_reuses_candidates_and_gives_the_same_data(catalog):
    """Candidate generation does not read options.spot_max_share (a row of the MIP): outcomes of a
    commitment plan that differ only in spot availability share one candidate set per product, and
    each problem equals the one built without the memo."""
    scenario, folder = load_scenario(EXAMPLES / "portfolio-3.yaml")
    memo = CandidateMemo()
    for share in (0.0, 0.2, 0.9):
        capped = scenario.model_copy(update={"options": scenario.options.model_copy(
            update={"tiers": ["on_demand", "spot"], "spot_max_share": share})})
        built, _, _ = _build(capped, catalog, folder, memo)
        assert built == _build(capped, catalog, folder, None)[0] and built.spot_max_share == share
        assert len(memo.sets) == len(scenario.products)

"""The candidate memo of one command: a re-plan that changes only demand, limits or solver
settings reuses the candidates generated for the plan; anything generation reads makes new ones;
what a caller gets is its own copy."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from fleetplan.models.presets import get_preset
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.problem_data.problem import CandidateMemo, build_problem
from fleetplan.optimizer.problem_data.candidates import generate_candidates
from fleetplan.optimizer.traffic.scenario import load_scenario, parse_scenario
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


# Products alike but for name and demand share one generation (a large portfolio's copies of a
# few shapes): what each is handed must be exactly what generating it alone gives.
TWINS = {
    "products": [
        {"name": "chat-a", "model": "llama-3.1-70b", "precision": "fp8", "peak_qps": 12, "input_tokens": 1000,
         "output_tokens": 300, "min_tokens_per_s_per_user": 20, "demand_profile": None},
        {"name": "chat-b", "model": "llama-3.1-70b", "precision": "fp8", "peak_qps": 31.5, "input_tokens": 1000,
         "output_tokens": 300, "min_tokens_per_s_per_user": 20, "api": {"model": "llama-3.1-70b", "max_fraction": 0.5}},
        {"name": "chat-long", "model": "llama-3.1-70b", "precision": "fp8", "peak_qps": 12, "input_tokens": 4000,
         "output_tokens": 300, "min_tokens_per_s_per_user": 20},
    ],
    "options": {"gpus": ["h100-sxm", "h200-sxm", "mi300x"], "tp": [1, 2, 4, 8], "prefill_gpus": ["h100-sxm"]},
}


def _twins(prefill: str = "headroom"):
    raw = {**TWINS, "products": [{**p, "prefill": prefill} for p in TWINS["products"]]}
    return parse_scenario(raw, "twins.yaml")


def _fields(x) -> dict:
    return {f.name: getattr(x, f.name) for f in fields(x)}


def _assert_same_set(got, fresh) -> None:
    """Field by field: the set's counts and figures, then every configuration's fields."""
    assert len(got.candidates) == len(fresh.candidates) > 0
    assert len(got.pool) == len(fresh.pool)
    for a, b in zip(got.candidates + got.pool, fresh.candidates + fresh.pool):
        assert _fields(a) == _fields(b)
        assert a.key == b.key
    assert {k: v for k, v in _fields(got).items() if k not in ("candidates", "pool")} == \
        {k: v for k, v in _fields(fresh).items() if k not in ("candidates", "pool")}


def test_a_product_alike_but_for_name_and_demand_gets_the_set_it_would_generate(catalog):
    for prefill in ("headroom", "auto"):  # "auto" adds prefill-pool configurations
        scenario = _twins(prefill)
        preset = get_preset(scenario.preset)
        a, b, long = scenario.products
        llm = catalog.model(a.model, "model")
        memo = CandidateMemo()
        got_a = memo.generate(a, llm, catalog, scenario, preset)
        got_b = memo.generate(b, llm, catalog, scenario, preset)
        assert (memo.hits, memo.misses) == (1, 1)
        fresh_b = generate_candidates(b, llm, catalog, scenario.options, preset)
        _assert_same_set(got_b, fresh_b)
        assert {c.product for c in got_b.candidates + got_b.pool} == {"chat-b"}
        assert got_b.product == "chat-b"
        # the first product's set keeps its own labels
        _assert_same_set(got_a, generate_candidates(a, llm, catalog, scenario.options, preset))
        assert memo.generate(a, llm, catalog, scenario, preset).candidates == got_a.candidates
        # a longer prompt is another generation, with other figures
        got_long = memo.generate(long, llm, catalog, scenario, preset)
        assert memo.misses == 2
        _assert_same_set(got_long, generate_candidates(long, llm, catalog, scenario.options, preset))
        assert [c.replica_tokens_per_s for c in got_long.candidates] != [c.replica_tokens_per_s for c in got_a.candidates]
        if prefill == "auto":
            assert got_b.pool and any(c.mode == "pool" for c in got_b.candidates)


class _PerName(CandidateMemo):
    """One generation per product name, as before products shared sets."""

    def key(self, product, catalog, scenario, preset):
        return (product.name, *super().key(product, catalog, scenario, preset))


def test_a_plan_on_shared_sets_is_the_plan_on_sets_generated_per_product(catalog):
    scenario = _twins()
    shared, per_name = CandidateMemo(), _PerName()
    one = make_plan(scenario, catalog, alternatives=False, memo=shared)
    other = make_plan(scenario, catalog, alternatives=False, memo=per_name)
    assert (shared.misses, per_name.misses) == (2, 3)
    assert one.monthly_cost_usd == other.monthly_cost_usd > 0
    assert [pp.candidate for pp in one.products] == [pp.candidate for pp in other.products]
    assert [pp.candidate.product for pp in one.products if pp.candidate] == \
        [pp.product.name for pp in one.products if pp.candidate]


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

"""Candidate generation within the command's deadline: it stops where the deadline passes, keeps
what it found, shares the time between products and a mix's buckets, and a plan on a cut set is
``time_limit`` (never optimal) or, with nothing found, one line naming ``options.time_limit_s``.

Where generation stops is made the same on every machine by deadlines that pass after a given
number of looks (:class:`Looks`), never by the clock; only the command-line test uses the clock,
bounded by a subprocess timeout."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetplan.models.presets import get_preset
from fleetplan.optimizer import plan as plan_module
from fleetplan.optimizer.problem_data.candidates import CandidateSet, generate_candidates
from fleetplan.optimizer.runtime.deadline import CANDIDATE_STAGE, Deadline, DeadlinePassed
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.problem_data.problem import build_problem
from fleetplan.optimizer.traffic.scenario import MAX_PRODUCTS, ScenarioError, parse_scenario

CHAT = {"name": "chat", "model": "llama-3.1-70b", "precision": "fp8", "peak_qps": 40, "input_tokens": 1000,
        "output_tokens": 300, "min_tokens_per_s_per_user": 20, "prefill": "colocated"}
# two GPU types, two TPs, a few batches: a dozen layouts, so a cut after a few looks is partial
SMALL_OPTIONS = {"gpus": ["a100-sxm-80gb", "h100-sxm", "h200-sxm"], "tp": [2, 4], "batch": [8, 32, 128]}


class Looks(Deadline):
    """A deadline that passes after ``looks`` looks at :attr:`expired`, shared with every share
    and split of it (so a product's and a bucket's generation count against the same looks)."""

    def __init__(self, looks: int, stopped: list[str] | None = None) -> None:
        super().__init__(at=None, stopped=stopped if stopped is not None else [])
        self.looks = looks

    @property
    def expired(self) -> bool:
        self.looks -= 1
        return self.looks < 0

    def share(self, fraction: float) -> Deadline:
        return self


class Splits(Deadline):
    """A deadline that never passes itself and hands out ``children`` in turn, one per split (the
    products' shares, then the pooled groups'; or a product's GPU types')."""

    def __init__(self, children: list[Deadline]) -> None:
        super().__init__(at=None)
        self.children = list(children)

    def split(self, parts: int) -> Deadline:
        return self.children.pop(0)


def _scenario(products: list[dict[str, Any]], **extra: Any) -> Any:
    return parse_scenario({"products": products, "options": dict(SMALL_OPTIONS), **extra}, "s.yaml")


def _generate(catalog: Any, deadline: Deadline | None, product: dict[str, Any] = CHAT) -> CandidateSet:
    sc = _scenario([product])
    p = sc.products[0]
    return generate_candidates(p, catalog.models[p.model], catalog, sc.options, get_preset("default"), prune=False,
                               deadline=deadline)


def _rows(cs: CandidateSet) -> dict[str, tuple[int, float, float]]:
    return {c.key: (c.batch, c.replica_tokens_per_s, c.monthly_cost_per_replica_usd) for c in cs.candidates}


def test_a_deadline_not_reached_changes_no_candidate(catalog):
    """With time to spare, generation is exactly what it is without a deadline."""
    free = _generate(catalog, None)
    timed_deadline = Deadline.after(1e6)
    timed = _generate(catalog, timed_deadline)
    assert not timed.cut and not timed_deadline.stopped
    assert _rows(timed) == _rows(free) and len(free.candidates) >= 6
    assert (timed.generated, timed.feasible) == (free.generated, free.feasible)


def test_generation_stops_where_the_deadline_passes_and_keeps_what_it_found(catalog):
    """Cut after n looks, the set is a prefix of the full search: fewer configurations, each one
    exactly as the full search found it, more of them the later the cut, and the stage noted."""
    full = _rows(_generate(catalog, None))
    found = []
    for looks in (1, 3, 5):
        deadline = Looks(looks)
        cs = _generate(catalog, deadline)
        rows = _rows(cs)
        assert cs.cut and deadline.stopped == [CANDIDATE_STAGE]
        assert rows.items() <= full.items() and len(rows) < len(full)
        found.append(len(rows))
    assert found == sorted(found) and found[-1] > found[0] > 0


def test_each_gpu_type_gets_its_own_share(catalog):
    """One look per GPU type: the first layout of every type (tp 2), not every layout of the first
    types, which one shared look count gives."""
    per_type = _generate(catalog, Splits([Looks(1), Looks(1), Looks(1)]))
    assert per_type.cut and sorted((c.gpu, c.tp) for c in per_type.candidates) == [
        ("a100-sxm-80gb", 2), ("h100-sxm", 2), ("h200-sxm", 2)]
    assert _rows(per_type).items() <= _rows(_generate(catalog, None)).items()
    shared = _generate(catalog, Looks(3))
    assert sorted((c.gpu, c.tp) for c in shared.candidates) == [("a100-sxm-80gb", 2), ("a100-sxm-80gb", 4),
                                                                  ("h100-sxm", 2)]


def test_a_deadline_passed_before_generation_leaves_nothing(catalog):
    cs = _generate(catalog, Looks(0))
    assert cs.cut and not cs.candidates and cs.generated == 0


def test_a_product_the_deadline_leaves_without_candidates_is_one_line_naming_time_limit(catalog):
    sc = _scenario([CHAT])
    with pytest.raises(DeadlinePassed) as err:
        build_problem(sc, catalog, get_preset("default"), deadline=Looks(0))
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("options.time_limit_s: the deadline (60 s) passed in candidate generation before "
                          "products[chat] had a configuration")


def test_each_product_gets_its_own_share(catalog):
    """A share that passes leaves the next product its own: both products keep what they found in
    theirs (one deadline for both would leave the second with nothing)."""
    other = {**CHAT, "name": "other", "input_tokens": 3000}
    sc = _scenario([CHAT, other])
    _, sets, _ = build_problem(sc, catalog, get_preset("default"), deadline=Splits([Looks(3), Looks(3)]))
    assert sets["chat"].cut and sets["other"].cut
    assert sets["chat"].candidates and sets["other"].candidates
    with pytest.raises(DeadlinePassed, match=r"products\[other\]"):
        build_problem(sc, catalog, get_preset("default"), deadline=Splits([Looks(10**6), Looks(0)]))


def test_a_pooled_group_the_deadline_leaves_without_candidates_stays_unpooled(catalog):
    """Pooling is allowed, not imposed: a group whose share found nothing is planned as its members.
    (``other`` asks a longer prompt and a shorter answer, so the group's merged request is generated anew, not a set kept
    for a member.)"""
    other = {**CHAT, "name": "other", "peak_qps": 10, "input_tokens": 1200, "output_tokens": 250}
    sc = _scenario([CHAT, other], limits={"allow_pooling": True})
    _, sets, planned = build_problem(sc, catalog, get_preset("default"), deadline=Splits([Looks(10**6)] * 3))
    assert [u.name for u in planned] == ["pool:chat+other"]
    group_share = Looks(0)
    _, sets, planned = build_problem(sc, catalog, get_preset("default"),
                                     deadline=Splits([Looks(10**6), Looks(10**6), group_share]))
    assert [u.name for u in planned] == ["chat", "other"]
    assert not sets["chat"].cut and group_share.stopped == [CANDIDATE_STAGE]


def test_a_mix_bucket_the_deadline_leaves_without_configurations_is_named(catalog):
    """Bucket 0 takes every look; bucket 1 is then timed on nothing (not even bucket 0's
    configurations): the error names it. With looks to spare both buckets are served."""
    mix = {**CHAT, "requests": [{"input_tokens": 128, "output_tokens": 128, "share": 0.8},
                                {"input_tokens": 6000, "output_tokens": 400, "share": 0.2}]}
    for key in ("input_tokens", "output_tokens"):
        mix.pop(key)
    sc = _scenario([mix])
    prob, sets, _ = build_problem(sc, catalog, get_preset("default"), deadline=Looks(10**6))
    assert not sets["chat"].cut and all(b.capacity for b in prob.products["chat"].buckets)
    with pytest.raises(DeadlinePassed, match=r"before products\[chat\]\.requests\[1\] had a configuration"):
        build_problem(sc, catalog, get_preset("default"), deadline=Looks(3))


def _cut_plans(monkeypatch: pytest.MonkeyPatch, looks: int) -> None:
    """Make every plan's candidate generation pass its deadline after ``looks`` looks (notes go
    to the command's deadline)."""
    real: Callable[..., Any] = plan_module.build_problem

    def build(*args: Any, deadline: Deadline, **kwargs: Any) -> Any:
        return real(*args, deadline=Looks(looks, deadline.stopped), **kwargs)

    monkeypatch.setattr(plan_module, "build_problem", build)


def test_a_plan_on_a_cut_set_is_time_limit_with_no_gap_and_costs_at_least_the_optimum(catalog, monkeypatch):
    sc = _scenario([CHAT])
    best = make_plan(sc, catalog, alternatives=False)
    assert best.solve_result.status == "optimal" and CANDIDATE_STAGE not in best.stopped
    _cut_plans(monkeypatch, 2)
    cut = make_plan(sc, catalog, alternatives=False)
    assert cut.solve_result.status == "time_limit" and cut.solve_result.mip_gap is None
    assert "candidate generation" in cut.solve_result.termination
    assert cut.stopped[0] == CANDIDATE_STAGE
    assert cut.monthly_cost_usd >= best.monthly_cost_usd - 0.01
    assert cut.monthly_cost_usd > best.monthly_cost_usd  # the cut set misses the optimum's GPU here
    chosen = {pp.candidate.gpu for pp in cut.products}
    assert chosen == {"a100-sxm-80gb"}


def test_too_many_products_are_refused_before_any_is_read():
    products = [{**CHAT, "name": f"p{i}"} for i in range(MAX_PRODUCTS + 1)]
    with pytest.raises(ScenarioError, match=r"^s\.yaml\.products: 1,001 products; a scenario may have at most 1,000"):
        parse_scenario({"products": products}, "s.yaml")
    assert len(parse_scenario({"products": products[:MAX_PRODUCTS]}, "s.yaml").products) == MAX_PRODUCTS


# Eight DeepSeek-V3 products searching every layout up to a batch of 65,536 per rank: minutes of
# candidate generation without a deadline (one of them alone: 21 s measured on a loaded two-core
# machine), about 3 s in all with a 1 s limit.
SLOW = {
    "products": [{"name": f"chat{i}", "model": "deepseek-v3", "precision": "fp8", "peak_qps": 100,
                  "input_tokens": 2000 + 100 * i, "output_tokens": 400, "min_tokens_per_s_per_user": 10,
                  "max_ttft_ms": 2000} for i in range(8)],
    "options": {"max_batch": 65536, "tp": [1, 2, 4, 8, 16], "pp": [1, 2, 4, 8], "dp_attention": [1, 8, 16, 32, 64],
                "time_limit_s": 1},
}
# far below the unbounded minute, far above the second asked for plus start-up on a loaded machine
SLOW_TIMEOUT_S = 40


def test_a_slow_candidate_search_ends_at_a_tiny_time_limit(tmp_path: Path):
    """From the command line: a plan cut in candidate generation (``time_limit``, the stage named)
    or one line naming ``options.time_limit_s`` - never the whole search, never a traceback."""
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(SLOW))
    r = subprocess.run([sys.executable, "-m", "fleetplan.main", "plan", str(path), "--json", "--no-alternatives"],
                       capture_output=True, text=True, timeout=SLOW_TIMEOUT_S, cwd=tmp_path)
    if r.returncode == 0:
        d = json.loads(r.stdout)
        assert d["status"] == "time_limit" and d["mip_gap"] is None
        assert CANDIDATE_STAGE in d["stopped_by_time_limit"]
    else:
        assert r.returncode == 2 and r.stdout == ""
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "options.time_limit_s: the deadline (1 s) passed in candidate generation" in lines[0]


def test_breakeven_keeps_its_scales_when_a_strategy_finds_no_configuration_in_time(catalog, tmp_path):
    """A strategy the deadline leaves without a configuration costs None, as one without a plan;
    the command goes on (one look for breakeven's own check, then generation finds the deadline passed)."""
    from fleetplan.optimizer.decisions.breakeven import breakeven

    api = {**CHAT, "model": "llama-3.1-8b", "api": {"model": "llama-3.1-8b", "max_fraction": 0.5}}
    result = breakeven(_scenario([api]), catalog, tmp_path, scales=(1.0, 2.0), deadline=Looks(1))
    (point,) = result.points
    assert point.self_host_usd is None and point.blend_usd is None and point.all_api_usd > 0
    assert CANDIDATE_STAGE in result.stopped


def test_a_solve_the_deadline_ends_without_any_plan_is_one_line_naming_the_time_limit(tmp_path, capsys, monkeypatch):
    """HiGHS stopped by the time limit before it found any plan (a large mix's one-hour MIP) is
    exit code 2 naming options.time_limit_s, not a solver error; searches that catch solver
    errors still read it as "nothing found in time"."""
    from fleetplan.main import main
    from fleetplan.optimizer.decomposition import search
    from fleetplan.optimizer.runtime.deadline import NoPlanInTime
    from fleetplan.optimizer.common.errors import SolverError
    from fleetplan.optimizer.mip.solvers import SolveResult

    class Stopped:
        def __init__(self, lp, solver):
            self.solver = solver

        def solve(self, *args, **kwargs):
            return SolveResult(str(self.solver), "time_limit", "time limit reached (no plan found)")

    monkeypatch.setattr(search, "Session", Stopped)
    s = tmp_path / "s.yaml"
    s.write_text("products:\n  - {name: m, model: llama-3.1-8b, peak_qps: 5, min_tokens_per_s_per_user: 20,\n"
                 "     requests: [{input_tokens: 500, output_tokens: 100, share: 0.5},\n"
                 "                {input_tokens: 4000, output_tokens: 300, share: 0.5}]}\n"
                 "options: {gpus: [h100-sxm], tp: [1], batch: [32]}\n", encoding="utf-8")
    code = main(["plan", str(s), "--json"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err == ("fleetplan: error: options.time_limit_s: the deadline passed before highs found any plan for "
                   "products[m]; allow more time, or search fewer GPUs, tp, batches or request buckets\n")
    assert issubclass(NoPlanInTime, SolverError)


class Parts(Deadline):
    """A deadline without a limit that records into how many parts each split shares the time."""

    def __init__(self) -> None:
        super().__init__(at=None)
        self.parts: list[int] = []

    def split(self, parts: int) -> Deadline:
        self.parts.append(parts)
        return Deadline(at=None)


def test_the_time_is_split_between_the_generations_still_to_run(catalog):
    """Products alike but for name and demand share one generation, so the time left is split
    between the distinct sets still to generate, not the products: [chat, twin, long, twin2]
    need two generations (chat's, long's), so chat gets half the time, not a quarter; twin gets
    all the time left before long's (it uses none: its set is chat's) and twin2 has nothing to
    generate."""
    twin = {**CHAT, "name": "twin", "peak_qps": 7}
    long = {**CHAT, "name": "long", "input_tokens": 6000}
    twin2 = {**CHAT, "name": "twin2", "peak_qps": 3, "api": {"model": "llama-3.1-70b", "max_fraction": 0.5}}
    sc = _scenario([CHAT, twin, long, twin2])
    deadline = Parts()
    _, sets, _ = build_problem(sc, catalog, get_preset("default"), deadline=deadline)
    assert deadline.parts == [2, 1, 1, 0]
    assert _rows(sets["twin"]) == {k.replace("chat/", "twin/", 1): v for k, v in _rows(sets["chat"]).items()}
    # pooling adds one more part to every product's split
    deadline = Parts()
    build_problem(_scenario([CHAT, twin, long], limits={"allow_pooling": True}), catalog, get_preset("default"),
                  deadline=deadline)
    assert deadline.parts[:3] == [3, 2, 2]



def test_a_request_mix_is_one_generation_and_its_twin_none(catalog):
    """A request mix's buckets are generated under one share; a mix alike but for name and demand
    needs none of its own."""
    mix = {**CHAT, "name": "mix", "requests": [{"input_tokens": 128, "output_tokens": 128, "share": 0.8},
                                               {"input_tokens": 6000, "output_tokens": 400, "share": 0.2}]}
    twin = {**mix, "name": "mix-twin", "peak_qps": 9}
    deadline = Parts()
    _, sets, _ = build_problem(_scenario([mix, twin, CHAT]), catalog, get_preset("default"), deadline=deadline)
    assert deadline.parts[:3] == [2, 1, 1]
    assert _rows(sets["mix-twin"]) == {k.replace("mix/", "mix-twin/", 1): v for k, v in _rows(sets["mix"]).items()}

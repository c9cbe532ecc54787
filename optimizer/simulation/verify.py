"""Replay before return: a plan made from a trace is checked on the trace's own arrivals and
tightened where it misses until it holds.

Owns the loop around :func:`fleetplan.optimizer.plan.make_plan` for products that give a
``trace``: plan, replay the peak hour through the discrete-event simulator
(:mod:`.simulate_plan`), and where a target misses, search the replica scale of that hour whose
replay meets the targets, raise the hour's planned demand by it (a cut on the MIP: that hour
must hold the capacity the replay needed, in whichever configurations the MIP then finds
cheapest) and solve again, until every replay meets its targets or the deadline ends. It
writes no file and prints nothing.

Which arrivals: the trace's busiest hour landing on the plan's peak hour, as logged (at most
:data:`REPLAY_REQUESTS` of them, the first). A product whose ``peak_qps`` rescales its trace is
replayed at its own rate instead, on :data:`REPLAY_REQUESTS` arrivals drawn at the trace's
measured inter-arrival SCV (:func:`fleetplan.optimizer.traffic.synthetic.renewal_gaps`): the trace's own times would be the
wrong rate. Only the peak hour is replayed (the hour that sizes the fleet; a plan from a mix
has its per-configuration replicas at that hour only). Targets are judged as ``simulate``
judges them: every percentile TTFT target, and the per-user speed as the median TPOT.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from fleetplan.optimizer.common.defaults import CEILING_MARGIN, MAX_SCALE, REPLAY_REQUESTS, REPLAY_ROUNDS, SCALE_BISECTIONS
from fleetplan.catalogs.loader import Catalog
from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.traffic.demand import hourly_qps
from fleetplan.optimizer.common.enums import Status
from fleetplan.optimizer.common.errors import InfeasibleError, SolverError
from fleetplan.optimizer.explanation.results import plan_to_dict
from fleetplan.optimizer.traffic.scenario import Product, Scenario
from fleetplan.optimizer.simulation.simulate_plan import Settings, hour_load, simulate_product
from fleetplan.optimizer.mip.solution import Plan
from fleetplan.optimizer.problem_data.problem import CandidateMemo
from fleetplan.optimizer.traffic.trace import read_trace, trace_fields

SEED = 0


def traced(scenario: Scenario) -> list[Product]:
    """Products planned from a trace (the ones a plan is replayed for)."""
    return [p for p in scenario.products if p.trace is not None]


def make_verified_plan(scenario: Scenario, catalog: Catalog, folder: Path, deadline: Deadline,
                       make: Any, verify: bool = True, **keywords: Any) -> Plan:
    """``make(scenario, catalog, folder=folder, deadline=deadline, demand=..., **keywords)`` (a
    :func:`~.plan.make_plan`) replayed and tightened until every traced product meets its
    targets; ``plan.verification`` says how it went. Without a traced product: ``make``'s plan
    as it is, with ``verification`` None. Every round's plan is made as asked, on one
    candidate memo (the rounds change only the demand). ``verify`` False: ``make``'s plan
    unreplayed, its ``verification`` saying so where a product gives a trace."""
    products = traced(scenario)
    if not verify:
        plan = make(scenario, catalog, folder=folder, deadline=deadline, **keywords)
        plan.verification = unverified() if products else None
        return plan
    demand = hourly_qps(scenario.products, folder)
    full = {**keywords, "memo": keywords.get("memo") or CandidateMemo()}
    if not products:
        return make(scenario, catalog, folder=folder, deadline=deadline, demand=demand, **full)
    replays = {p.name: _replay_source(p, folder) for p in products}
    real = {k: list(v) for k, v in demand.items()}
    plan = make(scenario, catalog, folder=folder, deadline=deadline, demand=demand, **full)
    rounds = 0
    while True:
        rounds += 1
        doc = plan_to_dict(at_demand(plan, real, demand))  # replayed at the real rate, not the raised one
        deadline.progress.update("replaying the trace", rounds, REPLAY_ROUNDS + 1, best=doc["monthly_cost_usd"])
        rows = {name: _replay(doc, name, catalog, plan, source, give_up=True) for name, source in replays.items()}
        rows = {k: v for k, v in rows.items() if v is not None}
        missed = [k for k, v in rows.items() if not v["meets_targets"]]
        if not missed or rounds > REPLAY_ROUNDS or deadline.expired:
            rows.update({k: _replay(doc, k, catalog, plan, replays[k]) for k in missed})  # a miss's figures in full
            break
        demand = _tightened(demand, doc, missed, rows, catalog, plan, replays, deadline)
        try:
            plan = make(scenario, catalog, folder=folder, deadline=deadline, demand=demand, **full)
        except (InfeasibleError, SolverError):
            rows.update({k: _replay(doc, k, catalog, plan, replays[k]) for k in missed})
            break  # no fleet within the scenario's limits holds the capacity the replay needs
    plan = at_demand(plan, real, demand)
    plan.verification = verification(rows, rounds, replays)
    if missed:
        _not_met(plan, missed, rows)
    return plan


def at_demand(plan: Plan, real: dict[str, list[float]], planned: dict[str, list[float]]) -> Plan:
    """``plan`` reported at its products' ``real`` hourly QPS where a replay raised the QPS it was
    solved for (``planned``): such a product's hourly demand (and its mix buckets') scaled back to
    the real rate, the output tokens/s the fleet was sized for kept in ``sized_for_tokens_per_s``.
    Fleet, API tokens and costs are the plan's; utilisation and cost per token are then the real ones."""
    products = []
    for pp in plan.products:
        asked, solved = real.get(pp.product.name), planned.get(pp.product.name)
        if asked is None or solved is None or asked == solved or len(solved) != len(pp.data.demand_tokens_per_s):
            products.append(pp)
            continue
        ratio = [a / s if s > 0 else 1.0 for a, s in zip(asked, solved)]
        data = replace(pp.data, demand_tokens_per_s=tuple(d * k for d, k in zip(pp.data.demand_tokens_per_s, ratio)),
                       buckets=tuple(replace(b, demand_tokens_per_s=tuple(d * k for d, k in zip(b.demand_tokens_per_s, ratio)))
                                     for b in pp.data.buckets))
        products.append(replace(pp, data=data, sized_for_tokens_per_s=pp.data.demand_tokens_per_s))
    return replace(plan, products=products)


def unverified() -> dict[str, Any]:
    """The ``verification`` of a plan from a trace planned without the replay check (the CLI's ``--no-verify``)."""
    return {"method": "none: planned without the replay check, not replayed", "hours": [], "rounds": 0,
            "meets_targets": None, "ttft_ms": None, "tpot_ms": None, "missed_requests": None}


def _replay_source(product: Product, folder: Path) -> dict[str, Any]:
    """What a product is replayed on: the trace itself, or (``peak_qps`` rescaling it) draws at its SCV."""
    fields = trace_fields(product, folder)
    peak = max(range(len(fields["profile"])), key=lambda h: (fields["profile"][h], -h))
    # the step times every replay of the product shares (rounds and searches replay the same configurations)
    arrivals = {"arrivals": fields["arrivals"][peak], "step_times": {}}
    if product.peak_qps is not None and not math.isclose(product.peak_qps, fields["peak_qps"], rel_tol=1e-9):
        return {"trace": None, "arrival_scv": fields["arrival_scv"], **arrivals,
                "method": f"replay of {REPLAY_REQUESTS:,} arrivals drawn at the trace's inter-arrival SCV "
                          f"{fields['arrival_scv']:g} at the peak hour's rate (peak_qps rescales the trace)"}
    return {"trace": read_trace(folder / product.trace), "arrival_scv": 1.0, **arrivals,
            "method": f"replay of the trace's busiest hour landing on the plan's peak hour (at most "
                      f"{REPLAY_REQUESTS:,} requests)"}


def _settings(source: dict[str, Any]) -> Settings:
    """The simulator's settings for a product's replay."""
    return Settings(hour=None, requests=REPLAY_REQUESTS, seed=SEED, trace=source["trace"],
                    arrival_scv=source["arrival_scv"], step_times=source["step_times"])


def _product(doc: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The plan document's row of a product that runs replicas of its own (None: API only, pooled)."""
    row = next((p for p in doc["products"] if p["name"] == name), None)
    if row is None or not row.get("gpu") or not row.get("replicas") or row.get("pooled_in"):
        return None
    return row


def _replay(doc: dict[str, Any], name: str, catalog: Catalog, plan: Plan, source: dict[str, Any],
            give_up: bool = False) -> dict[str, Any] | None:
    """One product's replay at its peak hour (None when it runs nothing of its own to replay).
    ``give_up``: a replay that must miss stops there (its verdict holds, its figures are partial;
    one that meets runs to the end, the same figures as without)."""
    pd = _product(doc, name)
    if pd is None:
        return None
    return simulate_product(pd, catalog, plan.preset, doc.get("hours") or 1, replace(_settings(source), give_up=give_up))


def _scaled(pd: dict[str, Any], hour: int, scale: float) -> dict[str, Any]:
    """``pd`` with every replica count of ``hour`` (decode, each configuration's, the pool's)
    multiplied by ``scale`` and rounded up."""
    out = copy.deepcopy(pd)

    def up(n: int | None) -> int:
        return math.ceil((n or 0) * scale - 1e-9)

    if out.get("hourly"):
        row = out["hourly"][hour]
        total = row["reserved_replicas"] + row["on_demand_replicas"] + row["spot_replicas"]
        row["on_demand_replicas"] += up(total) - total
        row["pool_replicas"] = up(row["pool_replicas"])
    else:
        out["replicas"] = up(out["replicas"])
        if (out.get("prefill") or {}).get("replicas"):
            out["prefill"]["replicas"] = up(out["prefill"]["replicas"])
    for conf in out.get("configurations") or []:
        key = "peak_hour_replicas" if "peak_hour_replicas" in conf else "replicas"
        conf[key] = up(conf[key])
    return out


def _counts(pd: dict[str, Any], hour: int) -> tuple[int, ...]:
    """The replica counts of ``hour`` that :func:`_scaled` multiplies (to tell two scales apart)."""
    load = hour_load(pd, hour)
    confs = tuple(c.get("peak_hour_replicas", c.get("replicas")) or 0 for c in pd.get("configurations") or [])
    return (load.replicas, load.pool_replicas, *confs)


def needed_scale(pd: dict[str, Any], catalog: Catalog, preset: Any, hours: int, settings: Settings,
                 deadline: Deadline | None = None) -> float:
    """Smallest scale of the hour's replica counts whose replay meets the targets: doubled from
    1 until a replay meets (at most :data:`MAX_SCALE`), then bisected
    (:data:`SCALE_BISECTIONS` replays, or until two scales give the same counts). Replays are
    verdicts on replica counts (:class:`_Verdicts`): each counts replayed once, and none where
    a replay of fewer replicas met or of more missed."""
    hour = hour_load(pd, settings.hour).hour
    verdicts = _Verdicts(pd, hour, catalog, preset, hours, replace(settings, give_up=True))
    meets = verdicts.meets

    if deadline is not None:
        deadline.progress.update("replaying the trace at more replicas")
    lo, hi = 1.0, 2.0
    while not (_meets_below(verdicts, lo, hi) or meets(hi)):
        lo, hi = hi, hi * 2.0
        if hi > MAX_SCALE or (deadline is not None and deadline.expired):
            return hi
    for _ in range(SCALE_BISECTIONS):
        mid = math.sqrt(lo * hi)
        if verdicts.counts(mid) in (verdicts.counts(lo), verdicts.counts(hi)):
            break
        if deadline is not None and deadline.expired:
            break
        lo, hi = (lo, mid) if meets(mid) else (mid, hi)
    return hi


def _meets_below(verdicts: _Verdicts, lo: float, hi: float) -> bool:
    """Whether the bisection's first midpoint between ``lo`` (a miss above 1) and ``hi`` meets,
    asked before ``hi`` itself: a meet there is a meet at ``hi`` (more replicas) without its
    replay, and a miss there is the bisection's first step, which it would replay anyway."""
    mid = math.sqrt(lo * hi)
    if lo <= 1.0 or verdicts.counts(mid) in (verdicts.counts(lo), verdicts.counts(hi)):
        return False
    return verdicts.meets(mid)


class _Verdicts:
    """Whether the hour's replica counts scaled by a factor meet the targets on replay, replayed
    only when no verdict already says: the same counts, fewer that met or more that missed (the
    search takes a replay's verdict as growing with replicas)."""

    def __init__(self, pd: dict[str, Any], hour: int, catalog: Catalog, preset: Any, hours: int,
                 settings: Settings) -> None:
        self.pd, self.hour, self.catalog, self.preset, self.hours, self.settings = pd, hour, catalog, preset, hours, settings
        self.known: dict[tuple[int, ...], bool] = {}

    def counts(self, scale: float) -> tuple[int, ...]:
        """The hour's replica counts at ``scale``."""
        return _counts(_scaled(self.pd, self.hour, scale), self.hour)

    def meets(self, scale: float) -> bool:
        """The verdict at ``scale``: known, implied, or replayed."""
        counts = self.counts(scale)
        for seen, met in self.known.items():
            if seen == counts or (met and _at_most(seen, counts)) or (not met and _at_most(counts, seen)):
                return met
        row = simulate_product(_scaled(self.pd, self.hour, scale), self.catalog, self.preset, self.hours, self.settings)
        self.known[counts] = bool(row["meets_targets"])
        return self.known[counts]


def _at_most(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Every count of ``a`` at most ``b``'s."""
    return all(x <= y for x, y in zip(a, b))


def _tightened(demand: dict[str, list[float]], doc: dict[str, Any], missed: list[str], rows: dict[str, Any],
               catalog: Catalog, plan: Plan, replays: dict[str, dict[str, Any]], deadline: Deadline
               ) -> dict[str, list[float]]:
    """The demand with each missed product's replayed hour raised: to the capacity the hour's
    replicas scaled by :func:`needed_scale` give (the hour's planned rate over its utilisation,
    times the scale, kept just below so the MIP's replica ceiling lands on it)."""
    out = {k: list(v) for k, v in demand.items()}
    hours = doc.get("hours") or 1
    for name in missed:
        pd = _product(doc, name)
        assert pd is not None
        hour = rows[name]["hour"]
        scale = needed_scale(pd, catalog, plan.preset, hours, _settings(replays[name]), deadline)
        usage = _hour_utilisation(plan, name, hour)
        out[name][hour] = max(out[name][hour] * (1.0 + 1e-6), out[name][hour] / usage * scale * CEILING_MARGIN)
    return out


def _hour_utilisation(plan: Plan, name: str, hour: int) -> float:
    """Share of the hour's self-hosted capacity its demand takes: the decode replicas' or the
    prefill pool's, whichever is fuller (1 when nothing is served)."""
    pp = next(p for p in plan.products if p.product.name == name)
    served = pp.served_tokens_per_s()[hour]
    capacity = pp.hour_capacity_tokens_per_s(hour)
    loads = [served / capacity] if capacity > 0 and served > 0 else []
    if pp.pool is not None and pp.prefill_pool.in_hour(hour) > 0:
        loads.append(pp.prefill_flops_per_s(hour) / (pp.prefill_pool.in_hour(hour) * pp.pool.flops_per_s
                                                    * pp.pool.max_utilisation))
    return min(1.0, max(loads)) if loads and max(loads) > 0 else 1.0


def verification(rows: dict[str, dict[str, Any]], rounds: int, replays: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The plan's ``verification``: how, which hours, rounds, the verdict and the replayed
    percentiles (the product with the highest P99 TTFT when several are replayed); per product
    its replay and ``trace_arrivals``, the arrival variability of its trace's peak planned hour
    (:func:`fleetplan.optimizer.traffic.arrival_stats.hour_stats`)."""
    if not rows:
        return {"method": "none: no product planned from a trace runs replicas of its own", "hours": [],
                "rounds": rounds, "meets_targets": None, "ttft_ms": None, "tpot_ms": None, "missed_requests": None}
    worst = max(rows.values(), key=lambda r: (r["ttft_ms"]["p99"] or math.inf, r["name"]))
    methods = sorted({replays[name]["method"] for name in rows})
    return {
        "method": "; ".join(methods),
        "hours": sorted({r["hour"] for r in rows.values()}),
        "rounds": rounds,
        "meets_targets": all(r["meets_targets"] for r in rows.values()),
        "ttft_ms": worst["ttft_ms"],
        "tpot_ms": worst["tpot_ms"],
        "missed_requests": sum(r["missed_requests"] for r in rows.values()),
        "products": [{**{k: r[k] for k in ("name", "hour", "requests", "replicas", "ttft_ms", "tpot_ms",
                                            "utilisation", "missed_requests", "meets_targets", "targets")},
                      "trace_arrivals": replays[r["name"]]["arrivals"]} for r in rows.values()],
    }


def _not_met(plan: Plan, missed: list[str], rows: dict[str, Any]) -> None:
    """Mark a plan whose replay still misses when the deadline ended: not optimal, and why."""
    what = "; ".join(f"{n}: P99 TTFT {rows[n]['ttft_ms']['p99']} ms, median TPOT {rows[n]['tpot_ms']['p50']} ms "
                     f"against {rows[n]['targets']}" for n in missed)
    plan.solve_result = replace(plan.solve_result, status=Status.TIME_LIMIT,
                                termination=f"replay misses its targets when the deadline ended ({what})")
    plan.verification["missed"] = what

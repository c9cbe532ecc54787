"""Plan a fleet: scenario -> candidates -> MIP -> solve -> explained plan."""

from __future__ import annotations

import bisect
import heapq
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from fleetplan.catalogs.loader import Catalog, InputError
from fleetplan.catalogs.schema import LLM
from fleetplan.models.memory import kv_bytes_per_token
from fleetplan.models.presets import Preset, get_preset
from fleetplan.models.physics import DEFAULT_TTFT_QUEUE_MULTIPLE, TTFT_WARNING_S
from fleetplan.models.roofline import decode_step
from fleetplan.models.ttft import colocated_prefill_steps, queue_factor
from fleetplan.optimizer.api import resolve_api
from fleetplan.optimizer.candidates import (
    Candidate,
    CandidateSet,
    PoolCandidate,
    check_options,
    generate_candidates,
    kv_link,
    prefill_work_per_request,
)
from fleetplan.optimizer.demand import horizon, product_qps, profile_lengths
from fleetplan.optimizer.formulation import SECONDS_PER_HOUR, FleetProblem, ProductData, build_model
from fleetplan.optimizer.linear import LinearProblem, to_linear_problem
from fleetplan.optimizer.scenario import Product, Scenario
from fleetplan.optimizer.deadline import DEFAULT_TIME_LIMIT_S, Deadline
from fleetplan.optimizer.solvers import Session, SolveResult, solve, solve_restricted
from fleetplan.optimizer.text import pct


# Of the time a plan is given, the main solve may use this share; the explanations (runner-ups on
# other GPU types, the cost of each prefill mode) share what is left of the rest. Proven plans
# take far less, so explanations usually get most of the time in practice.
MAIN_SOLVE_SHARE = 0.75
EXPLAIN_SHARE = 0.8


# the seed document's flat share of decode throughput kept for prefill and bursts
SEED_HEADROOM = 0.30


class InfeasibleError(InputError):
    """No plan meets the targets; the message names the constraint and the best reachable value."""


class SolverError(RuntimeError):
    """The solver returned no proven-optimal plan (``lower_bound``: what was proven, if anything)."""

    def __init__(self, message: str, lower_bound: float | None = None) -> None:
        super().__init__(message)
        self.lower_bound = lower_bound


@dataclass
class Timings:
    """Wall-clock seconds of each planning stage (not part of the plan's JSON: not deterministic)."""

    candidates_s: float = 0.0
    solve_s: float = 0.0  # building, exporting and solving the MIPs


@dataclass
class ProductPlan:
    """What the plan does for one product: decode replicas, prefill pool, API share, hour by hour."""

    product: Product
    data: ProductData
    hour_weight: float
    hours_per_month: float
    candidate: Candidate | None
    reserved: int = 0
    on_demand: list[int] = field(default_factory=list)
    spot: list[int] = field(default_factory=list)
    pool: PoolCandidate | None = None
    pool_reserved: int = 0
    pool_on_demand: list[int] = field(default_factory=list)
    pool_spot: list[int] = field(default_factory=list)
    api_tokens_per_s: list[float] = field(default_factory=list)
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    mode_costs: dict[str, float | None] = field(default_factory=dict)
    why: str = ""
    kv_transfer: dict[str, Any] | None = None
    prefill_check: dict[str, Any] | None = None
    stranded_usd: float = 0.0
    solve_objective: float = 0.0
    solve_optimal: bool = True

    # ---- decode replicas
    def replicas_in_hour(self, h: int) -> int:
        """Decode replicas running in hour ``h``."""
        return self.reserved + self.on_demand[h] + self.spot[h]

    @property
    def replicas(self) -> int:
        """Decode replicas at the busiest hour."""
        return max((self.replicas_in_hour(h) for h in range(len(self.on_demand))), default=0)

    @property
    def gpus(self) -> int:
        """Decode GPUs at the busiest hour."""
        return self.replicas * (self.candidate.tp if self.candidate else 0)

    @property
    def demand_tokens_per_s(self) -> float:
        """Peak output tokens/s."""
        return self.data.peak_demand_tokens_per_s

    @property
    def capacity_tokens_per_s(self) -> float:
        """Usable decode throughput at the busiest hour (after headroom)."""
        return self.replicas * (self.candidate.usable_tokens_per_s if self.candidate else 0.0)

    def served_tokens_per_s(self) -> list[float]:
        """Self-hosted output tokens/s in each hour (demand less the API's share)."""
        return [max(0.0, d - a) for d, a in zip(self.data.demand_tokens_per_s, self.api_tokens_per_s)]

    @property
    def decode_peak_utilisation(self) -> float | None:
        """Highest hourly load of the decode replicas as a share of their full throughput
        (at most 1 - headroom)."""
        c = self.candidate
        if c is None:
            return None
        loads = [s / (self.replicas_in_hour(h) * c.replica_tokens_per_s)
                 for h, s in enumerate(self.served_tokens_per_s()) if self.replicas_in_hour(h) > 0]
        return max(loads, default=0.0)

    @property
    def pool_peak_utilisation(self) -> float | None:
        """Highest hourly load of the prefill pool as a share of its FLOP/s."""
        if self.pool is None:
            return None
        f = self.data.prefill_flops_per_output_token
        loads = [f * s / (self.pool_replicas_in_hour(h) * self.pool.flops_per_s)
                 for h, s in enumerate(self.served_tokens_per_s()) if self.pool_replicas_in_hour(h) > 0]
        return max(loads, default=0.0)

    @property
    def ttft_s(self) -> float | None:
        """Modelled time to first token in the busiest hour (:mod:`fleetplan.models.ttft`):
        through the pool at its peak utilisation, or, colocated and in headroom mode, spread
        over the decode steps at the decode replicas' peak utilisation. None when all-API."""
        c = self.candidate
        if c is None:
            return None
        if c.mode == "pool":
            return self.pool.ttft_s(self.pool_peak_utilisation or 0.0) if self.pool is not None else None
        return c.ttft_at(self.decode_peak_utilisation or 0.0)

    # ---- pool
    def pool_replicas_in_hour(self, h: int) -> int:
        """Prefill-pool replicas running in hour ``h``."""
        return self.pool_reserved + self.pool_on_demand[h] + self.pool_spot[h] if self.pool else 0

    @property
    def pool_replicas(self) -> int:
        """Prefill-pool replicas at the busiest hour."""
        return max((self.pool_replicas_in_hour(h) for h in range(len(self.pool_on_demand))), default=0)

    @property
    def pool_gpus(self) -> int:
        """Prefill-pool GPUs at the busiest hour."""
        return self.pool_replicas * (self.pool.tp if self.pool else 0)

    def gpus_by_type(self, h: int) -> dict[str, int]:
        """GPUs the product runs in hour ``h``, per GPU type (decode and prefill pool, all tiers)."""
        out: dict[str, int] = {}
        for (gpu, _), n in self.gpus_by_tier(h).items():
            out[gpu] = out.get(gpu, 0) + n
        return out

    def gpus_by_tier(self, h: int) -> dict[tuple[str, str], int]:
        """GPUs the product runs in hour ``h``, per (GPU type, pricing tier)."""
        out: dict[tuple[str, str], int] = {}
        parts = [(self.candidate, self.reserved, self.on_demand, self.spot),
                 (self.pool, self.pool_reserved, self.pool_on_demand, self.pool_spot)]
        for part, reserved, on_demand, spot in parts:
            if part is None:
                continue
            for tier, n in (("reserved", reserved), ("on_demand", on_demand[h]), ("spot", spot[h])):
                if n:
                    out[(part.gpu, tier)] = out.get((part.gpu, tier), 0) + part.tp * n
        return out

    def decode_tiers(self) -> list[str]:
        """Pricing tiers the decode replicas run in at some hour (reserved, on_demand, spot order)."""
        used = {"reserved": self.reserved > 0, "on_demand": any(self.on_demand), "spot": any(self.spot)}
        return [t for t in ("reserved", "on_demand", "spot") if used[t]]

    def pool_tiers(self) -> list[str]:
        """Pricing tiers the prefill-pool replicas run in at some hour."""
        if self.pool is None:
            return []
        used = {"reserved": self.pool_reserved > 0, "on_demand": any(self.pool_on_demand), "spot": any(self.pool_spot)}
        return [t for t in ("reserved", "on_demand", "spot") if used[t]]

    def gpu_prices(self) -> dict[str, float]:
        """Plain GPU-hour price of each GPU type the product uses."""
        parts = [p for p in (self.candidate, self.pool) if p is not None]
        return {p.gpu: p.price.usd_per_gpu_hour for p in parts}

    # ---- costs (recomputed from the integer plan)
    def decode_cost_by_tier(self) -> dict[str, float]:
        """USD per month of decode replicas, per tier."""
        c = self.candidate
        if c is None:
            return {"reserved": 0.0, "on_demand": 0.0, "spot": 0.0}
        return {
            "reserved": self.reserved * c.usd_per_replica_hour_in("reserved") * self.hours_per_month,
            "on_demand": sum(self.on_demand) * c.usd_per_replica_hour_in("on_demand") * self.hour_weight,
            "spot": sum(self.spot) * c.usd_per_replica_hour_in("spot") * self.hour_weight,
        }

    def pool_cost_by_tier(self) -> dict[str, float]:
        """USD per month of prefill-pool replicas, per tier."""
        k = self.pool
        if k is None:
            return {"reserved": 0.0, "on_demand": 0.0, "spot": 0.0}
        return {
            "reserved": self.pool_reserved * k.usd_per_replica_hour_in("reserved") * self.hours_per_month,
            "on_demand": sum(self.pool_on_demand) * k.usd_per_replica_hour_in("on_demand") * self.hour_weight,
            "spot": sum(self.pool_spot) * k.usd_per_replica_hour_in("spot") * self.hour_weight,
        }

    @property
    def api_cost_usd(self) -> float:
        """USD per month sent to the hosted API."""
        if self.data.api is None:
            return 0.0
        return sum(self.api_tokens_per_s) * SECONDS_PER_HOUR * self.hour_weight * self.data.api.usd_per_output_token

    @property
    def self_hosts(self) -> bool:
        """Whether the product runs any replicas of its own."""
        return self.candidate is not None

    @property
    def fixed_cost_usd(self) -> float:
        """Fixed self-hosting cost, charged only when the product self-hosts."""
        return self.data.fixed_monthly_usd if self.self_hosts else 0.0

    def cost_breakdown(self) -> dict[str, float]:
        """USD per month by kind: reserved, on_demand, spot (decode + pool), api, fixed."""
        d, p = self.decode_cost_by_tier(), self.pool_cost_by_tier()
        return {
            "reserved": d["reserved"] + p["reserved"],
            "on_demand": d["on_demand"] + p["on_demand"],
            "spot": d["spot"] + p["spot"],
            "api": self.api_cost_usd,
            "fixed": self.fixed_cost_usd,
            "stranded": self.stranded_usd,
        }

    @property
    def decode_cost_usd(self) -> float:
        """Decode replicas' monthly cost."""
        return sum(self.decode_cost_by_tier().values())

    @property
    def pool_cost_usd(self) -> float:
        """Prefill pool's monthly cost."""
        return sum(self.pool_cost_by_tier().values())

    @property
    def monthly_cost_usd(self) -> float:
        """Everything the product costs per month."""
        return sum(self.cost_breakdown().values())


@dataclass
class Plan:
    """A solved plan with everything needed to report and check it."""

    scenario: Scenario
    preset: Preset
    solve_result: SolveResult
    products: list[ProductPlan]
    candidate_sets: dict[str, CandidateSet]
    problem: FleetProblem
    model_size: tuple[int, int]
    timings: Timings = field(default_factory=Timings)
    components: list[list[str]] = field(default_factory=list)
    instances: dict[str, dict[str, Any]] = field(default_factory=dict)
    first_come_monthly_cost_usd: float | None = None
    members: dict[str, list[Product]] = field(default_factory=dict)
    separate: dict[str, dict[str, Any]] = field(default_factory=dict)
    pooling: dict[str, Any] | None = None
    stopped: list[str] = field(default_factory=list)  # stages cut short by the deadline

    @property
    def monthly_cost_usd(self) -> float:
        """Total monthly cost, summed from the products."""
        return sum(p.monthly_cost_usd for p in self.products)

    @property
    def hours(self) -> int:
        """Hours of the planning horizon."""
        return self.problem.hours


def format_ms(seconds: float) -> str:
    """Milliseconds for a message: whole above 10 ms, two significant digits below (never "0")."""
    ms = seconds * 1e3
    return f"{ms:,.0f}" if ms >= 10 else f"{ms:.2g}"


def context_problem(product: Product, llm: LLM) -> str | None:
    """Why a request of ``product`` is longer than ``llm``'s context window, naming the fields; None when it fits."""
    context = product.input_tokens + product.output_tokens
    limit = llm.max_context_tokens
    if limit is None or context <= limit:
        return None
    return (
        f"products[{product.name}].input_tokens: input_tokens + output_tokens = {context:,} tokens exceeds "
        f"{llm.id}'s context window of {limit:,} tokens (max_context_tokens in the catalog); at most "
        f"{max(0, limit - product.output_tokens):,} input_tokens with output_tokens {product.output_tokens:,}"
    )


def explain_no_candidates(product: Product, cs: CandidateSet) -> str:
    """Which constraint no configuration of ``product`` can meet, and the best value reachable."""
    where = f"products[{product.name}]"
    if cs.generated == 0 or cs.generated == cs.invalid_shapes:
        unpriced = f"; no price for {', '.join(cs.unpriced_gpus)}" if cs.unpriced_gpus else ""
        return f"{where}: no valid GPU/TP shape for {product.model} among the allowed options{unpriced}"
    if not cs.any_fits_memory:
        return (
            f"{where}.input_tokens: infeasible: input_tokens + output_tokens = "
            f"{product.input_tokens + product.output_tokens:,} tokens of context for {product.model} do not fit in "
            f"memory on any allowed GPU/TP even at batch 1 (lower input_tokens or output_tokens, or allow a larger tp "
            f"or a lower precision)"
        )
    if not cs.any_meets_speed:
        return (
            f"{where}.min_tokens_per_s_per_user: infeasible: no configuration reaches "
            f"{product.min_tokens_per_s_per_user:g} tokens/s per user; the best reachable is "
            f"{cs.best_per_user_tokens_per_s:.1f} tokens/s ({cs.best_per_user_at})"
        )
    if product.max_ttft_ms is not None:
        best = "none" if cs.best_ttft_s == float("inf") else f"{format_ms(cs.best_ttft_s)} ms ({cs.best_ttft_at})"
        return (
            f"{where}.max_ttft_ms: infeasible: no configuration reaches a time to first token of "
            f"{product.max_ttft_ms:g} ms; the best reachable is {best}"
        )
    return f"{where}: infeasible: no prefill pool configuration fits {product.model}"


def build_problem(
    scenario: Scenario, catalog: Catalog, preset: Preset, folder: Path | None = None, *, with_api: bool = True
) -> tuple[FleetProblem, dict[str, CandidateSet], list[tuple[Product, list[Product]]]]:
    """Candidates and demand of every product as MIP data; a product with no candidate is an error
    unless it may go entirely to its API. Also returns the products as planned: with
    ``allow_pooling``, one product stands for each pooled group (with its members)."""
    check_options(catalog, scenario.options)
    folder = folder or Path(".")
    hours = horizon(profile_lengths(scenario.products, folder))
    sets: dict[str, CandidateSet] = {}
    data: dict[str, ProductData] = {}
    for product in scenario.products:
        llm = catalog.model(product.model, f"products[{product.name}].model")
        if (problem := context_problem(product, llm)) is not None:
            raise InputError(problem)
        offer = resolve_api(product, catalog) if with_api else None
        cs = generate_candidates(product, llm, catalog, scenario.options, preset)
        per_instance = scenario.limits.gpus_per_instance
        if scenario.limits.instance_gpus is not None:  # a TP group sits inside one instance
            cs.candidates = [c for c in cs.candidates if c.tp <= (per_instance(c.gpu) or c.tp)]
            cs.pool = [k for k in cs.pool if k.tp <= (per_instance(k.gpu) or k.tp)]
        api_only_possible = offer is not None and product.api is not None and product.api.max_fraction >= 1.0
        if not cs.candidates and not api_only_possible:
            raise InfeasibleError(explain_no_candidates(product, cs))
        sets[product.name] = cs
        qps = product_qps(product, folder, hours)
        data[product.name] = ProductData(
            name=product.name,
            demand_tokens_per_s=tuple(q * product.output_tokens for q in qps),
            candidates=tuple(cs.candidates),
            pool=tuple(cs.pool),
            prefill_flops_per_output_token=prefill_work_per_request(llm, product, preset) / product.output_tokens,
            api=offer,
            api_min_fraction=product.api.min_fraction if (product.api and offer) else 0.0,
            api_max_fraction=product.api.max_fraction if (product.api and offer) else 0.0,
            fixed_monthly_usd=product.self_host_fixed_monthly_usd,
        )
    planned: list[tuple[Product, list[Product]]] = [(p, [p]) for p in scenario.products]
    if scenario.limits.allow_pooling:
        for members in pooling_groups(scenario, data):
            name, product, pdata, cs = pooled_product(members, scenario, catalog, preset, data, sets)
            for m in members:
                del data[m.name]
            data[name] = pdata
            sets[name] = cs
            first = members[0].name
            planned = [(product, members) if p.name == first else (p, ms) for p, ms in planned
                       if p.name == first or p.name not in {m.name for m in members}]
    opts = scenario.options
    lim = scenario.limits
    for gpu_id in list(lim.gpu_availability) + ([] if not isinstance(lim.instance_gpus, dict) else
                                                [g for g in lim.instance_gpus if g != "default"]):
        catalog.gpu(gpu_id, "limits")
    instance_gpus = {g: n for g in catalog.gpus if (n := lim.gpus_per_instance(g))}
    prob = FleetProblem(
        products=data, hours=hours, hours_per_month=preset.hours_per_month, tiers=tuple(opts.tiers),
        spot_max_share=opts.spot_max_share, gpu_availability=lim.total_availability(),
        tier_availability=lim.tier_availability(),
        instance_gpus=instance_gpus, monthly_budget_usd=lim.monthly_budget_usd,
    )
    return prob, sets, planned


POOL_PREFIX = "pool:"


def pooling_groups(scenario: Scenario, data: dict[str, ProductData]) -> list[list[Product]]:
    """Products that may share one pool of replicas: same model, weight and KV precision and
    prefill mode, no API (API shares are per product). Groups of two or more, in scenario order."""
    groups: dict[tuple[Any, ...], list[Product]] = {}
    for p in scenario.products:
        if data[p.name].has_api:
            continue
        key = (p.model, p.precisions, p.kv_precision, p.prefill)
        groups.setdefault(key, []).append(p)
    return [g for g in groups.values() if len(g) > 1]


def pooled_product(
    members: list[Product], scenario: Scenario, catalog: Catalog, preset: Preset,
    data: dict[str, ProductData], sets: dict[str, CandidateSet],
) -> tuple[str, Product, ProductData, CandidateSet]:
    """One product standing for a pooled group: summed hourly demand, the strictest speed and
    TTFT targets, the longest prompt and answer (memory and steps sized for the largest request),
    the lowest cache hit rate and the largest headroom."""
    name = POOL_PREFIX + "+".join(m.name for m in members)
    first = members[0]
    ttfts = [m.max_ttft_ms for m in members if m.max_ttft_ms is not None]
    product = first.model_copy(update={
        "name": name,
        "input_tokens": max(m.input_tokens for m in members),
        "output_tokens": max(m.output_tokens for m in members),
        "min_tokens_per_s_per_user": max(m.min_tokens_per_s_per_user for m in members),
        "max_ttft_ms": min(ttfts) if ttfts else None,
        "prefix_cache_hit_rate": min(m.prefix_cache_hit_rate for m in members),
        "headroom": max(m.effective_headroom for m in members),
        "demand_profile": None,
        "api": None,
        "self_host_fixed_monthly_usd": sum(m.self_host_fixed_monthly_usd for m in members),
    })
    llm = catalog.models[first.model]
    cs = generate_candidates(product, llm, catalog, scenario.options, preset)
    per_instance = scenario.limits.gpus_per_instance
    if scenario.limits.instance_gpus is not None:
        cs.candidates = [c for c in cs.candidates if c.tp <= (per_instance(c.gpu) or c.tp)]
        cs.pool = [k for k in cs.pool if k.tp <= (per_instance(k.gpu) or k.tp)]
    if not cs.candidates:
        raise InfeasibleError(explain_no_candidates(product, cs))
    hours = len(data[first.name].demand_tokens_per_s)
    demand = tuple(sum(data[m.name].demand_tokens_per_s[h] for m in members) for h in range(hours))
    peak = [data[m.name].peak_demand_tokens_per_s for m in members]
    weight = sum(peak) or 1.0
    flops = sum(data[m.name].prefill_flops_per_output_token * d for m, d in zip(members, peak)) / weight
    pdata = ProductData(
        name=name, demand_tokens_per_s=demand, candidates=tuple(cs.candidates), pool=tuple(cs.pool),
        prefill_flops_per_output_token=max(flops, max(data[m.name].prefill_flops_per_output_token for m in members)),
        fixed_monthly_usd=product.self_host_fixed_monthly_usd,
        members=tuple(data[m.name] for m in members),
    )
    return name, product, pdata, cs


def _value(lp: LinearProblem, result: SolveResult, name: str) -> float:
    j = lp.col_index.get(name)
    return 0.0 if j is None else result.values[j]


def extract(lp: LinearProblem, result: SolveResult, prob: FleetProblem, scenario: Scenario) -> list[ProductPlan]:
    """Read each product's decisions out of a solution."""
    out: list[ProductPlan] = []
    hours = range(prob.hours)
    for product in scenario.products:
        pd = prob.products[product.name]
        pp = ProductPlan(product=product, data=pd, hour_weight=prob.hour_weight, hours_per_month=prob.hours_per_month,
                         candidate=None, on_demand=[0] * prob.hours, spot=[0] * prob.hours,
                         pool_on_demand=[0] * prob.hours, pool_spot=[0] * prob.hours)
        for c in pd.candidates:
            if _value(lp, result, f"use[{c.key}]") > 0.5:
                pp.candidate = c
                pp.reserved = round(_value(lp, result, f"reserved[{c.key}]"))
                pp.on_demand = [round(_value(lp, result, f"on_demand[{c.key}/{h}]")) for h in hours]
                pp.spot = [round(_value(lp, result, f"spot[{c.key}/{h}]")) for h in hours]
        for k in pd.pool:
            if _value(lp, result, f"pool_use[{k.key}]") > 0.5:
                pp.pool = k
                pp.pool_reserved = round(_value(lp, result, f"pool_reserved[{k.key}]"))
                pp.pool_on_demand = [round(_value(lp, result, f"pool_on_demand[{k.key}/{h}]")) for h in hours]
                pp.pool_spot = [round(_value(lp, result, f"pool_spot[{k.key}/{h}]")) for h in hours]
        pp.api_tokens_per_s = [
            max(0.0, _value(lp, result, f"api[{product.name}/{h}]")) if pd.has_api else 0.0 for h in hours
        ]
        if prob.hour_of:  # merged hours: back to every hour of the horizon
            of = prob.hour_of
            for name in ("on_demand", "spot", "pool_on_demand", "pool_spot", "api_tokens_per_s"):
                row = getattr(pp, name)
                setattr(pp, name, [row[i] for i in of])
            pp.data = replace(pd, demand_tokens_per_s=prob.full_demand[product.name])
        out.append(pp)
    return out


def _owned_columns(lp: LinearProblem) -> dict[str, list[int]]:
    """Columns of ``lp`` per configuration key they belong to (``use[k]``, ``reserved[k]``,
    ``on_demand[k/h]``, ``api_for[k/h]``, pool columns alike); built once per problem."""
    owned = lp.__dict__.get("_owned")
    if owned is None:
        owned = {}
        for j, name in enumerate(lp.col_names):
            entity = name[name.index("[") + 1:-1]
            head, _, tail = entity.rpartition("/")
            key = head if tail.isdigit() and head else entity
            owned.setdefault(key, []).append(j)
        lp.__dict__["_owned"] = owned
    return owned


def _fixing(lp: LinearProblem, pd: ProductData, choice: tuple[Candidate | None, PoolCandidate | None],
            allowed: set[str] | None = None) -> tuple[list[float], list[float]]:
    """Column bounds of ``lp`` that fix product ``pd`` to one decode (and pool) configuration, or to
    none (all-API): every column of another configuration is fixed at zero. With ``allowed``,
    the decode configurations outside it are switched off and the choice among the rest is left
    to the solver; a pool-mode configuration chosen without a pool leaves the pool to the solver."""
    lower, upper = list(lp.col_lower), list(lp.col_upper)
    col = lp.col_index
    owned = _owned_columns(lp)
    c, k = choice
    pool_free = k is None and c is not None and c.mode == "pool"  # the pool is left to the solver

    def off(key: str) -> None:
        for j in owned.get(key, ()):
            lower[j] = upper[j] = 0.0

    for d in pd.candidates:
        if allowed is not None:
            if d.key not in allowed:
                off(d.key)
        elif c is not None and d.key == c.key:
            lower[col[f"use[{d.key}]"]] = 1.0
        else:
            off(d.key)
    if allowed is None and not pool_free:
        for q in pd.pool:
            if k is not None and q.key == k.key:
                lower[col[f"pool_use[{q.key}]"]] = 1.0
            else:
                off(q.key)
    if pd.has_api and (allowed is None or allowed):
        j = col[f"self_host[{pd.name}]"]
        lower[j] = upper[j] = 0.0 if (allowed is None and c is None) else 1.0
    return lower, upper


def _instances_off(lp: LinearProblem, choice: tuple[Candidate | None, PoolCandidate | None],
                   bounds: tuple[list[float], list[float]]) -> tuple[list[float], list[float]]:
    """``bounds`` with the whole-instance columns of every GPU type the choice does not run on
    fixed at zero, for a model of one product: such instances would only be idle GPUs."""
    per_gpu = lp.__dict__.get("_instance_cols")
    if per_gpu is None:
        per_gpu = {}
        for j, name in enumerate(lp.col_names):
            if name.startswith("instances["):
                per_gpu.setdefault(name[len("instances["):-1].rpartition("/")[0], []).append(j)
        lp.__dict__["_instance_cols"] = per_gpu
    used = {x.gpu for x in choice if x is not None}
    lower, upper = bounds
    for gpu, cols in per_gpu.items():
        if gpu not in used:
            for j in cols:
                lower[j] = upper[j] = 0.0
    return lower, upper


def _quick_bound(prob: FleetProblem, pd: ProductData, choice: tuple[Candidate | None, PoolCandidate | None],
                 hours: tuple[Any, Any, Any] | None = None) -> float:
    """A lower bound on the monthly cost of one choice, without a solver.

    Every replica-hour is priced at the cheapest rate the tiers allow (a reserved replica's
    monthly price spread over the hours it serves is its hourly rate; spot only up to the spot
    share cap), and each hour runs the fewest whole decode replicas that meet its demand (and, with
    a pool of its own, the fewest whole pool replicas). With an API, tokens move from replicas to
    the API where that saves money, up to the API's share cap, counted as the LP of that choice
    (the fractional remainder of an hour first, then whole replicas), and the pool is priced per
    token. Idle instance GPUs, reserved replicas idle in quiet hours and the API floor only add
    to a plan's cost, so the bound is valid."""
    import numpy as np

    c, k = choice
    api = pd.api.usd_per_output_token * SECONDS_PER_HOUR if pd.has_api and pd.api is not None else math.inf
    w, n_h, d = hours if hours is not None else _hour_arrays(prob, pd)
    if c is None:
        return float(np.sum(w * d)) * api
    rate = _replica_hour_rate(prob, c)
    u = c.usable_tokens_per_s
    # prefill pool: per token (continuous) unless its own pool is fixed and no API is involved
    pool_token = 0.0
    pool_cost = 0.0
    if c.mode == "pool":
        pools = [k] if k is not None else list(pd.pool)
        if not pools:
            return math.inf
        f = pd.prefill_flops_per_output_token
        if f <= 0:  # every prompt token is cached: the pool has nothing to do
            pass
        elif k is not None and not pd.has_api:
            need = np.maximum(0.0, np.ceil(d * f / k.usable_flops_per_s - 1e-9))
            pool_cost = float(np.sum(w * need)) * min(k.usd_per_replica_hour_in(t) for t in prob.tiers)
        else:
            pool_token = min(min(q.usd_per_replica_hour_in(t) for t in prob.tiers) * f / q.usable_flops_per_s
                             for q in pools)
    whole = np.maximum(0.0, np.ceil(d / u - 1e-9))
    cost = pd.fixed_monthly_usd + pool_cost + rate * float(np.sum(w * whole)) + pool_token * float(np.sum(w * d))
    if not pd.has_api:
        return cost
    # moves to the API: per hour the remainder above whole replicas (saves one replica), then the
    # whole replicas (each saves one); greedy by saving per token within the API's token cap
    floor = np.floor(d / u + 1e-9)
    rem = np.clip(d - floor * u, 0.0, None)
    rem = np.where(whole > floor, rem, 0.0)
    tokens = np.concatenate([rem, floor * u])
    saves = np.concatenate([np.where(rem > 0, rate + (pool_token - api) * rem, 0.0),
                            floor * (rate + (pool_token - api) * u)])
    ww = np.concatenate([w, w])
    counts = np.concatenate([n_h, n_h])
    useful = (saves > 0) & (tokens > 0)
    if not useful.any():
        return cost
    tokens, saves, ww, counts = tokens[useful], saves[useful], ww[useful], counts[useful]
    order = np.argsort(-(saves / tokens), kind="stable")
    cap = pd.api_max_fraction * float(np.sum(n_h * d))
    left, saved = cap, 0.0
    for i in order.tolist():
        take = min(1.0, left / (counts[i] * tokens[i])) if tokens[i] > 0 else 1.0
        saved += take * ww[i] * saves[i]
        left -= take * counts[i] * tokens[i]
        if left <= 0:
            break
    return cost - saved


def _replica_hour_rate(prob: FleetProblem, c: Candidate) -> float:
    """The cheapest average price of one decode replica-hour of ``c`` the tiers allow: spot at most
    its share cap of the replica-hours, the rest at the cheaper of reserved and on-demand."""
    other = [c.usd_per_replica_hour_in(t) for t in prob.tiers if t != "spot"]
    if "spot" not in prob.tiers:
        return min(other)
    spot = c.usd_per_replica_hour_in("spot")
    if not other:
        return spot
    rest = min(other)
    share = prob.spot_max_share
    return min(rest, share * spot + (1 - share) * rest)


def _hour_arrays(prob: FleetProblem, pd: ProductData) -> tuple[Any, Any, Any]:
    """Per modelled hour: its weight in real hours of the month, the hours it stands for, and the
    product's demand in token/s (NumPy arrays)."""
    import numpy as np

    hours = range(prob.hours)
    return (np.array([prob.weight(h) for h in hours]), np.array([float(prob.count(h)) for h in hours]),
            np.asarray(pd.demand_tokens_per_s, dtype=float))


def _by_quick_bound(prob: FleetProblem, pd: ProductData, choices: list[tuple[Candidate | None, PoolCandidate | None]]
                    ) -> list[tuple[float, tuple[Candidate | None, PoolCandidate | None]]]:
    """Choices with their :func:`_quick_bound`, lowest first (ties by key, so the order is fixed)."""
    hours = _hour_arrays(prob, pd)
    keyed = [(_quick_bound(prob, pd, ch, hours), "/".join(x.key for x in ch if x is not None), ch)
             for ch in choices]
    keyed.sort(key=lambda t: (t[0], t[1]))
    return [(b, ch) for b, _, ch in keyed if not math.isinf(b) or ch[0] is None]


def _fallback(lp: LinearProblem, prob: FleetProblem, pd: ProductData,
              choice: tuple[Candidate | None, PoolCandidate | None]) -> tuple[SolveResult, list[float], list[float]] | None:
    """The on-demand plan of ``choice`` (the cheapest pool for a pool-mode choice left open), as a
    search result, or None when it is not feasible."""
    c, k = choice
    pairs = [(c, q) for q in pd.pool] if c is not None and c.mode == "pool" and k is None else [choice]
    for pair in sorted(pairs, key=lambda ch: _on_demand_cost(prob, pd, ch) if ch[0] is not None else math.inf):
        found = _on_demand_plan(lp, prob, pd, pair)
        if found is not None:
            return (found, *_fixing(lp, pd, pair))
    return None


def _on_demand_cost(prob: FleetProblem, pd: ProductData, choice: tuple[Candidate | None, PoolCandidate | None]) -> float:
    """Monthly cost of :func:`_on_demand_plan` for ``choice`` (without instances), for ranking."""
    c, k = choice
    assert c is not None
    total = 0.0
    for h in range(prob.hours):
        total += prob.weight(h) * pd.replica_bound(c, h) * c.usd_per_replica_hour_in("on_demand")
        if k is not None:
            total += prob.weight(h) * pd.pool_bound(k, h) * k.usd_per_replica_hour_in("on_demand")
    return total


def _on_demand_plan(lp: LinearProblem, prob: FleetProblem, pd: ProductData,
                    choice: tuple[Candidate | None, PoolCandidate | None]) -> SolveResult | None:
    """A feasible plan for one choice without a solver: in every hour the fewest on-demand replicas
    (and pool replicas) that alone meet demand, nothing sent to the API, whole instances rounded
    up. None when the rows do not hold (no on-demand tier, an API minimum share, a limit)."""
    c, k = choice
    if c is None or "on_demand" not in prob.tiers:
        return None
    x = [lo if lo > 0 else 0.0 for lo in _fixing(lp, pd, choice)[0]]
    col = lp.col_index
    gpus: dict[tuple[str, int], int] = {}
    for h in range(prob.hours):
        n = pd.replica_bound(c, h)
        x[col[f"on_demand[{c.key}/{h}]"]] = n
        gpus[c.gpu, h] = gpus.get((c.gpu, h), 0) + n * c.tp
        if k is not None:
            m = pd.pool_bound(k, h)
            x[col[f"pool_on_demand[{k.key}/{h}]"]] = m
            gpus[k.gpu, h] = gpus.get((k.gpu, h), 0) + m * k.tp
    for (gpu, h), n in gpus.items():
        j = col.get(f"instances[{gpu}/{h}]")
        if j is not None:
            x[j] = math.ceil(n / prob.instance_gpus[gpu])
    for a, lo, hi in zip(lp.row_activity(x).tolist(), lp.row_lower, lp.row_upper):
        if a < lo - 1e-6 * max(1.0, abs(lo)) or a > hi + 1e-6 * max(1.0, abs(hi)):
            return None
    if any(not (lo - 1e-9 <= v <= hi + 1e-9) for v, lo, hi in zip(x, lp.col_lower, lp.col_upper)):
        return None
    cost = lp.objective_constant + sum(a * v for a, v in zip(lp.objective, x))
    return SolveResult(solver="none", status="time_limit", termination="time limit reached before any MIP",
                       objective=cost, values=x, mip_gap=None)


# First time slice of one configuration's MIP in a multi-hour search (s); a MIP not finished in
# its slice goes back in the queue and gets four times as long when it comes round again.
MIP_SLICE_S = 1.0
# Slices a MIP gets at most (1 + 4 + ... + 4^5 s = 22.75 min without a deadline) before its bound is left open.
MIP_MAX_TRIES = 6


def solve_by_configuration(
    prob: FleetProblem,
    product: str,
    solver: str,
    *,
    keep: Callable[[Candidate], bool] | None = None,
    deadline: Deadline | None = None,
    mip_rel_gap: float = 1e-6,
    base_lp: LinearProblem | None = None,
    stage: str = "configuration search",
    incumbent_usd: float = math.inf,
) -> tuple[SolveResult, LinearProblem, FleetProblem] | None:
    """Solve the MIP of one product by branching on its configuration first.

    Exactly one decode configuration runs (with one prefill-pool configuration in pool mode), or
    none when the product may go all-API, so the optimum is the best of the MIPs with each such
    choice fixed. The product's model is built and loaded into the solver once; each choice is
    fixed by column bounds (:func:`_search_choices`). ``keep`` limits the configurations
    (runner-up reports). Returns the best solution with the model and problem it solves, or
    None if no choice is feasible.

    Over several hours the model is built only for the choices that can matter: first for the
    few with the lowest bound computed without a solver (:func:`_quick_bound`), which gives a
    plan; then for every choice whose bound is below that plan, searched with it as the
    incumbent. ``base_lp``, if given, is the exported model of ``prob.reduced()`` and is searched
    whole instead. One-hour problems are small: the whole model is solved once, with the
    configurations ``keep`` rejects switched off.

    At the ``deadline`` the best plan found so far is returned with status ``time_limit`` and a
    gap measured against the weakest bound left open. Over several hours, ``incumbent_usd`` (the
    cost of a plan known already) prunes from the start: then None also means that no plan
    costs less than it by more than ``mip_rel_gap``.
    """
    deadline = deadline or Deadline(at=None)
    prob = prob.reduced()
    pd = prob.products[product]
    decode = [c for c in pd.candidates if keep is None or keep(c)]
    api_alone = pd.has_api and pd.api_max_fraction >= 1.0 and keep is None
    if prob.hours == 1:
        lp = base_lp if base_lp is not None else to_linear_problem(build_model(prob))
        session = Session(lp, solver)
        if not decode and not api_alone:
            return None
        lower, upper = _fixing(lp, pd, (None, None), allowed={c.key for c in decode})
        if pd.has_api and api_alone:
            j = lp.col_index[f"self_host[{product}]"]
            lower[j], upper[j] = lp.col_lower[j], lp.col_upper[j]
        res = session.solve(lower, upper, time_limit_s=deadline.solver_limit(), mip_rel_gap=mip_rel_gap)
        if res.status == "infeasible" or not res.values:
            if res.status not in ("infeasible", "optimal") and not res.values:
                raise SolverError(f"{solver} returned no plan for {product}: {res.termination}")
            return None
        return res, lp.with_bounds(lower, upper), prob
    choices: list[tuple[Candidate | None, PoolCandidate | None]] = []
    for c in decode:
        choices.extend([(c, k) for k in pd.pool] if c.mode == "pool" else [(c, None)])
    if api_alone:
        choices.append((None, None))
    ordered = _by_quick_bound(prob, pd, choices)
    if base_lp is not None:
        rounds = [(base_lp, prob, ordered)]
    else:
        # rounds of 8, 32, 128, ... choices: a round's model is built only if a choice of it can
        # still beat the best plan of the rounds before
        rounds, start, size = [], 0, FIRST_ROUND_CHOICES
        while start < len(ordered):
            rounds.append((None, prob, ordered[start:start + size]))
            start, size = start + size, size * 4
    best: tuple[SolveResult, LinearProblem, FleetProblem] | None = None
    open_bounds: list[float] = []
    for lp, whole, these in rounds:
        value = float(best[0].objective or 0.0) if best is not None else incumbent_usd
        these = [(q, ch) for q, ch in these if q < value * (1 - mip_rel_gap) - 1e-7]
        if not these:
            continue
        if deadline.expired and (best is not None or not math.isinf(incumbent_usd)):
            open_bounds.append(these[0][0])  # not searched: its quick bound is all that is known
            break
        if lp is None:  # a model of these choices only
            whole = _with_choices(prob, product, [ch for _, ch in these])
            lp = to_linear_problem(build_model(whole))
        found, left_open = _search_choices(lp, whole, product, these, solver, deadline, mip_rel_gap, value)
        open_bounds += left_open
        if found is not None:
            best = found
    if best is None:
        if open_bounds:
            deadline.note(f"{product}: {stage}")
            raise SolverError(f"{solver} found no plan for {product} before the time limit",
                              lower_bound=min(open_bounds))
        return None
    res, lp, whole = best
    # every choice not left open was pruned against the best plan: the gap is against the weakest
    # bound left open at the deadline, or none
    value = float(res.objective or 0.0)
    lower_bound = min(open_bounds) if open_bounds else value
    gap = max(0.0, (value - lower_bound) / abs(value)) if value else 0.0
    if gap > mip_rel_gap:
        deadline.note(f"{product}: {stage}")
        res = replace(res, status="time_limit", termination=f"time limit reached (gap {gap:.3%})", mip_gap=gap)
    elif not res.optimal or res.solver == "none":
        res = replace(res, status="optimal", termination="optimal (no configuration can do better)", mip_gap=gap)
    return res, lp, whole


# Choices whose model is built first in a multi-hour search (those with the lowest quick bound):
# their best plan prunes the rest before the rest's model is built (in rounds four times larger).
FIRST_ROUND_CHOICES = 8


def _with_choices(prob: FleetProblem, product: str, choices: list[tuple[Candidate | None, PoolCandidate | None]]
                  ) -> FleetProblem:
    """``prob`` with the product's configurations cut to those of ``choices``."""
    pd = prob.products[product]
    keys = {x.key for ch in choices for x in ch if x is not None}
    cut = replace(pd, candidates=tuple(c for c in pd.candidates if c.key in keys),
                  pool=tuple(k for k in pd.pool if k.key in keys))
    return prob.derive(products={**prob.products, product: cut})


def _search_choices(
    lp: LinearProblem, prob: FleetProblem, product: str,
    ordered: list[tuple[float, tuple[Candidate | None, PoolCandidate | None]]], solver: str, deadline: Deadline,
    mip_rel_gap: float, incumbent_value: float,
) -> tuple[tuple[SolveResult, LinearProblem, FleetProblem] | None, list[float]]:
    """Best first over ``ordered`` (choices with their quick bound, lowest first) on the model
    ``lp`` of ``prob``: the open choice with the lowest bound is taken next; a choice known only
    by its quick bound gets its LP bound and goes back, one with an LP bound gets its MIP, which
    only looks for plans cheaper than the best so far (``incumbent_value`` to start with). Each
    LP and MIP holds only the columns of its own choice. Returns the best plan found below
    ``incumbent_value`` (or None) and the bounds left open at the deadline."""
    pd = prob.products[product]
    best: tuple[SolveResult, list[float], list[float]] | None = None
    open_bounds: list[float] = []

    def incumbent() -> float:
        return float(best[0].objective or 0.0) if best is not None else incumbent_value

    def beaten(bound: float) -> bool:
        return bound >= incumbent() * (1 - mip_rel_gap) - 1e-7

    def fix(choice: tuple[Candidate | None, PoolCandidate | None]) -> tuple[list[float], list[float]]:
        bounds = _fixing(lp, pd, choice)
        return _instances_off(lp, choice, bounds) if len(prob.products) == 1 else bounds

    def relaxed(choice: tuple[Candidate | None, PoolCandidate | None], floor: float) -> float | None:
        r = solve_restricted(lp, *fix(choice), solver, relax=True, time_limit_s=deadline.solver_limit())
        if r.status == "infeasible":
            return None
        return max(floor, float(r.objective or 0.0)) if r.status == "optimal" else floor

    if math.isinf(incumbent_value):
        # a first plan without a solver (every hour on demand) prunes choices whose bound exceeds it
        for _, choice in ordered[:5]:
            best = best or _fallback(lp, prob, pd, choice)
    heap: list[tuple[float, int, int, tuple[Candidate | None, PoolCandidate | None]]] = [
        (quick, n, 0, choice) for n, (quick, choice) in enumerate(ordered)]  # already in heap order
    searched = 0
    while heap:
        bound, n, tries, choice = heap[0]
        if beaten(bound):
            break  # every open choice has a bound at least as high
        if deadline.expired and (best is not None or not math.isinf(incumbent_value)):
            open_bounds.append(bound)  # the lowest open bound: every other one is at least as high
            break  # (without any plan yet, the search goes on to its first one)
        heapq.heappop(heap)
        if tries == 0:
            lp_bound = relaxed(choice, bound)
            if lp_bound is not None:
                heapq.heappush(heap, (lp_bound, n, 1, choice))
            continue
        searched += 1
        deadline.progress.update(f"{product}: searching configurations", searched, len(ordered), best=incumbent(),
                                 bound=bound)
        lower, upper = fix(choice)
        # only a plan cheaper than the best one matters: the solver proves fast that none exists;
        # a MIP gets a time slice that grows each time it comes back, so one hard choice cannot
        # hold up the others
        cutoff = incumbent() * (1 - mip_rel_gap) if not math.isinf(incumbent()) else None
        limit = MIP_SLICE_S * 4 ** (tries - 1)
        left = deadline.solver_limit()
        res = solve_restricted(lp, lower, upper, solver, time_limit_s=limit if left is None else min(limit, left),
                               mip_rel_gap=mip_rel_gap, cutoff=cutoff)
        if res.status in ("infeasible", "cutoff"):
            continue
        if res.values and float(res.objective or 0.0) < incumbent() - 1e-7:
            best = (res, lower, upper)
        if res.status == "time_limit" and tries < MIP_MAX_TRIES:
            # not finished in its slice: back in the queue with the bound its search proved
            proved = float(res.objective or 0.0) * (1 - (res.mip_gap or 0.0)) if res.values else bound
            heapq.heappush(heap, (max(bound, proved), n, tries + 1, choice))
        elif not res.optimal:  # the solver gave up on this choice: what it proved stays open
            open_bounds.append(max(bound, float(res.objective or 0.0) * (1 - (res.mip_gap or 0.0)))
                               if res.values else bound)
    if best is None:
        return None, open_bounds
    res, lower, upper = best
    return (res, lp.with_bounds(lower, upper), prob), open_bounds


def _alternatives(prob: FleetProblem, pp: ProductPlan, base: float, solver: str,
                  scenario: Scenario, deadline: Deadline, base_lp: LinearProblem | None = None) -> list[dict[str, Any]]:
    """Cheapest plan with the product's decode forced onto each other GPU type (those not reached
    before the deadline are left out, and the deadline notes it)."""
    if pp.candidate is None:
        return []
    alts: list[dict[str, Any]] = []
    name = pp.product.name
    gpus = sorted({c.gpu for c in prob.products[name].candidates} - {pp.candidate.gpu})
    for i, gpu in enumerate(gpus):
        if deadline.expired:
            deadline.note(f"{name}: runner-ups on other GPU types")
            break
        each = deadline.share(1.0 / (len(gpus) - i))
        try:
            found = solve_by_configuration(prob, name, solver, keep=lambda c, gpu=gpu: c.gpu == gpu,
                                           deadline=each, mip_rel_gap=1e-4, base_lp=base_lp,
                                           stage=f"runner-up on {gpu}")
        except SolverError:
            continue
        if found is None:
            continue
        res, fixed, sub = found
        alt = extract(fixed, res, sub, scenario)[0]
        if alt.candidate is None:
            continue
        c = alt.candidate
        alts.append({
            "gpu": c.gpu, "tp": c.tp, "batch": c.batch, "precision": c.precision, "prefill": c.mode,
            "replicas": alt.replicas, "gpus": alt.gpus, "monthly_cost_usd": round(alt.monthly_cost_usd, 2),
            "cost_difference_usd": round(float(res.objective or 0.0) - base, 2),
            "proven_optimal": res.optimal,
        })
    alts.sort(key=lambda a: (a["cost_difference_usd"], a["gpu"]))
    return alts


def kv_transfer_report(pp: ProductPlan, catalog: Catalog, preset: Preset) -> dict[str, Any] | None:
    """KV-cache hand-off from the prefill pool to decode: bytes per request, peak bytes/s and
    the link it crosses (scale-up fabric or the pool GPUs' NICs)."""
    if pp.pool is None or pp.candidate is None:
        return None
    llm = catalog.models[pp.product.model]
    kv_prec = pp.candidate.estimate.kv_precision
    per_request = pp.product.input_tokens * kv_bytes_per_token(llm, kv_prec)
    peak_qps = max((d - a) / pp.product.output_tokens for d, a in zip(pp.data.demand_tokens_per_s, pp.api_tokens_per_s))
    link, per_gpu = kv_link(catalog.gpus[pp.pool.gpu])
    link_bps = pp.pool_gpus * per_gpu
    peak = peak_qps * per_request
    return {
        "bytes_per_request": round(per_request),
        "peak_bytes_per_s": round(peak, 1),
        "link": link,
        "link_bytes_per_s": round(link_bps, 1),
        "link_utilisation": round(peak / link_bps, 6) if link_bps else None,
        "transfer_ms_per_request": round(pp.pool.transfer_s * 1e3, 3),
    }


def prefill_headroom_check(pp: ProductPlan, catalog: Catalog, preset: Preset, options: Any) -> dict[str, Any] | None:
    """Does a flat headroom cover prefill? On the chosen GPU/TP/precision at the batch the headroom
    rule would run (the largest meeting speed and memory without prefill), compare the rule's
    usable throughput (decode-only less the headroom: the product's own in headroom mode, the
    seed's 30% otherwise) with what the replica keeps when each step also carries its share of new
    requests' prefill (colocated, nothing held back)."""
    c = pp.candidate
    if c is None:
        return None
    llm, gpu = catalog.models[pp.product.model], catalog.gpus[c.gpu]
    work = prefill_work_per_request(llm, pp.product, preset)
    batches = sorted(set(options.batch)) if options.batch else list(range(1, options.max_batch + 1))

    def step(b: int, prefill: bool) -> Any:
        return decode_step(
            llm, gpu, precision=c.precision, tp=c.tp, batch=b, input_tokens=pp.product.input_tokens,
            output_tokens=pp.product.output_tokens, preset=preset, kv_precision=pp.product.kv_precision,
            prefill_flops_per_step=b / pp.product.output_tokens * work if prefill else 0.0,
        )

    def ok(b: int) -> bool:
        e = step(b, False)
        return e.fits and e.per_user_tokens_per_s >= pp.product.min_tokens_per_s_per_user

    n = bisect.bisect_left(range(len(batches)), True, key=lambda i: not ok(batches[i]))
    if n == 0:
        return None
    b = batches[n - 1]
    plain, mixed = step(b, False), step(b, True)
    rule = pp.product.effective_headroom if c.mode == "headroom" else SEED_HEADROOM
    assumed = plain.replica_tokens_per_s * (1 - rule)
    computed = mixed.replica_tokens_per_s
    margin = computed / assumed - 1
    demand = pp.demand_tokens_per_s
    replicas_rule = math.ceil(demand / assumed - 1e-9) if demand else 0
    replicas_needed = math.ceil(demand / computed - 1e-9) if demand else 0
    added = mixed.step_time_s - plain.step_time_s
    verdict = (
        f"{rule:.0%} headroom {'covers' if margin >= 0 else 'does not cover'} prefill on {c.gpu} tp{c.tp} {c.precision} batch {b}: "
        f"with prefill computed a replica serves {computed:,.0f} tokens/s against {assumed:,.0f} assumed "
        f"({'over-provisions' if margin >= 0 else 'misses'} by {abs(margin):.0%}: {replicas_needed:,} replicas needed "
        f"against {replicas_rule:,}); prefill lengthens a {plain.step_time_s * 1e3:.1f} ms step by {added * 1e3:.1f} ms "
        f"and per-user speed falls to {mixed.per_user_tokens_per_s:.1f} tokens/s"
    )
    return {
        "rule_headroom": rule,
        "batch": b,
        "assumed_tokens_per_s": round(assumed, 3),
        "computed_tokens_per_s": round(computed, 3),
        "covered": margin >= 0,
        "margin": round(margin, 6),
        "replicas_by_rule": replicas_rule,
        "replicas_with_prefill": replicas_needed,
        "prefill_ms_per_step": round(added * 1e3, 4),
        "step_time_ms_with_prefill": round(mixed.step_time_s * 1e3, 4),
        "per_user_tokens_per_s_with_prefill": round(mixed.per_user_tokens_per_s, 4),
        "verdict": verdict,
    }


TIER_WORDS = {"reserved": "reserved", "on_demand": "on demand", "spot": "spot"}


def _why(pp: ProductPlan) -> str:
    """Why the product runs what it runs, quoting the GPU-hour price paid in each tier used."""
    c = pp.candidate
    if c is None:
        assert pp.data.api is not None
        return (
            f"all traffic goes to the API ({pp.data.api.price.id}, ${pp.data.api.usd_per_million_output_tokens:.2f} per "
            f"million output tokens): cheaper than any self-hosted fleet plus ${pp.data.fixed_monthly_usd:,.0f}/month fixed cost"
        )
    e = c.estimate
    limiter = {
        "per_user_speed": f"a larger batch would drop below {pp.product.min_tokens_per_s_per_user:g} tokens/s per user",
        "memory": "a larger batch would not fit in memory",
        "batch_options": "the largest batch allowed",
        "max_ttft_ms": f"a larger batch would break the {pp.product.max_ttft_ms or 0:g} ms TTFT target",
    }[c.batch_limited_by]
    tiers = pp.decode_tiers() or ["on_demand"]
    paid = []
    for tier in tiers:
        month = c.usd_per_replica_hour_in(tier) * pp.hours_per_month
        paid.append(
            f"${month:,.0f}/month {TIER_WORDS[tier]} at ${c.price.tier(tier):,.2f}/GPU-hour "
            f"(${month / c.usable_tokens_per_s * 1000:,.0f} per 1,000 tokens/s-month)"
        )
    txt = (
        f"{c.gpu} tp{c.tp} {c.precision} at batch {c.batch} ({limiter}) is {e.bound}-bound at "
        f"{e.step_time_s * 1e3:.1f} ms per step and delivers {c.usable_tokens_per_s:,.0f} usable tokens/s per replica; "
        f"a replica costs " + ", ".join(paid)
    )
    if pp.alternatives:
        a = pp.alternatives[0]
        txt += (
            f"; the runner-up on another GPU type ({a['gpu']} tp{a['tp']} {a['precision']} batch {a['batch']}, "
            f"{a['replicas']} replicas) costs ${a['cost_difference_usd']:,.0f}/month more"
        )
    api_hours = [h for h, a in enumerate(pp.api_tokens_per_s) if a > 1e-6]
    if api_hours and pp.data.api is not None:
        demand = pp.data.demand_tokens_per_s
        share = sum(pp.api_tokens_per_s) / sum(demand) if sum(demand) else 0.0
        busiest = sorted(api_hours, key=lambda h: (-demand[h], h))[:3]
        txt += (
            f"; the API ({pp.data.api.price.id}) takes {pct(share)} of output tokens in {len(api_hours)} of "
            f"{len(demand)} hours (busiest: hour {', '.join(str(h) for h in busiest)}), where sending the remainder "
            f"costs less than another replica"
        )
    if pp.pool is not None:
        txt += (
            f"; prefill runs on {pp.pool_replicas} x {pp.pool.tp} {pp.pool.gpu} ({pp.pool.precision}) sized to "
            f"{pp.pool.max_utilisation:.0%} utilisation at most"
            + ("" if pp.product.max_ttft_ms else
               f" (no max_ttft_ms: the default keeps queueing within {DEFAULT_TTFT_QUEUE_MULTIPLE:g}x the zero-load TTFT)")
        )
    if c.requested_headroom is not None and c.headroom > c.requested_headroom + 1e-12:
        txt += (
            f"; headroom raised from {c.requested_headroom:.0%} to {c.headroom:.0%} (no max_ttft_ms: the default keeps "
            f"queueing within {DEFAULT_TTFT_QUEUE_MULTIPLE:g}x the zero-load TTFT)"
        )
    txt += _ttft_note(pp)
    if len(pp.mode_costs) > 1:
        parts = [f"{m} ${v:,.0f}" if v is not None else f"{m} infeasible" for m, v in sorted(pp.mode_costs.items())]
        txt += f"; prefill mode {c.mode} chosen by cost ({', '.join(parts)} per month for the whole plan)"
    return txt


def _ttft_note(pp: ProductPlan) -> str:
    """Why the modelled TTFT is long, when it exceeds ``TTFT_WARNING_S``; else nothing."""
    c, ttft = pp.candidate, pp.ttft_s
    if c is None or ttft is None or ttft <= TTFT_WARNING_S:
        return ""
    head = f"; modelled TTFT {format_ms(ttft)} ms exceeds {TTFT_WARNING_S:g} s"
    if c.mode == "pool" and pp.pool is not None:
        rho = pp.pool_peak_utilisation or 0.0
        return head + (
            f": one {pp.product.input_tokens:,}-token prefill takes {format_ms(pp.pool.service_s)} ms on a "
            f"{pp.pool.gpu} tp{pp.pool.tp} pool replica, x{queue_factor(rho):.2f} queueing at {rho:.0%} utilisation, "
            f"plus {format_ms(pp.pool.transfer_s)} ms KV hand-off (set max_ttft_ms to size the pool for a target)"
        )
    rho = pp.decode_peak_utilisation or 0.0
    steps = colocated_prefill_steps(c.batch, c.output_tokens)
    where = "colocated" if c.mode == "colocated" else "sharing the decode steps (headroom mode)"
    return head + (
        f": each {pp.product.input_tokens:,}-token prompt is prefilled {where} over {steps:,.1f} steps of "
        f"{format_ms(c.ttft_step_time_s)} ms at batch {c.batch}, x{queue_factor(rho):.2f} queueing at {rho:.0%} "
        f"utilisation (set max_ttft_ms, or prefill: pool)"
    )


def solve_component(
    task: tuple[FleetProblem, list[str], str, Deadline | float | None, float],
) -> tuple[FleetProblem, LinearProblem | None, LinearProblem | None, SolveResult | None, FleetProblem | None]:
    """Solve one group of coupled products: (problem, MIP solved, the product's whole model or None,
    result or None if infeasible, problem to read the solution from). A single product goes
    through :func:`solve_by_configuration`; a coupled group is one MIP after the exact reductions."""
    whole, names, solver, deadline, gap = task
    if not isinstance(deadline, Deadline):  # seconds, in a worker process
        deadline = Deadline.after(deadline)
    if len(names) == 1:
        # one hour: the whole model, shared by the runner-up searches; several hours: each search
        # builds the model of the choices that can matter
        base_lp = to_linear_problem(build_model(whole.reduced())) if whole.hours == 1 else None
        found = solve_by_configuration(whole, names[0], solver, deadline=deadline, mip_rel_gap=gap, base_lp=base_lp)
        if found is None:
            return whole, None, base_lp, None, None
        res, lp, sub = found
        return whole, lp, base_lp, res, sub
    small = whole.reduced()
    lp = to_linear_problem(build_model(small))
    res = solve(lp, solver, time_limit_s=deadline.solver_limit(), mip_rel_gap=gap)
    if res.status == "infeasible":
        return small, lp, None, None, None
    return small, lp, None, res, small


# A coupled group whose joint MIP would have more columns than this is planned product by product
# (see :func:`solve_one_by_one`): beyond it, building the joint model alone takes minutes and
# gigabytes, and HiGHS rarely finds a first plan within a minute.
JOINT_MAX_COLUMNS = 60_000


def joint_columns(prob: FleetProblem) -> int:
    """Columns the joint MIP of ``prob`` would have (integer replicas per configuration, tier and hour)."""
    per_hour = len(prob.hourly_tiers)
    configs = sum(len(p.candidates) + len(p.pool) for p in prob.products.values())
    return configs * (per_hour * prob.hours + ("reserved" in prob.tiers) + 1)


def solve_one_by_one(whole: FleetProblem, names: list[str], solver: str, deadline: Deadline, gap: float
                     ) -> tuple[list[Any], float]:
    """A coupled group too large for one MIP, planned product by product with their GPU types
    chosen together (:func:`fleetplan.optimizer.portfolio.plan_group`): each product's outcome
    and a lower bound on the group's joint optimum; the plan is checked against the shared
    limits afterwards (:func:`_one_by_one_result`)."""
    from fleetplan.optimizer.portfolio import plan_group

    deadline.note("joint plan of " + ", ".join(names[:3]) + (", ..." if len(names) > 3 else "") +
                  ": planned product by product")
    return plan_group(whole, names, solver, deadline, gap)


def _one_by_one_result(plan: Plan, groups: list[list[str]], parts: dict[str, Any], solver: str,
                       mip_rel_gap: float, bounds: list[float]) -> SolveResult:
    """The plan's result when some coupled groups were planned product by product: within the shared
    limits or an error naming them, and its gap against the groups' lower ``bounds`` plus the
    other products' own bounds."""
    prob = plan.problem
    members = {n for g in groups for n in g}
    mine = [pp for pp in plan.products if pp.product.name in members]
    for gpu, row in gpu_hours(mine, prob.hours).items():
        if gpu in prob.gpu_availability and max(row) > prob.gpu_availability[gpu]:
            raise SolverError(
                f"limits.gpu_availability: the {len(members)} coupled products were too many to plan jointly, and "
                f"planned one by one they need {max(row)} {gpu} GPUs of the {prob.gpu_availability[gpu]} available; "
                f"no plan within the limits was found (raise availability, or plan fewer products together)")
    for (gpu, tier), row in tier_gpu_hours(mine, prob.hours).items():
        limit = prob.tier_availability.get((gpu, tier))
        if limit is not None and max(row) > limit:
            raise SolverError(
                f"limits.gpu_availability: planned one by one the coupled products need {max(row)} {gpu} {tier} GPUs "
                f"of the {limit} available; no plan within the limits was found")
    unique = {id(r): r for n, (_, _, r) in parts.items() if n not in members}
    bound = sum(bounds) + sum(float(r.objective or 0.0) * (1 - (r.mip_gap or 0.0)) for r in unique.values())
    total = plan.monthly_cost_usd
    gap = max(0.0, (total - bound) / total) if total else 0.0
    if gap <= mip_rel_gap:
        return replace(plan.solve_result, status="optimal", mip_gap=gap)
    return replace(plan.solve_result, status="time_limit", mip_gap=gap,
                   termination=f"planned product by product within the shared limits (gap {gap:.3%} against a "
                               f"lower bound of the group)")


def coupled_components(prob: FleetProblem) -> list[list[str]]:
    """Groups of products that must be planned together (networkx connected components).

    Two products are coupled when both may use a GPU type whose availability is limited or
    that is bought in whole instances. A budget couples nothing: the objective is the monthly
    cost itself, so the cheapest plan meets the budget if any plan does, and the plan's total is
    checked against it. Components are listed in scenario order, products inside them too.
    """
    names = list(prob.products)
    shared_limits = prob.gpu_availability or prob.tier_availability or prob.instance_gpus
    if len(names) == 1 or not shared_limits:
        return [[n] for n in names]
    import networkx as nx  # imported only when products can be coupled

    g = nx.Graph()
    g.add_nodes_from(names)
    shared = set(prob.gpu_availability) | {g for g, _ in prob.tier_availability} | set(prob.instance_gpus)
    users: dict[str, list[str]] = {}
    for n in names:
        pd = prob.products[n]
        for gpu in sorted({c.gpu for c in pd.candidates} | {k.gpu for k in pd.pool}) :
            if gpu in shared:
                users.setdefault(gpu, []).append(n)
    for members in users.values():
        g.add_edges_from(zip(members, members[1:]))
    order = {n: i for i, n in enumerate(names)}
    comps = [sorted(c, key=order.__getitem__) for c in nx.connected_components(g)]
    return sorted(comps, key=lambda c: order[c[0]])


def _infeasible_message(prob: FleetProblem, names: list[str], solver: str) -> str:
    """Why a coupled group has no plan: GPU availability, or no configuration at all."""
    who = ", ".join(names)
    if prob.gpu_availability or prob.tier_availability:
        limits = [f"{g}: {n}" for g, n in sorted(prob.gpu_availability.items())]
        limits += [f"{g} {t}: {n}" for (g, t), n in sorted(prob.tier_availability.items())]
        return (
            f"limits.gpu_availability: infeasible: {who} cannot all be served within "
            + ", ".join(limits) + " GPUs (raise availability, allow other GPU types or add an API)"
        )
    spot_capped = "spot" in prob.tiers and prob.spot_max_share < 1.0
    if spot_capped and all(t == "spot" for t in prob.tiers):
        return (
            f"options.spot_max_share: infeasible: options.tiers allows only spot, but spot_max_share is "
            f"{prob.spot_max_share:g} (spot may provide at most {pct(prob.spot_max_share)} of replica-hours), so "
            f"{who} cannot self-host; set options.spot_max_share: 1 or add on_demand or reserved to options.tiers"
        )
    return f"products[{who}]: infeasible: no configuration meets demand under the given limits"


def _plan_alone(
    prob: FleetProblem, data: ProductData, solver: str, opts: Any, availability: dict[str, int],
    tier_availability: dict[tuple[str, str], int] | None = None, deadline: Deadline | None = None,
) -> ProductPlan | None:
    """One product planned on its own (instances kept, budget and other products ignored)."""
    sub = prob.derive(products={data.name: data}, gpu_availability=availability,
                      tier_availability=tier_availability or {}, monthly_budget_usd=None)
    found = solve_by_configuration(sub, data.name, solver, deadline=deadline, mip_rel_gap=opts.mip_rel_gap)
    if found is None:
        return None
    res, lp, sub_c = found
    stand_in = Product.model_construct(name=data.name, model="", headroom=None, prefill="headroom")
    pp = extract(lp, res, sub_c, Scenario.model_construct(products=[stand_in]))[0]
    pp.solve_objective = float(res.objective or 0.0)
    pp.solve_optimal = res.optimal
    return pp


def first_come_cost(prob: FleetProblem, order: list[str], solver: str, opts: Any,
                    deadline: Deadline | None = None) -> float | None:
    """Cost of planning products one after another, each taking what it needs of the scarce GPUs
    first (the baseline a joint plan is compared with); None if a later product is left
    unservable, or if the deadline comes first (noted)."""
    deadline = deadline or Deadline(at=None)
    remaining = dict(prob.gpu_availability)
    remaining_tier = dict(prob.tier_availability)
    total = 0.0
    for i, name in enumerate(order):
        deadline.progress.update("first-come baseline", i, len(order))
        try:
            pp = (None if deadline.expired else
                  _plan_alone(prob, prob.products[name], solver, opts, dict(remaining), dict(remaining_tier),
                              deadline.share(1.0 / (len(order) - i))))
        except SolverError:
            pp = None
        if pp is None or not pp.solve_optimal:
            if deadline.expired or (pp is not None and not pp.solve_optimal):
                deadline.note("first-come baseline")
            return None
        total += pp.solve_objective
        for gpu, row in gpu_hours([pp], prob.hours).items():
            if gpu in remaining:
                remaining[gpu] = max(0, remaining[gpu] - max(row))
        for key, row in tier_gpu_hours([pp], prob.hours).items():
            if key in remaining_tier:
                remaining_tier[key] = max(0, remaining_tier[key] - max(row))
    return total


def separate_cost(prob: FleetProblem, pooled: ProductData, solver: str, opts: Any,
                  deadline: Deadline | None = None) -> dict[str, Any]:
    """Replicas and cost if a pooled group's products each had their own replicas (no shared limits)."""
    deadline = deadline or Deadline(at=None)
    replicas = gpus = 0
    cost = 0.0
    for i, m in enumerate(pooled.members):
        try:
            pp = None if deadline.expired else _plan_alone(prob, m, solver, opts, {}, None,
                                                           deadline.share(1.0 / (len(pooled.members) - i)))
        except SolverError:
            pp = None
        if pp is None:
            return {"replicas": None, "gpus": None, "monthly_cost_usd": None}
        cost += pp.solve_objective
        replicas += pp.replicas
        gpus += pp.gpus + pp.pool_gpus
    return {"replicas": replicas, "gpus": gpus, "monthly_cost_usd": round(cost, 2)}


def _hourly_sum(products: list[ProductPlan], hours: int, usage: Callable[[ProductPlan, int], dict[Any, int]]
                ) -> dict[Any, list[int]]:
    out: dict[Any, list[int]] = {}
    for pp in products:
        for h in range(hours):
            for key, n in usage(pp, h).items():
                out.setdefault(key, [0] * hours)[h] += n
    return out


def gpu_hours(products: list[ProductPlan], hours: int) -> dict[str, list[int]]:
    """GPUs in use per GPU type and hour, summed over ``products``."""
    return _hourly_sum(products, hours, ProductPlan.gpus_by_type)


def tier_gpu_hours(products: list[ProductPlan], hours: int) -> dict[tuple[str, str], list[int]]:
    """GPUs in use per (GPU type, pricing tier) and hour, summed over ``products``."""
    return _hourly_sum(products, hours, ProductPlan.gpus_by_tier)


def _allocate_stranded(plan: Plan) -> None:
    """Charge idle instance GPUs (hour by hour, plain GPU-hour price) to the products on that GPU
    type in proportion to the GPUs they use, so products add up to the plan's total."""
    prob = plan.problem
    if not prob.instance_gpus:
        return
    used = gpu_hours(plan.products, prob.hours)
    for pp in plan.products:
        prices = pp.gpu_prices()
        for h in range(prob.hours):
            for gpu, gpus in pp.gpus_by_type(h).items():
                n = prob.instance_gpus.get(gpu)
                if n:
                    total = used[gpu][h]
                    idle = math.ceil(total / n) * n - total
                    pp.stranded_usd += idle * prices[gpu] * prob.hour_weight * gpus / total


def _instances(plan: Plan) -> dict[str, dict[str, Any]]:
    """Per GPU type: GPUs in use at the busiest hour, instances bought, stranded GPUs, availability."""
    prob = plan.problem
    out: dict[str, dict[str, Any]] = {}
    per_hour = gpu_hours(plan.products, prob.hours)
    per_tier = tier_gpu_hours(plan.products, prob.hours)
    for gpu in sorted(per_hour):
        used = per_hour[gpu]
        n = prob.instance_gpus.get(gpu)
        peak = max(used)
        instances = max(math.ceil(u / n) for u in used) if n else None
        out[gpu] = {
            "gpus": peak,
            "instances": instances,
            "gpus_per_instance": n,
            "stranded_gpus": (instances * n - peak) if n else 0,
            "available": prob.gpu_availability.get(gpu),
            "gpus_by_tier": {t: max(row) for (g, t), row in sorted(per_tier.items()) if g == gpu},
        }
        by_tier = {t: n for (g, t), n in sorted(prob.tier_availability.items()) if g == gpu}
        if by_tier:
            out[gpu]["available_by_tier"] = by_tier
    return out


def _cheapest(scenario: Scenario, catalog: Catalog, solver: str, preset: Preset, folder: Path | None,
              with_api: bool, deadline: Deadline) -> float:
    """Cost of the cheapest plan of ``scenario`` found by ``deadline`` (inf when none)."""
    try:
        return make_plan(scenario, catalog, solver, False, preset, folder, with_api=with_api,
                         compare_first_come=False, deadline=deadline).monthly_cost_usd
    except (InfeasibleError, SolverError):
        return math.inf


def check_budget(plan: Plan, original: Scenario, catalog: Catalog, solver: str, preset: Preset,
                 folder: Path | None, with_api: bool, deadline: Deadline) -> None:
    """The budget is not a row of the MIP: the objective is the monthly cost, so the cheapest plan
    meets the budget if any plan does. Raise, with what would make it fit, when it does not."""
    budget = plan.problem.monthly_budget_usd
    total = plan.monthly_cost_usd
    if budget is None or total <= budget + 0.005:
        return
    who = ", ".join(p.name for p in original.products)
    res = plan.solve_result
    if not res.optimal:
        bound = total * (1 - (res.mip_gap or 0.0))
        head = (f"limits.monthly_budget_usd: no plan within the budget of ${budget:,.0f} found before the time limit: "
                f"the best found for {who} costs ${total:,.0f} and none costs less than ${bound:,.0f}")
    else:
        head = (f"limits.monthly_budget_usd: infeasible: the cheapest plan for {who} costs ${total:,.0f} a month, "
                f"${total - budget:,.0f} over the budget of ${budget:,.0f}")
    raise InfeasibleError(head + "; " + budget_relief(original, catalog, solver, preset, folder, with_api, deadline))


def budget_relief(scenario: Scenario, catalog: Catalog, solver: str, preset: Preset, folder: Path | None,
                  with_api: bool = True, deadline: Deadline | None = None) -> str:
    """What a budget that cannot be met costs in API share or in per-user speed: the cheapest
    plan when products with a capped API may send it everything, and the largest common factor
    on every product's ``min_tokens_per_s_per_user`` whose cheapest plan fits the budget
    (bisection to 1%, stopped at the deadline with the best factor found so far)."""
    budget = scenario.limits.monthly_budget_usd
    assert budget is not None
    deadline = deadline or Deadline(at=None)
    # a search for what fits, not a proof: each plan to 0.1% within its share of the deadline;
    # a plan found that fits is a witness whatever its gap
    opts = scenario.options
    quick = opts.model_copy(update={"mip_rel_gap": max(opts.mip_rel_gap, 1e-3)})
    calls = [9]  # plans this search may still run (two ends and about seven bisection steps)

    def each() -> Deadline:
        calls[0] = max(1, calls[0] - 1)
        return deadline.share(1.0 / (calls[0] + 1))
    free = scenario.model_copy(update={"limits": scenario.limits.model_copy(update={"monthly_budget_usd": None}),
                                       "options": quick})
    out: list[str] = []
    capped = [p for p in scenario.products if p.api is not None and p.api.max_fraction < 1.0] if with_api else []
    if capped:
        names = {p.name for p in capped}
        products = [p.model_copy(update={"api": p.api.model_copy(update={"max_fraction": 1.0})}) if p.name in names
                    else p for p in scenario.products]
        cost = _cheapest(free.model_copy(update={"products": products}), catalog, solver, preset, folder, with_api, each())
        verdict = "fits" if cost <= budget else "still does not fit"
        out.append(f"with api.max_fraction 1 for {', '.join(sorted(names))} a plan costs ${cost:,.0f} ({verdict})")

    def slower(f: float) -> float:
        products = [p.model_copy(update={"min_tokens_per_s_per_user": p.min_tokens_per_s_per_user * f})
                    for p in scenario.products]
        return _cheapest(free.model_copy(update={"products": products}), catalog, solver, preset, folder, with_api,
                         each())

    lo, hi = 0.2, 1.0
    cost_lo = slower(lo)
    if cost_lo > budget:
        out.append(f"even at {lo:.0%} of every min_tokens_per_s_per_user no plan found costs less than ${cost_lo:,.0f}")
    else:
        while hi - lo > 0.01:
            if deadline.expired:
                deadline.note("budget relief search")
                out.append(f"(search stopped at the time limit: the factor is between {lo:.2f} and {hi:.2f})")
                break
            mid = round((lo + hi) / 2, 4)
            cost = slower(mid)
            if cost <= budget:
                lo, cost_lo = mid, cost
            else:
                hi = mid
        f = math.floor(lo * 100) / 100
        out.append(f"it fits (${cost_lo:,.0f}) with every min_tokens_per_s_per_user at {f:.2f}x its target ("
                   + ", ".join(f"{p.name} {p.min_tokens_per_s_per_user * f:.3g}" for p in scenario.products[:3])
                   + (", ..." if len(scenario.products) > 3 else "") + " tokens/s)")
    return "; ".join(out)


def make_plan(
    scenario: Scenario,
    catalog: Catalog,
    solver: str = "highs",
    alternatives: bool = True,
    preset: Preset | None = None,
    folder: Path | None = None,
    *,
    with_api: bool = True,
    compare_first_come: bool = True,
    jobs: int = 1,
    deadline: Deadline | None = None,
) -> Plan:
    """Solve ``scenario`` to proven optimality, or as far as the deadline allows, and explain the result.

    Products coupled by a shared limit (a scarce GPU type, in total or in a pricing tier, or
    whole instances) are solved together in one MIP; every other product is its own MIP (same
    formulation), solved by :func:`solve_by_configuration`; ``model_size`` counts the MIPs whose
    solutions are used. ``timings.solve_s`` covers building, exporting and solving them.
    ``preset`` replaces the scenario's named preset (e.g. one adjusted by a calibration
    profile); ``folder`` is where relative paths (demand profiles) are resolved;
    ``with_api=False`` plans as if no product had an API. ``jobs > 1`` solves independent
    multi-hour components in that many worker processes. The budget is checked against the
    plan's total (:func:`check_budget`); with limited GPUs the plan also carries the cost of
    planning the products first come, first served.

    Everything runs within one ``deadline`` (by default ``options.time_limit_s`` from now, or
    :data:`DEFAULT_TIME_LIMIT_S`): the plan itself gets most of it and stops with the best plan
    found and its proven gap (status ``time_limit``); explanations share what is left and are
    skipped once it is spent. ``plan.stopped`` lists what the deadline cut short.
    """
    preset = preset or get_preset(scenario.preset)
    if deadline is None:
        deadline = Deadline.after(scenario.options.time_limit_s or DEFAULT_TIME_LIMIT_S)
    plan = _solve_plan(scenario, catalog, solver, alternatives, preset, folder, with_api, jobs, deadline)
    check_budget(plan, scenario, catalog, solver, preset, folder, with_api, deadline)
    prob, planned = plan.problem, plan.scenario.products
    if compare_first_come and (prob.gpu_availability or prob.tier_availability) and len(planned) > 1:
        plan.first_come_monthly_cost_usd = first_come_cost(prob, [p.name for p in planned], solver,
                                                           plan.scenario.options, deadline)
    plan.stopped = list(deadline.stopped)
    return plan


def _solve_plan(scenario: Scenario, catalog: Catalog, solver: str, alternatives: bool, preset: Preset,
                folder: Path | None, with_api: bool, jobs: int, deadline: Deadline) -> Plan:
    """The cheapest plan of ``scenario`` with its explanations (see :func:`make_plan`); with
    ``allow_pooling``, the cheaper of pooled and separate replicas (each with half the time)."""
    timings = Timings()
    t0 = time.perf_counter()
    original = scenario
    prob, sets, planned = build_problem(scenario, catalog, preset, folder, with_api=with_api)
    own = deadline.share(0.5) if any(pd.members for pd in prob.products.values()) else deadline
    scenario = scenario.model_construct(**{**dict(scenario), "products": [p for p, _ in planned]})
    timings.candidates_s = time.perf_counter() - t0
    opts = scenario.options
    by_name = {p.name: p for p in scenario.products}
    plans: dict[str, ProductPlan] = {}
    parts: dict[str, tuple[FleetProblem, LinearProblem | None, SolveResult]] = {}
    solved: dict[int, LinearProblem] = {}  # the models the plan was read from
    components = coupled_components(prob)
    decomposed: list[list[str]] = []  # coupled groups too large for one MIP, planned product by product
    bounds: list[float] = []  # a lower bound of each of them
    t1 = time.perf_counter()
    main = own.share(MAIN_SOLVE_SHARE)
    tasks = [(prob.restrict(names).derive(monthly_budget_usd=None), names, solver, main, opts.mip_rel_gap)
             for names in components]
    heavy = [t for t in tasks if t[0].hours > 1]
    if len(heavy) > 1 and jobs > 1:
        # independent multi-hour components in worker processes; each result is what the same
        # call gives in this process, so the plan does not depend on the scheduling. Workers are
        # started fresh (spawn), so a calling script needs the usual ``if __name__ == "__main__"``.
        from fleetplan.optimizer.workers import worker_pool

        timed = [(w, n, so, main.left(), g) for w, n, so, _, g in heavy]  # seconds: a deadline stays in this process
        with worker_pool(min(len(heavy), jobs)) as pool:
            done = dict(zip([id(t) for t in heavy], pool.map(solve_component, timed)))
        outcomes = [done[id(t)] if id(t) in done else solve_component(t) for t in tasks]
    else:
        weights = [max(1, sum(len(p.candidates) + len(p.pool) for p in t[0].products.values()) * t[0].hours)
                   for t in tasks]
        outcomes = []
        for i, (w, n, so, _, g) in enumerate(tasks):
            main.progress.update("planning", i, len(tasks))
            share = main.share(weights[i] / sum(weights[i:]))
            if len(n) > 1 and joint_columns(w.reduced()) > JOINT_MAX_COLUMNS:
                decomposed.append(n)
                group, bound = solve_one_by_one(w, n, so, share, g)
                outcomes.append(group)
                bounds.append(bound)
            else:
                outcomes.append(solve_component((w, n, so, share, g)))
    pieces = [(names, o) for names, o in zip(components, outcomes) if names not in decomposed]
    pieces += [([name], o) for names, os_ in zip(components, outcomes) if names in decomposed for name, o in zip(names, os_)]
    for names, (whole, lp, base_lp, res, sub) in pieces:
        if res is None:
            raise InfeasibleError(_infeasible_message(prob, names, solver))
        if not res.optimal and not (res.status == "time_limit" and res.values):
            raise SolverError(f"{solver} returned no proven-optimal plan for {', '.join(names)}: {res.termination}")
        solved[id(lp)] = lp
        for name in names:
            parts[name] = (whole, base_lp, res)
        for pp in extract(lp, res, sub, scenario.model_construct(products=[by_name[n] for n in names])):
            plans[pp.product.name] = pp
    timings.solve_s += time.perf_counter() - t1
    products = [plans[p.name] for p in scenario.products]

    unique = {id(r): r for _, _, r in parts.values()}
    total = sum(float(r.objective or 0.0) for r in unique.values())
    gaps = [r.mip_gap for r in unique.values() if r.mip_gap is not None]
    stopped = [r for r in unique.values() if not r.optimal]
    result = SolveResult(
        solver=solver, status="time_limit" if stopped else "optimal",
        termination=(f"time limit reached with a feasible plan (gap {max(r.mip_gap or 0 for r in stopped):.3%})"
                     if stopped else "optimal (every MIP proven optimal)"),
        objective=total, mip_gap=max(gaps) if gaps else None, solve_time_s=timings.solve_s,
    )
    explain = own.share(EXPLAIN_SHARE)
    for i, pp in enumerate(products):
        name = pp.product.name
        whole, whole_lp, res = parts[name]
        single = len(whole.products) == 1
        base_lp = whole_lp if single else None  # the one-hour model, else None: searches build their own
        base = float(res.objective or 0.0)
        scen = scenario.model_construct(products=[pp.product])
        mine = explain.share(1.0 / (len(products) - i))
        if alternatives and single:
            pp.alternatives = _alternatives(whole, pp, base, solver, scen, mine.share(0.7), base_lp)
        modes = sorted({c.mode for c in whole.products[name].candidates})
        if len(modes) > 1 and single:
            for j, mode in enumerate(modes):
                if mine.expired:
                    mine.note(f"{name}: cost of each prefill mode")
                    break
                try:
                    found = solve_by_configuration(whole, name, solver, keep=lambda c, mode=mode: c.mode == mode,
                                                   deadline=mine.share(1.0 / (len(modes) - j)), mip_rel_gap=1e-4,
                                                   base_lp=base_lp, stage=f"cost of prefill mode {mode}")
                except SolverError:
                    found = None
                pp.mode_costs[mode] = None if found is None else round(float(found[0].objective or 0.0), 2)
        pp.why = _why(pp)
        pp.kv_transfer = kv_transfer_report(pp, catalog, preset)
        pp.prefill_check = prefill_headroom_check(pp, catalog, preset, scenario.options)
    size = (sum(lp.num_cols for lp in solved.values()), sum(lp.num_rows for lp in solved.values()))
    plan = Plan(scenario=scenario, preset=preset, solve_result=result, products=products, candidate_sets=sets,
                problem=prob, model_size=size, timings=timings, components=components,
                members={p.name: ms for p, ms in planned})
    plan.instances = _instances(plan)
    _allocate_stranded(plan)
    if decomposed:
        plan.solve_result = _one_by_one_result(plan, decomposed, parts, solver, opts.mip_rel_gap, bounds)
    for name, pd in prob.products.items():
        if pd.members:
            plan.separate[name] = separate_cost(prob, pd, solver, opts, own)
    if any(pd.members for pd in prob.products.values()):
        # pooling is allowed, not imposed: keep whichever of pooled and separate replicas is cheaper
        unpooled = original.model_copy(update={"limits": original.limits.model_copy(update={"allow_pooling": False})})
        alt = _solve_plan(unpooled, catalog, solver, alternatives, preset, folder, with_api, jobs, deadline)
        note = {"pooled_monthly_cost_usd": round(plan.monthly_cost_usd, 2),
                "separate_monthly_cost_usd": round(alt.monthly_cost_usd, 2)}
        if alt.monthly_cost_usd < plan.monthly_cost_usd - 0.005:
            alt.pooling = {**note, "chosen": "separate"}
            return alt
        plan.pooling = {**note, "chosen": "pooled"}
    return plan

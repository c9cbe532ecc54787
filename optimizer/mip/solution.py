"""A solved plan as typed results (:class:`ProductPlan`, :class:`Plan`) read out of a solver's
solution (:func:`extract`), with GPU usage per hour and the idle instance GPUs charged to products.

Owns the plan's primitive values (replicas, API tokens) and what follows from them; it does
not explain the plan (:mod:`fleetplan.optimizer.explanation.explain`) nor write it out (:mod:`fleetplan.optimizer.explanation.results`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from fleetplan.models.presets import Preset
from fleetplan.optimizer.problem_data.candidates import (
    Candidate,
    CandidateSet,
    PoolCandidate,
)
from fleetplan.optimizer.common.enums import TIERS, Tier
from fleetplan.optimizer.mip.linear import LinearProblem
from fleetplan.optimizer.problem_data.mix import BucketData
from fleetplan.optimizer.problem_data.problem import SECONDS_PER_HOUR, FleetProblem, ProductData
from fleetplan.optimizer.problem_data.reductions import on_hours
from fleetplan.optimizer.traffic.scenario import Product, Scenario
from fleetplan.optimizer.mip.solvers import SolveResult


@dataclass
class Timings:
    """Wall-clock seconds of each planning stage (not part of the plan's JSON: not deterministic)."""

    candidates_s: float = 0.0
    solve_s: float = 0.0  # building, exporting and solving the MIPs


@dataclass(frozen=True)
class Fleet:
    """Replicas of one configuration (a product's decode or its prefill pool): reserved all month,
    on demand and spot hour by hour; ``part`` is None when there is no such configuration."""

    part: Candidate | PoolCandidate | None
    reserved: int
    on_demand: list[int]
    spot: list[int]

    def by_tier(self, h: int) -> dict[Tier, int]:
        """Replicas running in hour ``h`` per tier (all zero without a configuration)."""
        if self.part is None:
            return dict.fromkeys(TIERS, 0)
        return {Tier.RESERVED: self.reserved, Tier.ON_DEMAND: self.on_demand[h], Tier.SPOT: self.spot[h]}

    def in_hour(self, h: int) -> int:
        """Replicas running in hour ``h``."""
        return sum(self.by_tier(h).values())

    @property
    def peak(self) -> int:
        """Replicas at the busiest hour."""
        return max((self.in_hour(h) for h in range(len(self.on_demand))), default=0)

    @property
    def gpus(self) -> int:
        """GPUs at the busiest hour."""
        return self.peak * (self.part.gpus_per_replica if self.part else 0)

    def tiers(self) -> list[str]:
        """Pricing tiers used at some hour, in reserved, on_demand, spot order."""
        if self.part is None:
            return []
        used = {Tier.RESERVED: self.reserved > 0, Tier.ON_DEMAND: any(self.on_demand), Tier.SPOT: any(self.spot)}
        return [t for t in TIERS if used[t]]

    def cost_by_tier(self, hours_per_month: float, hour_weight: float) -> dict[str, float]:
        """USD per month per tier: reserved replicas all month, the others per hour used."""
        k = self.part
        if k is None:
            return dict.fromkeys(TIERS, 0.0)
        return {
            Tier.RESERVED: self.reserved * k.usd_per_replica_hour_in(Tier.RESERVED) * hours_per_month,
            Tier.ON_DEMAND: sum(self.on_demand) * k.usd_per_replica_hour_in(Tier.ON_DEMAND) * hour_weight,
            Tier.SPOT: sum(self.spot) * k.usd_per_replica_hour_in(Tier.SPOT) * hour_weight,
        }


@dataclass
class MixPlan:
    """How a request mix is served (:mod:`fleetplan.optimizer.problem_data.mix`): the replicas of every decode configuration that
    runs, and each bucket's share of demand per configuration and sent to the API, hour by hour."""

    buckets: tuple[BucketData, ...]
    fleets: list[Fleet]
    serve: dict[tuple[int, str], list[float]]  # (bucket, configuration key) -> share of the bucket's demand
    api_share: dict[int, list[float]]  # bucket -> share of its demand sent to the API
    single: dict[str, Any] | None = None  # the best single-configuration plan (a runner-up), when solved
    # GPU types whose runner-up was not searched: a lower bound shows it cannot be among the cheapest
    left_out: list[dict[str, Any]] = field(default_factory=list)

    def share(self, bucket: int, key: str, h: int) -> float:
        """Share of bucket ``bucket``'s demand configuration ``key`` serves in hour ``h``."""
        row = self.serve.get((bucket, key))
        return row[h] if row else 0.0

    def consumed(self, key: str, h: int) -> float:
        """Replicas' worth of capacity of configuration ``key`` its buckets take in hour ``h``."""
        return sum(b.demand_tokens_per_s[h] / b.capacity[key] * self.share(b.index, key, h)
                   for b in self.buckets if key in b.capacity)

    def served_tokens(self, key: str, h: int) -> float:
        """Output tokens/s configuration ``key`` serves in hour ``h``."""
        return sum(b.demand_tokens_per_s[h] * self.share(b.index, key, h) for b in self.buckets)

    def prefill_flops_per_s(self, h: int, pool_keys: set[str]) -> float:
        """Prefill FLOP/s of the bucket shares served by the configurations ``pool_keys`` in hour ``h``."""
        return sum(b.prefill_flops_per_output_token * b.demand_tokens_per_s[h] * self.share(b.index, k, h)
                   for b in self.buckets for k in pool_keys)


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
    mix: MixPlan | None = None  # a product planned from a request mix: all its configurations
    ttft_percentiles_ms: dict[str, float] | None = None  # with percentile targets (see :mod:`fleetplan.optimizer.explanation.tail`)
    # a product whose fleet a replay sized for more than its demand (bursty arrivals): the hourly
    # output tokens/s the MIP was solved for; ``data`` then holds the product's real demand
    sized_for_tokens_per_s: tuple[float, ...] | None = None

    # ---- decode replicas and the prefill pool, each as a fleet
    @property
    def decode(self) -> Fleet:
        """The decode replicas."""
        return Fleet(self.candidate, self.reserved, self.on_demand, self.spot)

    @property
    def fleets(self) -> list[Fleet]:
        """Every decode fleet: the one configuration, or each configuration of a mix."""
        return self.mix.fleets if self.mix is not None else [self.decode]

    @property
    def prefill_pool(self) -> Fleet:
        """The prefill pool's replicas (none without a pool)."""
        return Fleet(self.pool, self.pool_reserved, self.pool_on_demand, self.pool_spot)

    def replicas_in_hour(self, h: int) -> int:
        """Decode replicas running in hour ``h``."""
        return self.decode.in_hour(h)

    @property
    def replicas(self) -> int:
        """Decode replicas at the busiest hour."""
        return self.decode.peak

    @property
    def gpus(self) -> int:
        """Decode GPUs at the busiest hour."""
        return self.decode.gpus

    @property
    def demand_tokens_per_s(self) -> float:
        """Peak output tokens/s."""
        return self.data.peak_demand_tokens_per_s

    @property
    def capacity_tokens_per_s(self) -> float:
        """Usable decode throughput at the busiest hour (after headroom); for a mix, each
        configuration's replicas at the rate of the buckets it serves."""
        if self.mix is None:
            return self.replicas * (self.candidate.usable_tokens_per_s if self.candidate else 0.0)
        h = self.peak_hour
        return sum(self._mix_capacity(f, h) for f in self.mix.fleets)

    def hour_capacity_tokens_per_s(self, h: int) -> float:
        """Usable decode throughput in hour ``h`` (after headroom), as :attr:`capacity_tokens_per_s`."""
        if self.mix is None:
            return self.replicas_in_hour(h) * (self.candidate.usable_tokens_per_s if self.candidate else 0.0)
        return sum(self._mix_capacity(f, h) for f in self.mix.fleets)

    @property
    def peak_hour(self) -> int:
        """The hour of highest demand (the first of equals)."""
        d = self.data.demand_tokens_per_s
        return max(range(len(d)), key=lambda h: (d[h], -h))

    def _mix_capacity(self, f: Fleet, h: int) -> float:
        """Usable tokens/s of a mix configuration's replicas in hour ``h`` at its buckets' rate."""
        assert self.mix is not None and f.part is not None
        used = self.mix.consumed(f.part.key, h)
        if used > 0:
            return self.mix.served_tokens(f.part.key, h) / used * f.in_hour(h)
        return f.in_hour(h) * max((b.capacity[f.part.key] for b in self.mix.buckets if f.part.key in b.capacity),
                                  default=0.0)

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
        if self.mix is not None:
            return max((self.mix_load(f, h) for f in self.mix.fleets for h in range(len(f.on_demand))), default=0.0)
        loads = [s / (self.replicas_in_hour(h) * c.replica_tokens_per_s)
                 for h, s in enumerate(self.served_tokens_per_s()) if self.replicas_in_hour(h) > 0]
        return max(loads, default=0.0)

    def mix_load(self, f: Fleet, h: int) -> float:
        """Load of a mix configuration's replicas in hour ``h`` as a share of their full throughput."""
        assert self.mix is not None and isinstance(f.part, Candidate)
        n = f.in_hour(h)
        return self.mix.consumed(f.part.key, h) / n * (1.0 - f.part.headroom) if n else 0.0

    def prefill_flops_per_s(self, h: int) -> float:
        """Prefill FLOP/s the pool takes in hour ``h`` (self-hosted demand; for a mix, the buckets'
        shares served in pool mode)."""
        if self.mix is None:
            return self.data.prefill_flops_per_output_token * self.served_tokens_per_s()[h]
        keys = {f.part.key for f in self.mix.fleets if f.part is not None and getattr(f.part, "mode", "") == "pool"}
        return self.mix.prefill_flops_per_s(h, keys)

    @property
    def pool_peak_utilisation(self) -> float | None:
        """Highest hourly load of the prefill pool as a share of its FLOP/s."""
        if self.pool is None:
            return None
        loads = [self.prefill_flops_per_s(h) / (self.prefill_pool.in_hour(h) * self.pool.flops_per_s)
                 for h in range(len(self.pool_on_demand)) if self.prefill_pool.in_hour(h) > 0]
        return max(loads, default=0.0)

    @property
    def ttft_s(self) -> float | None:
        """Modelled time to first token in the busiest hour (:mod:`fleetplan.models.ttft`):
        through the pool at its peak utilisation, or, colocated and in headroom mode, spread
        over the decode steps at the decode replicas' peak utilisation. None when all-API."""
        c = self.candidate
        if c is None:
            return None
        if self.mix is not None:
            return self._mix_ttft_s()
        if c.mode == "pool":
            return self.pool.ttft_s(self.pool_peak_utilisation or 0.0) if self.pool is not None else None
        return c.ttft_at(self.decode_peak_utilisation or 0.0)

    def _mix_ttft_s(self) -> float | None:
        """The longest modelled TTFT over a mix's configurations (pool-mode ones through the pool),
        each at its peak load."""
        assert self.mix is not None
        out = []
        for f in self.mix.fleets:
            c = f.part
            assert isinstance(c, Candidate)
            if c.mode == "pool":
                if self.pool is not None:
                    out.append(self.pool.ttft_s(self.pool_peak_utilisation or 0.0))
                continue
            t = c.ttft_at(max((self.mix_load(f, h) for h in range(len(f.on_demand))), default=0.0))
            if t is not None:
                out.append(t)
        return max(out, default=None)

    def gpus_by_type(self, h: int) -> dict[str, int]:
        """GPUs the product runs in hour ``h``, per GPU type (decode and prefill pool, all tiers)."""
        out: dict[str, int] = {}
        for (gpu, _), n in self.gpus_by_tier(h).items():
            out[gpu] = out.get(gpu, 0) + n
        return out

    def gpus_by_tier(self, h: int) -> dict[tuple[str, str], int]:
        """GPUs the product runs in hour ``h``, per (GPU type, pricing tier)."""
        out: dict[tuple[str, str], int] = {}
        for fleet in (*self.fleets, self.prefill_pool):
            for tier, n in fleet.by_tier(h).items():
                if n and fleet.part is not None:
                    key = (fleet.part.gpu, tier)
                    out[key] = out.get(key, 0) + fleet.part.gpus_per_replica * n
        return out

    def decode_tiers(self) -> list[str]:
        """Pricing tiers the decode replicas run in at some hour (reserved, on_demand, spot order)."""
        used = {t for f in self.fleets for t in f.tiers()}
        return [t for t in TIERS if t in used]

    def pool_tiers(self) -> list[str]:
        """Pricing tiers the prefill-pool replicas run in at some hour."""
        return self.prefill_pool.tiers()

    def gpu_prices(self) -> dict[str, float]:
        """Plain GPU-hour price of each GPU type the product uses."""
        parts = [f.part for f in (*self.fleets, self.prefill_pool) if f.part is not None]
        return {p.gpu: p.price.usd_per_gpu_hour for p in parts}

    # ---- costs (recomputed from the integer plan)
    def decode_cost_by_tier(self) -> dict[str, float]:
        """USD per month of decode replicas, per tier (every configuration of a mix)."""
        out = dict.fromkeys(TIERS, 0.0)
        for f in self.fleets:
            for t, usd in f.cost_by_tier(self.hours_per_month, self.hour_weight).items():
                out[t] += usd
        return out

    def pool_cost_by_tier(self) -> dict[str, float]:
        """USD per month of prefill-pool replicas, per tier."""
        return self.prefill_pool.cost_by_tier(self.hours_per_month, self.hour_weight)

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
            Tier.RESERVED: d[Tier.RESERVED] + p[Tier.RESERVED],
            Tier.ON_DEMAND: d[Tier.ON_DEMAND] + p[Tier.ON_DEMAND],
            Tier.SPOT: d[Tier.SPOT] + p[Tier.SPOT],
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
    binding_limits: list[dict[str, Any]] = field(default_factory=list)  # see :mod:`fleetplan.optimizer.explanation.binding`
    # the replay of a plan from a trace (:mod:`fleetplan.optimizer.simulation.verify`); None for a plan without a trace
    verification: dict[str, Any] | None = None
    # where the gap lies when groups were planned product by product (:func:`fleetplan.optimizer.decomposition.components.gap_breakdown`)
    gap_breakdown_usd: dict[str, float] | None = None
    # the solvers' values by column key (not in the plan's JSON): a start for re-plans of variants
    solution: dict[tuple[str, tuple[Any, ...]], float] = field(default_factory=dict)

    @property
    def monthly_cost_usd(self) -> float:
        """Total monthly cost, summed from the products."""
        return sum(p.monthly_cost_usd for p in self.products)

    @property
    def hours(self) -> int:
        """Hours of the planning horizon."""
        return self.problem.hours


def _read(lp: LinearProblem, result: SolveResult, family: str, *index: Any) -> float:
    """The solution's value of variable ``family[index]`` (0 when the model has no such variable)."""
    j = lp.find(family, *index)
    return 0.0 if j is None else result.values[j]


def _replicas(lp: LinearProblem, result: SolveResult, prefix: str, key: str, hours: range
              ) -> tuple[int, list[int], list[int]]:
    """Reserved replicas and on-demand and spot replicas per hour of one configuration (``prefix``
    is "" for decode, "pool_" for a prefill pool)."""
    def row(tier: Tier) -> list[int]:
        return [round(_read(lp, result, prefix + tier, key, h)) for h in hours]
    return round(_read(lp, result, prefix + Tier.RESERVED, key)), row(Tier.ON_DEMAND), row(Tier.SPOT)


def extract(lp: LinearProblem, result: SolveResult, prob: FleetProblem, products: Sequence[Product]) -> list[ProductPlan]:
    """Read the decisions of ``products`` out of a solution of ``lp`` (the model of ``prob``)."""
    out: list[ProductPlan] = []
    hours = range(prob.hours)
    for product in products:
        pd = prob.products[product.name]
        pp = ProductPlan(product=product, data=pd, hour_weight=prob.hour_weight, hours_per_month=prob.hours_per_month,
                         candidate=None, on_demand=[0] * prob.hours, spot=[0] * prob.hours,
                         pool_on_demand=[0] * prob.hours, pool_spot=[0] * prob.hours)
        for c in pd.candidates:
            if _read(lp, result, "use", c.key) > 0.5:
                pp.candidate = c
                pp.reserved, pp.on_demand, pp.spot = _replicas(lp, result, "", c.key, hours)
        for k in pd.pool:
            if _read(lp, result, "pool_use", k.key) > 0.5:
                pp.pool = k
                pp.pool_reserved, pp.pool_on_demand, pp.pool_spot = _replicas(lp, result, "pool_", k.key, hours)
        pp.api_tokens_per_s = [max(0.0, _read(lp, result, "api", product.name, h)) for h in hours]
        if pd.is_mix:
            _extract_mix(lp, result, pd, pp, hours)
        if prob.hour_of:  # merged hours: back to every hour of the horizon
            of = prob.hour_of
            for name in ("on_demand", "spot", "pool_on_demand", "pool_spot", "api_tokens_per_s"):  # ProductPlan fields
                row = getattr(pp, name)
                setattr(pp, name, [row[i] for i in of])
            pp.data = replace(on_hours(pd, list(of)), demand_tokens_per_s=prob.full_demand[product.name])
            if pp.mix is not None:
                pp.mix = _mix_on_hours(pp.mix, pp.data, list(of))
        out.append(pp)
    return out


def _extract_mix(lp: LinearProblem, result: SolveResult, pd: ProductData, pp: ProductPlan, hours: range) -> None:
    """A mix's configurations, replicas and bucket shares; the plan's own configuration (and its
    replicas) is the one with the most GPUs at the busiest hour."""
    fleets = []
    for c in pd.candidates:
        fleet = Fleet(c, *_replicas(lp, result, "", c.key, hours))
        if fleet.peak > 0:
            fleets.append(fleet)
    if not fleets and pd.candidates and not any(pp.api_tokens_per_s):  # no demand: the cheapest, at 0 replicas
        c = min(pd.candidates, key=lambda c: (c.monthly_cost_per_replica_usd, c.key))
        fleets.append(Fleet(c, 0, [0] * len(hours), [0] * len(hours)))
    serve = {(b.index, k): [max(0.0, _read(lp, result, "serve", pd.name, b.index, k, h)) for h in hours]
             for b in pd.buckets for k in pd.eligible(b)}
    serve = {key: row for key, row in serve.items() if any(x > 1e-9 for x in row)}
    api = {b.index: [max(0.0, _read(lp, result, "api_bucket", pd.name, b.index, h)) for h in hours] for b in pd.buckets}
    pp.mix = MixPlan(buckets=pd.buckets, fleets=fleets, serve=serve, api_share=api)
    if pp.pool is not None and pp.prefill_pool.peak == 0:  # a pool chosen but never used: none
        pp.pool, pp.pool_reserved = None, 0
        pp.pool_on_demand, pp.pool_spot = [0] * len(hours), [0] * len(hours)
    if fleets:
        main = max(fleets, key=lambda f: (f.gpus, f.part.key if f.part else ""))
        pp.candidate = main.part  # type: ignore[assignment]
        pp.reserved, pp.on_demand, pp.spot = main.reserved, main.on_demand, main.spot
    else:
        pp.candidate = None


def _mix_on_hours(mix: MixPlan, data: ProductData, of: list[int]) -> MixPlan:
    """A mix's plan back on every hour of the horizon (hour ``h`` is merged hour ``of[h]``)."""
    fleets = [Fleet(f.part, f.reserved, [f.on_demand[i] for i in of], [f.spot[i] for i in of]) for f in mix.fleets]
    return MixPlan(buckets=data.buckets, fleets=fleets,
                   serve={k: [row[i] for i in of] for k, row in mix.serve.items()},
                   api_share={k: [row[i] for i in of] for k, row in mix.api_share.items()})


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


def allocate_stranded(plan: Plan) -> None:
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


def instance_report(plan: Plan) -> dict[str, dict[str, Any]]:
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

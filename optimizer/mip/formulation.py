"""The fleet-sizing MIP in Pyomo, one function per business rule.

Sets
    P                 products;  H  hours of the planning horizon (1, 24 or 168)
    C_p               decode configurations of product p (GPU, TP, precision, batch, prefill mode)
    K_p               prefill-pool configurations of product p
    T                 capacity tiers in play: reserved (constant, paid all month), on_demand and
                      spot (chosen hour by hour, paid per hour used)
Variables
    use[c], pool_use[k]           binary: the configuration a product runs (and its pool)
    reserved[c], pool_reserved[k] integer replicas held all month
    on_demand[c,h], spot[c,h]     integer replicas in hour h (same for pools)
    api[p,h]                      output tokens/s sent to the hosted API in hour h
    self_host[p]                  binary: product p runs any replicas at all (only with an API)
Objective
    minimise USD per month: reserved replicas x price x hours per month
           + sum_h hour weight x (on-demand and spot replicas x their hourly price)
           + sum_h hour weight x 3600 x api tokens/s x API USD per output token
           + fixed self-hosting cost x self_host
with hour weight = hours per month / |H| x n_h (each modelled hour stands for that many real
hours; n_h = 1 unless hours of identical demand were merged into one, see :mod:`fleetplan.optimizer.problem_data.reductions`;
sums over the horizon, such as the spot and API shares, weigh each hour by n_h).

Request mixes (:mod:`fleetplan.optimizer.problem_data.mix`; products with ``buckets``): the one-configuration rule and the
per-configuration demand rows do not apply; instead
    serve[p,b,c,h] in [0, 1]      share of bucket b's demand in hour h served by configuration c
                                  (only where b is eligible on c)
    api_bucket[p,b,h] in [0, 1]   share of bucket b's demand in hour h sent to the API
    sum_c serve[p,b,c,h] + api_bucket[p,b,h] >= 1                       (each bucket covered)
    sum_b demand[p,b,h] / capacity[b,c] x serve[p,b,c,h] <= replicas[c,h]  (replicas shared)
    api[p,h] = sum_b demand[p,b,h] x api_bucket[p,b,h]
and one prefill pool at most, present when a pool-mode configuration runs, covering the
prefill FLOPs of the buckets' shares served in pool mode. A mix kept to one configuration
(``single``) keeps the one-configuration rule as well.

Names follow ``{entity}-{rule}-{bound}`` once exported (see :mod:`fleetplan.optimizer.mip.linear`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from fleetplan.optimizer.problem_data.candidates import Candidate, PoolCandidate
from fleetplan.optimizer.common.enums import Tier
from fleetplan.optimizer.common.errors import InfeasibleError
from fleetplan.optimizer.problem_data.mix import BucketData
from fleetplan.optimizer.problem_data.site_power import SiteRow
from fleetplan.optimizer.problem_data.problem import (
    PETA,
    SECONDS_PER_HOUR,
    FleetProblem,
    ProductData,
)
from pyomo.core import (
    Binary,
    ConcreteModel,
    Constraint,
    NonNegativeIntegers,
    NonNegativeReals,
    Objective,
    Var,
    minimize,
)


# benchmarks switch this off to measure what the exact reductions of :meth:`FleetProblem.reduced` save
@dataclass(frozen=True)
class Side:
    """Decode replicas or prefill-pool replicas: the same variable families and rules, on the
    decode configurations C_p (``use``, ``reserved``, ``on_demand``, ``spot``) or the pool
    configurations K_p (the same names with ``pool_`` in front)."""

    prefix: str

    @property
    def use(self) -> str:
        """The binary variable family: the configuration is chosen."""
        return f"{self.prefix}use"

    def family(self, tier: str) -> str:
        """The integer variable family of replicas bought in ``tier``."""
        return f"{self.prefix}{tier}"

    def parts(self, prob: FleetProblem) -> list[Candidate] | list[PoolCandidate]:
        """The configurations of this side, product by product."""
        return prob.all_pool() if self.prefix else prob.all_candidates()

    def part(self, prob: FleetProblem, key: str) -> Candidate | PoolCandidate:
        """The configuration called ``key``."""
        return prob.pools[key] if self.prefix else prob.cand[key]

    def capacity(self, prob: FleetProblem, key: str) -> float:
        """What one replica of ``key`` serves: output tokens/s (decode) or PFLOP/s of prefill (pool)."""
        part = self.part(prob, key)
        return part.usable_flops_per_s / PETA if self.prefix else part.usable_tokens_per_s  # type: ignore[union-attr]

    def per_token(self, pd: ProductData) -> float:
        """Work per output token in :meth:`capacity`'s unit: 1 (decode) or prefill PFLOP (pool)."""
        return pd.prefill_flops_per_output_token / PETA if self.prefix else 1.0

    def api_tokens(self, m: ConcreteModel, pd: ProductData, key: str, h: int) -> object:
        """The API's tokens/s this side need not serve in hour ``h``: those attributed to the
        configuration (decode) or all of the product's (pool)."""
        return m.api[pd.name, h] if self.prefix else m.api_for[key, h]

    def bound(self, prob: FleetProblem, key: str, hour: int | None = None) -> int:
        """Most replicas of ``key`` ever needed (in ``hour``, or the busiest hour)."""
        part = self.part(prob, key)
        pd = prob.products[part.product]
        return pd.pool_bound(part, hour) if self.prefix else pd.replica_bound(part, hour)  # type: ignore[arg-type]


DECODE = Side("")
POOL = Side("pool_")


def declare_replicas(m: ConcreteModel, prob: FleetProblem, side: Side, tier: str) -> None:
    """Integer replicas of every configuration of ``side`` bought in ``tier``: reserved ones all
    month, the others hour by hour, each at most what alone meets the demand."""
    keys = [x.key for x in side.parts(prob)]
    if tier == Tier.RESERVED:
        var = Var(keys, domain=NonNegativeIntegers, bounds=lambda _m, k: (0, side.bound(prob, k)))
    else:
        var = Var([(k, h) for k in keys for h in range(prob.hours)], domain=NonNegativeIntegers,
                  bounds=lambda _m, k, h: (0, side.bound(prob, k, h)))
    setattr(m, side.family(tier), var)


def define_variables(m: ConcreteModel, prob: FleetProblem) -> None:
    """Binary choices, integer replicas per tier, API tokens/s, self-hosting switches."""
    hours = range(prob.hours)
    for side in (DECODE, POOL):
        setattr(m, side.use, Var([x.key for x in side.parts(prob)], domain=Binary))
    for tier in [Tier.RESERVED] * (Tier.RESERVED in prob.tiers) + list(prob.hourly_tiers):
        for side in (DECODE, POOL):
            declare_replicas(m, prob, side, tier)
    api_products = [p.name for p in prob.products.values() if p.has_api]
    m.api = Var([(p, h) for p in api_products for h in hours], domain=NonNegativeReals,
                bounds=lambda _m, p, h: (0, prob.products[p].demand_tokens_per_s[h]))
    m.self_host = Var(api_products, domain=Binary,
                      bounds=lambda _m, p: (0 if prob.products[p].api_max_fraction >= 1.0 else 1, 1))
    # the API's tokens attributed to each configuration (zero unless it is chosen): keeps the
    # LP relaxation from letting one API stream cover every configuration at once
    api_cands = [c.key for c in _api_candidates(prob)]
    m.api_for = Var([(k, h) for k in api_cands for h in hours], domain=NonNegativeReals,
                    bounds=lambda _m, k, h: (0, prob.products[prob.cand[k].product].demand_tokens_per_s[h]))


def declare_mix_shares(m: ConcreteModel, prob: FleetProblem) -> None:
    """Shares of each bucket's demand served by each eligible configuration, and sent to the API,
    hour by hour (request mixes only)."""
    mixes = _mixes(prob)
    if not mixes:
        return
    hours = range(prob.hours)
    m.serve = Var([(p.name, b.index, k, h) for p in mixes for b in p.buckets for k in p.eligible(b)
                   for h in hours], domain=NonNegativeReals, bounds=(0, 1))
    m.api_bucket = Var([(p.name, b.index, h) for p in mixes if p.has_api for b in p.buckets for h in hours],
                       domain=NonNegativeReals, bounds=(0, 1))


def _mixes(prob: FleetProblem) -> list[ProductData]:
    """Products planned from a request mix."""
    return [p for p in prob.products.values() if p.is_mix]


def _plain(prob: FleetProblem) -> list[str]:
    """Names of the products planned from one request size."""
    return [p.name for p in prob.products.values() if not p.is_mix]


def declare_instances(m: ConcreteModel, prob: FleetProblem) -> None:
    """Integer instances bought per GPU type sold in whole instances and hour, at most what the
    type's availability allows."""
    gpus = [g for g in _gpu_types(prob) if g in prob.instance_gpus]
    if not gpus:
        return

    def bounds(_m: ConcreteModel, g: str, h: int) -> tuple[int, int | None]:
        limit = prob.gpu_availability.get(g)
        return 0, None if limit is None else limit // prob.instance_gpus[g]

    m.instances = Var([(g, h) for g in gpus for h in range(prob.hours)], domain=NonNegativeIntegers, bounds=bounds)


def horizon_tokens(prob: FleetProblem, product: str) -> float:
    """A product's demand summed over the hours of the horizon (tokens/s x hours)."""
    d = prob.products[product].demand_tokens_per_s
    return sum(prob.count(h) * d[h] for h in range(prob.hours))


def in_hour(m: ConcreteModel, prob: FleetProblem, side: Side, key: str, h: int) -> object:
    """Expression: replicas of configuration ``key`` of ``side`` running in hour ``h``."""
    terms = [getattr(m, side.family(Tier.RESERVED))[key]] if Tier.RESERVED in prob.tiers else []
    terms += [getattr(m, side.family(t))[key, h] for t in prob.hourly_tiers]
    return sum(terms)


def replicas_in_hour(m: ConcreteModel, prob: FleetProblem, key: str, h: int) -> object:
    """Expression: decode replicas of configuration ``key`` running in hour ``h``."""
    return in_hour(m, prob, DECODE, key, h)


def pool_replicas_in_hour(m: ConcreteModel, prob: FleetProblem, key: str, h: int) -> object:
    """Expression: pool replicas of configuration ``key`` running in hour ``h``."""
    return in_hour(m, prob, POOL, key, h)


def define_needs_configuration(m: ConcreteModel, prob: FleetProblem, side: Side) -> None:
    """Replicas only of the chosen configuration of ``side``, never more than alone meet the demand:
    reserved[c] <= U_c use[c];  on_demand[c,h], spot[c,h] <= U_{c,h} use[c] (pools alike)."""
    parts = side.parts(prob)
    if not parts:
        return
    use = getattr(m, side.use)
    if Tier.RESERVED in prob.tiers:
        var = getattr(m, side.family(Tier.RESERVED))
        setattr(m, f"{side.family(Tier.RESERVED)}_needs_configuration", Constraint(
            [x.key for x in parts], rule=lambda m, k, var=var: var[k] <= side.bound(prob, k) * use[k]))
    for tier in prob.hourly_tiers:
        var = getattr(m, side.family(tier))
        setattr(m, f"{side.family(tier)}_needs_configuration", Constraint(
            [(x.key, h) for x in parts for h in range(prob.hours)],
            rule=lambda m, k, h, var=var: var[k, h] <= side.bound(prob, k, h) * use[k]))


def define_one_configuration_per_product(m: ConcreteModel, prob: FleetProblem) -> None:
    """A product runs exactly one decode configuration, or none when it goes all-API:
    sum_{c in C_p} use[c] = self_host[p] (= 1 without an API)."""
    names = [p.name for p in prob.products.values() if not p.is_mix or p.single]
    if not names:
        return
    m.one_configuration_per_product = Constraint(
        names,
        rule=lambda m, p: sum(m.use[c.key] for c in prob.products[p].candidates)
        == (m.self_host[p] if prob.products[p].has_api else 1),
    )


def define_throughput_meets_demand(m: ConcreteModel, prob: FleetProblem) -> None:
    """Every hour, usable decode throughput plus API tokens cover demand (tokens/s):
    sum_{c in C_p} usable[c] x replicas[c,h] + api[p,h] >= demand[p,h]."""
    names = _plain(prob)
    if not names:
        return

    def rule(m: ConcreteModel, p: str, h: int) -> object:
        pd = prob.products[p]
        lhs = sum(c.usable_tokens_per_s * replicas_in_hour(m, prob, c.key, h) for c in pd.candidates)
        if pd.has_api:
            lhs = lhs + m.api[p, h]
        return lhs >= pd.demand_tokens_per_s[h]

    m.throughput_meets_demand = Constraint([(p, h) for p in names for h in range(prob.hours)], rule=rule)


def define_meets_demand_per_configuration(m: ConcreteModel, prob: FleetProblem, side: Side) -> None:
    """The demand rule stated for each configuration of ``side``, which is what makes the MIP
    solve fast: if c is chosen its replicas (plus the API) cover the hour's demand, else the row
    is void. Decode: usable[c] x replicas[c,h] + api_for[c,h] >= demand[p,h] x use[c]; pool, in
    PFLOP/s: usable_flops[k] x pool_replicas[k,h] + F x api[p,h] >= F x demand[p,h] x pool_use[k]
    (F: prefill PFLOP per output token). Without an API, replicas are whole numbers, so the row
    is rounded up: replicas[c,h] >= ceil(demand[p,h] / usable[c]) x use[c] (pools alike). (With an
    API the rounding of the decode row and the API's split by configuration are families of
    their own, below.) A request mix has no such row: its configurations share its demand."""
    parts = [x for x in side.parts(prob) if not prob.products[x.product].is_mix]
    if not parts:
        return
    use = getattr(m, side.use)

    def rule(m: ConcreteModel, key: str, h: int) -> object:
        pd = prob.products[side.part(prob, key).product]
        x = in_hour(m, prob, side, key, h)
        if not pd.has_api:
            return x >= side.bound(prob, key, h) * use[key]
        f = side.per_token(pd)
        return side.capacity(prob, key) * x + f * side.api_tokens(m, pd, key, h) >= f * pd.demand_tokens_per_s[h] * use[key]

    name = f"{side.prefix}configuration_meets_demand"
    setattr(m, name, Constraint([(x.key, h) for x in parts for h in range(prob.hours)], rule=rule))


def _api_candidates(prob: FleetProblem) -> list[Candidate]:
    return [c for c in prob.all_candidates() if prob.products[c.product].has_api and not prob.products[c.product].is_mix]


def define_configuration_meets_demand_rounded(m: ConcreteModel, prob: FleetProblem) -> None:
    """Whole replicas plus a continuous API stream: the mixed-integer rounding of the row above,
    u f x + api_for >= u f ceil(D/u) use with f the fractional part of D/u, is valid and gives
    the LP the exact trade-off between one more replica and the API taking the remainder."""
    api_cands = _api_candidates(prob)
    if not api_cands:
        return

    def mir(m: ConcreteModel, key: str, h: int) -> object:
        c = prob.cand[key]
        pd = prob.products[c.product]
        b = pd.demand_tokens_per_s[h] / c.usable_tokens_per_s
        f = b - math.floor(b)
        if f < 1e-9:
            return Constraint.Skip
        u = c.usable_tokens_per_s
        return u * f * replicas_in_hour(m, prob, key, h) + m.api_for[key, h] >= u * f * math.ceil(b) * m.use[key]

    m.configuration_meets_demand_rounded = Constraint([(c.key, h) for c in api_cands for h in range(prob.hours)],
                                                      rule=mir)


def define_api_split(m: ConcreteModel, prob: FleetProblem) -> None:
    """The API's tokens split by configuration: api[p,h] >= sum_c api_for[c,h]."""
    if not _api_candidates(prob):
        return
    m.api_split = Constraint(
        [(p.name, h) for p in prob.products.values() if p.has_api and not p.is_mix for h in range(prob.hours)],
        rule=lambda m, p, h: m.api[p, h] >= sum(m.api_for[c.key, h] for c in prob.products[p].candidates),
    )


def define_api_for_needs_configuration(m: ConcreteModel, prob: FleetProblem) -> None:
    """API tokens are attributed only to the chosen configuration: api_for[c,h] <= demand x use[c]."""
    api_cands = _api_candidates(prob)
    if not api_cands:
        return
    m.api_for_needs_configuration = Constraint(
        [(c.key, h) for c in api_cands for h in range(prob.hours)],
        rule=lambda m, k, h: m.api_for[k, h] <= prob.products[prob.cand[k].product].demand_tokens_per_s[h] * m.use[k],
    )


def define_api_for_share_max(m: ConcreteModel, prob: FleetProblem) -> None:
    """Each configuration's API share within the product's limit (void unless it is chosen)."""
    api_cands = _api_candidates(prob)
    if not api_cands:
        return
    hours = range(prob.hours)
    m.api_for_share_max = Constraint(
        [c.key for c in api_cands],
        rule=lambda m, k: sum(prob.count(h) * m.api_for[k, h] for h in hours)
        <= prob.products[prob.cand[k].product].api_max_fraction * horizon_tokens(prob, prob.cand[k].product) * m.use[k],
    )


def define_api_share_limits(m: ConcreteModel, prob: FleetProblem) -> None:
    """The API's share of the month's output tokens stays within [min_fraction, max_fraction]."""
    names = [p.name for p in prob.products.values() if p.has_api]
    if not names:
        return
    hours = range(prob.hours)
    m.api_share_max = Constraint(
        names, rule=lambda m, p: sum(prob.count(h) * m.api[p, h] for h in hours)
        <= prob.products[p].api_max_fraction * horizon_tokens(prob, p)
    )
    mins = [p for p in names if prob.products[p].api_min_fraction > 0]
    if mins:
        m.api_share_min = Constraint(
            mins, rule=lambda m, p: sum(prob.count(h) * m.api[p, h] for h in hours)
            >= prob.products[p].api_min_fraction * horizon_tokens(prob, p)
        )


def define_spot_share_limit(m: ConcreteModel, prob: FleetProblem) -> None:
    """Spot capacity provides at most ``spot_max_share`` of a product's decode replica-hours over
    the horizon: sum_{c,h} spot[c,h] <= share x sum_{c,h} replicas[c,h]."""
    if Tier.SPOT not in prob.tiers:
        return
    s, hours = prob.spot_max_share, range(prob.hours)

    def rule(m: ConcreteModel, p: str) -> object:
        keys = [c.key for c in prob.products[p].candidates]
        if not keys:
            return Constraint.Skip
        spot = sum(prob.count(h) * m.spot[k, h] for k in keys for h in hours)
        total = sum(prob.count(h) * replicas_in_hour(m, prob, k, h) for k in keys for h in hours)
        return spot <= s * total

    m.spot_share_limit = Constraint(list(prob.products), rule=rule)


def define_pool_matches_mode(m: ConcreteModel, prob: FleetProblem) -> None:
    """A product has exactly one prefill pool configuration iff its decode runs in pool mode."""
    names = [p.name for p in prob.products.values() if any(c.mode == "pool" for c in p.candidates) and not p.is_mix]
    if not names:
        return
    m.pool_matches_mode = Constraint(
        names, rule=lambda m, p: sum(m.pool_use[k.key] for k in prob.products[p].pool)
        == sum(m.use[c.key] for c in prob.products[p].candidates if c.mode == "pool"),
    )


def define_prefill_pool_meets_demand(m: ConcreteModel, prob: FleetProblem) -> None:
    """In pool mode, the pool's usable FLOP/s cover the prefill of every self-hosted request:
    sum_k usable_flops[k] x pool_replicas[k,h] >= F x (demand[p,h] - api[p,h]) - F x demand[p,h] x (1 - pool mode),
    with F = prefill FLOPs per output token (the last term switches the rule off outside pool mode).
    Stated in PFLOP/s so coefficients stay in a range solvers accept."""
    names = [p.name for p in prob.products.values() if p.pool and not p.is_mix]
    if not names:
        return

    def rule(m: ConcreteModel, p: str, h: int) -> object:
        pd = prob.products[p]
        f, d = pd.prefill_flops_per_output_token / PETA, pd.demand_tokens_per_s[h]
        cap = sum(k.usable_flops_per_s / PETA * pool_replicas_in_hour(m, prob, k.key, h) for k in pd.pool)
        in_pool = sum(m.use[c.key] for c in pd.candidates if c.mode == "pool")
        need = f * d * in_pool - (f * m.api[p, h] if pd.has_api else 0)
        return cap >= need

    m.prefill_pool_meets_demand = Constraint([(p, h) for p in names for h in range(prob.hours)], rule=rule)


def _eligible(prob: FleetProblem) -> list[tuple[ProductData, BucketData, str]]:
    """(mix, bucket, configuration key) for every bucket of a mix and configuration it may run on."""
    return [(p, b, k) for p in _mixes(prob) for b in p.buckets for k in p.eligible(b)]


def define_bucket_demand_covered(m: ConcreteModel, prob: FleetProblem) -> None:
    """Every hour, each bucket of a mix is served in full by its configurations and the API:
    sum_c serve[p,b,c,h] + api_bucket[p,b,h] >= 1 (shares of the bucket's demand; void in an
    hour without demand)."""
    rows = [(p.name, b.index, h) for p in _mixes(prob) for b in p.buckets for h in range(prob.hours)
            if b.demand_tokens_per_s[h] > 0]
    if not rows:
        return
    for p, i, _ in rows:  # a row with nothing to serve it would be the constant 0 >= 1
        pd = prob.products[p]
        if not pd.has_api and not pd.eligible(pd.buckets[i]):
            raise InfeasibleError(f"products[{p}].requests[{i}]: no configuration left may serve its requests "
                                  f"({pd.buckets[i].label} tokens) and the product may not use an API")

    def rule(m: ConcreteModel, p: str, i: int, h: int) -> object:
        pd = prob.products[p]
        served = sum(m.serve[p, i, k, h] for k in pd.eligible(pd.buckets[i]))
        return served + (m.api_bucket[p, i, h] if pd.has_api else 0) >= 1

    m.bucket_demand_covered = Constraint(rows, rule=rule)


def define_capacity_consumed(m: ConcreteModel, prob: FleetProblem) -> None:
    """A configuration's replicas are shared by the buckets it serves: the capacity they consume
    stays within its replicas, sum_b demand[p,b,h] / capacity[b,c] x serve[p,b,c,h] <= replicas[c,h]
    (demand and capacity in output tokens/s, so each term is replicas)."""
    keys = sorted({(p.name, k) for p, _, k in _eligible(prob)})
    if not keys:
        return

    def rule(m: ConcreteModel, p: str, key: str, h: int) -> object:
        pd = prob.products[p]
        buckets = [b for b in pd.buckets if key in pd.eligible(b) and b.demand_tokens_per_s[h] > 0]
        if not buckets:
            return Constraint.Skip
        used = sum(b.demand_tokens_per_s[h] / b.capacity[key] * m.serve[p, b.index, key, h] for b in buckets)
        return used <= replicas_in_hour(m, prob, key, h)

    m.capacity_consumed = Constraint([(p, k, h) for p, k in keys for h in range(prob.hours)], rule=rule)


def define_api_by_bucket(m: ConcreteModel, prob: FleetProblem) -> None:
    """A mix's API tokens are its buckets' shares sent there: api[p,h] = sum_b demand[p,b,h] x api_bucket[p,b,h]."""
    names = [p.name for p in _mixes(prob) if p.has_api]
    if not names:
        return
    m.api_by_bucket = Constraint(
        [(p, h) for p in names for h in range(prob.hours)],
        rule=lambda m, p, h: m.api[p, h] == sum(b.demand_tokens_per_s[h] * m.api_bucket[p, b.index, h]
                                                for b in prob.products[p].buckets),
    )


def define_mix_pool(m: ConcreteModel, prob: FleetProblem) -> None:
    """A mix runs at most one prefill-pool configuration, and one whenever a pool-mode decode
    configuration runs: use[c] <= sum_k pool_use[k] <= 1."""
    rows = [(p.name, c.key) for p in _mixes(prob) if p.pool for c in p.candidates if c.mode == "pool"]
    if not rows:
        return
    m.mix_pool_needed = Constraint(
        rows, rule=lambda m, p, key: m.use[key] <= sum(m.pool_use[k.key] for k in prob.products[p].pool))
    m.mix_pool_one = Constraint(
        sorted({p for p, _ in rows}), rule=lambda m, p: sum(m.pool_use[k.key] for k in prob.products[p].pool) <= 1)


def define_mix_prefill_pool_meets_demand(m: ConcreteModel, prob: FleetProblem) -> None:
    """A mix's pool covers the prefill of the bucket shares its pool-mode configurations serve
    (PFLOP/s): sum_k usable_flops[k] x pool_replicas[k,h] >= sum_{b, c in pool mode} F_b x demand[p,b,h] x serve[p,b,c,h]."""
    names = [p.name for p in _mixes(prob) if p.pool]
    if not names:
        return

    def rule(m: ConcreteModel, p: str, h: int) -> object:
        pd = prob.products[p]
        need = sum(b.prefill_flops_per_output_token / PETA * b.demand_tokens_per_s[h] * m.serve[p, b.index, c.key, h]
                   for b in pd.buckets for c in pd.candidates if c.mode == "pool" and c.key in b.capacity)
        if isinstance(need, int):
            return Constraint.Skip
        cap = sum(k.usable_flops_per_s / PETA * pool_replicas_in_hour(m, prob, k.key, h) for k in pd.pool)
        return cap >= need

    m.mix_prefill_pool_meets_demand = Constraint([(p, h) for p in names for h in range(prob.hours)], rule=rule)


def gpus_in_hour(m: ConcreteModel, prob: FleetProblem, gpu: str, h: int) -> object:
    """Expression: GPUs of type ``gpu`` running in hour ``h`` (decode and prefill pools), with
    those products outside the problem run in the same instances (``prob.gpus_elsewhere``)."""
    elsewhere = prob.gpus_elsewhere[gpu][1][h] if gpu in prob.gpus_elsewhere else 0
    return elsewhere + sum(c.gpus_per_replica * replicas_in_hour(m, prob, c.key, h) for c in prob.all_candidates() if c.gpu == gpu) + sum(
        k.gpus_per_replica * pool_replicas_in_hour(m, prob, k.key, h) for k in prob.all_pool() if k.gpu == gpu
    )


def gpus_in_tier(m: ConcreteModel, prob: FleetProblem, gpu: str, tier: str, h: int) -> object:
    """Expression: GPUs of type ``gpu`` bought in pricing tier ``tier`` running in hour ``h``."""
    if tier == Tier.RESERVED:
        return sum(c.gpus_per_replica * m.reserved[c.key] for c in prob.all_candidates() if c.gpu == gpu) + sum(
            k.gpus_per_replica * m.pool_reserved[k.key] for k in prob.all_pool() if k.gpu == gpu)
    decode, pool = getattr(m, tier), getattr(m, f"pool_{tier}")
    return sum(c.gpus_per_replica * decode[c.key, h] for c in prob.all_candidates() if c.gpu == gpu) + sum(
        k.gpus_per_replica * pool[k.key, h] for k in prob.all_pool() if k.gpu == gpu)


def _gpu_types(prob: FleetProblem) -> list[str]:
    return sorted({c.gpu for c in prob.all_candidates()} | {k.gpu for k in prob.all_pool()})


def define_gpu_availability(m: ConcreteModel, prob: FleetProblem) -> None:
    """In every hour, the GPUs of a scarce type in use stay within what can be obtained:
    sum over configurations on that type of tp x replicas[c,h] <= availability[gpu]; and, where
    availability is given per pricing tier, the GPUs bought in that tier within its limit."""
    gpus = [g for g in _gpu_types(prob) if g in prob.gpu_availability]
    if gpus:
        m.gpu_availability = Constraint(
            [(g, h) for g in gpus for h in range(prob.hours)],
            rule=lambda m, g, h: gpus_in_hour(m, prob, g, h) <= prob.gpu_availability[g],
        )
    # per pricing tier: reserved replicas are held all month (one row), the others hour by hour
    types = set(_gpu_types(prob))
    tiers = [(g, t) for g, t in sorted(prob.tier_availability) if g in types and t in prob.tiers]
    if tiers:
        m.gpu_tier_availability = Constraint(
            [(g, t, h) for g, t in tiers for h in (range(1) if t == Tier.RESERVED else range(prob.hours))],
            rule=lambda m, g, t, h: gpus_in_tier(m, prob, g, t, h) <= prob.tier_availability[g, t],
        )


def stranded_gpu_cost(m: ConcreteModel, prob: FleetProblem) -> object:
    """USD per month of GPUs bought with instances but left idle, at the plain GPU-hour price."""
    if not hasattr(m, "instances"):
        return idle_elsewhere_usd(prob, set())
    price = {}
    for c in prob.all_candidates():
        price.setdefault(c.gpu, c.price.usd_per_gpu_hour)
    for k in prob.all_pool():
        price.setdefault(k.gpu, k.price.usd_per_gpu_hour)
    declared = {g for g, _ in m.instances.index_set()}
    return sum(
        price[g] * prob.weight(h) * (prob.instance_gpus[g] * m.instances[g, h] - gpus_in_hour(m, prob, g, h))
        for (g, h) in m.instances.index_set()
    ) + idle_elsewhere_usd(prob, declared)


def idle_elsewhere_usd(prob: FleetProblem, declared: set[str]) -> float:
    """USD per month of the idle GPUs in the instances of GPU types that only products outside
    the problem run (``prob.gpus_elsewhere`` on a type not in ``declared``; its hours are never
    merged): a constant, so that plans that leave different GPU types to the others cost what the
    whole group pays."""
    return sum(prob.idle_instance_usd(g, price, row)
               for g, (price, row) in sorted(prob.gpus_elsewhere.items()) if g not in declared)


def monthly_cost_expression(m: ConcreteModel, prob: FleetProblem) -> object:
    """The monthly cost in USD: replicas by tier, API tokens, fixed costs, stranded GPUs."""
    hours = range(prob.hours)
    terms = []
    for c in prob.all_candidates():
        if Tier.RESERVED in prob.tiers:
            terms.append(c.usd_per_replica_hour_in(Tier.RESERVED) * prob.hours_per_month * m.reserved[c.key])
        for t in prob.hourly_tiers:
            terms.append(c.usd_per_replica_hour_in(t) * sum(prob.weight(h) * getattr(m, t)[c.key, h] for h in hours))
    for k in prob.all_pool():
        if Tier.RESERVED in prob.tiers:
            terms.append(k.usd_per_replica_hour_in(Tier.RESERVED) * prob.hours_per_month * m.pool_reserved[k.key])
        for t in prob.hourly_tiers:
            terms.append(k.usd_per_replica_hour_in(t) * sum(prob.weight(h) * getattr(m, f"pool_{t}")[k.key, h] for h in hours))
    for p in prob.products.values():
        if p.has_api:
            assert p.api is not None
            terms.append(p.api.usd_per_output_token * SECONDS_PER_HOUR * sum(prob.weight(h) * m.api[p.name, h] for h in hours))
            terms.append(p.fixed_monthly_usd * m.self_host[p.name])
        else:
            terms.append(p.fixed_monthly_usd)
    terms.append(stranded_gpu_cost(m, prob))
    return sum(terms)


def define_objective(m: ConcreteModel, prob: FleetProblem) -> None:
    """Minimise the monthly cost in USD (see :func:`monthly_cost_expression`)."""
    m.monthly_cost_usd = Objective(expr=monthly_cost_expression(m, prob), sense=minimize)


def define_whole_instances(m: ConcreteModel, prob: FleetProblem) -> None:
    """GPUs are bought as whole instances: instances[gpu,h] x GPUs per instance >= GPUs in use.
    Every TP group fits in one instance (TP <= GPUs per instance is required of candidates)."""
    if not hasattr(m, "instances"):
        return
    m.whole_instances = Constraint(
        list(m.instances.index_set()),
        rule=lambda m, g, h: prob.instance_gpus[g] * m.instances[g, h] >= gpus_in_hour(m, prob, g, h),
    )


Family = Callable[[ConcreteModel, FleetProblem], None]


def _on(family: Callable[[ConcreteModel, FleetProblem, Side], None], side: Side) -> Family:
    """``family`` stated for one side (decode or pool)."""
    def define(m: ConcreteModel, prob: FleetProblem) -> None:
        family(m, prob, side)
    define.__name__ = f"{family.__name__}[{side.prefix or 'decode_'}]"
    return define


# The constraint families of the MIP, in the order they are built (the order fixes the rows'
# order, and so the solver's path: keep it): decode, the API and spot shares, the prefill pool,
# then shared limits and the objective.
DECODE_FAMILIES: tuple[Family, ...] = (
    define_one_configuration_per_product, _on(define_needs_configuration, DECODE), define_throughput_meets_demand,
    _on(define_meets_demand_per_configuration, DECODE), define_configuration_meets_demand_rounded,
)
SHARE_FAMILIES: tuple[Family, ...] = (
    define_api_split, define_api_for_needs_configuration, define_api_for_share_max, define_api_share_limits,
    define_spot_share_limit,
)
POOL_FAMILIES: tuple[Family, ...] = (
    define_pool_matches_mode, _on(define_needs_configuration, POOL), define_prefill_pool_meets_demand,
    _on(define_meets_demand_per_configuration, POOL),
)
# request mixes: families that are empty (no rows, no columns) for a problem without one
MIX_FAMILIES: tuple[Family, ...] = (
    declare_mix_shares, define_bucket_demand_covered, define_capacity_consumed, define_api_by_bucket,
    define_mix_pool, define_mix_prefill_pool_meets_demand,
)
def site_mw_expression(m: ConcreteModel, prob: FleetProblem, row: SiteRow, h: int, types: set[str]) -> Any:
    """Expression: the facility MW the GPUs on the site of ``row`` hold in hour ``h`` at full load."""
    return sum(mw * gpus_in_tier(m, prob, g, t, h) for g, mw in row.mw_per_gpu if g in types
               for t in prob.tiers if row.hosts(t))


def define_site_power(m: ConcreteModel, prob: FleetProblem) -> None:
    """In every hour, the facility power of each site's GPUs at full load stays within its limit
    (MW): PUE x sum_{g,t on the site} P_full[g] x GPUs[g,t,h] <= limit (see :mod:`fleetplan.optimizer.problem_data.site_power`)."""
    types = set(_gpu_types(prob))
    rows = [r for r in prob.site_power if any(g in types for g, _ in r.mw_per_gpu)]
    if not rows:
        return
    by_name = {r.name: r for r in rows}
    m.site_power = Constraint(
        [(r.name, h) for r in rows for h in range(prob.hours)],
        rule=lambda m, s, h: site_mw_expression(m, prob, by_name[s], h, types) <= by_name[s].limit_mw)


LIMIT_FAMILIES: tuple[Family, ...] = (define_gpu_availability, define_site_power, declare_instances, define_whole_instances,
                                       define_objective)
FAMILIES: tuple[Family, ...] = DECODE_FAMILIES + SHARE_FAMILIES + POOL_FAMILIES + MIX_FAMILIES + LIMIT_FAMILIES


def build_model(prob: FleetProblem) -> ConcreteModel:
    """The Pyomo model of ``prob``: its variables, then the constraint families of :data:`FAMILIES`."""
    m = ConcreteModel(name="fleetplan")
    define_variables(m, prob)
    for family in FAMILIES:
        family(m, prob)
    return m

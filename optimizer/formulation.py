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
hours; n_h = 1 unless hours of identical demand were merged into one, see ``FleetProblem.merged``;
sums over the horizon, such as the spot and API shares, weigh each hour by n_h).

Names follow ``{entity}-{rule}-{bound}`` once exported (see :mod:`fleetplan.optimizer.linear`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from pyomo.core import Binary, ConcreteModel, Constraint, NonNegativeIntegers, NonNegativeReals, Objective, Var, minimize

from fleetplan.optimizer.api import APIOffer
from fleetplan.optimizer.candidates import Candidate, PoolCandidate

SECONDS_PER_HOUR = 3600.0
PETA = 1e15
# benchmarks switch this off to measure what the exact reductions of :meth:`FleetProblem.reduced` save
REDUCE_PROBLEMS = True


@dataclass(frozen=True)
class ProductData:
    """What the MIP needs of one product."""

    name: str
    demand_tokens_per_s: tuple[float, ...]
    candidates: tuple[Candidate, ...]
    pool: tuple[PoolCandidate, ...] = ()
    prefill_flops_per_output_token: float = 0.0
    api: APIOffer | None = None
    api_min_fraction: float = 0.0
    api_max_fraction: float = 0.0
    fixed_monthly_usd: float = 0.0
    members: tuple[ProductData, ...] = ()

    @property
    def peak_demand_tokens_per_s(self) -> float:
        """Highest hourly demand."""
        return max(self.demand_tokens_per_s)

    @property
    def has_api(self) -> bool:
        """Whether the product may send tokens to a hosted API."""
        return self.api is not None and self.api_max_fraction > 0

    def hour_signature(self, h: int) -> tuple[float, ...]:
        """What hour ``h`` asks of the product. Without an API only whole replicas serve it, so
        the hour is described exactly by the fewest replicas of each configuration (and pool
        configuration) that meet its demand; with an API the demand itself."""
        if self.has_api:
            return (self.demand_tokens_per_s[h],)
        return tuple(self.replica_bound(c, h) for c in self.candidates) + tuple(self.pool_bound(k, h) for k in self.pool)

    def replica_bound(self, c: Candidate, hour: int | None = None) -> int:
        """Replicas of ``c`` that alone meet the demand of ``hour`` (or the peak): never more."""
        d = self.peak_demand_tokens_per_s if hour is None else self.demand_tokens_per_s[hour]
        return max(0, math.ceil(d / c.usable_tokens_per_s - 1e-9))

    def pool_bound(self, k: PoolCandidate, hour: int | None = None) -> int:
        """Pool replicas of ``k`` that alone meet the prefill demand of ``hour`` (or the peak)."""
        d = self.peak_demand_tokens_per_s if hour is None else self.demand_tokens_per_s[hour]
        if d * self.prefill_flops_per_output_token <= 0:  # nothing to prefill: every prompt token cached
            return 0
        return max(0, math.ceil(d * self.prefill_flops_per_output_token / k.usable_flops_per_s - 1e-9))


@dataclass(frozen=True)
class FleetProblem:
    """Everything the MIP needs: products, horizon, tiers."""

    products: dict[str, ProductData]
    hours: int = 1
    hours_per_month: float = 730.0
    tiers: tuple[str, ...] = ("on_demand",)
    spot_max_share: float = 0.0
    gpu_availability: dict[str, int] = field(default_factory=dict)
    tier_availability: dict[tuple[str, str], int] = field(default_factory=dict)  # (GPU type, tier) -> GPUs
    instance_gpus: dict[str, int] = field(default_factory=dict)
    monthly_budget_usd: float | None = None  # checked against the plan's total, not a row (the objective is the cost)
    # identical hours merged (see :meth:`merged`): real hours each modelled hour stands for, the
    # modelled hour of every hour of the horizon, and each product's demand over the horizon
    hour_counts: tuple[int, ...] = ()
    hour_of: tuple[int, ...] = ()
    full_demand: dict[str, tuple[float, ...]] = field(default_factory=dict)
    cand: dict[str, Candidate] = field(default_factory=dict)
    pools: dict[str, PoolCandidate] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for p in self.products.values():
            for c in p.candidates:
                self.cand[c.key] = c
            for k in p.pool:
                self.pools[k.key] = k

    def derive(self, **changes: object) -> FleetProblem:
        """A copy with ``changes`` (products, limits); horizon, tiers and merged hours kept."""
        return replace(self, cand={}, pools={}, **changes)  # type: ignore[arg-type]

    def restrict(self, names: list[str], *, limits: bool = True) -> FleetProblem:
        """The same problem over products ``names`` only (shared limits kept unless ``limits`` is False)."""
        return self.derive(
            products={n: self.products[n] for n in names},
            gpu_availability=dict(self.gpu_availability) if limits else {},
            tier_availability=dict(self.tier_availability) if limits else {},
            instance_gpus=dict(self.instance_gpus) if limits else {},
            monthly_budget_usd=self.monthly_budget_usd if limits else None,
            full_demand={n: self.full_demand[n] for n in names if n in self.full_demand},
        )

    @property
    def horizon_hours(self) -> int:
        """Hours of the planning horizon (before identical hours are merged)."""
        return len(self.hour_of) or self.hours

    @property
    def hour_weight(self) -> float:
        """Real hours of a month each hour of the horizon stands for."""
        return self.hours_per_month / self.horizon_hours

    def count(self, h: int) -> int:
        """Hours of the horizon modelled hour ``h`` stands for (1 unless hours were merged)."""
        return self.hour_counts[h] if self.hour_counts else 1

    def weight(self, h: int) -> float:
        """Real hours of a month modelled hour ``h`` stands for."""
        return self.hour_weight * self.count(h)

    @property
    def hours_separable(self) -> bool:
        """Whether nothing but the configuration and reserved replicas links one hour to another:
        no spot share cap over the horizon and no API share limit that can bind. Then hours with
        the same demand for every product have the same best decisions, and merging them is exact."""
        if "spot" in self.tiers and self.spot_max_share < 1.0:
            return False
        return not any(p.has_api and (p.api_max_fraction < 1.0 or p.api_min_fraction > 0.0)
                       for p in self.products.values())

    def without_dominated(self) -> FleetProblem:
        """The same problem without decode configurations that another configuration of the
        product beats in every hour, when that is exact: the product has no API, capacity is
        bought hour by hour (no reserved tier, no spot share cap), and c' is dropped for c on the
        same GPU type, prefill mode and hourly prices when c needs no more GPUs than c' in any hour
        (tp x fewest replicas). Then c' can be swapped for c in any plan without raising its cost,
        its GPUs in any hour, or its instances (idle instance GPUs cost no more than used ones)."""
        if "reserved" in self.tiers or ("spot" in self.tiers and self.spot_max_share < 1.0):
            return self
        hourly = self.hourly_tiers
        if self.tier_availability and len(hourly) > 1:  # a TP group cannot be split across tiers
            return self
        changed = False
        products = {}
        for name, pd in self.products.items():
            if pd.has_api or len(pd.candidates) < 2:
                products[name] = pd
                continue
            gpus = {c.key: [c.tp * pd.replica_bound(c, h) for h in range(self.hours)] for c in pd.candidates}

            def key(c: Candidate) -> tuple[object, ...]:
                return (c.gpu, c.mode, tuple(c.price.tier(t) for t in hourly))

            def priced_up(c: Candidate) -> bool:
                return all(c.price.tier(t) >= c.price.usd_per_gpu_hour for t in hourly)

            kept = []
            for i, c in enumerate(pd.candidates):
                beaten = priced_up(c) and any(
                    key(d) == key(c) and all(x <= y for x, y in zip(gpus[d.key], gpus[c.key]))
                    and (gpus[d.key] != gpus[c.key] or j < i)
                    for j, d in enumerate(pd.candidates) if j != i
                )
                if not beaten:
                    kept.append(c)
            changed |= len(kept) < len(pd.candidates)
            products[name] = replace(pd, candidates=tuple(kept))
        return self.derive(products=products) if changed else self

    def reduced(self) -> FleetProblem:
        """:meth:`without_dominated`, then :meth:`merged`: the smaller problem with the same optimum
        (one-hour problems are left as they are: their candidates are already pruned)."""
        if self.hours == 1 or not REDUCE_PROBLEMS:
            return self
        return self.without_dominated().merged()

    def merged(self) -> FleetProblem:
        """The same problem with hours that ask the same of every product (:meth:`ProductData.hour_signature`)
        merged into one weighted hour, when that is exact (:attr:`hours_separable`) and saves hours;
        else itself. A daily profile tiled over a week, for one, leaves at most 24 distinct hours;
        small products whose replica counts change only a few times a day leave fewer."""
        if self.hour_of or self.hours == 1 or not self.hours_separable:
            return self
        classes: dict[tuple[float, ...], int] = {}  # numbered in order of first appearance
        rep_hours: list[int] = []
        hour_of: list[int] = []
        for h in range(self.hours):
            key = tuple(x for p in self.products.values() for x in p.hour_signature(h))
            if key not in classes:
                classes[key] = len(rep_hours)
                rep_hours.append(h)
            hour_of.append(classes[key])
        if len(rep_hours) == self.hours:
            return self
        counts = [0] * len(rep_hours)
        for i in hour_of:
            counts[i] += 1
        products = {
            n: replace(p, demand_tokens_per_s=tuple(p.demand_tokens_per_s[h] for h in rep_hours))
            for n, p in self.products.items()
        }
        return self.derive(
            products=products, hours=len(rep_hours), hour_counts=tuple(counts), hour_of=tuple(hour_of),
            full_demand={n: p.demand_tokens_per_s for n, p in self.products.items()},
        )

    def all_candidates(self) -> list[Candidate]:
        """Every decode candidate, product by product."""
        return [c for p in self.products.values() for c in p.candidates]

    def all_pool(self) -> list[PoolCandidate]:
        """Every pool candidate, product by product."""
        return [k for p in self.products.values() for k in p.pool]

    @property
    def hourly_tiers(self) -> tuple[str, ...]:
        """Tiers chosen hour by hour."""
        return tuple(t for t in self.tiers if t != "reserved")


def define_variables(m: ConcreteModel, prob: FleetProblem) -> None:
    """Binary choices, integer replicas per tier, API tokens/s, self-hosting switches."""
    keys = [c.key for c in prob.all_candidates()]
    pkeys = [k.key for k in prob.all_pool()]
    hours = range(prob.hours)
    m.use = Var(keys, domain=Binary)
    m.pool_use = Var(pkeys, domain=Binary)
    if "reserved" in prob.tiers:
        m.reserved = Var(keys, domain=NonNegativeIntegers,
                         bounds=lambda _m, k: (0, prob.products[prob.cand[k].product].replica_bound(prob.cand[k])))
        m.pool_reserved = Var(pkeys, domain=NonNegativeIntegers,
                              bounds=lambda _m, k: (0, prob.products[prob.pools[k].product].pool_bound(prob.pools[k])))
    for tier in prob.hourly_tiers:
        setattr(m, tier, Var(
            [(k, h) for k in keys for h in hours], domain=NonNegativeIntegers,
            bounds=lambda _m, k, h: (0, prob.products[prob.cand[k].product].replica_bound(prob.cand[k], h)),
        ))
        setattr(m, f"pool_{tier}", Var(
            [(k, h) for k in pkeys for h in hours], domain=NonNegativeIntegers,
            bounds=lambda _m, k, h: (0, prob.products[prob.pools[k].product].pool_bound(prob.pools[k], h)),
        ))
    api_products = [p.name for p in prob.products.values() if p.has_api]
    m.api = Var([(p, h) for p in api_products for h in hours], domain=NonNegativeReals,
                bounds=lambda _m, p, h: (0, prob.products[p].demand_tokens_per_s[h]))
    m.self_host = Var(api_products, domain=Binary,
                      bounds=lambda _m, p: (0 if prob.products[p].api_max_fraction >= 1.0 else 1, 1))
    # the API's tokens attributed to each configuration (zero unless it is chosen): keeps the
    # LP relaxation from letting one API stream cover every configuration at once
    api_cands = [c.key for c in prob.all_candidates() if prob.products[c.product].has_api]
    m.api_for = Var([(k, h) for k in api_cands for h in hours], domain=NonNegativeReals,
                    bounds=lambda _m, k, h: (0, prob.products[prob.cand[k].product].demand_tokens_per_s[h]))


def horizon_tokens(prob: FleetProblem, product: str) -> float:
    """A product's demand summed over the hours of the horizon (tokens/s x hours)."""
    d = prob.products[product].demand_tokens_per_s
    return sum(prob.count(h) * d[h] for h in range(prob.hours))


def replicas_in_hour(m: ConcreteModel, prob: FleetProblem, key: str, h: int) -> object:
    """Expression: decode replicas of configuration ``key`` running in hour ``h``."""
    terms = [m.reserved[key]] if "reserved" in prob.tiers else []
    terms += [getattr(m, t)[key, h] for t in prob.hourly_tiers]
    return sum(terms)


def pool_replicas_in_hour(m: ConcreteModel, prob: FleetProblem, key: str, h: int) -> object:
    """Expression: pool replicas of configuration ``key`` running in hour ``h``."""
    terms = [m.pool_reserved[key]] if "reserved" in prob.tiers else []
    terms += [getattr(m, f"pool_{t}")[key, h] for t in prob.hourly_tiers]
    return sum(terms)


def define_one_configuration_per_product(m: ConcreteModel, prob: FleetProblem) -> None:
    """A product runs exactly one decode configuration, or none when it goes all-API:
    sum_{c in C_p} use[c] = self_host[p] (= 1 without an API)."""
    if not prob.products:
        return
    m.one_configuration_per_product = Constraint(
        list(prob.products),
        rule=lambda m, p: sum(m.use[c.key] for c in prob.products[p].candidates)
        == (m.self_host[p] if prob.products[p].has_api else 1),
    )


def define_replicas_need_configuration(m: ConcreteModel, prob: FleetProblem) -> None:
    """Replicas only of the chosen configuration, never more than alone meet the demand:
    reserved[c] <= U_c use[c];  on_demand[c,h], spot[c,h] <= U_{c,h} use[c]."""
    cands = prob.all_candidates()
    if not cands:
        return
    if "reserved" in prob.tiers:
        m.reserved_needs_configuration = Constraint(
            [c.key for c in cands],
            rule=lambda m, k: m.reserved[k] <= prob.products[prob.cand[k].product].replica_bound(prob.cand[k]) * m.use[k],
        )
    for tier in prob.hourly_tiers:
        var = getattr(m, tier)
        setattr(m, f"{tier}_needs_configuration", Constraint(
            [(c.key, h) for c in cands for h in range(prob.hours)],
            rule=lambda m, k, h, var=var: var[k, h]
            <= prob.products[prob.cand[k].product].replica_bound(prob.cand[k], h) * m.use[k],
        ))


def define_throughput_meets_demand(m: ConcreteModel, prob: FleetProblem) -> None:
    """Every hour, usable decode throughput plus API tokens cover demand (tokens/s):
    sum_{c in C_p} usable[c] x replicas[c,h] + api[p,h] >= demand[p,h]."""
    if not prob.products:
        return

    def rule(m: ConcreteModel, p: str, h: int) -> object:
        pd = prob.products[p]
        lhs = sum(c.usable_tokens_per_s * replicas_in_hour(m, prob, c.key, h) for c in pd.candidates)
        if pd.has_api:
            lhs = lhs + m.api[p, h]
        return lhs >= pd.demand_tokens_per_s[h]

    m.throughput_meets_demand = Constraint([(p, h) for p in prob.products for h in range(prob.hours)], rule=rule)


def define_configuration_meets_demand(m: ConcreteModel, prob: FleetProblem) -> None:
    """The same rule stated for each configuration, which is what makes the MIP solve fast: if c is
    chosen its replicas (plus the API) cover the hour's demand, else the row is void:
    usable[c] x replicas[c,h] + api[p,h] >= demand[p,h] x use[c].
    Without an API, replicas are whole numbers, so the row is rounded up:
    replicas[c,h] >= ceil(demand[p,h] / usable[c]) x use[c]."""
    cands = prob.all_candidates()
    if not cands:
        return

    def rule(m: ConcreteModel, key: str, h: int) -> object:
        c = prob.cand[key]
        pd = prob.products[c.product]
        x = replicas_in_hour(m, prob, key, h)
        if pd.has_api:
            return c.usable_tokens_per_s * x + m.api_for[key, h] >= pd.demand_tokens_per_s[h] * m.use[key]
        return x >= pd.replica_bound(c, h) * m.use[key]

    m.configuration_meets_demand = Constraint([(c.key, h) for c in cands for h in range(prob.hours)], rule=rule)
    api_cands = [c for c in cands if prob.products[c.product].has_api]
    if not api_cands:
        return
    hours = range(prob.hours)

    # Whole replicas plus a continuous API stream: the mixed-integer rounding of the row above,
    # u f x + api >= u f ceil(D/u) use with f the fractional part of D/u, is valid and gives the
    # LP the exact trade-off between one more replica and the API taking the remainder.
    def mir(m: ConcreteModel, key: str, h: int) -> object:
        c = prob.cand[key]
        pd = prob.products[c.product]
        b = pd.demand_tokens_per_s[h] / c.usable_tokens_per_s
        f = b - math.floor(b)
        if f < 1e-9:
            return Constraint.Skip
        u = c.usable_tokens_per_s
        return u * f * replicas_in_hour(m, prob, key, h) + m.api_for[key, h] >= u * f * math.ceil(b) * m.use[key]

    m.configuration_meets_demand_rounded = Constraint([(c.key, h) for c in api_cands for h in hours], rule=mir)
    # API tokens split by configuration: api[p,h] >= sum_c api_for[c,h]; api_for[c,h] <= demand x use[c];
    # and each configuration's API share within the product's limit
    m.api_split = Constraint(
        [(p.name, h) for p in prob.products.values() if p.has_api for h in hours],
        rule=lambda m, p, h: m.api[p, h] >= sum(m.api_for[c.key, h] for c in prob.products[p].candidates),
    )
    m.api_for_needs_configuration = Constraint(
        [(c.key, h) for c in api_cands for h in hours],
        rule=lambda m, k, h: m.api_for[k, h] <= prob.products[prob.cand[k].product].demand_tokens_per_s[h] * m.use[k],
    )
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
    if "spot" not in prob.tiers:
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
    names = [p.name for p in prob.products.values() if any(c.mode == "pool" for c in p.candidates)]
    if not names:
        return
    m.pool_matches_mode = Constraint(
        names, rule=lambda m, p: sum(m.pool_use[k.key] for k in prob.products[p].pool)
        == sum(m.use[c.key] for c in prob.products[p].candidates if c.mode == "pool"),
    )


def define_pool_replicas_need_configuration(m: ConcreteModel, prob: FleetProblem) -> None:
    """Pool replicas only of the chosen pool configuration."""
    pool = prob.all_pool()
    if not pool:
        return
    if "reserved" in prob.tiers:
        m.pool_reserved_needs_configuration = Constraint(
            [k.key for k in pool],
            rule=lambda m, k: m.pool_reserved[k] <= prob.products[prob.pools[k].product].pool_bound(prob.pools[k]) * m.pool_use[k],
        )
    for tier in prob.hourly_tiers:
        var = getattr(m, f"pool_{tier}")
        setattr(m, f"pool_{tier}_needs_configuration", Constraint(
            [(k.key, h) for k in pool for h in range(prob.hours)],
            rule=lambda m, k, h, var=var: var[k, h]
            <= prob.products[prob.pools[k].product].pool_bound(prob.pools[k], h) * m.pool_use[k],
        ))


def define_prefill_pool_meets_demand(m: ConcreteModel, prob: FleetProblem) -> None:
    """In pool mode, the pool's usable FLOP/s cover the prefill of every self-hosted request:
    sum_k usable_flops[k] x pool_replicas[k,h] >= F x (demand[p,h] - api[p,h]) - F x demand[p,h] x (1 - pool mode),
    with F = prefill FLOPs per output token (the last term switches the rule off outside pool mode).
    Stated in PFLOP/s so coefficients stay in a range solvers accept."""
    names = [p.name for p in prob.products.values() if p.pool]
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


def define_pool_configuration_meets_demand(m: ConcreteModel, prob: FleetProblem) -> None:
    """The pool rule stated for each pool configuration (tightens the MIP as above), in PFLOP/s:
    usable_flops[k] x pool_replicas[k,h] + F x api[p,h] >= F x demand[p,h] x pool_use[k];
    without an API: pool_replicas[k,h] >= ceil(F x demand[p,h] / usable_flops[k]) x pool_use[k]."""
    pool = prob.all_pool()
    if not pool:
        return

    def rule(m: ConcreteModel, key: str, h: int) -> object:
        k = prob.pools[key]
        pd = prob.products[k.product]
        y = pool_replicas_in_hour(m, prob, key, h)
        if pd.has_api:
            f = pd.prefill_flops_per_output_token / PETA
            return k.usable_flops_per_s / PETA * y + f * m.api[pd.name, h] >= f * pd.demand_tokens_per_s[h] * m.pool_use[key]
        return y >= pd.pool_bound(k, h) * m.pool_use[key]

    m.pool_configuration_meets_demand = Constraint([(k.key, h) for k in pool for h in range(prob.hours)], rule=rule)


def gpus_in_hour(m: ConcreteModel, prob: FleetProblem, gpu: str, h: int) -> object:
    """Expression: GPUs of type ``gpu`` running in hour ``h`` (decode and prefill pools)."""
    return sum(c.tp * replicas_in_hour(m, prob, c.key, h) for c in prob.all_candidates() if c.gpu == gpu) + sum(
        k.tp * pool_replicas_in_hour(m, prob, k.key, h) for k in prob.all_pool() if k.gpu == gpu
    )


def gpus_in_tier(m: ConcreteModel, prob: FleetProblem, gpu: str, tier: str, h: int) -> object:
    """Expression: GPUs of type ``gpu`` bought in pricing tier ``tier`` running in hour ``h``."""
    if tier == "reserved":
        return sum(c.tp * m.reserved[c.key] for c in prob.all_candidates() if c.gpu == gpu) + sum(
            k.tp * m.pool_reserved[k.key] for k in prob.all_pool() if k.gpu == gpu)
    decode, pool = getattr(m, tier), getattr(m, f"pool_{tier}")
    return sum(c.tp * decode[c.key, h] for c in prob.all_candidates() if c.gpu == gpu) + sum(
        k.tp * pool[k.key, h] for k in prob.all_pool() if k.gpu == gpu)


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
            [(g, t, h) for g, t in tiers for h in (range(1) if t == "reserved" else range(prob.hours))],
            rule=lambda m, g, t, h: gpus_in_tier(m, prob, g, t, h) <= prob.tier_availability[g, t],
        )


def define_whole_instances(m: ConcreteModel, prob: FleetProblem) -> None:
    """GPUs are bought as whole instances: instances[gpu,h] x GPUs per instance >= GPUs in use.
    Every TP group fits in one instance (TP <= GPUs per instance is required of candidates)."""
    gpus = [g for g in _gpu_types(prob) if g in prob.instance_gpus]
    if not gpus:
        return
    hours = range(prob.hours)
    m.instances = Var([(g, h) for g in gpus for h in hours], domain=NonNegativeIntegers)
    m.whole_instances = Constraint(
        [(g, h) for g in gpus for h in hours],
        rule=lambda m, g, h: prob.instance_gpus[g] * m.instances[g, h] >= gpus_in_hour(m, prob, g, h),
    )
    if prob.gpu_availability:
        for g in gpus:
            if g in prob.gpu_availability:
                for h in hours:
                    m.instances[g, h].setub(prob.gpu_availability[g] // prob.instance_gpus[g])


def stranded_gpu_cost(m: ConcreteModel, prob: FleetProblem) -> object:
    """USD per month of GPUs bought with instances but left idle, at the plain GPU-hour price."""
    if not hasattr(m, "instances"):
        return 0
    price = {}
    for c in prob.all_candidates():
        price.setdefault(c.gpu, c.price.usd_per_gpu_hour)
    for k in prob.all_pool():
        price.setdefault(k.gpu, k.price.usd_per_gpu_hour)
    return sum(
        price[g] * prob.weight(h) * (prob.instance_gpus[g] * m.instances[g, h] - gpus_in_hour(m, prob, g, h))
        for (g, h) in m.instances.index_set()
    )


def monthly_cost_expression(m: ConcreteModel, prob: FleetProblem) -> object:
    """The monthly cost in USD: replicas by tier, API tokens, fixed costs, stranded GPUs."""
    hours = range(prob.hours)
    terms = []
    for c in prob.all_candidates():
        if "reserved" in prob.tiers:
            terms.append(c.usd_per_replica_hour_in("reserved") * prob.hours_per_month * m.reserved[c.key])
        for t in prob.hourly_tiers:
            terms.append(c.usd_per_replica_hour_in(t) * sum(prob.weight(h) * getattr(m, t)[c.key, h] for h in hours))
    for k in prob.all_pool():
        if "reserved" in prob.tiers:
            terms.append(k.usd_per_replica_hour_in("reserved") * prob.hours_per_month * m.pool_reserved[k.key])
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


def build_model(prob: FleetProblem) -> ConcreteModel:
    """The Pyomo model of ``prob``: the constraint families above, in order."""
    m = ConcreteModel(name="fleetplan")
    define_variables(m, prob)
    define_one_configuration_per_product(m, prob)
    define_replicas_need_configuration(m, prob)
    define_throughput_meets_demand(m, prob)
    define_configuration_meets_demand(m, prob)
    define_api_share_limits(m, prob)
    define_spot_share_limit(m, prob)
    define_pool_matches_mode(m, prob)
    define_pool_replicas_need_configuration(m, prob)
    define_prefill_pool_meets_demand(m, prob)
    define_pool_configuration_meets_demand(m, prob)
    define_gpu_availability(m, prob)
    define_whole_instances(m, prob)
    define_objective(m, prob)
    return m

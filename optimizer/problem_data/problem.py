"""The problem as plain data: each product's candidates and hourly demand, the horizon, tiers and
shared limits (:class:`FleetProblem`), built from a scenario and a catalog (:func:`build_problem`),
with pooled groups of products (:class:`PoolGroup`).

Owns what the MIP is asked; it does not build the MIP (:mod:`fleetplan.optimizer.mip.formulation`), reduce it
(:mod:`.reductions`) or solve it (:mod:`fleetplan.optimizer.decomposition.search`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from fleetplan.catalogs.loader import Catalog, InputError
from fleetplan.catalogs.schema import LLM
from fleetplan.models.presets import Preset
from fleetplan.optimizer.problem_data.api import APIOffer, resolve_api
from fleetplan.optimizer.problem_data.candidates import (
    Candidate,
    CandidateSet,
    PoolCandidate,
    check_options,
    generate_candidates,
    generate_pool_candidates,
    prefill_modes,
    prefill_work_per_request,
    prune_dominated_pool,
)
from fleetplan.optimizer.runtime.deadline import CANDIDATE_STAGE, DEFAULT_TIME_LIMIT_S, Deadline, DeadlinePassed
from fleetplan.optimizer.common.defaults import CEILING_TOLERANCE
from fleetplan.optimizer.traffic.demand import hourly_qps
from fleetplan.optimizer.common.enums import Tier
from fleetplan.optimizer.common.errors import InfeasibleError
from fleetplan.optimizer.problem_data.mix import BucketData, bucket_data, bucket_product, mean_prefill_work, mix_candidates, replicas_alone
from fleetplan.optimizer.traffic.scenario import Product, Scenario
from fleetplan.optimizer.problem_data.site_power import SiteRow, site_rows
from fleetplan.optimizer.common.text import format_ms

SECONDS_PER_HOUR = 3600.0


PETA = 1e15


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
    # a request mix (:mod:`.mix`): its buckets; ``single`` keeps it to one configuration (the
    # best single-configuration plan the mix is compared with)
    buckets: tuple[BucketData, ...] = ()
    single: bool = False

    @property
    def is_mix(self) -> bool:
        """Whether the product is planned from a request mix."""
        return bool(self.buckets)

    def eligible(self, bucket: BucketData) -> list[str]:
        """Keys of the product's configurations ``bucket`` may run on (a problem cut to fewer
        configurations keeps the buckets' capacities of the others, unused). Found once per bucket
        of this product: a mix's model asks for them in every row and hour."""
        if bucket.index < len(self.buckets) and self.buckets[bucket.index] is bucket:
            return list(self._eligible_by_bucket[bucket.index])
        return self._eligible_keys(bucket)

    @cached_property
    def _eligible_by_bucket(self) -> tuple[tuple[str, ...], ...]:
        """:meth:`eligible` of each of the product's buckets, in bucket order."""
        return tuple(tuple(self._eligible_keys(b)) for b in self.buckets)

    def _eligible_keys(self, bucket: BucketData) -> list[str]:
        """Keys of ``bucket``'s capacities that are the product's configurations, sorted."""
        keys = self.candidate_keys
        return sorted(k for k in bucket.capacity if k in keys)

    @cached_property
    def candidate_keys(self) -> frozenset[str]:
        """Keys of the product's decode configurations (computed once: a mix's model asks for
        them in every row)."""
        return frozenset(c.key for c in self.candidates)

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
        if self.buckets:
            return tuple(b.demand_tokens_per_s[h] for b in self.buckets)
        if self.has_api:
            return (self.demand_tokens_per_s[h],)
        return tuple(self.replica_bound(c, h) for c in self.candidates) + tuple(self.pool_bound(k, h) for k in self.pool)

    def replica_bound(self, c: Candidate, hour: int | None = None) -> int:
        """Replicas of ``c`` that alone meet the demand of ``hour`` (or the peak): never more. For a
        mix, the demand of every bucket ``c`` may serve."""
        if self.buckets:
            if hour is None:
                return max(self.replica_bound(c, h) for h in range(len(self.demand_tokens_per_s)))
            key = c.key  # built from the candidate's fields: once, not per bucket
            return replicas_alone([(b.demand_tokens_per_s[hour], b.capacity[key]) for b in self.buckets
                                   if key in b.capacity])
        d = self.peak_demand_tokens_per_s if hour is None else self.demand_tokens_per_s[hour]
        return max(0, math.ceil(d / c.usable_tokens_per_s - CEILING_TOLERANCE))

    def pool_bound(self, k: PoolCandidate, hour: int | None = None) -> int:
        """Pool replicas of ``k`` that alone meet the prefill demand of ``hour`` (or the peak)."""
        if self.buckets:
            hours = range(len(self.demand_tokens_per_s)) if hour is None else [hour]
            flops = max(sum(b.demand_tokens_per_s[h] * b.prefill_flops_per_output_token for b in self.buckets)
                        for h in hours)
            return max(0, math.ceil(flops / k.usable_flops_per_s - CEILING_TOLERANCE)) if flops > 0 else 0
        d = self.peak_demand_tokens_per_s if hour is None else self.demand_tokens_per_s[hour]
        if d * self.prefill_flops_per_output_token <= 0:  # nothing to prefill: every prompt token cached
            return 0
        return max(0, math.ceil(d * self.prefill_flops_per_output_token / k.usable_flops_per_s - CEILING_TOLERANCE))


@dataclass(frozen=True)
class FleetProblem:
    """Everything the MIP needs: products, horizon, tiers."""

    products: dict[str, ProductData]
    hours: int = 1
    hours_per_month: float = 730.0
    tiers: tuple[Tier, ...] = (Tier.ON_DEMAND,)
    spot_max_share: float = 0.0
    gpu_availability: dict[str, int] = field(default_factory=dict)
    tier_availability: dict[tuple[str, str], int] = field(default_factory=dict)  # (GPU type, tier) -> GPUs
    instance_gpus: dict[str, int] = field(default_factory=dict)
    monthly_budget_usd: float | None = None  # checked against the plan's total, not a row (the objective is the cost)
    reductions: bool = True  # whether :func:`~fleetplan.optimizer.problem_data.reductions.reduced` may shrink the problem
    # identical hours merged (see :meth:`merged`): real hours each modelled hour stands for, the
    # modelled hour of every hour of the horizon, and each product's demand over the horizon
    hour_counts: tuple[int, ...] = ()
    hour_of: tuple[int, ...] = ()
    full_demand: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # GPUs that products outside this problem run in the same whole instances, per GPU type sold
    # in instances: (plain USD per GPU-hour, GPUs in each hour); see :func:`fleetplan.optimizer.mip.formulation.gpus_in_hour`
    gpus_elsewhere: dict[str, tuple[float, tuple[int, ...]]] = field(default_factory=dict)
    site_power: tuple[SiteRow, ...] = ()  # each site's power limit (see :mod:`.site_power`)
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
            gpus_elsewhere=dict(self.gpus_elsewhere) if limits else {},
            site_power=self.site_power if limits else (),
            monthly_budget_usd=self.monthly_budget_usd if limits else None,
            full_demand={n: self.full_demand[n] for n in names if n in self.full_demand},
        )

    def idle_instance_usd(self, gpu: str, usd_per_gpu_hour: float, row: Sequence[float]) -> float:
        """USD per month of the idle GPUs of the whole instances of ``gpu`` that running ``row``
        (GPUs in each hour of the horizon) needs, at ``usd_per_gpu_hour``."""
        n = self.instance_gpus[gpu]
        return sum(usd_per_gpu_hour * self.hour_weight * (math.ceil(used / n - 1e-9) * n - used) for used in row)

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

    def all_candidates(self) -> list[Candidate]:
        """Every decode candidate, product by product."""
        return [c for p in self.products.values() for c in p.candidates]

    def all_pool(self) -> list[PoolCandidate]:
        """Every pool candidate, product by product."""
        return [k for p in self.products.values() for k in p.pool]

    @property
    def hourly_tiers(self) -> tuple[str, ...]:
        """Tiers chosen hour by hour."""
        return tuple(t for t in self.tiers if t != Tier.RESERVED)


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
    if product.max_ttft_ms is not None or product.ttft_percentiles_ms is not None:
        best = "none" if cs.best_ttft_s == float("inf") else f"{format_ms(cs.best_ttft_s)} ms ({cs.best_ttft_at})"
        target = (f"{product.max_ttft_ms:g} ms" if product.max_ttft_ms is not None else
                  ", ".join(f"p{q * 100:g} {s * 1e3:g} ms" for q, s in product.ttft_percentiles_ms.targets_s())  # type: ignore[union-attr]
                  + " (percentiles with queueing at one server)")
        return (
            f"{where}.max_ttft_ms: infeasible: no configuration reaches a time to first token of "
            f"{target}; the lowest mean TTFT reachable is {best}"
            if product.max_ttft_ms is None else
            f"{where}.max_ttft_ms: infeasible: no configuration reaches a time to first token of "
            f"{target}; the best reachable is {best}"
        )
    return f"{where}: infeasible: no prefill pool configuration fits {product.model}"


# Product fields candidate generation does not read: its name (only a label on what is found,
# set per product by :func:`relabelled`), demand and what pays for it.
_NOT_GENERATION = frozenset({"name", "peak_qps", "demand_profile", "api", "self_host_fixed_monthly_usd"})
# Option fields candidate generation does not read: how long and how exactly to solve, and the
# spot share cap (a row of the MIP; outcomes of a commitment plan that differ in spot availability
# share their configurations)
_NOT_GENERATION_OPTIONS = frozenset({"time_limit_s", "mip_rel_gap", "spot_max_share"})


@dataclass
class CandidateMemo:
    """Candidate sets one command has generated, so that its re-plans of variants that change
    only demand, limits or solver settings (binding-limit values, the tornado's demand swing)
    reuse them, and so that products alike but for their name and demand (a large portfolio's
    copies of a few model and request shapes) share one generation. The key is everything
    generation reads: the product but its name and demand, the options but the solver settings,
    and the catalog and preset objects (alive for the command). ``hits`` and ``misses`` count the
    sets reused and generated."""

    sets: dict[tuple[Any, ...], CandidateSet] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    def key(self, product: Product, catalog: Catalog, scenario: Scenario, preset: Preset) -> tuple[Any, ...]:
        """The key ``product``'s set is kept under."""
        return candidate_key(product, catalog, scenario, preset)

    def generate(self, product: Product, llm: LLM, catalog: Catalog, scenario: Scenario, preset: Preset,
                 deadline: Deadline | None = None) -> CandidateSet:
        """The product's candidate set, generated once per key (within ``deadline``: a set the
        deadline cut is kept too, so the command's re-plans see the plan's candidates) and
        labelled with the product's name; the caller gets its own lists."""
        key = self.key(product, catalog, scenario, preset)
        if key in self.sets:
            self.hits += 1
        else:
            self.misses += 1
            self.sets[key] = self.fresh(product, llm, catalog, scenario, preset, deadline)
        return relabelled(self.sets[key], product.name)

    def fresh(self, product: Product, llm: LLM, catalog: Catalog, scenario: Scenario, preset: Preset,
              deadline: Deadline | None = None) -> CandidateSet:
        """A newly generated set for ``product`` (what :meth:`generate` keeps on a miss)."""
        return generate_candidates(product, llm, catalog, scenario.options, preset, deadline=deadline)

    def generation(self, product: Product, catalog: Catalog, scenario: Scenario, preset: Preset) -> tuple[Any, ...]:
        """The keys of the sets ``product`` is planned with: its own, or one per bucket of a request mix."""
        if product.requests is None:
            return (self.key(product, catalog, scenario, preset),)
        return tuple(self.key(bucket_product(product, i), catalog, scenario, preset)
                     for i in range(len(product.requests)))

    def pending(self, generations: Sequence[tuple[Any, ...]]) -> int:
        """How many generations are still to run for products with these :meth:`generation` keys:
        the distinct ones with a set not yet kept (a request mix's buckets count as one)."""
        return len({g for g in generations if any(k not in self.sets for k in g)})

    def rebind(self, catalog: Catalog, preset: Preset) -> None:
        """Key every set to ``catalog`` and ``preset`` (the only ones its sets were made with): a
        memo unpickled in another process holds copies of them, whose identities are new there."""
        ids = (id(catalog), id(preset))
        at = _KEY_CATALOG_PRESET
        if any(k[at] != ids for k in self.sets):
            self.sets = {(*k[:at.start], *ids, *k[at.stop:]): v for k, v in self.sets.items()}


# Where :func:`candidate_key` holds the catalog's and the preset's identities
_KEY_CATALOG_PRESET = slice(2, 4)


def candidate_key(product: Product, catalog: Catalog, scenario: Scenario, preset: Preset) -> tuple[Any, ...]:
    """What tells a product's candidate sets apart within one command (see :class:`CandidateMemo`)."""
    return (product.model_dump_json(exclude=set(_NOT_GENERATION)),
            scenario.options.model_dump_json(exclude=set(_NOT_GENERATION_OPTIONS)), id(catalog), id(preset),
            repr(scenario.options._site_prices))  # the prices a scenario's sites set (owned, carbon)


def relabelled(cs: CandidateSet, name: str) -> CandidateSet:
    """``cs`` as generated for product ``name``: every configuration (and the set) labelled with
    it, with lists of its own (see :func:`copied`)."""
    if cs.product == name:
        return copied(cs)
    return replace(cs, product=name, candidates=[replace(c, product=name) for c in cs.candidates],
                   pool=[replace(k, product=name) for k in cs.pool], unpriced_gpus=list(cs.unpriced_gpus))


def copied(cs: CandidateSet) -> CandidateSet:
    """``cs`` with lists of its own, so that a caller filtering them leaves a memo's set unchanged."""
    return replace(cs, candidates=list(cs.candidates), pool=list(cs.pool), unpriced_gpus=list(cs.unpriced_gpus))


def build_problem(
    scenario: Scenario, catalog: Catalog, preset: Preset, folder: Path | None = None, *, with_api: bool = True,
    reductions: bool = True, demand: dict[str, list[float]] | None = None, memo: CandidateMemo | None = None,
    deadline: Deadline | None = None,
) -> tuple[FleetProblem, dict[str, CandidateSet], list[Planned]]:
    """Candidates and demand of every product as MIP data; a product with no candidate is an error
    unless it may go entirely to its API. Also returns what is planned (:class:`Planned`): with
    ``allow_pooling``, one unit for each pooled group. ``demand``
    is each product's queries per second hour by hour, when the caller has read the profiles;
    ``memo`` keeps candidate sets across the builds of one command.

    Within ``deadline``, each product's generation gets an equal share of the time left (pooled
    groups share one more), so a cut leaves every product the configurations found in its share:
    a product that found none then is an error naming ``options.time_limit_s``
    (:class:`~fleetplan.optimizer.runtime.deadline.DeadlinePassed`), a pooled group that found none stays unpooled."""
    check_options(catalog, scenario.options, scenario.products)
    for site in scenario.sites:  # a site's GPU ids name catalog GPUs as the options' do (owned ones: sites.py)
        for gpu_id in site.gpus or ():
            catalog.gpu(gpu_id, f"sites[{site.name}].gpus")
    qps = demand if demand is not None else hourly_qps(scenario.products, folder or Path("."))
    memo = memo if memo is not None else CandidateMemo()
    sets: dict[str, CandidateSet] = {}
    data: dict[str, ProductData] = {}
    pooling = scenario.limits.allow_pooling and len(scenario.products) > 1
    generations = [memo.generation(p, catalog, scenario, preset) for p in scenario.products] if deadline else []
    for i, product in enumerate(scenario.products):
        # an equal share for each generation still to run: a product whose set is kept takes none
        share = None if deadline is None else deadline.split(memo.pending(generations[i:]) + int(pooling))
        if deadline is not None:
            deadline.progress.update(CANDIDATE_STAGE, i, len(scenario.products))
        data[product.name], sets[product.name] = _product_data(product, qps[product.name], scenario, catalog, preset,
                                                               with_api, memo, share)
    planned = [Planned(p, (p,)) for p in scenario.products]
    if pooling:
        groups = pooling_groups(scenario, data)
        for j, members in enumerate(groups):
            share = None if deadline is None else deadline.split(len(groups) - j)
            if (found := pooled_product(members, scenario, catalog, preset, data, memo, share)) is None:
                continue
            group, pdata, cs = found
            for m in members:
                del data[m.name]
            data[group.name], sets[group.name] = pdata, cs
            # the group takes its first member's place
            planned = [group if u.name == members[0].name else u for u in planned if u.name == members[0].name
                       or u.name not in {m.name for m in members}]
    prob = FleetProblem(products=data, hours=max(map(len, qps.values()), default=1), hours_per_month=preset.hours_per_month,
                        reductions=reductions, **_limits(scenario, catalog))
    return prob, sets, planned


def _limits(scenario: Scenario, catalog: Catalog) -> dict[str, Any]:
    """The problem's tiers and shared limits from the scenario (GPU ids checked against the catalog)."""
    opts, lim = scenario.options, scenario.limits
    named = list(lim.gpu_availability)
    if isinstance(lim.instance_gpus, dict):
        named += [g for g in lim.instance_gpus if g != "default"]
    for gpu_id in named:
        catalog.gpu(gpu_id, "limits")
    return {
        "tiers": tuple(opts.tiers), "spot_max_share": opts.spot_max_share,
        "gpu_availability": lim.total_availability(), "tier_availability": lim.tier_availability(),
        "instance_gpus": {g: n for g in catalog.gpus if (n := lim.gpus_per_instance(g))},
        "monthly_budget_usd": lim.monthly_budget_usd,
        **({"site_power": site_rows(scenario, searched_gpus(scenario, catalog))} if scenario.sites else {}),
    }


def searched_gpus(scenario: Scenario, catalog: Catalog) -> list[str]:
    """Every GPU type a scenario's decode or prefill pools may run on."""
    opts = scenario.options
    pools = {g for p in scenario.products for g in (p.prefill_gpus or opts.prefill_gpus or [])}
    return sorted(set(opts.gpus or catalog.gpus) | pools)


def _candidates(product: Product, llm: LLM, catalog: Catalog, scenario: Scenario, preset: Preset,
                memo: CandidateMemo, deadline: Deadline | None = None) -> CandidateSet:
    """The product's configurations (those found before ``deadline``); with whole instances, only
    replicas that fit in one instance or fill whole instances (a TP group never spans instances; a
    replica spanning nodes takes whole ones)."""
    cs = memo.generate(product, llm, catalog, scenario, preset, deadline)
    per_instance = scenario.limits.gpus_per_instance
    if scenario.limits.instance_gpus is not None:
        cs.candidates = [c for c in cs.candidates if fits_instances(c.tp, c.gpus_per_replica, per_instance(c.gpu))]
        cs.pool = [k for k in cs.pool if fits_instances(k.tp, k.gpus_per_replica, per_instance(k.gpu))]
    return cs


def fits_instances(tp: int, gpus_per_replica: int, per_instance: int | None) -> bool:
    """Whether a replica can be placed on instances of ``per_instance`` GPUs: its TP group inside
    one instance, and either the whole replica inside one or filling whole instances."""
    if per_instance is None:
        return True
    return tp <= per_instance and (gpus_per_replica <= per_instance or gpus_per_replica % per_instance == 0)


def out_of_time(where: str, scenario: Scenario) -> DeadlinePassed:
    """The error for a product (or bucket) ``where`` that the deadline left without a configuration."""
    limit = scenario.options.time_limit_s or DEFAULT_TIME_LIMIT_S
    return DeadlinePassed(
        f"options.time_limit_s: the deadline ({limit:g} s) passed in candidate generation before {where} had a "
        f"configuration that meets its targets; allow more time, or search fewer GPUs, tp, pp, dp_attention or batches")


def _product_data(product: Product, qps: list[float], scenario: Scenario, catalog: Catalog, preset: Preset,
                  with_api: bool, memo: CandidateMemo, deadline: Deadline | None = None
                  ) -> tuple[ProductData, CandidateSet]:
    """One product's MIP data and candidates (generated within ``deadline``); an error when the
    request does not fit the model's context, or no configuration serves it (or none was found
    before the deadline) and it may not go all-API."""
    llm = catalog.model(product.model, f"products[{product.name}].model")
    if (problem := context_problem(product, llm)) is not None:
        raise InputError(problem)
    offer = resolve_api(product, catalog) if with_api else None
    api_only_possible = offer is not None and product.api is not None and product.api.max_fraction >= 1.0
    if product.requests is not None:
        return _mix_data(product, llm, qps, scenario, catalog, preset, offer, api_only_possible, memo, deadline)
    cs = _candidates(product, llm, catalog, scenario, preset, memo, deadline)
    if not cs.candidates and not api_only_possible:
        if cs.cut:
            raise out_of_time(f"products[{product.name}]", scenario)
        raise InfeasibleError(explain_no_candidates(product, cs))
    data = ProductData(
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
    return data, cs


def _mix_data(product: Product, llm: LLM, qps: list[float], scenario: Scenario, catalog: Catalog, preset: Preset,
              offer: APIOffer | None, api_only_possible: bool, memo: CandidateMemo, deadline: Deadline | None = None,
              ) -> tuple[ProductData, CandidateSet]:
    """A product with a request mix as MIP data (:mod:`.mix`): every bucket's configurations and
    capacities, one prefill pool timed by the mix; an error when a bucket does not fit the
    context or no configuration serves it (unless the product may go all-API). A mix of one
    bucket keeps to one configuration, as a plain product does, and so plans exactly what the
    plain product of that request size plans."""
    assert product.requests is not None
    for i in range(len(product.requests)):
        if (problem := context_problem(bucket_product(product, i), llm)) is not None:
            raise InputError(problem.replace(".input_tokens:", f".requests[{i}]:", 1))
    cs, caps = mix_candidates(product, llm, catalog, preset,
                              lambda bp, within: _candidates(bp, llm, catalog, scenario, preset, memo, within), deadline)
    if "pool" in prefill_modes(product):
        cs.pool = _mix_pool(product, llm, catalog, scenario, preset, cs)
        if not cs.pool:
            cs.candidates = [c for c in cs.candidates if c.mode != "pool"]
            keep = {c.key for c in cs.candidates}
            caps = [{k: u for k, u in cap.items() if k in keep} for cap in caps]
    for i, cap in enumerate(caps):
        if not cap and not api_only_possible:
            if cs.cut:
                raise out_of_time(f"products[{product.name}].requests[{i}]", scenario)
            bp = bucket_product(product, i)
            why = explain_no_candidates(bp, _candidates(bp, llm, catalog, scenario, preset, memo))
            raise InfeasibleError(why.replace(f"products[{product.name}]", f"products[{product.name}].requests[{i}]", 1))
    buckets = bucket_data(product, llm, preset, qps, caps)
    data = ProductData(
        name=product.name,
        demand_tokens_per_s=tuple(sum(b.demand_tokens_per_s[h] for b in buckets) for h in range(len(qps))),
        candidates=tuple(cs.candidates), pool=tuple(cs.pool),
        prefill_flops_per_output_token=max(b.prefill_flops_per_output_token for b in buckets),
        api=offer,
        api_min_fraction=product.api.min_fraction if (product.api and offer) else 0.0,
        api_max_fraction=product.api.max_fraction if (product.api and offer) else 0.0,
        fixed_monthly_usd=product.self_host_fixed_monthly_usd, buckets=buckets,
        single=len(buckets) == 1,  # one request size: one configuration, as for the plain product
    )
    return data, cs


def _mix_pool(product: Product, llm: LLM, catalog: Catalog, scenario: Scenario, preset: Preset,
              cs: CandidateSet) -> list[PoolCandidate]:
    """Prefill-pool configurations of a mix: one pool for every bucket, timed by the mix, its KV
    hand-off that of the mix's mean prompt (whatever ``input_tokens`` the product gives)."""
    assert product.requests is not None
    mean_input = max(1, round(sum(b.share * b.input_tokens for b in product.requests)))
    pool = generate_pool_candidates(product.model_copy(update={"input_tokens": mean_input}), llm, catalog,
                                    scenario.options, preset, mean_prefill_work(product, llm, preset), cs)
    if scenario.limits.instance_gpus is not None:
        per_instance = scenario.limits.gpus_per_instance
        pool = [k for k in pool if fits_instances(k.tp, k.gpus_per_replica, per_instance(k.gpu))]
    return sorted(prune_dominated_pool(pool), key=lambda k: k.key)


POOL_PREFIX = "pool:"


@dataclass(frozen=True)
class Planned:
    """What the planner plans as one unit: a scenario product on its own, or a pooled group of
    products sharing one fleet of replicas (``members``: the group's products, in scenario order).
    ``request`` is the request the fleet is sized for: the product itself, or for a group the
    merged request of :func:`pooled_request` named after the group."""

    request: Product
    members: tuple[Product, ...]

    @property
    def pooled(self) -> bool:
        """Whether this is a group of several products."""
        return len(self.members) > 1

    @property
    def name(self) -> str:
        """The product's name, or the group's: ``pool:`` and its members' names joined by ``+``."""
        return self.request.name


def pooling_groups(scenario: Scenario, data: dict[str, ProductData]) -> list[list[Product]]:
    """Products that may share one pool of replicas: same model, weight and KV precision and
    prefill mode, no API (API shares are per product). Groups of two or more, in scenario order."""
    groups: dict[tuple[Any, ...], list[Product]] = {}
    for p in scenario.products:
        if data[p.name].has_api or data[p.name].is_mix:
            continue
        key = (p.model, p.precisions, p.kv_precision, p.prefill)
        groups.setdefault(key, []).append(p)
    return [g for g in groups.values() if len(g) > 1]


def pooled_request(members: list[Product]) -> Product:
    """The request a pooled group's fleet is sized for: the strictest speed and TTFT targets, the
    longest prompt and answer (memory and steps sized for the largest request), the lowest cache
    hit rate and the largest headroom, named after the group."""
    first = members[0]
    ttfts = [m.max_ttft_ms for m in members if m.max_ttft_ms is not None]
    return first.model_copy(update={
        "name": POOL_PREFIX + "+".join(m.name for m in members),
        "input_tokens": max(m.input_tokens for m in members),
        "output_tokens": max(m.output_tokens for m in members),
        "min_tokens_per_s_per_user": max(m.min_tokens_per_s_per_user for m in members),
        "max_ttft_ms": min(ttfts) if ttfts else None,
        "prefix_cache_hit_rate": min(m.prefix_cache_hit_rate for m in members),
        # the largest headroom of the members (left unset when none sets one: the mode's default)
        "headroom": (max(m.effective_headroom for m in members)
                     if any(m.headroom is not None for m in members) else None),
        "demand_profile": None,
        "api": None,
        "self_host_fixed_monthly_usd": sum(m.self_host_fixed_monthly_usd for m in members),
    })


def pooled_product(
    members: list[Product], scenario: Scenario, catalog: Catalog, preset: Preset, data: dict[str, ProductData],
    memo: CandidateMemo, deadline: Deadline | None = None,
) -> tuple[Planned, ProductData, CandidateSet] | None:
    """A pooled group as one unit of the MIP: summed hourly demand, candidates sized for the
    merged request (:func:`pooled_request`), prefill work per token the larger of the members'
    demand-weighted mean and maximum. None when ``deadline`` passed before the group had a
    configuration: pooling is allowed, not imposed, so its members are planned on their own."""
    request = pooled_request(members)
    cs = _candidates(request, catalog.models[request.model], catalog, scenario, preset, memo, deadline)
    if not cs.candidates and cs.cut:
        return None
    if not cs.candidates:
        raise InfeasibleError(explain_no_candidates(request, cs))
    hours = len(data[members[0].name].demand_tokens_per_s)
    demand = tuple(sum(data[m.name].demand_tokens_per_s[h] for m in members) for h in range(hours))
    peak = [data[m.name].peak_demand_tokens_per_s for m in members]
    weight = sum(peak) or 1.0
    flops = sum(data[m.name].prefill_flops_per_output_token * d for m, d in zip(members, peak)) / weight
    pdata = ProductData(
        name=request.name, demand_tokens_per_s=demand, candidates=tuple(cs.candidates), pool=tuple(cs.pool),
        prefill_flops_per_output_token=max(flops, max(data[m.name].prefill_flops_per_output_token for m in members)),
        fixed_monthly_usd=request.self_host_fixed_monthly_usd,
        members=tuple(data[m.name] for m in members),
    )
    return Planned(request, tuple(members)), pdata, cs

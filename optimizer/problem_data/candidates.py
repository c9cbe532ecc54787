"""Candidate configurations: enumerate (GPU x layout x precision x batch), keep the feasible, prune.

Decode candidates. Step time, per-user speed and memory get worse as the batch grows, so for
one (GPU, layout, precision, prefill mode) shape the batches meeting speed and memory form a
prefix of the sorted batch options, found by binary search. Replica throughput B / step is not
monotone in the batch once a replica has attention ranks or micro-batches (one sequence past a
multiple of them makes every rank run one more), nor is TTFT, so the candidate is the feasible
batch with the most throughput (every replica of a shape costs the same), found by an exact
branch and bound that needs only the step time to grow with the batch (:func:`_best_first`);
with a TTFT target (colocated and headroom modes) over the batches that meet it, wherever they lie.

Prefill modes of a decode candidate:
    headroom   decode only; the product's headroom (30% by default) stands in for prefill;
               TTFT is estimated as for colocated (prefill shares the decode steps);
    colocated  each decode step also carries its share of new requests' prefill (chunked
               prefill): B / output_tokens requests finish per step, so as many start, each
               bringing its uncached prompt; headroom is burst only (10% by default);
    pool       decode only; prefill runs on a separate pool (pool candidates below).

Pool candidates: (GPU, TP, precision) replicas that prefill one request at a time at
max(compute time, weight-read time); their capacity in FLOP/s is derated to the utilisation
a TTFT target allows.

TTFT and its queueing allowance come from :mod:`fleetplan.models.ttft`. A colocated or
headroom-mode candidate's TTFT is checked at utilisation 1 - headroom (the most the plan may
load a replica). Without ``max_ttft_ms`` every queue is kept at or below
``DEFAULT_MAX_UTILISATION`` (pool utilisation capped, decode headroom raised where needed), so
TTFT stays within ``DEFAULT_TTFT_QUEUE_MULTIPLE`` times its zero-load value.

Across shapes, a candidate is dominated when another one of the same product, GPU type and
prefill mode uses no more GPUs per replica, costs no more and delivers at least as much.

Percentile TTFT targets (``ttft_percentiles_ms``) are checked by the rules of
:mod:`.percentiles`: a colocated batch qualifies when every target quantile is met at
utilisation 1 - headroom, a pool's utilisation is capped so that every one is met. A product
with a request mix has its pool timed by the mix's service-time distribution
(:func:`pool_service_time`); its decode candidates come from :mod:`.mix`, bucket by bucket.

Given a deadline, generation checks it before each replica layout (and each pool GPU type), each
GPU type within its share of the time: a GPU type whose share has passed is left there, and the
set is then the candidates found by then, marked ``cut``.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fleetplan.optimizer.common.defaults import SHORTEST_SPREAD_S, SPREAD_BAND, THRESHOLD_STEPS, THROUGHPUT_TIE
from fleetplan.catalogs.loader import Catalog, InputError, nearest
from fleetplan.catalogs.schema import GPU, LLM, PRECISIONS
from fleetplan.models.layout import Layout
from fleetplan.models.memory import kv_bytes_per_token
from fleetplan.models.parallel import tp_problem
from fleetplan.models.prefill import prefill_flops
from fleetplan.models.presets import Preset
from fleetplan.models.queueing import ServiceTime
from fleetplan.models.roofline import StepEstimate, decode_step, effective_kv_precision
from fleetplan.models.ttft import (
    DEFAULT_MAX_UTILISATION,
    admission_s,
    colocated_prefill_steps,
    colocated_ttft_s,
    kv_transfer_s,
    max_utilisation,
    pool_ttft_s,
    prefill_service_s,
    queue_factor,
)
from fleetplan.optimizer.runtime.deadline import CANDIDATE_STAGE, Deadline
from fleetplan.optimizer.common.defaults import RACK_SCALE_GPUS
from fleetplan.optimizer.common.enums import BatchLimit, Tier
from fleetplan.optimizer.problem_data.layouts import RESTRICTED, layout_batches, pool_stages, replica_layouts, restriction_problem
from fleetplan.optimizer.problem_data.percentiles import Targets, colocated_ratio, pool_utilisation_cap, targets
from fleetplan.optimizer.traffic.scenario import Options, Product
from fleetplan.optimizer.traffic.sites import with_site_prices

DEFAULT_TP: tuple[int, ...] = (1, 2, 4, 8)
TIERS: tuple[str, ...] = tuple(Tier)


@dataclass(frozen=True)
class GPUPriceChoice:
    """GPU-hour prices a plan uses for one GPU type, per capacity tier, and their sources."""

    gpu: str
    usd_per_gpu_hour: float
    source: str
    tier_usd_per_gpu_hour: tuple[tuple[str, float], ...] = ()
    tier_sources: tuple[tuple[str, str], ...] = ()

    def tier(self, tier: str) -> float:
        """USD per GPU-hour in ``tier`` (on_demand is the plain price)."""
        return dict(self.tier_usd_per_gpu_hour).get(tier, self.usd_per_gpu_hour)

    def tier_source(self, tier: str) -> str:
        """Where the ``tier`` price comes from."""
        return dict(self.tier_sources).get(tier, self.source)


class _Replica:
    """What a decode and a prefill-pool configuration share: the replica's layout, its GPUs and
    nodes, and its price per hour and month (the dataclasses below hold the fields)."""

    tp: int
    pp: int
    ep: int
    dp_attention: int
    node_gpus: int
    price: GPUPriceChoice
    hours_per_month: float

    @property
    def layout(self) -> Layout:
        """The replica's parallel layout."""
        return Layout(self.tp, self.pp, self.ep, self.dp_attention)

    @property
    def gpus_per_replica(self) -> int:
        """GPUs per replica: ``tp x dp_attention x pp`` (``tp`` for a tensor-parallel group)."""
        return self.layout.gpus

    @property
    def nodes_per_replica(self) -> int:
        """Nodes (servers) one replica occupies."""
        return -(-self.gpus_per_replica // self.node_gpus)

    def usd_per_replica_hour_in(self, tier: str) -> float:
        """Price of one replica for one hour in capacity tier ``tier``."""
        return self.gpus_per_replica * self.price.tier(tier)

    @property
    def monthly_cost_per_replica_usd(self) -> float:
        """Price of one replica kept on all month at the plain price."""
        return self.gpus_per_replica * self.price.usd_per_gpu_hour * self.hours_per_month


@dataclass(frozen=True)
class Candidate(_Replica):
    """One decode replica configuration of one product, at its feasible batch with the most throughput."""

    product: str
    gpu: str
    tp: int
    precision: str
    batch: int
    mode: str
    estimate: StepEstimate
    price: GPUPriceChoice
    hours_per_month: float
    headroom: float
    batch_limited_by: str
    ttft_s: float | None = None
    prefill_flops_per_step: float = 0.0
    ttft_step_time_s: float = 0.0
    output_tokens: float = 1.0
    requested_headroom: float | None = None
    admission_s: float = 0.0
    pp: int = 1
    ep: int = 1
    dp_attention: int = 1
    node_gpus: int = 8

    def ttft_at(self, utilisation: float) -> float | None:
        """Modelled TTFT of a colocated or headroom-mode replica loaded to ``utilisation`` of its
        throughput (None in pool mode, where the pool sets TTFT)."""
        if self.mode == "pool":
            return None
        return colocated_ttft_s(self.ttft_step_time_s, self.batch, self.output_tokens, utilisation, self.admission_s)

    @property
    def key(self) -> str:
        """Stable name: ``{product}/{mode}/{gpu}/tp{tp}[/pp{pp}/ep{ep}/dp{dp}]/{precision}/b{batch}``."""
        return (f"{self.product}/{self.mode}/{self.gpu}/tp{self.tp}{self.layout.key_suffix()}"
                f"/{self.precision}/b{self.batch}")

    @property
    def replica_tokens_per_s(self) -> float:
        """Output tokens/s of one replica at full batch."""
        return self.estimate.replica_tokens_per_s

    @property
    def usable_tokens_per_s(self) -> float:
        """Replica throughput left for decode demand after the headroom is set aside."""
        return self.estimate.replica_tokens_per_s * (1.0 - self.headroom)


@dataclass(frozen=True)
class PoolCandidate(_Replica):
    """One prefill-pool replica configuration of one product."""

    product: str
    gpu: str
    tp: int
    precision: str
    price: GPUPriceChoice
    hours_per_month: float
    service_s: float
    transfer_s: float
    flops_per_request: float
    max_utilisation: float
    admission_s: float = 0.0
    service_scv: float = 0.0
    service_atoms: tuple[tuple[float, float], ...] = ()  # a mix's (seconds, probability); empty: deterministic
    pp: int = 1
    ep: int = 1
    dp_attention: int = 1
    node_gpus: int = 8

    @property
    def service_time(self) -> ServiceTime:
        """The distribution of one request's service time the pool was sized with."""
        return ServiceTime(self.service_s, self.service_scv, self.service_atoms)

    @property
    def key(self) -> str:
        """Stable name: ``{product}/pool/{gpu}/tp{tp}[/pp{pp}]/{precision}``."""
        return f"{self.product}/pool/{self.gpu}/tp{self.tp}{self.layout.key_suffix()}/{self.precision}"

    @property
    def flops_per_s(self) -> float:
        """Prefill FLOP/s one replica sustains when busy."""
        return self.flops_per_request / self.service_s

    @property
    def usable_flops_per_s(self) -> float:
        """Prefill FLOP/s one replica may be loaded with and still meet the TTFT target."""
        return self.flops_per_s * self.max_utilisation

    def ttft_s(self, utilisation: float) -> float:
        """Time to first token at pool utilisation ``utilisation``: queue + prefill + KV hand-off."""
        return pool_ttft_s(self.service_s, self.transfer_s, utilisation, self.admission_s)


@dataclass
class CandidateSet:
    """Candidates of one product, with counts for reporting and the best unmet values.

    Decode counts are of configurations (GPU x TP x precision x prefill mode x batch) on priced
    GPUs: ``generated`` enumerated, ``invalid_shapes`` of them with a TP the model cannot be
    split by, ``feasible`` fitting in memory and meeting the speed and TTFT targets. Decode
    candidates (``candidates``) are one per feasible shape, at its feasible batch with the most throughput,
    less the dominated ones. Prefill-pool counts are of shapes (GPU x TP x precision):
    ``pool_generated`` enumerated, ``pool_feasible`` fitting and meeting the TTFT target.
    """

    product: str
    candidates: list[Candidate] = field(default_factory=list)
    pool: list[PoolCandidate] = field(default_factory=list)
    generated: int = 0
    feasible: int = 0
    invalid_shapes: int = 0
    pool_generated: int = 0
    pool_feasible: int = 0
    unpriced_gpus: list[str] = field(default_factory=list)
    best_per_user_tokens_per_s: float = 0.0
    best_per_user_at: str = ""
    any_fits_memory: bool = False
    any_meets_speed: bool = False
    best_ttft_s: float = math.inf
    best_ttft_at: str = ""
    # the deadline stopped generation before every shape was searched: the candidates are the
    # ones found by then, and a plan on them is not proven optimal
    cut: bool = False

    def out_of_time(self, deadline: Deadline | None) -> bool:
        """Whether ``deadline`` has passed: the set is then ``cut`` (and the stage
        :data:`~fleetplan.optimizer.runtime.deadline.CANDIDATE_STAGE` noted once)."""
        if deadline is None or not deadline.expired:
            return False
        self.cut = True
        deadline.note(CANDIDATE_STAGE)
        return True

    @property
    def after_pruning(self) -> int:
        """Decode candidates the solver sees (one batch per shape, dominated ones dropped)."""
        return len(self.candidates)

    @property
    def pool_after_pruning(self) -> int:
        """Prefill-pool candidates the solver sees."""
        return len(self.pool)

    def note_ttft(self, ttft_s: float, where: str) -> None:
        """Remember the best TTFT reachable, for infeasibility reports."""
        if ttft_s < self.best_ttft_s:
            self.best_ttft_s, self.best_ttft_at = ttft_s, where


def resolve_gpu_price(catalog: Catalog, options: Options, gpu_id: str) -> GPUPriceChoice | None:
    """GPU-hour prices of ``gpu_id`` per tier.

    on_demand (the plain price): scenario override, else ``price_provider``'s on-demand rate,
    else the catalog reference. reserved / spot: scenario override, else the cheapest catalog
    row of that kind (of ``price_provider`` when set), else the plain price less
    ``reserved_discount`` / ``spot_discount``.
    """
    if gpu_id in options.gpu_hour_usd:
        usd, source = options.gpu_hour_usd[gpu_id], "scenario options.gpu_hour_usd"
    else:
        usd = source = None  # type: ignore[assignment]
        if options.price_provider is not None:
            rows = [p for p in catalog.prices_for(gpu_id, "on_demand") if p.provider == options.price_provider]
            if rows:
                usd, source = rows[0].usd_per_gpu_hour, f"{rows[0].provider} on-demand (as of {rows[0].as_of})"
        if usd is None:
            ref = catalog.reference_price(gpu_id)
            if ref is None:
                return None
            usd, source = ref.usd_per_gpu_hour, f"catalog reference price (as of {ref.as_of})"
    tiers: list[tuple[str, float]] = [("on_demand", usd)]
    sources: list[tuple[str, str]] = [("on_demand", source)]
    for tier, overrides, discount in (
        ("reserved", options.reserved_gpu_hour_usd, options.reserved_discount),
        ("spot", options.spot_gpu_hour_usd, options.spot_discount),
    ):
        if gpu_id in overrides:
            tiers.append((tier, overrides[gpu_id]))
            sources.append((tier, f"scenario options.{tier}_gpu_hour_usd"))
            continue
        rows = [
            p for p in catalog.prices_for(gpu_id, tier)
            if options.price_provider is None or p.provider == options.price_provider
        ]
        if rows:
            tiers.append((tier, rows[0].usd_per_gpu_hour))
            sources.append((tier, f"{rows[0].provider} {tier} (as of {rows[0].as_of})"))
        else:
            tiers.append((tier, usd * (1 - discount)))
            sources.append((tier, f"plain price less options.{tier}_discount {discount:.0%}"))
    if gpu_id in options._site_prices:
        tiers, sources, usd = with_site_prices(tiers, sources, usd, options._site_prices[gpu_id])
        source = dict(sources)["on_demand"]
    return GPUPriceChoice(gpu_id, usd, source, tuple(tiers), tuple(sources))


def check_options(catalog: Catalog, options: Options, products: Sequence[Product] = ()) -> None:
    """Reject option values naming GPUs, providers or shapes the catalog does not know, and layout
    restrictions (``options.ep``, ``pp``, ``dp_attention``) the models of ``products`` cannot run
    (:func:`~fleetplan.optimizer.problem_data.layouts.restriction_problem`)."""
    for what, ids in (
        ("options.gpus", options.gpus or ()),
        ("options.prefill_gpus", options.prefill_gpus or ()),
        ("options.gpu_hour_usd", options.gpu_hour_usd),
        ("options.reserved_gpu_hour_usd", options.reserved_gpu_hour_usd),
        ("options.spot_gpu_hour_usd", options.spot_gpu_hour_usd),
    ):
        for gpu_id in ids:
            catalog.gpu(gpu_id, what)
    if options.price_provider is not None:
        providers = {p.provider for p in catalog.prices}
        if options.price_provider not in providers:
            raise InputError(
                f"options.price_provider: unknown provider {options.price_provider!r}"
                f"{nearest(options.price_provider, providers)}"
            )
    for tp in options.tp or ():
        if tp & (tp - 1):
            raise InputError(f"options.tp: {tp} is not a power of two (nearest valid choice: {1 << (tp.bit_length() - 1)})")
    llms = [catalog.models[p.model] for p in products if p.model in catalog.models]
    if llms and any(getattr(options, name) for name in RESTRICTED):
        gpus = [catalog.gpus[g] for g in sorted(set(options.gpus or catalog.gpus))]
        problem = restriction_problem(llms, gpus, sorted(set(options.tp or DEFAULT_TP)), options)
        if problem:
            raise InputError(problem)


def prefill_modes(product: Product) -> tuple[str, ...]:
    """Decode modes the MIP may choose for ``product``: auto offers colocated and pool."""
    if product.prefill == "auto":
        return ("colocated", "pool")
    return (product.prefill or "headroom",)


def prefill_work_per_request(llm: LLM, product: Product, preset: Preset) -> float:
    """Prefill FLOPs of one request (:func:`fleetplan.models.prefill.prefill_flops`)."""
    return prefill_flops(llm, preset, product.input_tokens, product.prefix_cache_hit_rate)


def _shape_precisions(product: Product, options: Options) -> tuple[str, ...]:
    return product.precisions or tuple(options.precisions or PRECISIONS)


# The batch searches below rely on one invariant of the decode step, the one that makes the
# batches meeting speed and memory a prefix: step time never falls as the batch grows (with or
# without the prefill share). Throughput B / step and TTFT need not be monotone (with attention
# ranks or micro-batches, one sequence past a multiple of them makes every rank run one more),
# so both are searched by branch and bound over batch intervals: over batches lo..hi, throughput
# is at most B_hi / step(B_lo), and TTFT at least its value for a prompt spread over B_hi's steps
# of B_lo's length (at most: B_lo's steps of B_hi's length). Exact, and most intervals are
# dropped after evaluating their ends.


def _best_first(n: int, score: Callable[[int], float], bound: Callable[[int, int], float],
                ok: Callable[[int], bool] | None = None,
                may_hold: Callable[[int, int], bool] | None = None) -> int | None:
    """Index ``i`` in ``range(n)`` with ``ok(i)`` and the lowest ``score(i)`` (the largest index
    among equals found), or None when no index is ok.

    ``bound(lo, hi)`` is at most ``score`` of every index from lo to hi; ``may_hold(lo, hi)`` is
    False only when no index from lo to hi is ok. Intervals are split at their middle, the one
    with the lowest bound first, until no bound is below the best score found.
    """
    if n <= 0:
        return None
    best: int | None = None

    def consider(i: int) -> None:
        nonlocal best
        if (best is None or (score(i), -i) < (score(best), -best)) and (ok is None or ok(i)):
            best = i

    consider(n - 1)
    consider(0)
    heap = [(bound(0, n - 1), 0, n - 1)] if n > 2 else []
    while heap:
        low, lo, hi = heapq.heappop(heap)
        if best is not None and low >= score(best):
            break
        if may_hold is not None and not may_hold(lo, hi):
            continue
        mid = (lo + hi) // 2
        consider(mid)
        for a, b in ((lo, mid), (mid, hi)):
            if b - a > 1:
                heapq.heappush(heap, (bound(a, b), a, b))
    return best


def _threshold(f: Callable[[float], float], limit: float) -> tuple[float, float]:
    """(lo, hi) with ``f(s) <= limit`` for every spread s <= lo and ``f(s) > limit`` for every
    s >= hi, for ``f`` rising in s, from :data:`SHORTEST_SPREAD_S` on (lo = -1 when f there
    already exceeds the limit; hi = inf when no s up to 2^200 s does)."""
    f0 = f(SHORTEST_SPREAD_S)
    if f0 > limit:
        return -1.0, SHORTEST_SPREAD_S
    slope = (f(1.0) - f0) / (1.0 - SHORTEST_SPREAD_S)
    guess = SHORTEST_SPREAD_S + (limit - f0) / slope if slope > 0 else math.inf
    lo, hi = SHORTEST_SPREAD_S, math.inf
    if math.isfinite(guess):
        for s in (guess * (1.0 - SPREAD_BAND), guess * (1.0 + SPREAD_BAND)):
            if s > lo and s < hi:
                lo, hi = (s, hi) if f(s) <= limit else (lo, s)
    probe = max(lo * 2.0, 1.0)
    for _ in range(THRESHOLD_STEPS):
        if math.isfinite(hi):
            break
        if f(probe) > limit:
            hi = probe
        else:
            lo, probe = probe, probe * 2.0
    for _ in range(THRESHOLD_STEPS):
        if not math.isfinite(hi) or hi - lo <= SPREAD_BAND * hi:
            break
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) <= limit else (lo, mid)
    return lo, hi


@dataclass(frozen=True)
class Shapes:
    """The only configuration shapes to generate for a product: decode (GPU, TP, precision,
    prefill mode) and prefill pool (GPU, TP, precision). Every batch and layout of a shape is
    searched as without it, so its candidates are the ones generated without it before pruning;
    a shape another one would have pruned (:func:`prune_dominated`) is kept."""

    decode: frozenset[tuple[str, int, str, str]]
    pool: frozenset[tuple[str, int, str]] = frozenset()


@dataclass(frozen=True)
class _DecodeSearch:
    """What :func:`generate_candidates` searches for one product on every GPU type: its tensor
    parallel degrees and precisions, batches, prefill modes and the product's figures."""

    product: Product
    llm: LLM
    options: Options
    preset: Preset
    shapes: Shapes | None
    batches: Sequence[int]
    modes: tuple[str, ...]
    work: float
    max_ttft_s: float | None

    def on_gpu(self, gpu: GPU, price: GPUPriceChoice, result: CandidateSet, within: Deadline | None) -> None:
        """Add to ``result`` the best decode configuration of every shape on ``gpu`` (at ``price``
        per GPU-hour) found before ``within`` passes."""
        product, llm, options, preset = self.product, self.llm, self.options, self.preset
        for tp in sorted(set(options.tp or DEFAULT_TP)):
            for precision in _shape_precisions(product, options):
                if tp_problem(llm, gpu, tp) is not None:
                    result.generated += len(self.batches) * len(self.modes)
                    result.invalid_shapes += len(self.batches) * len(self.modes)
                    continue
                wanted = [m for m in self.modes
                          if self.shapes is None or (gpu.id, tp, precision, m) in self.shapes.decode]
                if not wanted:
                    continue
                for layout in replica_layouts(llm, gpu, tp, precision, options, preset):
                    if result.out_of_time(within):
                        return
                    searched = layout_batches(self.batches, layout, options)
                    for mode in wanted:
                        result.generated += len(searched)
                        cand = _best_decode(product, llm, gpu, layout, precision, mode, searched, preset, price,
                                            self.work, product.effective_headroom, self.max_ttft_s, result)
                        if cand is not None:
                            result.candidates.append(cand)


def generate_candidates(
    product: Product,
    llm: LLM,
    catalog: Catalog,
    options: Options,
    preset: Preset,
    *,
    prune: bool = True,
    shapes: Shapes | None = None,
    deadline: Deadline | None = None,
) -> CandidateSet:
    """All feasible decode shapes of ``product`` at their feasible batch with the most throughput, and its pool
    shapes; with ``shapes``, only those (see :class:`Shapes`). With ``deadline``, only those found
    before it passes (the set is then ``cut``): each GPU type, and the pool shapes after them, get an
    equal share of the time left, so a cut keeps some configurations of every type rather than
    every configuration of the first types."""
    gpu_ids = sorted(options.gpus) if options.gpus else sorted(catalog.gpus)
    gpus: list[GPU] = [catalog.gpus[g] for g in gpu_ids]
    batches: Sequence[int] = sorted(set(options.batch)) if options.batch else range(1, options.max_batch + 1)
    result = CandidateSet(product=product.name)
    modes = prefill_modes(product)
    work = prefill_work_per_request(llm, product, preset)
    search = _DecodeSearch(product, llm, options, preset, shapes, batches, modes, work,
                           product.max_ttft_ms / 1e3 if product.max_ttft_ms is not None else None)
    pool_part = int("pool" in modes and (shapes is None or bool(shapes.pool)))
    for i, gpu in enumerate(gpus):
        price = resolve_gpu_price(catalog, options, gpu.id)
        if price is None:
            result.unpriced_gpus.append(gpu.id)
            continue
        search.on_gpu(gpu, price, result, None if deadline is None else deadline.split(len(gpus) - i + pool_part))
    if "pool" in modes and (shapes is None or shapes.pool):
        result.pool = generate_pool_candidates(product, llm, catalog, options, preset, work, result, deadline)
        if shapes is not None:
            result.pool = [k for k in result.pool if (k.gpu, k.tp, k.precision) in shapes.pool]
        if not result.pool:
            result.candidates = [c for c in result.candidates if c.mode != "pool"]
    if prune:
        result.candidates = prune_dominated(result.candidates)
        result.pool = prune_dominated_pool(result.pool)
    result.candidates.sort(key=lambda c: c.key)
    result.pool.sort(key=lambda k: k.key)
    return result


def decode_headroom(headroom: float, max_ttft_s: float | None) -> float:
    """Headroom a colocated or headroom-mode replica keeps: the product's, raised without a TTFT
    target so the replica's load stays within ``DEFAULT_MAX_UTILISATION``."""
    return headroom if max_ttft_s is not None else max(headroom, 1.0 - DEFAULT_MAX_UTILISATION)


@dataclass
class _Shape:
    """One decode shape of a product (GPU, layout, precision, prefill mode): its steps by batch,
    each computed once, as the replica runs them and with prefill sharing them; ``rho`` is the
    utilisation TTFT is judged at."""

    product: Product
    llm: LLM
    gpu: GPU
    layout: Layout
    precision: str
    mode: str
    preset: Preset
    work: float
    rho: float
    goals: Targets = field(default_factory=list)
    max_ttft_s: float | None = None
    _plain: dict[int, StepEstimate] = field(default_factory=dict)
    _mixed: dict[int, StepEstimate] = field(default_factory=dict)
    _ttft_ok: dict[int, bool] = field(default_factory=dict)
    _band: tuple[float, float] | None = None

    @property
    def per_request(self) -> float:
        """Prefill FLOPs per request the decode steps carry (colocated only)."""
        return self.work if self.mode == "colocated" else 0.0

    def _step(self, b: int, prefill_per_request: float) -> StepEstimate:
        p = self.product
        return decode_step(
            self.llm, self.gpu, precision=self.precision, tp=self.layout.tp, batch=b, input_tokens=p.input_tokens,
            output_tokens=p.output_tokens, preset=self.preset, kv_precision=p.kv_precision,
            prefill_flops_per_step=b / p.output_tokens * prefill_per_request, layout=self.layout,
        )

    def est(self, b: int) -> StepEstimate:
        """The step the replica runs at batch ``b``."""
        if b not in self._plain:
            self._plain[b] = self._step(b, self.per_request)
        return self._plain[b]

    def prefill_step(self, b: int) -> StepEstimate:
        """The step as it runs with prefill sharing it (the same step when colocated)."""
        if self.mode == "colocated":
            return self.est(b)
        if b not in self._mixed:
            self._mixed[b] = self._step(b, self.work)
        return self._mixed[b]

    def speed_ok(self, b: int) -> bool:
        """Fits in memory and keeps every user at the target speed."""
        e = self.est(b)
        return e.fits and e.per_user_tokens_per_s >= self.product.min_tokens_per_s_per_user

    def ttft(self, b: int) -> float:
        """Modelled TTFT at batch ``b`` and utilisation ``rho``."""
        return colocated_ttft_s(self.prefill_step(b).step_time_s, b, self.product.output_tokens, self.rho,
                                admission_s(self.preset))

    def ttft_ratio(self, b: int) -> float:
        """The largest ratio of a TTFT target's modelled value to its budget at batch ``b`` (at
        most 1: every target met): the percentile targets (:func:`.percentiles.colocated_ratio`),
        and the plain one when also given."""
        spread = colocated_prefill_steps(b, self.product.output_tokens) * self.prefill_step(b).step_time_s
        ratio = colocated_ratio(spread, self.rho, admission_s(self.preset), self.goals)
        return max(ratio, self.ttft(b) / self.max_ttft_s) if self.max_ttft_s is not None else ratio

    def spread(self, b_steps: int, b_step: int) -> float:
        """Seconds a prompt is spread over: the prefill steps of batch ``b_steps``, each as long as
        a step (with prefill) of batch ``b_step``. Every TTFT target is a rising function of the
        spread at batch ``b = b_steps = b_step`` (:meth:`measure_of_spread`); over batches lo..hi
        the spread lies between ``spread(hi, lo)`` and ``spread(lo, hi)``, as the steps it covers
        fall and a step lengthens with the batch."""
        return colocated_prefill_steps(b_steps, self.product.output_tokens) * self.prefill_step(b_step).step_time_s

    def measure_of_spread(self, spread_s: float) -> float:
        """What the TTFT targets compare for a prompt spread over ``spread_s`` seconds: the mean
        TTFT in seconds against a plain target alone, else the largest ratio of a target to its
        budget (as :meth:`ttft_ratio`); rising in the spread. Within :attr:`ttft_limit`: met."""
        adm = admission_s(self.preset)
        plain = adm + spread_s * queue_factor(self.rho)
        if not self.goals:
            return plain
        ratio = colocated_ratio(spread_s, self.rho, adm, self.goals)
        return max(ratio, plain / self.max_ttft_s) if self.max_ttft_s is not None else ratio

    @property
    def ttft_limit(self) -> float:
        """The bound :meth:`measure_of_spread` must stay within: ``max_ttft_s`` alone, else 1."""
        return self.max_ttft_s if not self.goals and self.max_ttft_s is not None else 1.0

    def ttft_ok(self, b: int) -> bool:
        """Whether batch ``b`` meets every TTFT target."""
        if b not in self._ttft_ok:
            low, high = self.spread_band()
            spread = self.spread(b, b)
            self._ttft_ok[b] = spread <= low or (spread < high and self.measure_of_spread(spread) <= self.ttft_limit)
        return self._ttft_ok[b]

    def spread_band(self) -> tuple[float, float]:
        """(lo, hi): spreads with every spread up to ``lo`` meeting the TTFT targets and every one
        from ``hi`` missing them (``lo`` < 0: none meets them), ``hi - lo`` at most
        :data:`SPREAD_BAND` of ``hi``. Found from an affine guess (exact for a mean target, close
        for quantiles, which scale with a deterministic service time), checked, and otherwise by
        bisection; batches between the two are checked one by one."""
        if self._band is None:
            self._band = _threshold(self.measure_of_spread, self.ttft_limit)
        return self._band

    def where(self, b: int) -> str:
        """The shape at batch ``b``, for messages."""
        return f"{self.gpu.id} {self.layout.label()} {self.precision} batch {b}"


def _best_decode(
    product: Product, llm: LLM, gpu: GPU, layout: Layout, precision: str, mode: str, batches: Sequence[int],
    preset: Preset, price: GPUPriceChoice, work: float, headroom: float, max_ttft_s: float | None,
    result: CandidateSet,
) -> Candidate | None:
    """The feasible batch of one shape in one prefill mode with the most throughput per replica,
    as a candidate (or None); a shape's replicas all cost the same, so it is also the cheapest.

    Speed and memory are checked on the step the replica runs (with its prefill share when
    colocated): the batches meeting them are a prefix of ``batches``. TTFT (colocated and headroom
    modes) is checked on a step carrying the prefill share, at utilisation 1 - headroom; the
    batches meeting it need not be contiguous. Both searches are exact (:func:`_best_first`).
    """
    goals = targets(product)
    if mode != "pool":
        headroom = decode_headroom(headroom, max_ttft_s if max_ttft_s is not None or not goals else math.inf)
    shape = _Shape(product, llm, gpu, layout, precision, mode, preset, work, 1.0 - headroom, goals, max_ttft_s)
    first = shape.est(batches[0])
    if first.fits:
        result.any_fits_memory = True
        if first.per_user_tokens_per_s > result.best_per_user_tokens_per_s:
            result.best_per_user_tokens_per_s = first.per_user_tokens_per_s
            result.best_per_user_at = shape.where(batches[0])
    if not shape.speed_ok(batches[0]):
        return None
    result.any_meets_speed = True
    n_ok = bisect.bisect_left(range(len(batches)), True, key=lambda i: not shape.speed_ok(batches[i]))
    limited_by = (BatchLimit.BATCH_OPTIONS if n_ok == len(batches) else
                  BatchLimit.MEMORY if not shape.est(batches[n_ok]).fits else BatchLimit.PER_USER_SPEED)
    timed = mode != "pool" and (max_ttft_s is not None or bool(goals))
    if not timed:
        result.feasible += n_ok
        best = _most_throughput(shape, batches, n_ok)
        assert best is not None
    else:
        best = _most_throughput_meeting_ttft(shape, batches, n_ok, result)
        if best is None:
            return None
    if best < n_ok - 1:
        larger_ok = not timed or _ttft_count(shape, batches, best + 1, n_ok - 1) > 0
        limited_by = BatchLimit.RANK_ROUNDING if larger_ok else BatchLimit.MAX_TTFT
    return _candidate(shape, batches[best], price, headroom, limited_by)


def _throughput_bound(shape: _Shape, batches: Sequence[int]) -> Callable[[int, int], float]:
    """Minus an upper bound of replica throughput over batches lo..hi: ``B_hi / step(B_lo)``."""
    return lambda lo, hi: -batches[hi] / shape.est(batches[lo]).step_time_s


def _most_throughput(shape: _Shape, batches: Sequence[int], n: int, ok: Callable[[int], bool] | None = None,
                     may_hold: Callable[[int, int], bool] | None = None) -> int | None:
    """Index of the largest batch of ``batches[:n]`` (all meeting speed and memory) with the most
    replica throughput (within :data:`THROUGHPUT_TIE`) among those ``ok``, or None when none is;
    ``may_hold`` as for :func:`_best_first`."""
    def thr(i: int) -> float:
        return shape.est(batches[i]).replica_tokens_per_s

    bound = _throughput_bound(shape, batches)
    best = _best_first(n, lambda i: -thr(i), bound, ok, may_hold)
    if best is None:
        return None
    floor = thr(best) * (1.0 - THROUGHPUT_TIE)
    return _best_first(n, lambda i: -i, lambda lo, hi: -hi, lambda i: thr(i) >= floor and (ok is None or ok(i)),
                       lambda lo, hi: -bound(lo, hi) >= floor and (may_hold is None or may_hold(lo, hi)))


def _ttft_count(shape: _Shape, batches: Sequence[int], lo: int, hi: int) -> int:
    """How many of ``batches[lo..hi]`` meet the TTFT targets: intervals whose spreads all lie
    below the band of :meth:`_Shape.spread_band` count whole, those above it not at all, a batch
    inside it is checked on its own."""
    low, high = shape.spread_band()
    count, stack = 0, [(lo, hi)] if lo <= hi else []
    while stack:
        a, b = stack.pop()
        if shape.spread(batches[b], batches[a]) >= high:
            continue
        if shape.spread(batches[a], batches[b]) <= low:
            count += b - a + 1
        elif a == b:
            count += shape.ttft_ok(batches[a])
        else:
            mid = (a + b) // 2
            stack += [(a, mid), (mid + 1, b)]
    return count


def _most_throughput_meeting_ttft(shape: _Shape, batches: Sequence[int], n: int, result: CandidateSet) -> int | None:
    """Index of the batch of ``batches[:n]`` with the most replica throughput among those meeting
    the TTFT targets, or None (noting the lowest TTFT reachable); counts the feasible ones."""
    count = _ttft_count(shape, batches, 0, n - 1)
    result.feasible += count
    mode = "colocated" if shape.mode == "colocated" else "headroom mode"
    if count == 0:
        low = _best_first(n, lambda i: shape.spread(batches[i], batches[i]),
                          lambda lo, hi: shape.spread(batches[hi], batches[lo]))
        assert low is not None
        result.note_ttft(shape.ttft(batches[low]), f"{mode} on {shape.where(batches[low])} at {shape.rho:.0%} utilisation")
        return None
    high = shape.spread_band()[1]
    best = _most_throughput(shape, batches, n, ok=lambda i: shape.ttft_ok(batches[i]),
                            may_hold=lambda lo, hi: shape.spread(batches[hi], batches[lo]) < high)
    assert best is not None
    result.note_ttft(shape.ttft(batches[best]), f"{mode} on {shape.where(batches[best])} at {shape.rho:.0%} utilisation")
    return best


def _candidate(shape: _Shape, b: int, price: GPUPriceChoice, headroom: float, limited_by: str) -> Candidate:
    """The shape at batch ``b`` as a decode candidate."""
    p, layout, colocated = shape.product, shape.layout, shape.mode != "pool"
    return Candidate(
        product=p.name, gpu=shape.gpu.id, tp=layout.tp, precision=shape.precision, batch=b, mode=shape.mode,
        estimate=shape.est(b), price=price, hours_per_month=shape.preset.hours_per_month, headroom=headroom,
        batch_limited_by=limited_by, ttft_s=shape.ttft(b) if colocated else None,
        prefill_flops_per_step=b / p.output_tokens * shape.per_request,
        ttft_step_time_s=shape.prefill_step(b).step_time_s if colocated else 0.0,
        output_tokens=float(p.output_tokens), requested_headroom=p.effective_headroom,
        admission_s=admission_s(shape.preset), pp=layout.pp, ep=layout.ep, dp_attention=layout.dp_attention,
        node_gpus=shape.gpu.node_gpus,
    )


def kv_link(gpu: GPU) -> tuple[str, float]:
    """(name, bytes/s per GPU) of the link a KV cache crosses from a prefill to a decode replica:
    the scale-up fabric when a domain holds many replicas (rack-scale NVLink), else the NIC."""
    if gpu.scaleup_domain_gpus >= RACK_SCALE_GPUS:
        return "scale-up", gpu.scaleup_bandwidth_bytes_per_s
    return "network", gpu.network_bandwidth_bytes_per_s


def generate_pool_candidates(
    product: Product, llm: LLM, catalog: Catalog, options: Options, preset: Preset, work: float, result: CandidateSet,
    deadline: Deadline | None = None,
) -> list[PoolCandidate]:
    """Prefill-pool shapes of ``product`` that fit and can meet its TTFT target (with ``deadline``,
    those found before it passes; ``result`` is then marked ``cut``)."""
    ids = product.prefill_gpus or options.prefill_gpus or options.gpus or sorted(catalog.gpus)
    for gpu_id in ids:
        catalog.gpu(gpu_id, f"products[{product.name}].prefill_gpus")
    tps = sorted(set(options.tp or DEFAULT_TP))
    kv_prec = effective_kv_precision(preset, product.kv_precision)
    kv_bytes = product.input_tokens * kv_bytes_per_token(llm, kv_prec)
    max_ttft_s = product.max_ttft_ms / 1e3 if product.max_ttft_ms is not None else None
    admission = admission_s(preset)
    out: list[PoolCandidate] = []
    for gpu_id in sorted(set(ids)):
        if result.out_of_time(deadline):
            break
        gpu = catalog.gpus[gpu_id]
        price = resolve_gpu_price(catalog, options, gpu_id)
        if price is None:
            if gpu_id not in result.unpriced_gpus:
                result.unpriced_gpus.append(gpu_id)
            continue
        for tp in tps:
            if tp_problem(llm, gpu, tp) is not None:
                result.pool_generated += len(_shape_precisions(product, options))
                continue
            for precision in _shape_precisions(product, options):
                result.pool_generated += 1
                for pp in pool_stages(llm, gpu, tp, precision, kv_bytes, options, preset):
                    cand = _pool_shape(product, llm, gpu, Layout(tp, pp), precision, price, preset, work, kv_bytes,
                                       max_ttft_s, result, admission)
                    if cand is not None:
                        out.append(cand)
    return out


def _pool_shape(
    product: Product, llm: LLM, gpu: GPU, layout: Layout, precision: str, price: GPUPriceChoice, preset: Preset,
    work: float, kv_bytes: float, max_ttft_s: float | None, result: CandidateSet, admission: float,
) -> PoolCandidate | None:
    """One pool replica of ``layout.gpus`` GPUs: prompts pipelined through its stages, so it
    prefills at ``tp x pp`` GPUs' rate (:func:`prefill_service_s` over that many GPUs); None when
    it cannot meet the TTFT target."""
    n = layout.gpus
    dist = pool_service_time(product, llm, gpu, preset, precision, layout, work)
    service = dist.mean_s
    _, link_bw = kv_link(gpu)
    transfer = kv_transfer_s(kv_bytes, n * link_bw)
    rho = DEFAULT_MAX_UTILISATION
    goals = targets(product)
    if max_ttft_s is not None or goals:
        result.note_ttft(pool_ttft_s(service, transfer, 0.0, admission),
                         f"pool on {gpu.id} {layout.label()} {precision} at zero load")
        rho = max_utilisation(service, max_ttft_s - transfer - admission) if max_ttft_s is not None else 1.0
        if goals:
            rho = min(rho, pool_utilisation_cap(dist, transfer + admission, goals))
        if rho <= 0.0:
            return None
    result.pool_feasible += 1
    return PoolCandidate(
        product=product.name, gpu=gpu.id, tp=layout.tp, precision=precision, price=price,
        hours_per_month=preset.hours_per_month, service_s=service, transfer_s=transfer,
        flops_per_request=work, max_utilisation=rho, admission_s=admission, pp=layout.pp, node_gpus=gpu.node_gpus,
        service_scv=dist.scv, service_atoms=dist.atoms,
    )


def pool_service_time(product: Product, llm: LLM, gpu: GPU, preset: Preset, precision: str, layout: Layout,
                      work: float) -> ServiceTime:
    """A pool replica's service time on ``layout`` (prompts pipelined through its stages): one
    prefill of ``work`` FLOPs (deterministic), or for a product with a request mix, the mix of its
    buckets' prefills weighted by their shares."""
    def service(flops: float) -> float:
        return prefill_service_s(llm, gpu, preset, precision=precision, tp=layout.tp, pp=layout.pp, flops=flops)

    if product.requests is None:
        return ServiceTime(service(work))
    times = [service(prefill_flops(llm, preset, b.input_tokens, product.prefix_cache_hit_rate))
             for b in product.requests]
    return ServiceTime.of_mix(times, [b.share for b in product.requests])


def prune_dominated(cands: list[Candidate]) -> list[Candidate]:
    """Drop decode candidates another one of the same GPU type and prefill mode beats: no more
    GPUs per replica, no dearer, no less usable throughput.

    Comparing only within a GPU type keeps the pruning exact when per-type GPU availability
    binds, and keeps every GPU type's best configuration for the runner-up report. Ties are
    broken by the candidate key so the result is deterministic.
    """
    order = sorted(cands, key=lambda c: (c.monthly_cost_per_replica_usd, -c.usable_tokens_per_s, c.key))
    kept: list[Candidate] = []
    for c in order:
        if not any(
            k.gpu == c.gpu and k.mode == c.mode and k.gpus_per_replica <= c.gpus_per_replica
            and k.monthly_cost_per_replica_usd <= c.monthly_cost_per_replica_usd
            and k.usable_tokens_per_s >= c.usable_tokens_per_s
            for k in kept
        ):
            kept.append(c)
    return kept


def prune_dominated_pool(cands: list[PoolCandidate]) -> list[PoolCandidate]:
    """Drop pool candidates beaten on the same GPU type: no more GPUs, no less usable FLOP/s."""
    order = sorted(cands, key=lambda c: (c.monthly_cost_per_replica_usd, -c.usable_flops_per_s, c.key))
    kept: list[PoolCandidate] = []
    for c in order:
        if not any(
            k.gpu == c.gpu and k.gpus_per_replica <= c.gpus_per_replica and k.monthly_cost_per_replica_usd <= c.monthly_cost_per_replica_usd
            and k.usable_flops_per_s >= c.usable_flops_per_s
            for k in kept
        ):
            kept.append(c)
    return kept


def bucket_capacity(product: Product, llm: LLM, gpu: GPU, cand: Candidate, preset: Preset) -> float | None:
    """Usable output tokens/s of one replica of ``cand`` (its shape, prefill mode, headroom and
    batch) serving only requests of ``product``'s sizes, or None when they do not fit its memory
    at that batch or miss the speed or TTFT targets there (the rules of :func:`_best_decode`)."""
    work = prefill_work_per_request(llm, product, preset)
    max_ttft_s = product.max_ttft_ms / 1e3 if product.max_ttft_ms is not None else None
    goals = targets(product)
    shape = _Shape(product, llm, gpu, cand.layout, cand.precision, cand.mode, preset, work, 1.0 - cand.headroom,
                   goals, max_ttft_s)
    b = cand.batch
    if not shape.speed_ok(b):
        return None
    if cand.mode != "pool" and goals and shape.ttft_ratio(b) > 1.0:
        return None
    if cand.mode != "pool" and not goals and max_ttft_s is not None and shape.ttft(b) > max_ttft_s:
        return None
    return shape.est(b).replica_tokens_per_s * (1.0 - cand.headroom)


def colocated_spread_s(product: Product, llm: LLM, gpu: GPU, cand: Candidate, preset: Preset) -> float:
    """Seconds a colocated (or headroom-mode) replica of ``cand`` spends admitting one prompt of
    ``product``'s sizes: the prefill steps it is spread over times a step carrying prefill."""
    work = prefill_work_per_request(llm, product, preset)
    shape = _Shape(product, llm, gpu, cand.layout, cand.precision, cand.mode, preset, work, 1.0 - cand.headroom)
    return colocated_prefill_steps(cand.batch, product.output_tokens) * shape.prefill_step(cand.batch).step_time_s

"""Candidate replica configurations: enumerate (GPU x TP x precision x batch), keep the feasible, prune.

Every decode-step quantity the roofline gives gets worse as the batch grows (step time,
per-user speed, memory), while replica throughput B / step only grows. So for one
(GPU, TP, precision) shape the feasible batches form a prefix of the sorted batch options
and the largest feasible batch gives the most throughput for the same price: it is the only
one of that shape worth offering to the solver. A binary search finds it.

Across shapes, a candidate is dominated when another one of the same product and GPU type
uses no more GPUs per replica, costs no more and delivers at least as much usable throughput.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from fleetplan.catalogs.loader import Catalog, InputError, nearest
from fleetplan.catalogs.schema import GPU, LLM, PRECISIONS
from fleetplan.models.parallel import tp_problem
from fleetplan.models.presets import Preset
from fleetplan.models.roofline import StepEstimate, decode_step
from fleetplan.optimizer.scenario import Options, Product

DEFAULT_TP: tuple[int, ...] = (1, 2, 4, 8)


@dataclass(frozen=True)
class GPUPriceChoice:
    """The GPU-hour price a plan uses for one GPU type, and where it comes from."""

    gpu: str
    usd_per_gpu_hour: float
    source: str


@dataclass(frozen=True)
class Candidate:
    """One replica configuration of one product, with its largest feasible batch."""

    product: str
    gpu: str
    tp: int
    precision: str
    batch: int
    estimate: StepEstimate
    price: GPUPriceChoice
    hours_per_month: float
    headroom: float
    batch_limited_by: str

    @property
    def key(self) -> str:
        """Stable name: ``{product}/{gpu}/tp{tp}/{precision}/b{batch}``."""
        return f"{self.product}/{self.gpu}/tp{self.tp}/{self.precision}/b{self.batch}"

    @property
    def gpus(self) -> int:
        """GPUs per replica."""
        return self.tp

    @property
    def replica_tokens_per_s(self) -> float:
        """Output tokens/s of one replica at full batch."""
        return self.estimate.replica_tokens_per_s

    @property
    def usable_tokens_per_s(self) -> float:
        """Replica throughput left for decode demand after the headroom is set aside."""
        return self.estimate.replica_tokens_per_s * (1.0 - self.headroom)

    @property
    def usd_per_replica_hour(self) -> float:
        """Price of one replica for one hour."""
        return self.tp * self.price.usd_per_gpu_hour

    @property
    def monthly_cost_per_replica_usd(self) -> float:
        """Price of one replica kept on all month."""
        return self.usd_per_replica_hour * self.hours_per_month


@dataclass
class CandidateSet:
    """Candidates of one product, with counts for reporting and the best unmet values."""

    product: str
    candidates: list[Candidate] = field(default_factory=list)
    generated: int = 0
    feasible: int = 0
    invalid_shapes: int = 0
    unpriced_gpus: list[str] = field(default_factory=list)
    best_per_user_tokens_per_s: float = 0.0
    best_per_user_at: str = ""
    any_fits_memory: bool = False

    @property
    def after_pruning(self) -> int:
        """Candidates the solver sees."""
        return len(self.candidates)


def resolve_gpu_price(catalog: Catalog, options: Options, gpu_id: str) -> GPUPriceChoice | None:
    """GPU-hour price: scenario override, else the chosen provider's on-demand rate, else the reference."""
    if gpu_id in options.gpu_hour_usd:
        return GPUPriceChoice(gpu_id, options.gpu_hour_usd[gpu_id], "scenario options.gpu_hour_usd")
    if options.price_provider is not None:
        rows = [p for p in catalog.prices_for(gpu_id, "on_demand") if p.provider == options.price_provider]
        if rows:
            row = rows[0]
            return GPUPriceChoice(gpu_id, row.usd_per_gpu_hour, f"{row.provider} on-demand (as of {row.as_of})")
    ref = catalog.reference_price(gpu_id)
    if ref is None:
        return None
    return GPUPriceChoice(gpu_id, ref.usd_per_gpu_hour, f"catalog reference price (as of {ref.as_of})")


def check_options(catalog: Catalog, options: Options) -> None:
    """Reject option values naming GPUs, providers or shapes the catalog does not know."""
    for gpu_id in options.gpus or ():
        catalog.gpu(gpu_id, "options.gpus")
    for gpu_id in options.gpu_hour_usd:
        catalog.gpu(gpu_id, "options.gpu_hour_usd")
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


def _shape_precisions(product: Product, options: Options) -> tuple[str, ...]:
    return product.precisions or tuple(options.precisions or PRECISIONS)


def generate_candidates(
    product: Product,
    llm: LLM,
    catalog: Catalog,
    options: Options,
    preset: Preset,
    *,
    prune: bool = True,
) -> CandidateSet:
    """All feasible shapes of ``product`` at their largest feasible batch, dominated ones pruned."""
    gpus: list[GPU] = [catalog.gpus[g] for g in sorted(options.gpus)] if options.gpus else [
        catalog.gpus[g] for g in sorted(catalog.gpus)
    ]
    tps = sorted(set(options.tp or DEFAULT_TP))
    batches = sorted(set(options.batch)) if options.batch else list(range(1, options.max_batch + 1))
    result = CandidateSet(product=product.name)

    for gpu in gpus:
        price = resolve_gpu_price(catalog, options, gpu.id)
        if price is None:
            result.unpriced_gpus.append(gpu.id)
            continue
        for tp in tps:
            for precision in _shape_precisions(product, options):
                result.generated += len(batches)
                if tp_problem(llm, gpu, tp) is not None:
                    result.invalid_shapes += len(batches)
                    continue

                def est(b: int, gpu: GPU = gpu, tp: int = tp, precision: str = precision) -> StepEstimate:
                    return decode_step(
                        llm, gpu, precision=precision, tp=tp, batch=b, input_tokens=product.input_tokens,
                        output_tokens=product.output_tokens, preset=preset, kv_precision=product.kv_precision,
                    )

                def ok(e: StepEstimate) -> bool:
                    return e.fits and e.per_user_tokens_per_s >= product.min_tokens_per_s_per_user

                first = est(batches[0])
                if first.fits:
                    result.any_fits_memory = True
                    if first.per_user_tokens_per_s > result.best_per_user_tokens_per_s:
                        result.best_per_user_tokens_per_s = first.per_user_tokens_per_s
                        result.best_per_user_at = f"{gpu.id} tp{tp} {precision} batch {batches[0]}"
                if not ok(first):
                    continue
                # largest index whose batch is feasible (feasibility is a prefix of the sorted list)
                n_ok = bisect.bisect_left(range(len(batches)), True, key=lambda i: not ok(est(batches[i])))
                result.feasible += n_ok
                best_b = batches[n_ok - 1]
                best = est(best_b)
                if n_ok == len(batches):
                    limited_by = "batch_options"
                else:
                    nxt = est(batches[n_ok])
                    limited_by = "memory" if not nxt.fits else "per_user_speed"
                result.candidates.append(
                    Candidate(
                        product=product.name, gpu=gpu.id, tp=tp, precision=precision, batch=best_b, estimate=best,
                        price=price, hours_per_month=preset.hours_per_month, headroom=product.headroom,
                        batch_limited_by=limited_by,
                    )
                )
    if prune:
        result.candidates = prune_dominated(result.candidates)
    result.candidates.sort(key=lambda c: c.key)
    return result


def prune_dominated(cands: list[Candidate]) -> list[Candidate]:
    """Drop candidates another one of the same GPU type beats: no more GPUs per replica, no
    dearer, no less usable throughput.

    Comparing only within a GPU type keeps the pruning exact when per-type GPU availability
    binds, and keeps every GPU type's best configuration for the runner-up report. Ties are
    broken by the candidate key so the result is deterministic.
    """
    order = sorted(cands, key=lambda c: (c.monthly_cost_per_replica_usd, -c.usable_tokens_per_s, c.key))
    kept: list[Candidate] = []
    for c in order:
        dominated = False
        for k in kept:
            if k.gpu != c.gpu or k.tp > c.tp:
                continue
            if k.monthly_cost_per_replica_usd <= c.monthly_cost_per_replica_usd and k.usable_tokens_per_s >= c.usable_tokens_per_s:
                dominated = True
                break
        if not dominated:
            kept.append(c)
    return kept

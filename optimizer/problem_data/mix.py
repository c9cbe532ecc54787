"""Request mixes as MIP data: a product's request-size buckets, each with its hourly demand and
the configurations that may serve it at what capacity.

The design (the Mélange formulation on fleetplan's candidates). A product with ``requests:``
is planned from its buckets. Candidates are generated for each bucket as for a plain product
of that bucket's sizes (per shape, the feasible batch with the most throughput per replica, the
larger batch among equals; dominance pruning); the product's configurations are the union of
them. Each configuration is then timed for every bucket *at its
own batch*: a bucket is eligible on it when it fits the configuration's memory at that batch and
meets the product's speed and TTFT targets there (:func:`~.candidates.bucket_capacity`), and
serves it at ``capacity[b][c]`` usable tokens/s per replica. The MIP (:mod:`fleetplan.optimizer.mip.formulation`)
splits each bucket's demand, every hour, over its eligible configurations; a configuration's
integer replicas are shared by the buckets it serves:

    sum_b serve[b,c,h] / capacity[b][c] <= replicas[c,h]

so several GPU types and prefill modes may run at once, short requests on small GPUs and long
ones on large ones. Memory of a replica serving a mix at batch B is at most that of its longest
bucket alone at B, which the eligibility checks. The optimum is exact over this set of
configurations: every bucket's own best shapes, each at the batch its bucket chose.

A configuration beaten on every bucket by another of the same GPU type and prefill mode (no
more GPUs per replica, no dearer, at least the capacity for every bucket it serves) is
dropped. Prefill-pool configurations are generated once for the whole mix, timed by the mix's
service-time distribution (:func:`~.candidates.pool_service_time`).

Within a deadline, each bucket's generation gets an equal share of what is left, and once it has
passed a configuration is timed only for the buckets that generated it (the union is then
``cut``): a smaller set of configurations, each still timed exactly.

Owns these data; it builds no model and solves nothing."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from fleetplan.catalogs.loader import Catalog
from fleetplan.catalogs.schema import LLM
from fleetplan.models.presets import Preset
from fleetplan.optimizer.problem_data.candidates import Candidate, CandidateSet, bucket_capacity, prefill_work_per_request
from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.common.defaults import CEILING_TOLERANCE
from fleetplan.optimizer.traffic.scenario import Product


@dataclass(frozen=True)
class BucketData:
    """One bucket of a product's mix as the MIP sees it: output tokens/s asked every hour, prefill
    FLOPs per output token, and the usable tokens/s per replica of each eligible configuration."""

    index: int
    input_tokens: int
    output_tokens: int
    share: float
    demand_tokens_per_s: tuple[float, ...]
    prefill_flops_per_output_token: float
    capacity: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def label(self) -> str:
        """The bucket's sizes, for messages: ``in 512 / out 128``."""
        return f"in {self.input_tokens} / out {self.output_tokens}"


def bucket_product(product: Product, index: int) -> Product:
    """``product`` with one request size: its bucket ``index``."""
    assert product.requests is not None
    b = product.requests[index]
    return product.model_copy(update={"input_tokens": b.input_tokens, "output_tokens": b.output_tokens,
                                      "requests": None})


def replicas_alone(bucket_demand: list[tuple[float, float]]) -> int:
    """Fewest replicas that alone serve (demand tokens/s, capacity tokens/s per replica) pairs."""
    return max(0, math.ceil(sum(d / cap for d, cap in bucket_demand) - CEILING_TOLERANCE))


def _dominated(c: Candidate, by: Candidate, by_key: str, served: list[tuple[dict[str, float], float]]) -> bool:
    """Whether ``by`` (key ``by_key``) beats ``c`` for every bucket ``c`` serves (same GPU type and
    prefill mode); ``served`` holds each such bucket's capacities and ``c``'s capacity in it."""
    return (by.gpu == c.gpu and by.mode == c.mode and by.gpus_per_replica <= c.gpus_per_replica
            and by.monthly_cost_per_replica_usd <= c.monthly_cost_per_replica_usd
            and all(by_key in cap and cap[by_key] >= own for cap, own in served))


def prune_mix(cands: list[Candidate], caps: list[dict[str, float]]) -> list[Candidate]:
    """Drop configurations another one beats on every bucket (ties kept by key order). Keys and
    the buckets each configuration serves are found once, and only configurations of one GPU type
    and prefill mode are compared: the comparison is over pairs, and a mix of many buckets has
    thousands of configurations."""
    keys = {id(c): c.key for c in cands}
    order = sorted(cands, key=lambda c: (c.monthly_cost_per_replica_usd, keys[id(c)]))
    kept: dict[tuple[str, str], list[Candidate]] = {}  # by GPU type and prefill mode: only these compare
    for c in order:
        served = [(cap, cap[keys[id(c)]]) for cap in caps if keys[id(c)] in cap]
        rivals = kept.setdefault((c.gpu, c.mode), [])
        if not any(_dominated(c, k, keys[id(k)], served) for k in rivals):
            rivals.append(c)
    return sorted((c for group in kept.values() for c in group), key=lambda c: keys[id(c)])


def mix_candidates(product: Product, llm: LLM, catalog: Catalog, preset: Preset,
                   make_cs: Callable[[Product, Deadline | None], CandidateSet], deadline: Deadline | None = None,
                   ) -> tuple[CandidateSet, list[dict[str, float]]]:
    """The union of every bucket's candidates (:func:`make_cs` of each bucket's product, within an
    equal share of ``deadline``), less the dominated, with each bucket's capacity on each
    configuration it is eligible for (once the deadline has passed, only on its own)."""
    assert product.requests is not None
    n = len(product.requests)
    per_bucket = [make_cs(bucket_product(product, i), None if deadline is None else deadline.split(n - i)) for i in range(n)]
    merged = CandidateSet(product=product.name)
    union: dict[str, Candidate] = {}
    for cs in per_bucket:
        for c in cs.candidates:
            union.setdefault(c.key, c)
    caps: list[dict[str, float]] = []
    for i, cs in enumerate(per_bucket):
        own = {c.key: c.usable_tokens_per_s for c in cs.candidates}
        bp = bucket_product(product, i)
        cap: dict[str, float] = {}
        for key, c in sorted(union.items()):
            if key not in own and merged.out_of_time(deadline):
                continue
            u = own[key] if key in own else bucket_capacity(bp, llm, catalog.gpus[c.gpu], c, preset)
            if u is not None and u > 0:
                cap[key] = u
        caps.append(cap)
    merged.candidates = prune_mix(list(union.values()), caps)
    for cs in per_bucket:
        _add_counts(merged, cs)
    kept = {c.key for c in merged.candidates}
    return merged, [{k: u for k, u in cap.items() if k in kept} for cap in caps]


def _add_counts(total: CandidateSet, cs: CandidateSet) -> None:
    """Add one bucket's counts and best unmet values to the mix's candidate set."""
    total.generated += cs.generated
    total.feasible += cs.feasible
    total.invalid_shapes += cs.invalid_shapes
    total.unpriced_gpus = sorted(set(total.unpriced_gpus) | set(cs.unpriced_gpus))
    total.any_fits_memory |= cs.any_fits_memory
    total.any_meets_speed |= cs.any_meets_speed
    total.cut |= cs.cut
    if cs.best_per_user_tokens_per_s > total.best_per_user_tokens_per_s:
        total.best_per_user_tokens_per_s, total.best_per_user_at = cs.best_per_user_tokens_per_s, cs.best_per_user_at
    if cs.best_ttft_s < total.best_ttft_s:
        total.best_ttft_s, total.best_ttft_at = cs.best_ttft_s, cs.best_ttft_at


def bucket_data(product: Product, llm: LLM, preset: Preset, qps: list[float],
                caps: list[dict[str, float]]) -> tuple[BucketData, ...]:
    """Each bucket's hourly output tokens/s (queries/s x share x output tokens), its prefill FLOPs
    per output token and its capacities."""
    assert product.requests is not None
    out = []
    for i, b in enumerate(product.requests):
        work = prefill_work_per_request(llm, bucket_product(product, i), preset)
        out.append(BucketData(
            index=i, input_tokens=b.input_tokens, output_tokens=b.output_tokens, share=b.share,
            demand_tokens_per_s=tuple(q * b.share * b.output_tokens for q in qps),
            prefill_flops_per_output_token=work / b.output_tokens, capacity=caps[i],
        ))
    return tuple(out)


def mean_prefill_work(product: Product, llm: LLM, preset: Preset) -> float:
    """Prefill FLOPs of the mix's average request (share-weighted)."""
    assert product.requests is not None
    return sum(b.share * prefill_work_per_request(llm, bucket_product(product, i), preset)
               for i, b in enumerate(product.requests))

"""The model against measurements: predicted time per output token and error statistics.

Every number comes from the functions the planner uses: :func:`~fleetplan.models.roofline.decode_step`
for the step, :func:`~fleetplan.models.prefill.prefill_flops` for a prompt's work,
:func:`~fleetplan.models.ttft.prefill_service_s` for its prefill time and
:func:`~fleetplan.models.ttft.ttft_s` (through ``benchmark_ttft_s``) for TTFT.

A measured TPOT in a closed-loop continuous-batching benchmark includes the share of the other
``batch - 1`` requests' prefill its engine runs inside the decode steps
(:mod:`fleetplan.models.interference`); a static-batch measurement includes none. The predicted
TTFT under continuous batching is that of a request admitted with ``batch - 1`` others: the
engine's share of their prompts and its own, prefilled in chunks with decode steps interleaved,
plus the admission latency; under static batching all ``batch`` prompts are prefilled first.

Rows the planner would refuse are not predicted but skipped with the reason: an unknown model
or GPU, or an impossible TP or EP degree (beyond the scale-up domain, heads that do not split).
A benchmark's concurrency may exceed the sequences whose KV cache fits next to the weights (or the
engine's cap): the engine then runs the sequences that fit (:func:`running_batch`) and queues the
rest, so such a row is predicted at that running batch, with the queue in its TTFT. A measured row
whose weights and one sequence do not fit was run all the same, so it is the model's error
(:data:`MODEL_ERROR`), listed and counted as one.

Error statistics use the ratio measured / predicted: its median, the share of rows within a
factor of 1.25, 1.5 and 2 either way, and the mean absolute percentage error
|predicted - measured| / measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
import dataclasses
from dataclasses import dataclass
from typing import Any

from fleetplan.catalogs.loader import Catalog, nearest
from fleetplan.catalogs.schema import ServerRecipe
from fleetplan.models.interference import Arrival
from fleetplan.models.layout import Layout, layout_problem
from fleetplan.models.measurements import Measurement
from fleetplan.models.memory import bytes_per_value
from fleetplan.models.moe import ep_problem
from fleetplan.models.parallel import tp_problem
from fleetplan.models.presets import Preset, normalize_engine
from fleetplan.models.prefill import prefill_flops
from fleetplan.models.roofline import StepEstimate, decode_step, model_kind
from fleetplan.models.ttft import benchmark_ttft_percentiles_s, prefill_service_s, ttft_s

WITHIN: tuple[float, ...] = (1.25, 1.5, 2.0)
# How a skip reason starts when the row ran but the model cannot hold its weights and one sequence
MODEL_ERROR = "model error: "
GROUPS: tuple[str, ...] = ("gpu", "tp", "engine", "model")


@dataclass(frozen=True)
class Prediction:
    """A measurement with the model's estimate for it."""

    row: Measurement
    estimate: StepEstimate
    predicted_tpot_ms: float
    predicted_ttft_ms: float
    decode_step_time_ms: float = 0.0
    prefill_flops_per_request: float = 0.0
    prefix_cache_hit_rate: float = 0.0
    draft_tokens: int = 0
    accepted_tokens_per_step: float = 1.0
    running_batch: int = 0
    engine_known: bool = True
    arrival: Arrival = Arrival()
    predicted_ttft_p99_ms: float = 0.0

    @property
    def ratio(self) -> float:
        """Measured / predicted TPOT."""
        return self.row.measured_tpot_ms / self.predicted_tpot_ms


def row_layout(row: Measurement) -> Layout:
    """The replica layout a measurement row names (``pp``, ``ep``, ``dp_attention`` default 1)."""
    return Layout(row.tp, row.pp, row.ep, row.dp_attention)


def skip_reason(row: Measurement, catalog: Catalog, preset: Preset) -> str | None:
    """Why ``row`` is not predicted (unknown model or GPU, impossible TP or EP degree; weights and
    one sequence that do not fit in memory, the model's error, starting :data:`MODEL_ERROR`), or
    None."""
    if row.model not in catalog.models:
        return f"unknown model {row.model!r}{nearest(row.model, catalog.models)}"
    if row.gpu not in catalog.gpus:
        return f"unknown GPU {row.gpu!r}{nearest(row.gpu, catalog.gpus)}"
    llm, gpu = catalog.models[row.model], catalog.gpus[row.gpu]
    if row.pp > 1 or row.dp_attention > 1:  # a replica beyond one TP group: the layout's rules
        problem = layout_problem(llm, gpu, row_layout(row))
        if problem is None and speculation(row, preset)[0] > 0:
            problem = "speculative decoding is modelled for tensor-parallel replicas only (pp and dp_attention 1)"
    else:
        problem = tp_problem(llm, gpu, row.tp) or ep_problem(llm, row.tp, row.ep)
    if problem:
        return problem
    if running_batch(row, catalog, preset) < 1:
        e = _step(dataclasses.replace(row, batch=1), catalog, preset, aggregated=False)
        need, usable = e.memory_needed_bytes / 1e9, e.memory_usable_bytes / 1e9
        return (f"{MODEL_ERROR}the weights and one sequence need {need:,.0f} GB, {row.tp} x {row.gpu} hold "
                f"{usable:,.0f} GB usable, yet the row was measured running")
    return None


def running_batch(row: Measurement, catalog: Catalog, preset: Preset) -> int:
    """Sequences ``row``'s engine decodes at once: its concurrency, or fewer where their KV cache
    does not fit next to the weights in the engine's memory budget or the engine caps them (the rest
    queue for a slot); 0 where not even one whole context fits.

    A paged cache allocates a sequence's blocks as it grows, so under continuous batching the
    running sequences hold on average their prompt and half their output (requests in a closed loop
    are spread evenly over their decode), not the full context the planner reserves; a static batch
    holds the full context at its end, and so does an engine that admits a request only with room
    for its whole context (``Physics.whole_context_admission``). The cache's precision and the
    budget are the run's as far as they are known (:func:`memory_budget`)."""
    e = _step(row, catalog, preset, aggregated=False)
    engine = normalize_engine(row.engine)
    recipe = server_recipe(row, catalog)
    full = row.input_tokens + row.output_tokens
    held = e.kv_bytes_held_per_sequence * _kv_scale(row, preset, recipe, e.kv_precision)
    one = held  # one sequence's whole context, the least a measured run needs
    if row.batching == "continuous" and (preset.physics is None or engine not in preset.physics.whole_context_admission):
        held *= (row.input_tokens + 0.5 * row.output_tokens) / full
    weights = e.memory_needed_bytes - row.batch * e.kv_bytes_held_per_sequence
    free = memory_budget(row, preset, recipe, e) - weights
    if free < one:
        return 0
    cap = min(c for c in (e.batch_cap, recipe.max_running_requests if recipe else None, row.batch) if c is not None)
    return max(1, min(cap, math.floor(free / max(held, 1.0))))


def server_recipe(row: Measurement, catalog: Catalog) -> ServerRecipe | None:
    """The launch settings of ``row``'s run: the first recipe of its harness (matched by
    ``source_id``) for its engine, model, GPU, precision and TP, else None."""
    h = catalog.harness_for(row.source_id) if row.source_id else None
    if h is None:
        return None
    return h.recipe_for(normalize_engine(row.engine) or "", row.model, row.gpu, row.precision, row.tp)


def recv_interval(row: Measurement, catalog: Catalog) -> int:
    """Decode steps between the polls for new requests of ``row``'s engine at its concurrency: its
    recipe's (:meth:`~fleetplan.catalogs.schema.ServerRecipe.recv_interval`), else 1."""
    recipe = server_recipe(row, catalog)
    return recipe.recv_interval(row.batch) if recipe is not None else 1


def _kv_scale(row: Measurement, preset: Preset, recipe: ServerRecipe | None, step_kv: str) -> float:
    """Bytes of ``row``'s cache as the engine held it over the bytes at ``step_kv``: the row's own KV
    precision, else its recipe's, else the engine's rule for quantised checkpoints
    (:meth:`~fleetplan.models.physics.Physics.benchmark_kv_cache_precision`)."""
    if row.kv_precision is not None:
        return 1.0
    kv = recipe.kv_cache_precision if recipe is not None else None
    if kv is None and preset.physics is not None:
        kv = preset.physics.benchmark_kv_cache_precision(normalize_engine(row.engine), row.precision)
    return bytes_per_value(kv) / bytes_per_value(step_kv) if kv is not None else 1.0


def memory_budget(row: Measurement, preset: Preset, recipe: ServerRecipe | None, e: StepEstimate) -> float:
    """Bytes ``row``'s engine gives weights and KV cache over the replica's GPUs: the recipe's
    ``memory_fraction`` of their memory where the run set one; the weights plus the engine's share
    of the memory they leave free where its cache is sized so (TensorRT-LLM's
    ``free_gpu_memory_fraction``, :meth:`~fleetplan.models.physics.Physics.kv_free_share`); else
    the preset's usable share, as the planner holds it."""
    whole = e.memory_usable_bytes / preset.usable_memory_fraction
    if recipe is not None and recipe.memory_fraction is not None:
        return whole * recipe.memory_fraction
    share = preset.physics.kv_free_share(normalize_engine(row.engine)) if preset.physics is not None else None
    if share is None:
        return e.memory_usable_bytes
    weights = e.memory_needed_bytes - row.batch * e.kv_bytes_held_per_sequence
    return weights + share * max(whole - weights, 0.0)


def row_arrival(row: Measurement, catalog: Catalog) -> Arrival:
    """How ``row``'s benchmark clients arrived: its own ``arrival_pattern`` / ``length_range_ratio``
    columns (source ``row``), else the catalog harness its ``source_id`` starts with (source its
    id), else fixed-length waves (``default``); ``harness`` is the matched harness in every case."""
    h = catalog.harness_for(row.source_id) if row.source_id else None
    harness = h.id if h is not None else ""
    if row.arrival_pattern is not None or row.length_range_ratio is not None:
        ratio = row.length_range_ratio
        pattern = row.arrival_pattern or ("waves" if ratio is not None and ratio >= 1.0 else "steady")
        return Arrival(pattern, 1.0 if pattern == "waves" else ratio, "row", harness)
    if h is not None:
        ratio = h.length_range_ratio
        return Arrival(h.arrival_pattern, 1.0 if h.arrival_pattern == "waves" else ratio, h.id, harness)
    return Arrival()


def engine_known(row: Measurement, preset: Preset) -> bool:
    """Whether the preset has fitted figures for ``row``'s engine (else the engines' mean share and
    fixed latency stand in); a preset without physics uses none, so every engine is known to it."""
    if preset.physics is None:
        return True
    return any(e.engine == normalize_engine(row.engine) for e in preset.physics.engines)


def prompt_hit_rate(row: Measurement, preset: Preset) -> float:
    """Share of each of ``row``'s prompts its run served from the prefix cache: the row's own
    ``prefix_cache_hit_rate``, else the preset's rule for its engine and release
    (:meth:`~fleetplan.models.physics.Physics.benchmark_hit_rate`), else 0."""
    if row.prefix_cache_hit_rate is not None:
        return row.prefix_cache_hit_rate
    if preset.physics is None:
        return 0.0
    return preset.physics.benchmark_hit_rate(normalize_engine(row.engine), row.engine_version)


def speculation(row: Measurement, preset: Preset) -> tuple[int, float]:
    """(draft tokens, accepted tokens per step) of ``row``'s run: the row's own columns, else the
    preset's rule for its engine, release and model
    (:meth:`~fleetplan.models.physics.Physics.benchmark_speculative`), else plain decoding (0, 1)."""
    if row.draft_tokens is not None and row.accepted_tokens_per_step is not None:
        return row.draft_tokens, row.accepted_tokens_per_step
    if preset.physics is None:
        return 0, 1.0
    return preset.physics.benchmark_speculative(normalize_engine(row.engine), row.engine_version, row.model)


def _step(row: Measurement, catalog: Catalog, preset: Preset, aggregated: bool, hit_rate: float = 0.0) -> StepEstimate:
    """The decode step of ``row``'s configuration (with the benchmark's prefill when ``aggregated``,
    ``hit_rate`` of each prompt from the prefix cache, speculative decoding as :func:`speculation`)."""
    draft, accepted = speculation(row, preset)
    return decode_step(
        catalog.models[row.model], catalog.gpus[row.gpu], precision=row.precision, tp=row.tp, batch=row.batch,
        input_tokens=row.input_tokens, output_tokens=row.output_tokens, preset=preset,
        kv_precision=row.kv_precision, ep=row.ep, engine=row.engine, aggregated=aggregated,
        layout=row_layout(row) if row.pp > 1 or row.dp_attention > 1 else None, prefix_cache_hit_rate=hit_rate,
        draft_tokens=draft, accepted_tokens_per_step=accepted, engine_version=row.engine_version,
    )


def predict(row: Measurement, catalog: Catalog, preset: Preset) -> Prediction:
    """The preset's TPOT and TTFT for one measured configuration (model and GPU must be known).

    Where the engine runs fewer sequences than the row's concurrency (:func:`running_batch`), TPOT
    is that of the running batch, and a closed loop of B clients over R slots makes each request
    queue for ``(B / R - 1)`` request times (Little's law: R slots each serve one request per
    TTFT + O x TPOT) before its own TTFT at the running batch. A calibration's ``ttft_scale``
    multiplies the TTFT last."""
    running = running_batch(row, catalog, preset)
    if 1 <= running < row.batch:
        p = _predict_running(dataclasses.replace(row, batch=running), catalog, preset)
        service_ms = p.predicted_ttft_ms + row.output_tokens * p.predicted_tpot_ms
        queue_ms = (row.batch / running - 1.0) * service_ms if row.batching == "continuous" else 0.0
        p = dataclasses.replace(p, row=row, predicted_ttft_ms=p.predicted_ttft_ms + queue_ms,
                                predicted_ttft_p99_ms=p.predicted_ttft_p99_ms + queue_ms)
    else:
        p = _predict_running(row, catalog, preset)
    gpu = catalog.gpus[row.gpu]
    llm = catalog.models[row.model]
    scale = preset.factors_for(gpu.id, gpu.family, row.engine, model_kind(llm), llm.id).ttft_scale
    if scale == 1.0:
        return p
    return dataclasses.replace(p, predicted_ttft_ms=p.predicted_ttft_ms * scale,
                               predicted_ttft_p99_ms=p.predicted_ttft_p99_ms * scale)


def _predict_running(row: Measurement, catalog: Catalog, preset: Preset) -> Prediction:
    """:func:`predict` for a row whose batch all runs at once."""
    llm = catalog.models[row.model]
    continuous = row.batching == "continuous"
    hits = prompt_hit_rate(row, preset)
    est = _step(row, catalog, preset, aggregated=continuous, hit_rate=hits)
    decode_only = _step(row, catalog, preset, aggregated=False) if continuous else est
    work = prefill_flops(llm, preset, row.input_tokens, hits)
    prompt_s = _prompt_s(row, catalog, preset, work)
    arrival = row_arrival(row, catalog)
    if continuous:
        mean = arrival.mean_length_share()
        mean_prompt_s = prompt_s if mean >= 1.0 else _prompt_s(
            row, catalog, preset, prefill_flops(llm, preset, row.input_tokens * mean, hits))
        ttft, tail = benchmark_ttft_percentiles_s(
            preset, prefill_s=mean_prompt_s, step_s=decode_only.step_time_s, batch=row.batch,
            input_tokens=row.input_tokens, engine=row.engine, busy_share=est.prefill_busy_share,
            engine_version=row.engine_version, arrival=arrival, output_tokens=row.output_tokens * mean,
            tail_prefill_s=prompt_s, attention_dp=row.dp_attention, recv_interval_steps=recv_interval(row, catalog))
    else:  # static batching: every prompt of the batch is prefilled, then one step
        ttft = tail = ttft_s(prefill_s=prompt_s, requests_ahead=row.batch - 1, steps=1.0, step_s=est.step_time_s,
                             utilisation=0.0)
    draft, accepted = speculation(row, preset)
    tpot = est.step_time_s / est.accepted_tokens_per_step  # the step over the tokens it gains a sequence
    return Prediction(row=row, estimate=est, predicted_tpot_ms=tpot * 1e3, predicted_ttft_ms=ttft * 1e3,
                      decode_step_time_ms=decode_only.step_time_s * 1e3, prefill_flops_per_request=work,
                      prefix_cache_hit_rate=hits, draft_tokens=draft, accepted_tokens_per_step=accepted,
                      running_batch=row.batch, engine_known=engine_known(row, preset), arrival=arrival,
                      predicted_ttft_p99_ms=tail * 1e3)


def _prompt_s(row: Measurement, catalog: Catalog, preset: Preset, flops: float) -> float:
    """Prefill service time of one of ``row``'s prompts of ``flops`` work."""
    return prefill_service_s(catalog.models[row.model], catalog.gpus[row.gpu], preset, precision=row.precision,
                             tp=row.tp, flops=flops, engine=row.engine)


def predict_all(
    rows: Iterable[Measurement], catalog: Catalog, preset: Preset
) -> tuple[list[Prediction], list[tuple[Measurement, str]]]:
    """Predictions for every row the catalog can model, and the skipped rows with the reason."""
    done: list[Prediction] = []
    skipped: list[tuple[Measurement, str]] = []
    for r in rows:
        reason = skip_reason(r, catalog, preset)
        if reason:
            skipped.append((r, reason))
        else:
            done.append(predict(r, catalog, preset))
    return done, skipped


def error_stats(measured: Sequence[float], predicted: Sequence[float]) -> dict[str, float | int]:
    """Median measured/predicted ratio, shares within 1.25x/1.5x/2x, MAPE (as fractions)."""
    n = len(measured)
    if n == 0:
        return {"rows": 0}
    ratios = sorted(m / p for m, p in zip(measured, predicted, strict=True))
    mid = n // 2
    median = ratios[mid] if n % 2 else math.sqrt(ratios[mid - 1] * ratios[mid])
    out: dict[str, float | int] = {"rows": n, "median_ratio": median}
    for w in WITHIN:
        out[f"within_{w:g}x"] = sum(1 for r in ratios if max(r, 1 / r) <= w * (1 + 1e-12)) / n
    out["mape"] = sum(abs(p - m) / m for m, p in zip(measured, predicted, strict=True)) / n
    return out


def group_key(row: Measurement, by: str) -> str:
    """The value of column ``by`` used to group rows (engines normalised: vllm, sglang, trtllm...)."""
    if by == "engine":
        return normalize_engine(row.engine) or ""
    if by == "tp":
        return str(row.tp)
    return str(getattr(row, by))


def summarize(
    rows: Sequence[Measurement], predicted_ms: Sequence[float], groups: Sequence[str] = GROUPS
) -> dict[str, Any]:
    """Error statistics overall and per value of each grouping column."""
    summary: dict[str, Any] = {"overall": error_stats([r.measured_tpot_ms for r in rows], predicted_ms)}
    for by in groups:
        buckets: dict[str, tuple[list[float], list[float]]] = {}
        for r, p in zip(rows, predicted_ms, strict=True):
            m_list, p_list = buckets.setdefault(group_key(r, by), ([], []))
            m_list.append(r.measured_tpot_ms)
            p_list.append(p)
        order: Callable[[str], Any] = (lambda k: (len(k), k)) if by == "tp" else (lambda k: k)
        summary[f"by_{by}"] = {k: error_stats(*buckets[k]) for k in sorted(buckets, key=order)}
    return summary


def ttft_stats(predictions: Sequence[Prediction]) -> dict[str, float | int]:
    """Error statistics of TTFT over the rows that report a measured TTFT."""
    pairs = [(p.row.measured_ttft_ms, p.predicted_ttft_ms) for p in predictions if p.row.measured_ttft_ms]
    return error_stats([m for m, _ in pairs if m is not None], [p for _, p in pairs])


def ttft_p99_stats(predictions: Sequence[Prediction]) -> dict[str, float | int]:
    """Error statistics of the 99th-percentile TTFT over the rows that report a measured one."""
    pairs = [(p.row.measured_ttft_p99_ms, p.predicted_ttft_p99_ms) for p in predictions if p.row.measured_ttft_p99_ms]
    return error_stats([m for m, _ in pairs if m is not None], [p for _, p in pairs])


def arrival_counts(predictions: Sequence[Prediction]) -> dict[str, int]:
    """Rows predicted per arrival pattern (``waves``, ``steady``), in that order."""
    return {k: sum(1 for p in predictions if p.arrival.pattern == k) for k in ("waves", "steady")}

"""The decode-step roofline of the seed document, as pure functions.

For one decode step of a replica (a TP group of ``tp`` GPUs) running ``batch`` sequences:

    bytes = W + B x KV_seq_read                       (weights once, every sequence's KV)
    FLOPs = 2 x P_active x B
    memory_time  = bytes / (tp x bandwidth x bandwidth_efficiency)
    compute_time = FLOPs / (tp x FLOP/s x compute_efficiency)
    step_time    = max(memory_time, compute_time)
    per-user tokens/s = 1 / step_time;  replica tokens/s = B / step_time

Memory check: W_held + B x KV_seq_held <= tp x allocatable memory x usable_memory_fraction (W_held: the
checkpoint's bytes by tensor class, FP4 block scales included, :func:`~fleetplan.models.memory.held_weight_bytes`).

That is the ``seed`` preset exactly. The ``default`` preset (``composition="kernels"``)
treats the weight GEMMs and attention as separate kernels and adds the terms of
:mod:`fleetplan.models.physics`:

    weights_time = W_read / (tp x bandwidth x eff_family)   (W_read: MoE touched experts only,
                   each at the grouped GEMM's small-group cost; weight-only FP4 dequantised)
    kv_time      = B x KV_seq_read x page_factor / (tp x bandwidth x eff_family x eff_kv)
    step_time    = max(weights_time, compute_time) + kv_time + prefill_time
                   + communication + fixed overhead

where ``page_factor`` (:func:`kv_page_factor`) rounds each sequence's KV read up to whole pages of
the engine's paged cache and adds a fixed cost per page, and ``prefill_time`` is the compute time of the prefill work the step carries (chunked
prefill of newly admitted requests) at the prefill compute efficiency. Every term is non-decreasing in ``B`` and
``step_time / B`` is non-increasing, so replica throughput never falls as the batch grows.
A calibration profile scales these terms per GPU and engine. ``fits`` also requires the
batch to stay within the engine's cap on concurrent sequences.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from fleetplan.catalogs.schema import GPU, LLM
from fleetplan.models.communication import parallel_comm_time_s
from fleetplan.models.interference import prefill_busy_share, share_before_first_token
from fleetplan.models.interference import prefill_flops_per_step as aggregated_prefill_flops
from fleetplan.models.prefill import prefill_flops_per_request
from fleetplan.models.memory import (bytes_per_value, held_weight_bytes, kv_bytes_per_sequence, kv_replication_factor,
                                     usable_memory_bytes, weight_bytes)
from fleetplan.models.moe import (busiest_expert_share, grouped_params_read_per_step, params_read_per_step,
                                  routed_expert_params)
from fleetplan.models.overhead import dequant_time_s, host_time_s, layer_time_s
from fleetplan.models.presets import CalibrationFactors, Preset, normalize_engine

if TYPE_CHECKING:
    from fleetplan.models.layout import Layout


@dataclass(frozen=True)
class StepEstimate:
    """The roofline breakdown of one decode step. Times in seconds, sizes in bytes."""

    weight_bytes: float
    kv_bytes_read_per_sequence: float
    kv_bytes_held_per_sequence: float
    bytes_per_step: float
    flops_per_step: float
    memory_time_s: float
    compute_time_s: float
    step_time_s: float
    bound: str
    per_user_tokens_per_s: float
    replica_tokens_per_s: float
    memory_needed_bytes: float
    memory_usable_bytes: float
    kv_precision: str
    compute_precision: str
    weight_bytes_read: float = 0.0
    weights_time_s: float = 0.0
    kv_time_s: float = 0.0
    prefill_time_s: float = 0.0
    comm_time_s: float = 0.0
    overhead_time_s: float = 0.0
    batch: int = 0
    batch_cap: int | None = None
    ep: int = 1
    prefill_busy_share: float = 0.0
    draft_time_s: float = 0.0
    accepted_tokens_per_step: float = 1.0

    @property
    def fits(self) -> bool:
        """Whether weights plus every sequence's KV fit in usable memory, and the batch is
        within the engine's cap on concurrent sequences."""
        within_cap = self.batch_cap is None or self.batch <= self.batch_cap
        return self.memory_needed_bytes <= self.memory_usable_bytes and within_cap

    def as_dict(self) -> dict[str, float | str | bool]:
        """Plain dict with the seconds also given in milliseconds."""
        d: dict[str, float | str | bool] = dict(asdict(self))
        d["memory_time_ms"] = self.memory_time_s * 1e3
        d["compute_time_ms"] = self.compute_time_s * 1e3
        d["step_time_ms"] = self.step_time_s * 1e3
        for key in ("weights_time", "kv_time", "prefill_time", "comm_time", "overhead_time", "draft_time"):
            d[f"{key}_ms"] = float(d[f"{key}_s"]) * 1e3
        d["fits_in_memory"] = self.fits
        return d


def effective_kv_precision(preset: Preset, kv_precision: str | None) -> str:
    """KV-cache precision used: bf16 in the seed preset, the product's choice otherwise."""
    if not preset.kv_precision_from_product or kv_precision is None:
        return "bf16"
    return kv_precision


def compute_precision(preset: Preset, gpu: GPU, precision: str) -> str:
    """Precision whose dense rate bounds compute: bf16 (seed), else the weights' if supported."""
    if preset.compute_precision == "bf16" or precision not in gpu.dense_flops_per_s:
        return "bf16"
    return precision


def kv_context_tokens(preset: Preset, input_tokens: float, output_tokens: float) -> tuple[float, float]:
    """(tokens of KV read per step, tokens of KV held) for one sequence."""
    held = input_tokens + output_tokens
    read = held if preset.decode_context == "full" else input_tokens + output_tokens / 2
    return read, held


def kv_bytes_read_and_held(
    llm: LLM, preset: Preset, tp: int, kv_prec: str, input_tokens: float, output_tokens: float
) -> tuple[float, float]:
    """(KV bytes one sequence's step reads, KV bytes it holds: paged, with head replication)."""
    read_tokens, held_tokens = kv_context_tokens(preset, input_tokens, output_tokens)
    replication = kv_replication_factor(llm, tp) if preset.kv_head_replication else 1.0
    block = preset.physics.kv_block_tokens if (preset.paged_kv and preset.physics is not None) else 1
    kv_read = kv_bytes_per_sequence(llm, kv_prec, read_tokens, preset.sliding_window) * replication
    kv_held = kv_bytes_per_sequence(llm, kv_prec, held_tokens, preset.sliding_window, block) * replication
    return kv_read, kv_held


def kv_page_factor(preset: Preset, engine: str | None, read_tokens: float) -> float:
    """Time of reading a sequence's KV cache in pages against reading its ``read_tokens`` tokens.

    Paged attention reads whole pages of the engine's ``kv_page_tokens`` P (1 for no physics or
    no paged KV), ceil(n / P) of them for n tokens, and each page costs a fixed overhead worth c
    tokens of reading (``Physics.kv_page_overhead``): factor = ceil(n / P) x (P + c) / n. An engine
    with one-token pages (SGLang) pays c per token, 16-token pages (vLLM) c / 16.
    """
    physics = preset.physics
    if physics is None or not preset.paged_kv or read_tokens <= 0:
        return 1.0
    page = physics.engine(normalize_engine(engine)).kv_page_tokens
    return math.ceil(read_tokens / page) * (page + physics.kv_page_overhead) / read_tokens


def model_kind(llm: LLM) -> str:
    """``moe`` for a mixture-of-experts model, else ``dense`` (calibration factors differ by kind)."""
    return "dense" if llm.moe is None else "moe"


def bandwidth_efficiency(preset: Preset, gpu: GPU) -> float:
    """Share of datasheet memory bandwidth decode kernels sustain: per family with physics."""
    return preset.bandwidth_efficiency if preset.physics is None else preset.physics.family(gpu.family).bandwidth_efficiency


def usable_flop_rate(preset: Preset, gpu: GPU, precision: str, tp: int, factors: CalibrationFactors, prefill: bool) -> float:
    """FLOP/s a ``tp``-GPU replica sustains: decode GEMMs at ``compute_efficiency``, prefill (GEMMs
    at large M) at ``prefill_compute_efficiency``, both scaled by the calibration.

    FP8 and FP4 tensor cores speed up the weight GEMMs only: the physics' ``bf16_work_share`` s of
    the work (attention's matrix products, norms, activation quantisation, the MoE router) runs at
    the bf16 rate R16 whatever the weights, so a precision of datasheet rate R > R16 sustains
    R16 / (s + (1 - s) x R16 / R) (Amdahl's law; R16 itself at bf16 or on a GPU without the
    precision's tensor cores)."""
    eff = preset.prefill_compute_efficiency if prefill else preset.compute_efficiency
    return tp * mixed_precision_rate(preset, gpu, precision) * eff * factors.compute_scale


def mixed_precision_rate(preset: Preset, gpu: GPU, precision: str) -> float:
    """Datasheet FLOP/s of ``precision``'s work on ``gpu`` with the physics' ``bf16_work_share`` at
    the bf16 rate (:func:`usable_flop_rate`); the plain rate of the compute precision without physics."""
    rate = gpu.flops_per_s(compute_precision(preset, gpu, precision))
    bf16 = gpu.flops_per_s("bf16")
    share = preset.physics.bf16_work_share if preset.physics is not None else 0.0
    if share <= 0.0 or rate <= bf16:
        return rate
    return bf16 / (share + (1.0 - share) * bf16 / rate)


def weight_bytes_read(llm: LLM, gpu: GPU, preset: Preset, precision: str, batch: int,
                      ep: int = 1) -> tuple[float, float]:
    """(bytes a step reads, bytes-equivalent of the time reading them takes).

    With MoE expert sampling a step reads the touched experts only, and the grouped GEMM's
    small-group cost and the dequantisation of weight-only FP4 (a GPU without FP4 tensor
    cores) lengthen the read (:mod:`fleetplan.models.physics`). With expert parallelism over
    ``ep`` > 1 GPUs (and the physics' ``expert_parallel_busiest``) the routed experts are timed at
    the GPU holding the most touched ones (:func:`~fleetplan.models.moe.busiest_expert_share`)."""
    if not preset.moe_expert_sampling:
        w = weight_bytes(llm, precision)
        return w, w
    bpv = bytes_per_value(precision)
    read = params_read_per_step(llm, batch) * bpv
    physics = preset.physics
    if physics is None:
        return read, read
    timed_params = grouped_params_read_per_step(llm, batch, physics.moe_small_group_tokens)
    if physics.expert_parallel_busiest and ep > 1 and llm.moe is not None:
        dense = llm.total_params - routed_expert_params(llm)
        share = busiest_expert_share(llm.moe.num_experts, llm.moe.experts_per_token, float(batch), ep)
        timed_params = dense + (timed_params - dense) * share
    timed = timed_params * bpv
    if precision == "fp4" and precision not in gpu.dense_flops_per_s:
        timed *= physics.weight_only_fp4_dequant_factor
    return read, timed


def benchmark_share_ahead(preset: Preset, engine: str | None, busy_share: float = 0.0,
                          engine_version: str = "") -> float:
    """Share of the other requests' prompts a closed-loop benchmark prefills before a request's
    first token: the share of the engine at ``engine_version``
    (:meth:`~fleetplan.models.physics.Physics.prefill_before_first_token`), lowered as prefill
    takes a larger ``busy_share`` of the cycle
    (:func:`~fleetplan.models.interference.share_before_first_token`); none without physics."""
    if preset.physics is None:
        return 0.0
    base = preset.physics.prefill_before_first_token(normalize_engine(engine), engine_version)
    return share_before_first_token(base, busy_share, preset.physics.busy_share_exponent)


def benchmark_prefill_share(preset: Preset, engine: str | None, busy_share: float = 0.0,
                            engine_version: str = "") -> float:
    """Share of the other requests' prompts a closed-loop benchmark's decode steps carry:
    1 - :func:`benchmark_share_ahead` (all of them without physics)."""
    return 1.0 - benchmark_share_ahead(preset, engine, busy_share, engine_version)


def benchmark_busy_share(llm: LLM, gpu: GPU, preset: Preset, *, precision: str, tp: int, batch: int,
                         input_tokens: float, output_tokens: float, decode_step_s: float,
                         factors: CalibrationFactors, hit_rate: float = 0.0) -> float:
    """Busy share of prefill in a closed-loop benchmark
    (:func:`~fleetplan.models.interference.prefill_busy_share`): each prompt's FLOPs (the first
    ``hit_rate`` of it from the prefix cache) at the replica's prefill rate against
    ``output_tokens`` decode steps of ``decode_step_s`` (the step without the benchmark's prefill)."""
    flops = prefill_flops_per_request(llm, input_tokens, hit_rate, attention=True)
    prompt_s = flops / usable_flop_rate(preset, gpu, precision, tp, factors, prefill=True)
    return prefill_busy_share(batch, prompt_s, output_tokens, decode_step_s)


def _extra_times(llm: LLM, gpu: GPU, preset: Preset, tp: int, ep: int, batch: int, factors: CalibrationFactors,
                 prefill_flops: float = 0.0, precision: str = "", tokens: float | None = None) -> tuple[float, float]:
    """(communication, overhead) seconds of one step, zero where the preset has neither. The
    all-reduces carry the ``tokens`` the step decodes (``batch`` unless speculative decoding
    verifies more per sequence) and, with ``prefill_communication``, the activations of the
    prompt tokens the step prefills (``prefill_flops`` at 2 x P_active per token); the overhead
    is the layers' fixed GPU time plus the host's work per sequence (:mod:`fleetplan.models.overhead`)."""
    physics = preset.physics
    if physics is None:
        return 0.0, 0.0
    comm = 0.0
    if preset.communication:
        prefill_tokens = prefill_flops / (2.0 * llm.active_params) if physics.prefill_communication else 0.0
        decoded = batch if tokens is None else tokens
        comm = parallel_comm_time_s(llm, gpu, physics, tp=tp, ep=ep, tokens=decoded + prefill_tokens) * factors.comm_scale
    if not preset.step_overhead:
        return comm, 0.0
    fixed = layer_time_s(llm, gpu, physics) + dequant_time_s(llm, gpu, physics, precision)
    return comm, (fixed + host_time_s(gpu, physics, batch)) * factors.overhead_scale


def _benchmark_prefill_flops(llm: LLM, preset: Preset, engine: str | None, batch: int, input_tokens: float,
                             output_tokens: float, busy_share: float, hit_rate: float = 0.0,
                             engine_version: str = "") -> float:
    """Prefill FLOPs per step of a closed-loop continuous-batching benchmark: the engine's share of
    the other ``batch - 1`` requests' prefill (:mod:`fleetplan.models.interference`) at the
    benchmark's prefill ``busy_share``, the first ``hit_rate`` of each prompt from the prefix cache."""
    share = benchmark_prefill_share(preset, engine, busy_share, engine_version)
    return aggregated_prefill_flops(llm, max(batch - 1, 0), input_tokens, output_tokens, share, hit_rate)


def _benchmark_load(
    llm: LLM, gpu: GPU, preset: Preset, engine: str | None, aggregated: bool, kwargs: dict[str, Any],
    hit_rate: float = 0.0, engine_version: str = "",
) -> tuple[float, float]:
    """(prefill FLOPs per step, prefill busy share) of a closed-loop benchmark of the decode step
    ``kwargs`` describes (its engine at ``engine_version``), whose prompts come ``hit_rate`` from
    the prefix cache; zeros unless the
    step is one of such a benchmark (``aggregated``) and the preset models its prefill; the busy
    share needs the step without that prefill, computed once more only when the preset's share
    depends on it."""
    if not (aggregated and preset.prefill_interference):
        return 0.0, 0.0
    physics = preset.physics
    busy = 0.0
    steps = kwargs["output_tokens"] / kwargs.get("accepted_tokens_per_step", 1.0)  # decode steps per request
    if physics is not None and physics.busy_share_exponent > 0:
        plain = decode_step(llm, gpu, preset=preset, engine=engine, **kwargs)
        factors = preset.factors_for(gpu.id, gpu.family, engine, model_kind(llm), llm.id)
        busy = benchmark_busy_share(
            llm, gpu, preset, precision=kwargs["precision"], tp=kwargs["tp"], batch=kwargs["batch"],
            input_tokens=kwargs["input_tokens"], output_tokens=steps,
            decode_step_s=plain.step_time_s, factors=factors, hit_rate=hit_rate)
    flops = _benchmark_prefill_flops(llm, preset, engine, kwargs["batch"], kwargs["input_tokens"],
                                     steps, busy, hit_rate, engine_version)
    return flops, busy


def _layout_decode_step(llm: LLM, gpu: GPU, layout: Layout, draft_tokens: int, args: dict[str, Any]) -> StepEstimate:
    """A replica with pipeline, expert or attention-data parallelism: its step is the layout's
    (:func:`fleetplan.models.layout.layout_step`, built on this module's single-replica step)."""
    from fleetplan.models.layout import layout_step

    if draft_tokens:  # validate skips such rows (models.validation.skip_reason)
        raise ValueError("speculative decoding is modelled for tensor-parallel replicas only")

    return layout_step(llm, gpu, layout, **args)


def _timed_parts(
    llm: LLM, gpu: GPU, preset: Preset, factors: Any, precision: str, tp: int, weights_time: float,
    kv_bytes: float, bandwidth: float, compute_time: float, prefill_flops_per_step: float, draft_tokens: int,
    engine: str | None = None, kv_read_tokens: float = 0.0,
) -> tuple[float, float, float, float]:
    """The default composition's timed parts of a decode step: the weights' read time, the KV
    cache's read time at its own bandwidth efficiency in ``engine``'s pages of a sequence's
    ``kv_read_tokens`` (:func:`kv_page_factor`), the carried prefill at the prefill
    efficiency and, with speculative decoding, k passes of a one-layer draft head
    (k / num_layers of the step's GPU time plus one layer's fixed cost).

    Speculative decoding (``draft_tokens`` k > 0): each step verifies k + 1 tokens per sequence
    (the weights and KV cache read once, k + 1 times the FLOPs, expert routing and all-reduced
    activations) after the k draft passes, and yields ``accepted_tokens_per_step`` tokens per
    sequence on average (1 to k + 1): a decode step's ``step_time_s`` is the time of one such
    step, ``per_user_tokens_per_s`` its accepted tokens per second, and a request of O output
    tokens takes O / accepted steps."""
    kv_eff = preset.physics.kv_bandwidth_efficiency if preset.physics is not None else 1.0
    kv_time = kv_bytes / (bandwidth * kv_eff) * kv_page_factor(preset, engine, kv_read_tokens)
    prefill_time = prefill_flops_per_step / usable_flop_rate(preset, gpu, precision, tp, factors, prefill=True)
    draft = 0.0
    if draft_tokens:
        layer = layer_time_s(llm, gpu, preset.physics) if preset.physics is not None else 0.0
        draft = draft_tokens / llm.num_layers * (max(weights_time, compute_time) + kv_time + layer)
    return weights_time, kv_time, prefill_time, draft


def _sequence_cap(preset: Preset) -> int | None:
    """The engine's cap on running sequences when the preset applies one (None: no cap)."""
    return preset.physics.max_num_seqs if (preset.sequence_cap and preset.physics is not None) else None


def _compose(
    llm: LLM, gpu: GPU, preset: Preset, factors: Any, precision: str, tp: int, seed: bool, memory_time: float,
    weights_time: float, kv_bytes: float, bandwidth: float, compute_time: float, prefill_flops_per_step: float,
    draft_tokens: int, comm: float, overhead: float, engine: str | None = None, kv_read_tokens: float = 0.0,
) -> tuple[float, float, float, float, float, str]:
    """A decode step's parts put together: the weights', KV cache's (read in ``engine``'s pages of a
    sequence's ``kv_read_tokens``), carried prefill's and draft head's times, the step time and what
    bounds it. The seed composition (``seed``) takes the
    larger of the memory and compute times; the default one adds the KV cache's read and the
    prefill to the larger of the weights' read and the compute (:func:`_timed_parts`)."""
    if seed:
        parts = {"memory": memory_time, "compute": compute_time}
        step = max(memory_time, compute_time) + comm + overhead
        return memory_time, 0.0, 0.0, 0.0, step, max(parts, key=lambda k: parts[k])
    weights_time, kv_time, prefill_time, draft = _timed_parts(
        llm, gpu, preset, factors, precision, tp, weights_time, kv_bytes, bandwidth,
        compute_time, prefill_flops_per_step, draft_tokens, engine, kv_read_tokens)
    step = max(weights_time, compute_time) + kv_time + draft + prefill_time + comm + overhead
    parts = {"memory": weights_time + kv_time if weights_time >= compute_time else kv_time,
             "compute": compute_time + prefill_time, "communication": comm, "overhead": overhead}
    return weights_time, kv_time, prefill_time, draft, step, max(parts, key=lambda k: parts[k])


def decode_step(
    llm: LLM, gpu: GPU, *, precision: str, tp: int, batch: int, input_tokens: float, output_tokens: float,
    preset: Preset, kv_precision: str | None = None, prefill_flops_per_step: float = 0.0, ep: int = 1,
    engine: str | None = None, aggregated: bool = False, layout: Layout | None = None,
    prefix_cache_hit_rate: float = 0.0, draft_tokens: int = 0, accepted_tokens_per_step: float = 1.0,
    engine_version: str = "",
) -> StepEstimate:
    """Estimate of one decode step of a ``tp``-GPU replica running ``batch`` sequences: the one
    function every decode step time comes from (``estimate``, the planner, ``validate``).

    ``prefill_flops_per_step``: prefill work the step carries (chunked prefill on a colocated
    replica), FLOPs of the step in the seed composition, time at the prefill efficiency in the
    default one. ``aggregated=True``: a closed-loop benchmark, where ``prefill_interference`` adds
    the engine's share of the other ``batch - 1`` prompts (:mod:`fleetplan.models.interference`).
    ``ep``: expert-parallel degree; ``engine``: calibration and prefill scheduling; ``layout``
    (pipeline, expert, attention-data parallelism): :func:`fleetplan.models.layout.layout_step`.
    ``prefix_cache_hit_rate``: share of each benchmark prompt served from the prefix cache and
    ``engine_version``: the benchmark's engine release (both only with ``aggregated``).

    Speculative decoding (``draft_tokens`` k > 0, ``accepted_tokens_per_step``): see :func:`_timed_parts`.
    """
    if layout is not None and not layout.is_tensor_parallel_only:
        return _layout_decode_step(llm, gpu, layout, draft_tokens, dict(
            precision=precision, batch=batch, input_tokens=input_tokens, output_tokens=output_tokens, preset=preset,
            kv_precision=kv_precision, prefill_flops_per_step=prefill_flops_per_step, engine=engine,
            aggregated=aggregated, prefix_cache_hit_rate=prefix_cache_hit_rate, engine_version=engine_version))
    extra, busy = _benchmark_load(llm, gpu, preset, engine, aggregated, dict(
        precision=precision, tp=tp, batch=batch, input_tokens=input_tokens, output_tokens=output_tokens,
        kv_precision=kv_precision, prefill_flops_per_step=prefill_flops_per_step, ep=ep, draft_tokens=draft_tokens,
        accepted_tokens_per_step=accepted_tokens_per_step), prefix_cache_hit_rate, engine_version)
    tokens = batch * (1 + draft_tokens)  # tokens decoded (verified) per step
    prefill_flops_per_step += extra
    kv_prec = effective_kv_precision(preset, kv_precision)
    kv_read, kv_held = kv_bytes_read_and_held(llm, preset, tp, kv_prec, input_tokens, output_tokens)
    w = held_weight_bytes(llm, precision, gpu.vendor)  # held; the bytes a step reads are weight_bytes_read's
    w_read, w_timed = weight_bytes_read(llm, gpu, preset, precision, tokens, ep)
    factors = preset.factors_for(gpu.id, gpu.family, engine, model_kind(llm), llm.id)
    bandwidth = tp * gpu.mem_bandwidth_bytes_per_s * bandwidth_efficiency(preset, gpu) * factors.bandwidth_scale
    flop_rate = usable_flop_rate(preset, gpu, precision, tp, factors, prefill=False)
    memory_time = (bytes_per_step := w_read + batch * kv_read) / bandwidth
    comm, overhead = _extra_times(llm, gpu, preset, tp, ep, batch, factors, prefill_flops_per_step, precision, tokens)
    seed = preset.composition == "roofline"  # prefill carried as FLOPs of the step, else as time
    flops = 2.0 * llm.active_params * tokens + (prefill_flops_per_step if seed else 0.0)
    compute_time = flops / flop_rate
    weights_time, kv_time, prefill_time, draft, step, bound = _compose(
        llm, gpu, preset, factors, precision, tp, seed, memory_time, w_timed / bandwidth, batch * kv_read, bandwidth,
        compute_time, prefill_flops_per_step, draft_tokens, comm, overhead, engine,
        kv_context_tokens(preset, input_tokens, output_tokens)[0])
    return StepEstimate(
        weight_bytes=w, kv_bytes_read_per_sequence=kv_read, kv_bytes_held_per_sequence=kv_held,
        bytes_per_step=bytes_per_step, flops_per_step=flops, memory_time_s=memory_time, compute_time_s=compute_time,
        step_time_s=step, bound=bound, per_user_tokens_per_s=accepted_tokens_per_step / step,
        replica_tokens_per_s=batch * accepted_tokens_per_step / step, memory_needed_bytes=w + batch * kv_held,
        memory_usable_bytes=tp * usable_memory_bytes(gpu, preset.usable_memory_fraction), kv_precision=kv_prec,
        compute_precision=compute_precision(preset, gpu, precision), weight_bytes_read=w_read,
        weights_time_s=weights_time, kv_time_s=kv_time, prefill_time_s=prefill_time, comm_time_s=comm,
        overhead_time_s=overhead, batch=batch, batch_cap=_sequence_cap(preset), ep=ep, prefill_busy_share=busy,
        draft_time_s=draft,
        accepted_tokens_per_step=accepted_tokens_per_step,
    )

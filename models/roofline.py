"""The decode-step roofline of the seed document, as pure functions.

For one decode step of a replica (a TP group of ``tp`` GPUs) running ``batch`` sequences:

    bytes = W + B x KV_seq_read                       (weights once, every sequence's KV)
    FLOPs = 2 x P_active x B
    memory_time  = bytes / (tp x bandwidth x bandwidth_efficiency)
    compute_time = FLOPs / (tp x FLOP/s x compute_efficiency)
    step_time    = max(memory_time, compute_time)
    per-user tokens/s = 1 / step_time;  replica tokens/s = B / step_time

Memory check: W + B x KV_seq_held <= tp x memory x usable_memory_fraction.

That is the ``seed`` preset exactly. The ``default`` preset (``composition="kernels"``)
treats the weight GEMMs and attention as separate kernels and adds the terms of
:mod:`fleetplan.models.physics`:

    weights_time = W_read / (tp x bandwidth x eff_family)   (W_read: MoE touched experts only)
    kv_time      = B x KV_seq_read / (tp x bandwidth x eff_family)
    step_time    = max(weights_time, compute_time) + kv_time + prefill_time
                   + communication + fixed overhead

where ``prefill_time`` is the compute time of the prefill work the step carries (chunked
prefill of newly admitted requests). Every term is non-decreasing in ``B`` and
``step_time / B`` is non-increasing, so replica throughput never falls as the batch grows.
A calibration profile scales these terms per GPU and engine. ``fits`` also requires the
batch to stay within the engine's cap on concurrent sequences.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from fleetplan.catalogs.schema import GPU, LLM
from fleetplan.models.communication import parallel_comm_time_s
from fleetplan.models.interference import prefill_flops_per_step as aggregated_prefill_flops
from fleetplan.models.memory import bytes_per_value, kv_bytes_per_sequence, kv_replication_factor, weight_bytes
from fleetplan.models.moe import params_read_per_step
from fleetplan.models.overhead import step_overhead_s
from fleetplan.models.presets import Preset

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
        for key in ("weights_time", "kv_time", "prefill_time", "comm_time", "overhead_time"):
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


def decode_step(
    llm: LLM,
    gpu: GPU,
    *,
    precision: str,
    tp: int,
    batch: int,
    input_tokens: float,
    output_tokens: float,
    preset: Preset,
    kv_precision: str | None = None,
    prefill_flops_per_step: float = 0.0,
    ep: int = 1,
    engine: str | None = None,
    aggregated: bool = False,
    layout: Layout | None = None,
) -> StepEstimate:
    """Estimate of one decode step of a ``tp``-GPU replica running ``batch`` sequences.

    ``prefill_flops_per_step`` is prefill work carried by the same step (chunked prefill of
    new requests on a colocated replica). The seed composition adds it to the step's FLOPs;
    the default one adds its compute time to the step. ``aggregated=True`` says the replica
    serves continuous batches: a preset with ``prefill_interference`` then adds the steady-state
    prefill of new requests (:mod:`fleetplan.models.interference`) on top. ``ep`` is the
    expert-parallel degree of MoE layers (1: experts split by tensor parallelism);
    ``engine`` selects engine-specific calibration factors. ``layout`` (pipeline stages, expert
    and attention-data parallelism, :mod:`fleetplan.models.layout`) times a replica beyond one
    tensor-parallel group; left out, or with pp = ep = dp_attention = 1, the step is this one.
    """
    # layout hook: a replica spanning stages, EP or attention-DP ranks (models/layout.py)
    if layout is not None and not layout.is_tensor_parallel_only:
        from fleetplan.models.layout import layout_step

        return layout_step(llm, gpu, layout, precision=precision, batch=batch, input_tokens=input_tokens,
                           output_tokens=output_tokens, preset=preset, kv_precision=kv_precision,
                           prefill_flops_per_step=prefill_flops_per_step, engine=engine, aggregated=aggregated)
    kv_prec = effective_kv_precision(preset, kv_precision)
    read_tokens, held_tokens = kv_context_tokens(preset, input_tokens, output_tokens)
    replication = kv_replication_factor(llm, tp) if preset.kv_head_replication else 1.0
    block = preset.physics.kv_block_tokens if (preset.paged_kv and preset.physics is not None) else 1
    kv_read = kv_bytes_per_sequence(llm, kv_prec, read_tokens, preset.sliding_window) * replication
    kv_held = kv_bytes_per_sequence(llm, kv_prec, held_tokens, preset.sliding_window, block) * replication
    w = weight_bytes(llm, precision)
    if preset.moe_expert_sampling:
        w_read = params_read_per_step(llm, batch) * bytes_per_value(precision)
    else:
        w_read = w
    if aggregated and preset.prefill_interference:
        prefill_flops_per_step += aggregated_prefill_flops(llm, batch, input_tokens, output_tokens)

    factors = preset.factors_for(gpu.id, gpu.family, engine)
    physics = preset.physics
    bw_eff = preset.bandwidth_efficiency if physics is None else physics.family(gpu.family).bandwidth_efficiency
    bandwidth = tp * gpu.mem_bandwidth_bytes_per_s * bw_eff * factors.bandwidth_scale
    c_prec = compute_precision(preset, gpu, precision)
    flop_rate = tp * gpu.flops_per_s(c_prec) * preset.compute_efficiency * factors.compute_scale

    bytes_per_step = w_read + batch * kv_read
    memory_time = bytes_per_step / bandwidth
    decode_flops = 2.0 * llm.active_params * batch
    if preset.composition == "roofline":
        flops = decode_flops + prefill_flops_per_step
        compute_time = flops / flop_rate
        weights_time, kv_time, prefill_time = memory_time, 0.0, 0.0
        core = max(memory_time, compute_time)
    else:
        flops = decode_flops
        compute_time = flops / flop_rate
        weights_time = w_read / bandwidth
        kv_time = batch * kv_read / bandwidth
        prefill_time = prefill_flops_per_step / flop_rate
        core = max(weights_time, compute_time) + kv_time + prefill_time
    comm = 0.0
    if preset.communication and physics is not None:
        comm = parallel_comm_time_s(llm, gpu, physics, tp=tp, ep=ep, tokens=batch) * factors.comm_scale
    overhead = 0.0
    if preset.step_overhead and physics is not None:
        overhead = step_overhead_s(llm, gpu, physics) * factors.overhead_scale
    step = core + comm + overhead
    parts = {"memory": weights_time + kv_time if weights_time >= compute_time else kv_time,
             "compute": compute_time + prefill_time, "communication": comm, "overhead": overhead}
    if preset.composition == "roofline":
        parts = {"memory": memory_time, "compute": compute_time}
    bound = max(parts, key=lambda k: parts[k])
    cap = physics.max_num_seqs if (preset.sequence_cap and physics is not None) else None
    return StepEstimate(
        weight_bytes=w,
        kv_bytes_read_per_sequence=kv_read,
        kv_bytes_held_per_sequence=kv_held,
        bytes_per_step=bytes_per_step,
        flops_per_step=flops,
        memory_time_s=memory_time,
        compute_time_s=compute_time,
        step_time_s=step,
        bound=bound,
        per_user_tokens_per_s=1.0 / step,
        replica_tokens_per_s=batch / step,
        memory_needed_bytes=w + batch * kv_held,
        memory_usable_bytes=tp * gpu.memory_bytes * preset.usable_memory_fraction,
        kv_precision=kv_prec,
        compute_precision=c_prec,
        weight_bytes_read=w_read,
        weights_time_s=weights_time,
        kv_time_s=kv_time,
        prefill_time_s=prefill_time,
        comm_time_s=comm,
        overhead_time_s=overhead,
        batch=batch,
        batch_cap=cap,
        ep=ep,
    )

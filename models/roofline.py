"""The decode-step roofline of the seed document, as pure functions.

For one decode step of a replica (a TP group of ``tp`` GPUs) running ``batch`` sequences:

    bytes = W + B x KV_seq_read                       (weights once, every sequence's KV)
    FLOPs = 2 x P_active x B
    memory_time  = bytes / (tp x bandwidth x bandwidth_efficiency)
    compute_time = FLOPs / (tp x FLOP/s x compute_efficiency)
    step_time    = max(memory_time, compute_time)
    per-user tokens/s = 1 / step_time;  replica tokens/s = B / step_time

Memory check: W + B x KV_seq_held <= tp x memory x usable_memory_fraction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from fleetplan.catalogs.schema import GPU, LLM
from fleetplan.models.memory import kv_bytes_per_sequence, kv_replication_factor, weight_bytes
from fleetplan.models.presets import Preset


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

    @property
    def fits(self) -> bool:
        """Whether weights plus every sequence's KV fit in usable memory."""
        return self.memory_needed_bytes <= self.memory_usable_bytes

    def as_dict(self) -> dict[str, float | str | bool]:
        """Plain dict with the seconds also given in milliseconds."""
        d: dict[str, float | str | bool] = dict(asdict(self))
        d["memory_time_ms"] = self.memory_time_s * 1e3
        d["compute_time_ms"] = self.compute_time_s * 1e3
        d["step_time_ms"] = self.step_time_s * 1e3
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
) -> StepEstimate:
    """Roofline estimate of one decode step of a ``tp``-GPU replica running ``batch`` sequences.

    ``prefill_flops_per_step`` is prefill work carried by the same step (chunked prefill of
    new requests on a colocated replica); it adds to the step's compute time.
    """
    kv_prec = effective_kv_precision(preset, kv_precision)
    read_tokens, held_tokens = kv_context_tokens(preset, input_tokens, output_tokens)
    replication = kv_replication_factor(llm, tp) if preset.kv_head_replication else 1.0
    kv_read = kv_bytes_per_sequence(llm, kv_prec, read_tokens, preset.sliding_window) * replication
    kv_held = kv_bytes_per_sequence(llm, kv_prec, held_tokens, preset.sliding_window) * replication
    w = weight_bytes(llm, precision)

    bytes_per_step = w + batch * kv_read
    memory_time = bytes_per_step / (tp * gpu.mem_bandwidth_bytes_per_s * preset.bandwidth_efficiency)
    c_prec = compute_precision(preset, gpu, precision)
    flops = 2.0 * llm.active_params * batch + prefill_flops_per_step
    compute_time = flops / (tp * gpu.flops_per_s(c_prec) * preset.compute_efficiency)
    step = max(memory_time, compute_time)
    return StepEstimate(
        weight_bytes=w,
        kv_bytes_read_per_sequence=kv_read,
        kv_bytes_held_per_sequence=kv_held,
        bytes_per_step=bytes_per_step,
        flops_per_step=flops,
        memory_time_s=memory_time,
        compute_time_s=compute_time,
        step_time_s=step,
        bound="memory" if memory_time >= compute_time else "compute",
        per_user_tokens_per_s=1.0 / step,
        replica_tokens_per_s=batch / step,
        memory_needed_bytes=w + batch * kv_held,
        memory_usable_bytes=tp * gpu.memory_bytes * preset.usable_memory_fraction,
        kv_precision=kv_prec,
        compute_precision=c_prec,
    )

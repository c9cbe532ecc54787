"""Time per decode step that does not depend on bytes moved or FLOPs done.

    overhead = num_layers x layer_overhead                         (GPU: kernel ramp and tail)
             + num_layers x weight_only_fp4_layer                   (FP4 weights, no FP4 tensor cores)
             + step_overhead + batch x sequence_overhead           (host: scheduling, sampling)

``layer_overhead`` is the ramp-up and tail of the kernels each layer launches; the host's work
is a fixed part per step and a part per running sequence (input preparation, sampling,
detokenisation, bookkeeping). The figures come from :mod:`fleetplan.models.physics`. None of
it shrinks with tensor parallelism, which is why small per-GPU weight shards (TP 4-8) run well
below the bandwidth roofline, most of all at large batches.
"""

from __future__ import annotations

from fleetplan.catalogs.schema import GPU, LLM
from fleetplan.models.physics import Physics


def host_time_s(gpu: GPU, physics: Physics, batch: float) -> float:
    """Seconds of host (CPU) work per decode step: the fixed scheduling and sampling cost plus
    ``sequence_overhead_s`` for each of the ``batch`` sequences (input preparation, sampling,
    detokenisation and bookkeeping are per request, and no GPU parallelism shortens them)."""
    return physics.family(gpu.family).step_overhead_s + batch * physics.sequence_overhead_s


def layer_time_s(llm: LLM, gpu: GPU, physics: Physics) -> float:
    """Fixed GPU seconds per decode step: ``layer_overhead_s`` for each transformer layer."""
    return llm.num_layers * physics.family(gpu.family).layer_overhead_s


def dequant_time_s(llm: LLM, gpu: GPU, physics: Physics, precision: str) -> float:
    """Fixed GPU seconds per decode step of weight-only FP4 (FP4 weights on a GPU without FP4
    tensor cores): ``weight_only_fp4_layer_s`` for each layer, whose GEMMs unpack their weights
    to bf16 in extra kernel work; zero at any other precision or where the GPU has an FP4 rate."""
    if precision != "fp4" or "fp4" in gpu.dense_flops_per_s:
        return 0.0
    return llm.num_layers * physics.weight_only_fp4_layer_s

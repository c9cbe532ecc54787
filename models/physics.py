"""Physical parameters of the ``default`` preset beyond the first-order roofline, in one place.

Every number the ``default`` preset uses for communication, fixed overheads, the paged KV
cache and the engine's sequence cap lives in :data:`DEFAULT_PHYSICS`, with the reason for
its value next to it. Nothing here is fitted to a particular benchmark row; `fleetplan
calibrate` fits multipliers on top of these values from the user's own measurements.

Units are SI base units with the unit in the field name (seconds, bytes, bytes/s).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FamilyPhysics:
    """Per-GPU-family figures: how close decode kernels get to the datasheet, and fixed costs.

    ``bandwidth_efficiency``: share of datasheet HBM bandwidth that decode kernels (weight
    GEMV/GEMM and paged attention) sustain over a whole step.
    ``step_overhead_s``: fixed time per decode step outside the layers (scheduling, input
    preparation, sampling, launching the captured graph).
    ``layer_overhead_s``: fixed time per transformer layer per step (ramp-up and tail of the
    dozen kernels a layer launches; it does not shrink with tensor parallelism, so it weighs
    more as each GPU's share of the weights gets smaller).
    ``collective_latency_s``: fixed cost of one collective (launch, synchronisation).
    ``hop_latency_s``: added per ring step of a collective over the scale-up fabric.
    """

    family: str
    bandwidth_efficiency: float
    step_overhead_s: float
    layer_overhead_s: float
    collective_latency_s: float
    hop_latency_s: float


@dataclass(frozen=True)
class Physics:
    """Everything the ``default`` preset adds to the roofline, with engine-level defaults."""

    families: tuple[FamilyPhysics, ...]
    fallback: FamilyPhysics
    comm_bandwidth_efficiency: float
    activation_bytes: float
    allreduces_per_layer: int
    kv_block_tokens: int
    max_num_seqs: int

    def family(self, name: str) -> FamilyPhysics:
        """The figures of GPU family ``name``, or the generic fallback for an unknown family."""
        for f in self.families:
            if f.family == name:
                return f
        return self.fallback


DEFAULT_PHYSICS = Physics(
    families=(
        # NVIDIA datacenter parts with HBM (A100, H100/H200, B200/GB200/B300): streaming
        # kernels reach 85-90% of datasheet bandwidth in microbenchmarks; a whole decode step
        # (GEMV/GEMM at small M, paged attention, norms) sustains about 80%.
        # Fixed costs with CUDA graphs: ~0.6 ms per step for scheduling and sampling in the
        # serving engines (vLLM, SGLang, TensorRT-LLM), ~20 us per layer of kernel ramp/tail
        # (about ten kernels of 2 us each). NVLink collectives: a custom or NCCL LL all-reduce
        # costs ~8 us to launch and synchronise plus ~2.5 us per ring step.
        FamilyPhysics("ampere", 0.80, 0.6e-3, 20e-6, 8e-6, 2.5e-6),
        FamilyPhysics("hopper", 0.80, 0.6e-3, 20e-6, 8e-6, 2.5e-6),
        FamilyPhysics("blackwell", 0.80, 0.6e-3, 20e-6, 8e-6, 2.5e-6),
        # Ada (L4, L40S): GDDR6 with no NVLink; bandwidth efficiency as for HBM parts, the
        # PCIe collectives are slower per step (TP > 1 is outside the scale-up domain anyway).
        FamilyPhysics("ada", 0.80, 0.6e-3, 20e-6, 15e-6, 5.0e-6),
        # AMD CDNA3/CDNA4 (MI300X, MI325X, MI355X): ROCm decode kernels sustain ~65% of the
        # 5.3-8 TB/s datasheet figure; RCCL all-reduce over xGMI has higher fixed latency and
        # each peer link is only 64 GB/s one way, hence a larger hop latency.
        FamilyPhysics("cdna3", 0.65, 1.0e-3, 30e-6, 15e-6, 5.0e-6),
        FamilyPhysics("cdna4", 0.65, 1.0e-3, 30e-6, 15e-6, 5.0e-6),
    ),
    # Unknown families (user catalogs) get conservative mid-range figures.
    fallback=FamilyPhysics("other", 0.75, 0.8e-3, 25e-6, 12e-6, 4.0e-6),
    # NCCL reaches ~70% of the one-direction link bandwidth on bus-bandwidth tests.
    comm_bandwidth_efficiency=0.7,
    # Activations exchanged by tensor-parallel all-reduces are bf16 whatever the weights.
    activation_bytes=2.0,
    # Megatron-style tensor parallelism: one all-reduce after attention, one after the MLP.
    allreduces_per_layer=2,
    # vLLM's default KV block is 16 tokens (SGLang pages of 1, TensorRT-LLM 32-64): every
    # sequence's cache is rounded up to whole blocks.
    kv_block_tokens=16,
    # Engines cap concurrent sequences per instance (vLLM max_num_seqs, TensorRT-LLM
    # max_batch_size, SGLang max_running_requests); 1024 is the largest default among them.
    max_num_seqs=1024,
)


# Queueing allowance on time to first token when a product sets no ``max_ttft_ms``: the plan keeps
# every queue a request waits in (a prefill pool's replicas, a colocated replica's decode steps)
# at a utilisation where the modelled TTFT is at most this multiple of its zero-load value. For
# the M/D/1 queue of :mod:`fleetplan.models.ttft` a multiple of 3 is a utilisation of 0.8, the
# usual ceiling for latency-sensitive serving at peak: above it the wait grows steeply (5.5x the
# service time at 0.9, 10.5x at 0.95, unbounded at 1), so a few percent more demand than forecast
# would multiply TTFT, while below it each extra replica buys little latency (2x at 0.67).
DEFAULT_TTFT_QUEUE_MULTIPLE: float = 3.0

# A modelled TTFT above this is called out in the plan's explanation even when it meets every
# target: interactive users abandon requests that show nothing for about ten seconds.
TTFT_WARNING_S: float = 10.0

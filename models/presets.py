"""Modelling presets: the assumptions behind every estimate, named so a plan can say which it used.

``seed`` reproduces the capacity-planning document exactly:
    - KV bytes read per step = the full input+output context of every sequence;
    - compute at the GPU's dense bf16 rate whatever the weight precision;
    - KV cache in bf16; no KV-head replication under tensor parallelism; every layer
      attends to the whole context (sliding windows ignored).

``default`` is the best first-order model:
    - KV bytes read per step = the average decode context, input + output/2 (the context
      grows from input to input+output over a request's life), while memory must hold
      the full input+output context;
    - compute at the dense rate of the weight precision (bf16 rate where the GPU has no
      native support, i.e. weight-only quantisation);
    - KV precision chosen separately from weight precision (product field ``kv_precision``);
    - KV heads replicated when TP exceeds the KV-head count, MLA latents replicated on
      every TP rank;
    - sliding-window layers hold at most their window of KV;
    - prefill FLOPs include the attention term and run at their own (GEMM at large M) compute
      efficiency;
    - beyond first order (parameters in :mod:`fleetplan.models.physics`): per-family
      bandwidth efficiency; weights GEMMs and attention as separate kernels,
      ``max(weights, compute) + KV``; tensor/expert-parallel communication; a fixed per-step
      and per-layer overhead; MoE weights read = dense + expected distinct experts touched;
      paged KV blocks and a cap on concurrent sequences; prefill carried by decode steps in
      aggregated serving (when the caller says the serving is aggregated) as added time; the KV
      cache read in whole pages of the engine, each page at a fixed cost.

A calibration profile (``fleetplan calibrate``) adds :class:`CalibrationFactors` per GPU
(id or family) and engine; :meth:`Preset.factors_for` picks the most specific one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fleetplan.models.physics import DEFAULT_PHYSICS, Physics


def normalize_engine(text: str | None) -> str | None:
    """Canonical engine name: ``trtllm``, ``vllm``, ``sglang``, ``tgi``, or the first word, lower case.

    NVIDIA NIM runs TensorRT-LLM and is reported as ``trtllm``.
    """
    if text is None:
        return None
    t = text.strip().lower()
    if not t:
        return None
    if "tensorrt" in t or "trt-llm" in t or "trtllm" in t or t.startswith("nim") or "nvidia nim" in t:
        return "trtllm"
    if "sglang" in t:
        return "sglang"
    if "vllm" in t:
        return "vllm"
    if t.startswith("tgi") or "text-generation-inference" in t:
        return "tgi"
    return t.split()[0]


@dataclass(frozen=True)
class CalibrationFactors:
    """Multipliers fitted to measurements for one GPU (id or family) and engine.

    ``gpu`` / ``engine`` / ``kind`` (``dense`` or ``moe`` models) / ``model`` (catalog id) None match
    anything, except that an
    entry with ``unnamed_engine`` matches only a caller that names no engine (the planner: factors
    pooled over the engines measured, which a named engine never measured should not inherit).
    Memory times are divided by
    ``bandwidth_scale``, compute times by ``compute_scale``; the fixed overhead and the
    communication time are multiplied by ``overhead_scale`` and ``comm_scale``; a benchmark's
    predicted TTFT (:func:`fleetplan.models.validation.predict`) by ``ttft_scale`` on top.
    """

    gpu: str | None = None
    engine: str | None = None
    kind: str | None = None
    model: str | None = None
    bandwidth_scale: float = 1.0
    compute_scale: float = 1.0
    overhead_scale: float = 1.0
    comm_scale: float = 1.0
    unnamed_engine: bool = False
    ttft_scale: float = 1.0


IDENTITY = CalibrationFactors()


@dataclass(frozen=True)
class Preset:
    """Efficiency factors and modelling switches for the roofline."""

    name: str
    bandwidth_efficiency: float = 0.7
    compute_efficiency: float = 0.5
    prefill_compute_efficiency: float = 0.5
    prefill_attention: bool = False
    usable_memory_fraction: float = 0.9
    hours_per_month: float = 730.0
    decode_context: Literal["full", "average"] = "full"
    compute_precision: Literal["bf16", "weights"] = "bf16"
    kv_precision_from_product: bool = False
    kv_head_replication: bool = False
    sliding_window: bool = False
    calibration: str | None = None
    composition: Literal["roofline", "kernels"] = "roofline"
    physics: Physics | None = None
    moe_expert_sampling: bool = False
    communication: bool = False
    step_overhead: bool = False
    paged_kv: bool = False
    sequence_cap: bool = False
    prefill_interference: bool = False
    factors: tuple[CalibrationFactors, ...] = ()

    def factors_for(self, gpu_id: str, family: str, engine: str | None, kind: str | None = None,
                    model: str | None = None) -> CalibrationFactors:
        """The most specific calibration factors for this GPU, engine, model kind and model (identity if none).

        Order: an entry for the model (catalog id) before any other; then GPU id and engine, GPU
        id, family and engine, family, engine, anything; among equals an entry for the model's
        kind (``dense`` / ``moe``) before one for any kind.
        """
        eng = normalize_engine(engine)
        best: tuple[int, CalibrationFactors] | None = None
        for f in self.factors:
            if f.gpu is not None and f.gpu not in (gpu_id, family):
                continue
            if (f.engine is not None and f.engine != eng) or (f.unnamed_engine and eng is not None):
                continue
            if f.kind is not None and f.kind != kind:
                continue
            if f.model is not None and f.model != model:
                continue
            gpu_rank = 0 if f.gpu is None else (2 if f.gpu == gpu_id else 1)
            rank = (gpu_rank * 2 + (1 if f.engine is not None else 0)) * 2 + (1 if f.kind is not None else 0)
            rank += 100 if f.model is not None else 0
            if best is None or rank > best[0]:
                best = (rank, f)
        return best[1] if best is not None else IDENTITY

    def describe(self) -> str:
        """One line summarising the preset's assumptions."""
        bandwidth = "per GPU family" if self.physics is not None else f"x{self.bandwidth_efficiency}"
        return (
            f"{self.name}: bandwidth {bandwidth}, compute x{self.compute_efficiency}, "
            f"usable memory {self.usable_memory_fraction:.0%}, KV read = "
            f"{'full context' if self.decode_context == 'full' else 'average context'}, compute at "
            f"{'bf16 rate' if self.compute_precision == 'bf16' else 'weight-precision rate'}"
            + (", + communication, overheads, MoE expert sampling, paged KV" if self.physics is not None else "")
            + (f", calibrated by {self.calibration}" if self.calibration else "")
        )


SEED = Preset(name="seed")

DEFAULT = Preset(
    name="default",
    # Fitted with the physics (see fleetplan.models.physics): decode GEMMs at small M reach
    # 62.7% of the dense datasheet rate, prefill GEMMs at large M 78.3% (silicon-train.csv and
    # inferencemax-train.csv, the 1,022 rows above the bandwidth floor), of the weights' precision
    # for the 88.2% of the work its tensor cores speed up and of bf16 for the rest
    # (``Physics.bf16_work_share``). They were 55.8% and 74.1% of the plain datasheet rate
    # without that share, 42.1% and 69.3% without the KV pages' cost (``Physics.kv_page_overhead``).
    compute_efficiency=0.627,
    prefill_compute_efficiency=0.783,
    prefill_attention=True,
    decode_context="average",
    compute_precision="weights",
    kv_precision_from_product=True,
    kv_head_replication=True,
    sliding_window=True,
    composition="kernels",
    physics=DEFAULT_PHYSICS,
    moe_expert_sampling=True,
    communication=True,
    step_overhead=True,
    paged_kv=True,
    sequence_cap=True,
    prefill_interference=True,
)

PRESETS: dict[str, Preset] = {p.name: p for p in (SEED, DEFAULT)}


def get_preset(name: str) -> Preset:
    """The preset called ``name``; ``KeyError`` names the valid ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown preset {name!r} (valid: {', '.join(PRESETS)})") from None

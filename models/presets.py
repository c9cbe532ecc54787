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
    - sliding-window layers hold at most their window of KV.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Preset:
    """Efficiency factors and modelling switches for the roofline."""

    name: str
    bandwidth_efficiency: float = 0.7
    compute_efficiency: float = 0.5
    usable_memory_fraction: float = 0.9
    hours_per_month: float = 730.0
    decode_context: Literal["full", "average"] = "full"
    compute_precision: Literal["bf16", "weights"] = "bf16"
    kv_precision_from_product: bool = False
    kv_head_replication: bool = False
    sliding_window: bool = False
    calibration: str | None = None

    def describe(self) -> str:
        """One line summarising the preset's assumptions."""
        return (
            f"{self.name}: bandwidth x{self.bandwidth_efficiency}, compute x{self.compute_efficiency}, "
            f"usable memory {self.usable_memory_fraction:.0%}, KV read = "
            f"{'full context' if self.decode_context == 'full' else 'average context'}, compute at "
            f"{'bf16 rate' if self.compute_precision == 'bf16' else 'weight-precision rate'}"
        )


SEED = Preset(name="seed")

DEFAULT = Preset(
    name="default",
    decode_context="average",
    compute_precision="weights",
    kv_precision_from_product=True,
    kv_head_replication=True,
    sliding_window=True,
)

PRESETS: dict[str, Preset] = {p.name: p for p in (SEED, DEFAULT)}


def get_preset(name: str) -> Preset:
    """The preset called ``name``; ``KeyError`` names the valid ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown preset {name!r} (valid: {', '.join(PRESETS)})") from None

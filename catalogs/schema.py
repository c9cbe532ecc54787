"""Schema of the catalog files: one frozen pydantic model per entry kind.

Every field carries its unit in its name (SI base units: bytes, seconds, FLOP/s, USD).
Unknown fields are rejected, so a typo in a user catalog fails on load instead of being
silently ignored.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

Precision = Literal["bf16", "fp8", "fp4"]
PRECISIONS: tuple[str, ...] = ("bf16", "fp8", "fp4")
PricingKind = Literal["on_demand", "reserved", "spot"]
PRICING_KINDS: tuple[str, ...] = ("on_demand", "reserved", "spot")


class Entry(BaseModel):
    """Base of every catalog entry: strict, immutable, and sourced."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    source: str = Field(min_length=1, description="Where the figures come from")
    as_of: dt.date = Field(description="Date the figures were recorded")
    notes: str = ""


class GPU(Entry):
    """One accelerator. FLOP/s are DENSE tensor-core rates (no structured sparsity)."""

    id: str = Field(min_length=1)
    name: str
    vendor: str
    family: str
    memory_bytes: PositiveFloat
    mem_bandwidth_bytes_per_s: PositiveFloat
    dense_flops_per_s: dict[Precision, PositiveFloat]
    scaleup_domain_gpus: PositiveInt
    scaleup_bandwidth_bytes_per_s: PositiveFloat = Field(description="one direction, per GPU")
    network_bandwidth_bytes_per_s: PositiveFloat = Field(description="scale-out NIC, one direction, per GPU")
    tdp_watts: PositiveFloat | None = None

    @model_validator(mode="after")
    def _needs_bf16(self) -> GPU:
        if "bf16" not in self.dense_flops_per_s:
            raise ValueError("dense_flops_per_s must give at least bf16")
        return self

    def flops_per_s(self, precision: str) -> float:
        """Dense FLOP/s at ``precision``; precisions without native support run at bf16 rate."""
        return self.dense_flops_per_s.get(precision, self.dense_flops_per_s["bf16"])  # type: ignore[call-overload]


class MoE(BaseModel):
    """Mixture-of-experts layout of a model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_experts: PositiveInt
    experts_per_token: PositiveInt
    num_shared_experts: int = Field(default=0, ge=0)
    num_moe_layers: PositiveInt
    moe_intermediate_size: PositiveInt


class LLM(Entry):
    """Architecture facts of one model, as in its config.json."""

    id: str = Field(min_length=1)
    name: str
    hf_repo: str | None = None
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    attention: Literal["gqa", "mla"] = "gqa"
    sliding_window_tokens: PositiveInt | None = None
    num_global_layers: int | None = Field(default=None, ge=0)
    kv_lora_rank: PositiveInt | None = None
    qk_rope_head_dim: PositiveInt | None = None
    moe: MoE | None = None
    total_params: PositiveFloat
    active_params: PositiveFloat
    max_context_tokens: PositiveInt | None = None

    @model_validator(mode="after")
    def _consistent(self) -> LLM:
        if self.active_params > self.total_params * (1 + 1e-9):
            raise ValueError("active_params exceeds total_params")
        if self.attention == "mla" and (self.kv_lora_rank is None or self.qk_rope_head_dim is None):
            raise ValueError("attention 'mla' needs kv_lora_rank and qk_rope_head_dim")
        if self.num_global_layers is not None and self.num_global_layers > self.num_layers:
            raise ValueError("num_global_layers exceeds num_layers")
        if self.num_global_layers is not None and self.sliding_window_tokens is None:
            raise ValueError("num_global_layers is set but sliding_window_tokens is not")
        return self


class GPUPrice(Entry):
    """A GPU-hour price offered by one provider under one pricing kind."""

    gpu: str
    provider: str
    kind: PricingKind
    usd_per_gpu_hour: PositiveFloat
    region: str | None = None


class ReferencePrice(Entry):
    """The GPU-hour price used for a GPU when a scenario names none."""

    gpu: str
    usd_per_gpu_hour: PositiveFloat


class APIPrice(Entry):
    """A hosted-API price per million tokens."""

    id: str = Field(min_length=1)
    provider: str
    model: str
    provider_model_id: str | None = None
    input_usd_per_million_tokens: NonNegativeFloat
    output_usd_per_million_tokens: NonNegativeFloat
    cached_input_usd_per_million_tokens: NonNegativeFloat | None = None

"""Schema of the catalog files: one frozen pydantic model per entry kind.

Every field carries its unit in its name (SI base units: bytes, seconds, FLOP/s, USD); every
number is checked against its range in :mod:`fleetplan.catalogs.fields` (finite, no booleans,
bounds with their reasons in the field descriptions).
Unknown fields are rejected, so a typo in a user catalog fails on load instead of being
silently ignored.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fleetplan.catalogs import fields as F

Precision = Literal["bf16", "fp8", "fp4"]
PRECISIONS: tuple[str, ...] = ("bf16", "fp8", "fp4")
PricingKind = Literal["on_demand", "reserved", "spot"]


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
    memory_bytes: Annotated[float, F.MEMORY_BYTES] = Field(description="HBM capacity")
    physical_memory_bytes: Annotated[float | None, F.MEMORY_BYTES] = Field(
        default=None, description="HBM the engines allocate from where the datasheet's capacity is less; "
        "left out: memory_bytes")
    mem_bandwidth_bytes_per_s: Annotated[float, F.BANDWIDTH_BYTES_PER_S] = Field(description="HBM bandwidth")
    dense_flops_per_s: dict[Precision, Annotated[float, F.FLOPS_PER_S]] = Field(
        description="dense tensor-core rate per precision")
    scaleup_domain_gpus: Annotated[int, F.SCALEUP_DOMAIN_GPUS] = Field(description="GPUs in one NVLink-class domain")
    scaleup_bandwidth_bytes_per_s: Annotated[float, F.BANDWIDTH_BYTES_PER_S] = Field(
        description="one direction, per GPU")
    network_bandwidth_bytes_per_s: Annotated[float, F.BANDWIDTH_BYTES_PER_S] = Field(
        description="scale-out NIC, one direction, per GPU")
    gpus_per_node: Annotated[int | None, F.INSTANCE_GPUS] = Field(
        default=None, description="GPUs in one server (node, compute tray); left out: the scale-up domain, at most 8")
    tdp_watts: Annotated[float | None, F.WATTS] = None

    @model_validator(mode="after")
    def _needs_bf16(self) -> GPU:
        if "bf16" not in self.dense_flops_per_s:
            raise ValueError("dense_flops_per_s must give at least bf16")
        return self

    @property
    def allocatable_memory_bytes(self) -> float:
        """HBM an engine allocates weights, KV cache and activations from: the physical figure
        where the catalog gives one, else ``memory_bytes``."""
        return self.physical_memory_bytes if self.physical_memory_bytes is not None else self.memory_bytes

    @property
    def node_gpus(self) -> int:
        """GPUs in one node: ``gpus_per_node``, else the scale-up domain capped at an 8-GPU server."""
        return self.gpus_per_node if self.gpus_per_node is not None else min(self.scaleup_domain_gpus, 8)

    def flops_per_s(self, precision: str) -> float:
        """Dense FLOP/s at ``precision``; precisions without native support run at bf16 rate."""
        return self.dense_flops_per_s.get(precision, self.dense_flops_per_s["bf16"])  # type: ignore[call-overload]


class MoE(BaseModel):
    """Mixture-of-experts layout of a model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_experts: Annotated[int, F.EXPERTS]
    experts_per_token: Annotated[int, F.EXPERTS]
    num_shared_experts: Annotated[int, F.SHARED_EXPERTS] = 0
    num_moe_layers: Annotated[int, F.LAYERS]
    moe_intermediate_size: Annotated[int, F.WIDTH]


class LLM(Entry):
    """Architecture facts of one model, as in its config.json."""

    id: str = Field(min_length=1)
    name: str
    hf_repo: str | None = None
    num_layers: Annotated[int, F.LAYERS]
    hidden_size: Annotated[int, F.WIDTH]
    num_attention_heads: Annotated[int, F.HEADS]
    num_kv_heads: Annotated[int, F.HEADS]
    head_dim: Annotated[int, F.WIDTH]
    attention: Literal["gqa", "mla"] = "gqa"
    sliding_window_tokens: Annotated[int | None, F.CONTEXT_TOKENS] = None
    num_global_layers: Annotated[int | None, F.LAYER_COUNT] = None
    kv_lora_rank: Annotated[int | None, F.WIDTH] = None
    qk_rope_head_dim: Annotated[int | None, F.WIDTH] = None
    moe: MoE | None = None
    total_params: Annotated[float, F.PARAMS]
    active_params: Annotated[float, F.PARAMS]
    max_context_tokens: Annotated[int | None, F.CONTEXT_TOKENS] = None

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
    usd_per_gpu_hour: Annotated[float, F.USD_PER_GPU_HOUR]
    region: str | None = None


class ReferencePrice(Entry):
    """The GPU-hour price used for a GPU when a scenario names none."""

    gpu: str
    usd_per_gpu_hour: Annotated[float, F.USD_PER_GPU_HOUR]


class APIPrice(Entry):
    """A hosted-API price per million tokens."""

    id: str = Field(min_length=1)
    provider: str
    model: str
    provider_model_id: str | None = None
    input_usd_per_million_tokens: Annotated[float, F.USD_PER_MILLION_TOKENS]
    output_usd_per_million_tokens: Annotated[float, F.USD_PER_MILLION_TOKENS]
    cached_input_usd_per_million_tokens: Annotated[float | None, F.USD_PER_MILLION_TOKENS] = None


ArrivalPattern = Literal["waves", "steady"]


class ServerRecipe(BaseModel):
    """How a harness's launch scripts started one engine for the matching runs: the memory and cache
    settings that decide how many sequences run at once. Empty match fields match every run;
    ``memory_fraction`` is each GPU's share for weights and KV cache (SGLang's
    ``--mem-fraction-static``, vLLM's ``--gpu-memory-utilization``), ``kv_cache_precision`` the cache
    the engine was told to keep (``--kv-cache-dtype``), ``max_running_requests`` its cap on running
    sequences, ``recv_interval_steps`` (from clients, decode steps) pairs of the interval at which the
    scheduler polls for new requests while it decodes (SGLang's ``--scheduler-recv-interval``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)

    engine: str = Field(min_length=1)
    model_prefix: str = ""
    gpu: str | None = None
    precision: Precision | None = None
    tp: Annotated[int, Field(ge=1)] | None = None
    memory_fraction: Annotated[float | None, F.FRACTION] = None
    kv_cache_precision: Precision | None = None
    max_running_requests: Annotated[int, Field(ge=1)] | None = None
    recv_interval_steps: list[tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]]] = Field(default_factory=list)
    source: str = Field(min_length=1, description="The launch script the settings are read from")

    def recv_interval(self, clients: int) -> int:
        """Decode steps between the scheduler's polls for new requests at ``clients`` concurrency:
        the last (from clients, steps) pair of :attr:`recv_interval_steps` at or below it, else 1
        (every step)."""
        return next((steps for start, steps in sorted(self.recv_interval_steps, reverse=True) if clients >= start), 1)

    def matches(self, engine: str, model: str, gpu: str, precision: str, tp: int) -> bool:
        """Whether this recipe started ``engine`` (normalised) for a run of ``model`` at
        ``precision`` on ``tp`` x ``gpu``."""
        return (engine == self.engine and model.startswith(self.model_prefix)
                and self.gpu in (None, gpu) and self.precision in (None, precision) and self.tp in (None, tp))


class BenchmarkHarness(Entry):
    """A closed-loop benchmark harness whose measurements ``validate`` may read: how its clients
    arrive, for the rows whose ``source_id`` starts with one of ``source_id_prefixes``.

    ``arrival_pattern``: ``waves`` where every request has the same lengths (a wave of clients
    finishes together and the next wave's prompts arrive together), ``steady`` where lengths are
    drawn from a range so the clients drift apart. ``length_range_ratio``: the harness draws each
    prompt's and each output's length uniformly between this share of the stated length and the
    stated length (1: fixed lengths; empty for ``steady``: clients taken as fully drifted apart).
    ``server_recipes``: the engine settings its launch scripts pass that decide memory
    (:class:`ServerRecipe`), first match wins.
    """

    id: str = Field(min_length=1)
    source_id_prefixes: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    arrival_pattern: ArrivalPattern
    length_range_ratio: Annotated[float | None, F.FRACTION] = None
    server_recipes: list[ServerRecipe] = Field(default_factory=list)

    def recipe_for(self, engine: str, model: str, gpu: str, precision: str, tp: int) -> ServerRecipe | None:
        """The first of :attr:`server_recipes` that started this run, or None (the engine's defaults)."""
        return next((r for r in self.server_recipes if r.matches(engine, model, gpu, precision, tp)), None)

    @model_validator(mode="after")
    def _pattern_matches_ratio(self) -> BenchmarkHarness:
        fixed = self.length_range_ratio is not None and self.length_range_ratio >= 1.0
        if self.arrival_pattern == "waves" and self.length_range_ratio is not None and not fixed:
            raise ValueError("arrival_pattern waves needs fixed lengths: length_range_ratio 1 or empty")
        if self.arrival_pattern == "steady" and fixed:
            raise ValueError("arrival_pattern steady needs lengths drawn from a range: length_range_ratio below 1")
        return self

"""Bytes of weights and KV cache, derived from a model's architecture facts.

GB here is 10^9 bytes. ``kv_bytes_per_token(llama-3.1-70b, "bf16")`` is
2 (K and V) x 80 layers x 8 KV heads x 128 head_dim x 2 B = 327,680 B (320 KiB).
"""

from __future__ import annotations

import math

from fleetplan.catalogs.schema import GPU, LLM
from fleetplan.models.moe import routed_expert_params

BYTES_PER_VALUE: dict[str, float] = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5}


def bytes_per_value(precision: str) -> float:
    """Storage bytes of one parameter or cache element at ``precision``."""
    try:
        return BYTES_PER_VALUE[precision]
    except KeyError:
        raise ValueError(f"unknown precision {precision!r} (valid: {', '.join(BYTES_PER_VALUE)})") from None


def weight_bytes(llm: LLM, precision: str) -> float:
    """Bytes of all weights at ``precision``: total parameters x bytes per parameter."""
    return llm.total_params * bytes_per_value(precision)


def kv_bytes_per_token_per_layer(llm: LLM, kv_precision: str) -> float:
    """KV-cache bytes one token adds to one attention layer.

    GQA/MHA: K and V, each ``num_kv_heads x head_dim`` values.
    MLA: one compressed latent of ``kv_lora_rank`` plus the decoupled RoPE key of
    ``qk_rope_head_dim`` values.
    """
    b = bytes_per_value(kv_precision)
    if llm.attention == "mla":
        assert llm.kv_lora_rank is not None and llm.qk_rope_head_dim is not None
        return (llm.kv_lora_rank + llm.qk_rope_head_dim) * b
    return 2 * llm.num_kv_heads * llm.head_dim * b


def kv_bytes_per_token(llm: LLM, kv_precision: str) -> float:
    """KV-cache bytes per token over all layers, as if every layer attends to the full context."""
    return llm.num_layers * kv_bytes_per_token_per_layer(llm, kv_precision)


def num_global_layers(llm: LLM) -> int:
    """Layers whose KV grows with the whole context (all of them unless the model has local layers)."""
    if llm.sliding_window_tokens is None:
        return llm.num_layers
    return llm.num_global_layers or 0


def paged_tokens(tokens: float, block_tokens: int) -> float:
    """Tokens of cache a paged KV store allocates for ``tokens`` tokens: whole blocks."""
    if block_tokens <= 1:
        return tokens
    return math.ceil(tokens / block_tokens - 1e-9) * block_tokens


def kv_bytes_per_sequence(
    llm: LLM, kv_precision: str, context_tokens: float, sliding_window: bool, block_tokens: int = 1
) -> float:
    """KV-cache bytes of one sequence holding ``context_tokens`` tokens.

    With ``sliding_window`` the local layers keep at most their window of tokens; without
    it every layer keeps the whole context (the seed document's formula). With
    ``block_tokens`` > 1 each layer's cache is allocated in whole blocks of that many tokens
    (a paged KV cache), so a sequence wastes on average half a block per layer.
    """
    per_layer = kv_bytes_per_token_per_layer(llm, kv_precision)
    if not sliding_window or llm.sliding_window_tokens is None:
        return llm.num_layers * per_layer * paged_tokens(context_tokens, block_tokens)
    n_global = num_global_layers(llm)
    n_local = llm.num_layers - n_global
    local = min(context_tokens, llm.sliding_window_tokens)
    return per_layer * (
        n_global * paged_tokens(context_tokens, block_tokens) + n_local * paged_tokens(local, block_tokens)
    )


def kv_replication_factor(llm: LLM, tp: int) -> float:
    """How many copies of each KV entry a TP group stores.

    GQA shards KV heads over ranks until TP exceeds the KV-head count; past that, heads are
    replicated (factor TP / num_kv_heads). An MLA latent is not split by heads, so every
    rank keeps a full copy (factor TP).
    """
    if llm.attention == "mla":
        return float(tp)
    return max(1.0, tp / llm.num_kv_heads)


# Bits a served checkpoint stores per FP4 weight, block scales included. NVFP4 (NVIDIA's format,
# native on Blackwell): 4-bit values in blocks of 16 with one FP8 (E4M3) scale each, 4 + 8/16 = 4.5
# bits (the per-tensor FP32 scale is negligible). MXFP4 (the OCP microscaling format, native on
# MI355X; what gpt-oss ships and AMD's FP4 checkpoints use): blocks of 32 with one E8M0 scale, 4 +
# 8/32 = 4.25 bits.
NVFP4_BITS_PER_WEIGHT: float = 4.5
MXFP4_BITS_PER_WEIGHT: float = 4.25
# Model id prefixes whose published FP4 checkpoint is MXFP4 on every GPU: OpenAI ships gpt-oss's
# experts in MXFP4 and the engines load them as they are.
MXFP4_CHECKPOINTS: tuple[str, ...] = ("gpt-oss",)
# Bytes per weight of the tensors an FP4 MoE checkpoint leaves unquantised (attention, router,
# shared experts, embeddings and head): BF16 in gpt-oss (model card: 60.8 GiB = 65.3 GB for
# gpt-oss-120b, 12.8 GiB = 13.8 GB for gpt-oss-20b, which this rule reproduces within 0.5 GB);
# at most 8 bits in NVIDIA's NVFP4 DeepSeek-R1, so BF16 is the upper bound of the two.
FP4_UNQUANTISED_BYTES: float = 2.0


def fp4_bits_per_weight(llm: LLM, vendor: str) -> float:
    """Stored bits per FP4 weight of ``llm``'s checkpoint on a ``vendor`` GPU: MXFP4 for the models
    published in it and on AMD GPUs, NVFP4 on NVIDIA's."""
    if vendor == "amd" or llm.id.startswith(MXFP4_CHECKPOINTS):
        return MXFP4_BITS_PER_WEIGHT
    return NVFP4_BITS_PER_WEIGHT


def held_weight_bytes(llm: LLM, precision: str, vendor: str = "nvidia") -> float:
    """Bytes an engine holds for ``llm``'s checkpoint at ``precision``, by tensor class.

    BF16 and FP8: every weight at the precision's bytes (FP8's per-tensor or 128 x 128 block scales
    add under 0.03%). FP4: the quantised class at :func:`fp4_bits_per_weight` (block scales
    included): a MoE model's routed experts, the rest (attention, router, shared experts,
    embeddings and head) at :data:`FP4_UNQUANTISED_BYTES`; a dense model's every weight. So
    gpt-oss-120b holds 65.1 GB (its model card: 65.3 GB), not 116.8e9 x 0.5 = 58.4 GB, and
    DeepSeek-R1 NVFP4 402 GB.
    """
    if precision != "fp4":
        return weight_bytes(llm, precision)
    quantised = routed_expert_params(llm) if llm.moe is not None else llm.total_params
    rest = llm.total_params - quantised
    return quantised * fp4_bits_per_weight(llm, vendor) / 8.0 + rest * FP4_UNQUANTISED_BYTES


def usable_memory_bytes(gpu: GPU, usable_fraction: float) -> float:
    """Memory of one GPU an engine gives weights and KV cache: ``usable_fraction`` (what engines
    leave for activations, graphs and fragmentation, e.g. vLLM's ``gpu_memory_utilization`` 0.9)
    of the HBM it allocates from (:attr:`~fleetplan.catalogs.schema.GPU.allocatable_memory_bytes`)."""
    return gpu.allocatable_memory_bytes * usable_fraction

"""Bytes of weights and KV cache, derived from a model's architecture facts.

GB here is 10^9 bytes. ``kv_bytes_per_token(llama-3.1-70b, "bf16")`` is
2 (K and V) x 80 layers x 8 KV heads x 128 head_dim x 2 B = 327,680 B (320 KiB).
"""

from __future__ import annotations

import math

from fleetplan.catalogs.schema import LLM

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

"""Prefill work per request: the linear layers plus the attention term that grows with prompt length.

Linear layers: 2 FLOPs per active parameter per new token, 2 x P_active x u for u uncached tokens.

Attention: a new token at position i scores against i keys (QK^T) and mixes i values (AV),
2 x 2 x i x (heads x head_dim) FLOPs per layer. Summed over the uncached positions c..n of an
n-token prompt whose first c tokens come from the prefix cache:

    attention FLOPs = 2 x heads x head_dim x (n^2 - c^2) x layers

For llama-3.1-70b (64 heads x 128, 80 layers) that is 1.3e6 x n^2: 1.9% of the linear work at
2,000 tokens, 18% at 20,000. Sliding-window layers attend to at most their window, so they
add 4 x heads x head_dim x window per token instead.
"""

from __future__ import annotations

from fleetplan.catalogs.schema import LLM
from fleetplan.models.memory import num_global_layers
from fleetplan.models.presets import Preset


def prefill_linear_flops(llm: LLM, new_tokens: float) -> float:
    """FLOPs of the linear layers for ``new_tokens`` prompt tokens: 2 x P_active x tokens."""
    return 2.0 * llm.active_params * new_tokens


def prefill_attention_flops(llm: LLM, input_tokens: float, cached_tokens: float = 0.0) -> float:
    """Attention FLOPs for prefilling positions ``cached_tokens``..``input_tokens`` of one prompt."""
    n, c = float(input_tokens), min(float(cached_tokens), float(input_tokens))
    width = llm.num_attention_heads * llm.head_dim
    n_global = num_global_layers(llm)
    flops = 2.0 * width * (n * n - c * c) * n_global
    n_local = llm.num_layers - n_global
    if n_local and llm.sliding_window_tokens is not None:
        w = float(llm.sliding_window_tokens)
        # positions beyond the window see w keys; inside it, as many as their position
        def capped(x: float) -> float:
            return x * x if x <= w else w * w + 2.0 * w * (x - w)

        flops += 2.0 * width * (capped(n) - capped(c)) * n_local
    return flops


def prefill_flops_per_request(
    llm: LLM, input_tokens: float, prefix_cache_hit_rate: float = 0.0, attention: bool = False
) -> float:
    """FLOPs to prefill one request whose first ``hit_rate`` share of input tokens is cached.

    With ``attention=False`` this is the seed document's 2 x P_active x uncached input tokens.
    """
    cached = input_tokens * prefix_cache_hit_rate
    flops = prefill_linear_flops(llm, input_tokens - cached)
    if attention:
        flops += prefill_attention_flops(llm, input_tokens, cached)
    return flops


def prefill_flops(llm: LLM, preset: Preset, input_tokens: float, prefix_cache_hit_rate: float = 0.0) -> float:
    """FLOPs to prefill one request under ``preset``: the one rule ``estimate``, the planner and
    ``validate`` use (the attention term where the preset's ``prefill_attention`` says so)."""
    return prefill_flops_per_request(llm, input_tokens, prefix_cache_hit_rate, attention=preset.prefill_attention)

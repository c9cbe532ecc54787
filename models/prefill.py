"""Prefill work per request."""

from __future__ import annotations

from fleetplan.catalogs.schema import LLM


def prefill_flops_per_request(llm: LLM, input_tokens: float, prefix_cache_hit_rate: float = 0.0) -> float:
    """Linear-layer FLOPs to prefill one request: 2 x P_active x uncached input tokens."""
    return 2.0 * llm.active_params * input_tokens * (1.0 - prefix_cache_hit_rate)

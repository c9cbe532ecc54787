"""Prefill work that decode steps carry in aggregated (colocated) serving.

With continuous batching and chunked prefill, a replica holding ``B`` sequences that each
generate ``O`` tokens finishes B/O sequences per step in steady state and admits as many new
ones, whose ``I``-token prompts are prefilled in chunks inside the decode steps. On average
every step therefore carries

    B x I / O prefill tokens,

and a measured time per output token (TPOT) includes their compute. Static-batch benchmarks
(all prompts prefilled before decoding starts) carry none.
"""

from __future__ import annotations

from fleetplan.catalogs.schema import LLM
from fleetplan.models.prefill import prefill_attention_flops, prefill_linear_flops


def prefill_tokens_per_step(batch: float, input_tokens: float, output_tokens: float) -> float:
    """Average prompt tokens prefilled per decode step in steady-state aggregated serving."""
    return batch * input_tokens / max(output_tokens, 1.0)


def prefill_flops_per_step(llm: LLM, batch: float, input_tokens: float, output_tokens: float) -> float:
    """Average prefill FLOPs per decode step: linear layers plus attention over each prompt."""
    requests_per_step = batch / max(output_tokens, 1.0)
    per_request = prefill_linear_flops(llm, input_tokens) + prefill_attention_flops(llm, input_tokens)
    return requests_per_step * per_request

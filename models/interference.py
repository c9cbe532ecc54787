"""Prefill work that decode steps carry in aggregated (colocated) serving.

With continuous batching and chunked prefill, a replica holding ``B`` sequences that each
generate ``O`` tokens finishes B/O sequences per step in steady state and admits as many new
ones, whose ``I``-token prompts are prefilled in chunks inside the decode steps. On average
every step therefore carries

    B x I / O prefill tokens                                   (steady state: the planner)

A closed-loop benchmark at concurrency ``B`` admits requests in waves instead: the ``B - 1``
others' prompts are prefilled around a request's start, a share ``s`` of them (the engine's
``prefill_before_first_token``) before its first token and the rest inside its ``O`` decode
steps, so its time per output token (TPOT) carries

    (1 - s) x (B - 1) x I / O prefill tokens per step           (measured TPOT: ``validate``)

Static-batch benchmarks (all prompts prefilled before decoding starts) carry none.
"""

from __future__ import annotations

from fleetplan.catalogs.schema import LLM
from fleetplan.models.prefill import prefill_attention_flops, prefill_linear_flops


def prefill_tokens_per_step(batch: float, input_tokens: float, output_tokens: float) -> float:
    """Average prompt tokens prefilled per decode step in steady-state aggregated serving."""
    return batch * input_tokens / max(output_tokens, 1.0)


def prefill_flops_per_step(llm: LLM, batch: float, input_tokens: float, output_tokens: float, share: float = 1.0) -> float:
    """Average prefill FLOPs per decode step: ``share`` of ``batch`` prompts (linear layers plus
    attention) spread over ``output_tokens`` steps."""
    requests_per_step = share * batch / max(output_tokens, 1.0)
    per_request = prefill_linear_flops(llm, input_tokens) + prefill_attention_flops(llm, input_tokens)
    return requests_per_step * per_request

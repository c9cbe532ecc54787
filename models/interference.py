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

How synchronised the waves stay depends on how much of a request's cycle its engine spends
prefilling: the busy share ``rho = B x prefill / (B x prefill + O x step)`` (prefill of the ``B``
prompts against the ``O`` decode steps of a request). Where prefill takes a large part of the
cycle, the first tokens of a wave spread over that prefill, the requests finish and return
staggered, and fewer of the others' prompts are ahead of a request:

    s = s_engine x (1 - rho)^gamma                               (``busy_share_exponent``)

Static-batch benchmarks (all prompts prefilled before decoding starts) carry none.
"""

from __future__ import annotations

from fleetplan.catalogs.schema import LLM
from fleetplan.models.prefill import prefill_flops_per_request


def prefill_tokens_per_step(batch: float, input_tokens: float, output_tokens: float) -> float:
    """Average prompt tokens prefilled per decode step in steady-state aggregated serving."""
    return batch * input_tokens / max(output_tokens, 1.0)


def prefill_flops_per_step(llm: LLM, batch: float, input_tokens: float, output_tokens: float, share: float = 1.0,
                           hit_rate: float = 0.0) -> float:
    """Average prefill FLOPs per decode step: ``share`` of ``batch`` prompts (linear layers plus
    attention, the first ``hit_rate`` of each prompt from the prefix cache) spread over
    ``output_tokens`` steps."""
    requests_per_step = share * batch / max(output_tokens, 1.0)
    return requests_per_step * prefill_flops_per_request(llm, input_tokens, hit_rate, attention=True)


def prefill_busy_share(batch: float, prefill_s: float, output_tokens: float, decode_step_s: float) -> float:
    """Share of a closed-loop request's cycle its engine spends prefilling: ``batch`` prompts of
    ``prefill_s`` each against ``output_tokens`` decode steps of ``decode_step_s`` (0 to 1)."""
    prefill = batch * prefill_s
    total = prefill + max(output_tokens, 1.0) * decode_step_s
    return prefill / total if total > 0 else 0.0


def share_before_first_token(engine_share: float, busy_share: float, exponent: float) -> float:
    """Share of a benchmark's other prompts prefilled before a request's first token: the engine's
    share ``engine_share`` times ``(1 - busy_share)^exponent`` (the engine's share at exponent 0)."""
    if exponent <= 0:
        return engine_share
    return engine_share * (1.0 - min(max(busy_share, 0.0), 1.0)) ** exponent

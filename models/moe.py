"""Mixture-of-experts weights: which parameters a decode step reads.

A step of ``B`` tokens, each routed to ``k`` of ``E`` experts, touches on average

    E x (1 - (1 - k/E)^B)

distinct experts per MoE layer (uniform routing): ``k`` at one token, all ``E`` as B grows.
Every touched expert's weights are read once, so the bytes per step are the dense and shared
weights (attention, embeddings, shared experts, dense layers) plus the touched experts, not
all experts and not only ``k``. Compute still follows the active parameters, 2 x P_active x B.

With expert parallelism over ``ep`` GPUs each GPU holds ``E / ep`` whole experts and reads only
the touched ones among them, so the step waits for the GPU that holds the most touched experts
(:func:`busiest_expert_share`): each expert is touched with probability ``q = 1 - (1 - k/E)^B``,
a GPU's count is binomial ``(E / ep, q)``, and the busiest of ``ep`` GPUs reads ``E[max]``
experts against the mean ``E q / ep``.
"""

from __future__ import annotations

import math
from functools import lru_cache

from fleetplan.catalogs.schema import LLM


def expected_distinct_experts(num_experts: int, experts_per_token: int, tokens: float) -> float:
    """Expected number of distinct experts ``tokens`` tokens route to in one MoE layer."""
    if tokens <= 0:
        return 0.0
    miss = 1.0 - experts_per_token / num_experts
    return num_experts * (1.0 - miss**tokens)


def params_per_expert(llm: LLM) -> float:
    """Parameters of one routed expert in one layer: gate, up and down projections."""
    assert llm.moe is not None
    return 3.0 * llm.hidden_size * llm.moe.moe_intermediate_size


def routed_expert_params(llm: LLM) -> float:
    """Parameters of all routed experts over all MoE layers, at most the model's total."""
    if llm.moe is None:
        return 0.0
    routed = llm.moe.num_moe_layers * llm.moe.num_experts * params_per_expert(llm)
    return min(routed, llm.total_params)


def params_read_per_step(llm: LLM, tokens: float) -> float:
    """Parameters a step of ``tokens`` tokens reads: everything for a dense model; for MoE the
    non-routed parameters plus the expected distinct routed experts of every MoE layer."""
    if llm.moe is None:
        return llm.total_params
    dense = llm.total_params - routed_expert_params(llm)
    touched = expected_distinct_experts(llm.moe.num_experts, llm.moe.experts_per_token, tokens)
    touched_params = llm.moe.num_moe_layers * touched * params_per_expert(llm)
    return min(llm.total_params, dense + touched_params)


def ep_problem(llm: LLM, tp: int, ep: int) -> str | None:
    """Why ``ep`` is not a valid expert-parallel degree in a ``tp``-GPU replica, or None."""
    if ep < 1:
        return "ep must be at least 1"
    if ep == 1:
        return None
    if llm.moe is None:
        return f"ep {ep} needs a mixture-of-experts model; {llm.id} is dense"
    if ep > tp or tp % ep:
        return f"ep {ep} must divide the replica's {tp} GPUs"
    if llm.moe.num_experts % ep:
        return f"ep {ep} does not divide {llm.id}'s {llm.moe.num_experts} experts"
    return None


def grouped_params_read_per_step(llm: LLM, tokens: float, small_group_tokens: float) -> float:
    """Parameters a step reads, each touched expert weighted by the grouped GEMM's small-group
    cost (nothing extra for a dense model or ``small_group_tokens`` 0).

    A touched expert that gets ``t`` tokens is read at ``1 + small_group_tokens / t`` times its
    bytes: an expert that gets one token streams at a fraction of the rate of one that gets
    dozens. The extra, ``small_group_tokens x touched^2 / (tokens x k)`` expert-parameters, peaks
    at ``tokens* = 1.2564 / -ln(1 - k/E)`` (where ``2y = e^y - 1``) and is held at its peak beyond,
    so the step time never falls as the batch grows.
    """
    base = params_read_per_step(llm, tokens)
    if llm.moe is None or small_group_tokens <= 0 or tokens <= 0:
        return base
    e, k = llm.moe.num_experts, llm.moe.experts_per_token
    if k >= e:
        return base * (1.0 + small_group_tokens / tokens)
    peak = 1.2564 / -math.log(1.0 - k / e)
    t = min(tokens, peak)
    touched = expected_distinct_experts(e, k, t)
    extra = small_group_tokens * touched * touched / (t * k)
    return base + llm.moe.num_moe_layers * extra * params_per_expert(llm)


@lru_cache(maxsize=4096)
def busiest_expert_share(num_experts: int, experts_per_token: int, tokens: float, ep: int) -> float:
    """Touched experts on the busiest of ``ep`` expert-parallel GPUs over the mean per GPU (1 for
    ``ep`` 1 or no tokens).

    Each GPU holds ``n = E / ep`` experts, each touched with probability ``q = 1 - (1 - k/E)^tokens``
    (independently: the binomial approximation of uniform routing); the busiest GPU's expected
    count is ``E[max] = sum_{m=0}^{n-1} (1 - F(m)^ep)`` with ``F`` the binomial CDF, and the
    share is ``E[max] / (n q)``. Non-decreasing in ``tokens``' touched count, at most ``1 / q``.
    """
    if ep <= 1 or tokens <= 0 or num_experts % ep:
        return 1.0
    n = num_experts // ep
    q = 1.0 - (1.0 - experts_per_token / num_experts) ** tokens
    if q >= 1.0:
        return 1.0
    pmf = [math.comb(n, m) * q**m * (1.0 - q) ** (n - m) for m in range(n + 1)]
    cdf, expected_max = 0.0, 0.0
    for m in range(n):
        cdf += pmf[m]
        expected_max += 1.0 - min(cdf, 1.0) ** ep
    return expected_max / (n * q)

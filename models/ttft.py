"""Time to first token (TTFT): the one place its model lives.

Every TTFT fleetplan checks or reports (candidate generation, the ``max_ttft_ms`` check, the
plan's ``ttft_ms`` and its explanation) comes from :func:`colocated_ttft_s` or
:func:`pool_ttft_s`; refitting TTFT to measurements means changing these functions only.

Colocated prefill (and ``headroom`` mode, where prefill also shares the decode steps): a
replica decoding ``B`` sequences of ``O`` output tokens admits ``B / O`` requests per step and
prefills their prompts in chunks, so a new request's prompt is spread over ``max(1, O / B)``
steps of a step that carries prefill::

    TTFT = max(1, O / B) x step_with_prefill x queue_factor(utilisation)

Prefill pool: a pool replica prefills one request at a time in ``service`` seconds, then the
KV cache crosses to a decode replica in ``transfer`` seconds::

    TTFT = service x queue_factor(utilisation) + transfer

Queueing: each replica is an M/D/1 queue, so a request spends ``1 + rho / (2 (1 - rho))``
service times in it at utilisation ``rho``.

With the documented invariants of the decode step (step time non-decreasing in ``B``, step
time per sequence non-increasing), the colocated TTFT is non-increasing in ``B`` up to ``O``
and non-decreasing beyond it.
"""

from __future__ import annotations

import math

from fleetplan.models.physics import DEFAULT_TTFT_QUEUE_MULTIPLE


def queue_factor(utilisation: float) -> float:
    """Time in system over service time at ``utilisation`` (M/D/1): 1 + rho / (2 (1 - rho))."""
    if utilisation >= 1.0:
        return math.inf
    return 1.0 + utilisation / (2.0 * (1.0 - utilisation))


def utilisation_for_queue_factor(factor: float) -> float:
    """Highest utilisation whose queue factor is at most ``factor``: 2 (f - 1) / (2 f - 1); 0 below 1."""
    if factor < 1.0:
        return 0.0
    if math.isinf(factor):
        return 1.0
    return 2.0 * (factor - 1.0) / (2.0 * factor - 1.0)


def max_utilisation(service_s: float, budget_s: float) -> float:
    """Highest utilisation at which ``service_s`` x queue factor stays within ``budget_s``."""
    if service_s <= 0:
        return 1.0
    return utilisation_for_queue_factor(budget_s / service_s)


# utilisation ceiling of any TTFT queue when the product sets no max_ttft_ms (0.8 for a multiple of 3)
DEFAULT_MAX_UTILISATION: float = utilisation_for_queue_factor(DEFAULT_TTFT_QUEUE_MULTIPLE)


def colocated_prefill_steps(batch: float, output_tokens: float) -> float:
    """Decode steps a new request's prompt is spread over: max(1, output_tokens / batch)."""
    return max(1.0, output_tokens / batch)


def colocated_ttft_s(step_time_s: float, batch: float, output_tokens: float, utilisation: float) -> float:
    """TTFT of a request whose prompt is prefilled in chunks inside the decode steps.

    ``step_time_s`` is the time of a decode step that carries its share of prefill,
    ``utilisation`` the share of the replica's throughput the demand takes.
    """
    return colocated_prefill_steps(batch, output_tokens) * step_time_s * queue_factor(utilisation)


def pool_service_s(flops_per_request: float, flops_per_s: float, weight_bytes: float, bytes_per_s: float) -> float:
    """Seconds a prefill replica takes for one request: its FLOPs at the replica's usable FLOP/s,
    but never less than one read of the weights at its usable bandwidth."""
    return max(flops_per_request / flops_per_s, weight_bytes / bytes_per_s)


def kv_transfer_s(kv_bytes: float, link_bytes_per_s: float) -> float:
    """Seconds to hand a request's KV cache from a prefill to a decode replica."""
    return kv_bytes / link_bytes_per_s


def pool_ttft_s(service_s: float, transfer_s: float, utilisation: float) -> float:
    """TTFT through a prefill pool at ``utilisation``: queue and prefill, then the KV hand-off."""
    return service_s * queue_factor(utilisation) + transfer_s

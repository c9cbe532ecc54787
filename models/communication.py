"""Time of the collectives a tensor- or expert-parallel decode step performs.

Tensor parallelism (Megatron-style) all-reduces the activations twice per layer, after
attention and after the MLP. Each all-reduce of an ``n``-byte message over ``p`` GPUs costs,
as a ring:

    t = latency + 2 (p - 1) x hop_latency + 2 (p - 1) / p x n / (link bandwidth x efficiency)

``latency`` is the fixed launch/synchronisation cost, ``hop_latency`` the cost per ring step
and the link bandwidth the scale-up (NVLink/xGMI) bandwidth per GPU, one direction. With
expert parallelism the MoE layers instead dispatch tokens to the GPUs holding their experts
and combine the results: two all-to-alls, each sending (p - 1)/p of ``k`` copies of every
token's activations.
"""

from __future__ import annotations

from fleetplan.catalogs.schema import GPU, LLM
from fleetplan.models.physics import Physics


def _collective_s(message_bytes: float, gpus: int, steps: int, moved: float, link_bytes_per_s: float,
                  latency_s: float, hop_latency_s: float, bandwidth_efficiency: float) -> float:
    """A collective over ``gpus`` GPUs: one fixed latency, ``steps`` hops, and each GPU moving
    ``moved`` times ``message_bytes`` over its link; zero for a single GPU."""
    if gpus <= 1:
        return 0.0
    return latency_s + steps * hop_latency_s + moved * message_bytes / (link_bytes_per_s * bandwidth_efficiency)


def allreduce_time_s(
    message_bytes: float, gpus: int, link_bytes_per_s: float, latency_s: float, hop_latency_s: float,
    bandwidth_efficiency: float,
) -> float:
    """Ring all-reduce of ``message_bytes`` over ``gpus`` GPUs: 2(g - 1) steps, each GPU moving
    2(g - 1)/g of the message."""
    steps = 2 * (gpus - 1)
    return _collective_s(message_bytes, gpus, steps, steps / gpus, link_bytes_per_s, latency_s, hop_latency_s,
                         bandwidth_efficiency)


def alltoall_time_s(
    message_bytes: float, gpus: int, link_bytes_per_s: float, latency_s: float, hop_latency_s: float,
    bandwidth_efficiency: float,
) -> float:
    """All-to-all where each GPU sends (gpus - 1)/gpus of ``message_bytes`` to its peers."""
    return _collective_s(message_bytes, gpus, gpus - 1, (gpus - 1) / gpus, link_bytes_per_s, latency_s,
                         hop_latency_s, bandwidth_efficiency)


def parallel_comm_time_s(llm: LLM, gpu: GPU, physics: Physics, *, tp: int, ep: int, tokens: float) -> float:
    """Communication time of one step of a ``tp``-GPU replica processing ``tokens`` tokens.

    Dense layers (and attention in every layer) all-reduce ``tokens x hidden`` activations
    twice per layer. When ``ep`` > 1 the MoE layers replace their MLP all-reduce by a
    dispatch and a combine all-to-all among ``ep`` GPUs of ``tokens x k x hidden`` activations
    (a GPU's share: tokens / ep, since attention outputs are replicated).
    """
    fam = physics.family(gpu.family)
    link = gpu.scaleup_bandwidth_bytes_per_s
    eff = physics.comm_bandwidth_efficiency
    msg = tokens * llm.hidden_size * physics.activation_bytes
    ar = allreduce_time_s(msg, tp, link, fam.collective_latency_s, fam.hop_latency_s, eff)
    per_layer = physics.allreduces_per_layer
    if llm.moe is None or ep <= 1:
        return llm.num_layers * per_layer * ar
    moe_layers = llm.moe.num_moe_layers
    a2a_msg = tokens / ep * llm.moe.experts_per_token * llm.hidden_size * physics.activation_bytes
    a2a = alltoall_time_s(a2a_msg, ep, link, fam.collective_latency_s, fam.hop_latency_s, eff)
    attention_ars = llm.num_layers * (per_layer - 1) * ar
    dense_mlp_ars = (llm.num_layers - moe_layers) * ar
    return attention_ars + dense_mlp_ars + moe_layers * 2 * a2a

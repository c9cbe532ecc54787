"""The parallel layout of one replica: tensor, pipeline, expert and attention-data parallelism.

A replica runs ``pp`` pipeline stages one after another. Each stage holds ``ceil(layers / pp)``
or ``floor(layers / pp)`` consecutive layers on ``tp x dp_attention`` GPUs: attention runs on
``dp_attention`` ranks of ``tp`` GPUs each (tensor parallel inside the scale-up domain, each
rank with its own sequences and its own KV cache), and the MoE layers spread their experts over
``ep`` of the stage's GPUs (``ep`` = 1: experts split by tensor parallelism over the whole stage).
So a replica has ``tp x dp_attention x pp`` GPUs, on ``ceil(GPUs / gpus_per_node)`` nodes.

Rules (as the engines enforce them): ``tp`` a valid tensor-parallel degree inside the scale-up
domain (:func:`fleetplan.models.parallel.tp_problem`); ``pp`` at most the layer count (stages get
``ceil`` or ``floor`` of ``layers / pp`` layers; the largest stage sets memory and time, see
:func:`pp_imbalance`); ``ep`` 1 or dividing both the stage's GPUs and the expert count;
``dp_attention`` > 1 and ``ep`` > 1 only for mixture-of-experts models.

One decode step of a replica holding ``B`` sequences (:func:`layout_step`): the sequences form
``pp`` micro-batches of ``b = ceil(B / pp)`` in flight, and an attention rank holds
``r = ceil(b / dp_attention)`` of them. A token of a sequence waits for its micro-batch to pass
every stage, and each stage serves the ``pp`` micro-batches in turn, so

    T = pp_imbalance x (time of one micro-batch through all layers) + (pp - 1) x hand-off(b)
    time through all layers = core (+ or, with ep > 1, overlapped with) MoE exchange + TP all-reduces + overhead
    per-user tokens/s = 1 / T;   replica tokens/s = B / T   (pp batches in flight)

where the micro-batch's time is the rank's roofline (:func:`fleetplan.models.roofline.decode_step`
at ``tp`` GPUs and ``r`` sequences: dense weights / tp, its own KV, its share of FLOPs) with the
routed experts read once per stage over all its GPUs, and the MoE layers' communication replaced
by :func:`moe_comm_time_s`. Memory per GPU: dense weights / (tp pp), experts / (tp dp pp), the
rank's KV / (tp pp) (MLA latents replicated on the rank's ``tp`` GPUs only, never across ranks),
checked on the largest stage.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from fleetplan.catalogs.schema import GPU, LLM
from fleetplan.models.communication import allreduce_time_s
from fleetplan.models.memory import bytes_per_value
from fleetplan.models.moe import busiest_expert_share, params_read_per_step, routed_expert_params
from fleetplan.models.parallel import tp_problem
from fleetplan.models.physics import DEFAULT_PHYSICS, Physics
from fleetplan.models.presets import Preset
from fleetplan.models.roofline import StepEstimate, decode_step, kv_context_tokens, kv_page_factor


@dataclass(frozen=True)
class LayoutPhysics:
    """Figures for traffic that leaves a replica's scale-up domain, and expert load imbalance.

    ``network_latency_s``: fixed cost of one collective or hand-off over the NIC (RDMA round,
    kernel launch and synchronisation): not fitted; a few microseconds of InfiniBand/RoCE
    latency plus the GPU-side launch, taken as 20 us, about twice the NVLink collective latency
    of :mod:`fleetplan.models.physics`.
    ``network_efficiency``: share of the NIC bandwidth an all-to-all or send/receive sustains;
    DeepEP's README (deepseek-ai/DeepEP, 2025) measures 43-47 GB/s of a CX7's ~50 GB/s over RDMA
    at EP 16-64, about 0.85.
    ``ep_load_imbalance``: busiest GPU's routed tokens over the mean with expert parallelism
    (after the engines' load balancers replicate hot experts); the MoE share of compute and the
    all-to-alls are timed at the busiest GPU. Taken as 1.2: SGLang's large-scale EP report
    (lmsys.org/blog/2025-05-05-large-scale-ep) shows balancing is needed and still leaves the
    busiest GPU above the mean; not fitted.
    """

    network_latency_s: float = 20e-6
    network_efficiency: float = 0.85
    ep_load_imbalance: float = 1.2


LAYOUT_PHYSICS = LayoutPhysics()


@dataclass(frozen=True)
class Layout:
    """How one replica is split: ``tp`` x ``dp_attention`` GPUs per stage, ``pp`` stages, MoE over ``ep``."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp_attention: int = 1

    @property
    def gpus_per_stage(self) -> int:
        """GPUs of one pipeline stage: ``tp x dp_attention``."""
        return self.tp * self.dp_attention

    @property
    def gpus(self) -> int:
        """GPUs of one replica: ``tp x dp_attention x pp``."""
        return self.gpus_per_stage * self.pp

    @property
    def is_tensor_parallel_only(self) -> bool:
        """Whether the replica is one tensor-parallel group (pp, ep, dp_attention all 1)."""
        return self.pp == 1 and self.ep == 1 and self.dp_attention == 1

    def nodes(self, gpu: GPU) -> int:
        """Nodes a replica occupies: ``ceil(GPUs / gpus per node)``."""
        return math.ceil(self.gpus / gpu.node_gpus)

    def label(self) -> str:
        """Compact name: ``tp8``, ``tp8·pp2``, ``dp8·ep16``, ``dp8·tp2·ep16·pp2``."""
        parts = [f"dp{self.dp_attention}"] if self.dp_attention > 1 else []
        if self.tp > 1 or self.dp_attention == 1:
            parts.append(f"tp{self.tp}")
        parts += [f"ep{self.ep}"] if self.ep > 1 else []
        parts += [f"pp{self.pp}"] if self.pp > 1 else []
        return "·".join(parts)

    def key_suffix(self) -> str:
        """What a candidate key adds for this layout: nothing for a tensor-parallel group."""
        extra = [f"pp{self.pp}"] if self.pp > 1 else []
        extra += [f"ep{self.ep}"] if self.ep > 1 else []
        extra += [f"dp{self.dp_attention}"] if self.dp_attention > 1 else []
        return "".join(f"/{e}" for e in extra)


def layout_problem(llm: LLM, gpu: GPU, layout: Layout) -> str | None:
    """Why ``layout`` cannot serve ``llm`` on ``gpu`` (naming the degree at fault), or None."""
    problem = tp_problem(llm, gpu, layout.tp)
    if problem:
        return problem
    if layout.pp < 1 or layout.pp > llm.num_layers:
        return f"pp {layout.pp} must be between 1 and {llm.id}'s {llm.num_layers} layers"
    for name, value in (("ep", layout.ep), ("dp_attention", layout.dp_attention)):
        if value < 1:
            return f"{name} must be at least 1"
        if value > 1 and llm.moe is None:
            return f"{name} {value} needs a mixture-of-experts model; {llm.id} is dense (nearest valid choice: 1)"
    if llm.moe is not None and layout.ep > 1:
        if layout.gpus_per_stage % layout.ep:
            return f"ep {layout.ep} must divide the stage's {layout.gpus_per_stage} GPUs (tp x dp_attention)"
        if llm.moe.num_experts % layout.ep:
            return f"ep {layout.ep} does not divide {llm.id}'s {llm.moe.num_experts} experts"
    return None


def pp_imbalance(num_layers: int, pp: int) -> float:
    """Largest stage over the mean stage: ``pp x ceil(layers / pp) / layers`` (1 when pp divides).

    Stages get ``ceil`` or ``floor`` of ``layers / pp`` consecutive layers; the largest holds the
    most weights and KV and takes the longest, so memory and step time are set by it.
    """
    return pp * math.ceil(num_layers / pp) / num_layers


def micro_batch(batch: int, pp: int) -> int:
    """Sequences of one micro-batch when ``batch`` sequences form ``pp`` micro-batches: ``ceil(B / pp)``."""
    return math.ceil(batch / pp)


def rank_batch(micro: int, dp_attention: int) -> int:
    """Sequences one attention rank holds: ``ceil(micro-batch / dp_attention)``."""
    return math.ceil(micro / dp_attention)


def crosses_nodes(gpu: GPU, gpus: int) -> bool:
    """Whether ``gpus`` GPUs of one group leave the scale-up domain (traffic over the NIC)."""
    return gpus > gpu.scaleup_domain_gpus


def link(gpu: GPU, gpus: int, physics: Physics, lp: LayoutPhysics) -> tuple[float, float, float]:
    """(bytes/s per GPU, efficiency, fixed latency s) of the fabric a group of ``gpus`` GPUs uses:
    NVLink/xGMI inside the scale-up domain, the NIC beyond it."""
    if crosses_nodes(gpu, gpus):
        return gpu.network_bandwidth_bytes_per_s, lp.network_efficiency, lp.network_latency_s
    return gpu.scaleup_bandwidth_bytes_per_s, physics.comm_bandwidth_efficiency, physics.family(gpu.family).collective_latency_s


def pp_handoff_s(llm: LLM, gpu: GPU, layout: Layout, tokens: int, physics: Physics, lp: LayoutPhysics) -> float:
    """Hand-off of one micro-batch's activations from one stage to the next.

    ``latency + tokens x hidden x activation bytes / (stage GPUs x link bytes/s x efficiency)``:
    every GPU of a stage sends its share, over NVLink when the whole replica sits in one scale-up
    domain, else over the NIC. Zero with one stage.
    """
    if layout.pp <= 1:
        return 0.0
    bw, eff, latency = link(gpu, layout.gpus, physics, lp)
    size = tokens * llm.hidden_size * physics.activation_bytes
    return latency + size / (layout.gpus_per_stage * bw * eff)


def ep_alltoall_s(message_bytes: float, ep: int, bw: float, eff: float, latency_s: float) -> float:
    """One expert-parallel all-to-all: ``latency + (ep - 1)/ep x message / (bw x eff)``.

    Each GPU sends its share to every peer at once (DeepEP-style kernels write straight into the
    peers' buffers), so there is one fixed latency, not one per ring step.
    """
    if ep <= 1:
        return 0.0
    return latency_s + (ep - 1) / ep * message_bytes / (bw * eff)


def moe_comm_time_s(llm: LLM, gpu: GPU, layout: Layout, tokens: int, physics: Physics, lp: LayoutPhysics) -> float:
    """Communication of one MoE layer for a micro-batch of ``tokens`` tokens in one stage.

    ``ep`` > 1: a dispatch and a combine all-to-all (:func:`ep_alltoall_s`) among ``ep`` GPUs,
    each GPU sending ``tokens / ep x k x hidden x activation bytes``, over the NIC when ``ep``
    leaves the scale-up domain, timed at the busiest GPU (times the expert load imbalance).
    ``ep`` = 1: the experts are tensor-parallel over the stage, one ring all-reduce of the
    micro-batch over the stage's GPUs.
    """
    assert llm.moe is not None
    if layout.ep > 1:
        bw, eff, latency = link(gpu, layout.ep, physics, lp)
        msg = tokens / layout.ep * llm.moe.experts_per_token * llm.hidden_size * physics.activation_bytes
        return 2 * lp.ep_load_imbalance * ep_alltoall_s(msg, layout.ep, bw, eff, latency)
    fam = physics.family(gpu.family)
    bw, eff, latency = link(gpu, layout.gpus_per_stage, physics, lp)
    msg = tokens * llm.hidden_size * physics.activation_bytes
    return allreduce_time_s(msg, layout.gpus_per_stage, bw, latency, fam.hop_latency_s, eff)


def rank_comm_time_s(llm: LLM, gpu: GPU, layout: Layout, rank_tokens: int, physics: Physics) -> float:
    """Tensor-parallel all-reduces inside one attention rank: attention in every layer and the
    MLP of the dense (non-MoE) layers, each of ``rank_tokens x hidden`` activations over ``tp``."""
    fam = physics.family(gpu.family)
    msg = rank_tokens * llm.hidden_size * physics.activation_bytes
    ar = allreduce_time_s(msg, layout.tp, gpu.scaleup_bandwidth_bytes_per_s, fam.collective_latency_s,
                          fam.hop_latency_s, physics.comm_bandwidth_efficiency)
    moe_layers = llm.moe.num_moe_layers if llm.moe is not None else 0
    return (llm.num_layers * (physics.allreduces_per_layer - 1) + llm.num_layers - moe_layers) * ar


def expert_bytes_read(llm: LLM, preset: Preset, precision: str, tokens: int, ep: int = 1) -> float:
    """Routed-expert bytes a step of ``tokens`` tokens reads (all of them without expert sampling),
    at the busiest of ``ep`` expert-parallel GPUs where the physics times them so
    (:func:`fleetplan.models.moe.busiest_expert_share`)."""
    if llm.moe is None:
        return 0.0
    routed = routed_expert_params(llm)
    if preset.moe_expert_sampling:
        routed = params_read_per_step(llm, tokens) - (llm.total_params - routed)
    if preset.physics is not None and preset.physics.expert_parallel_busiest and ep > 1:
        routed *= busiest_expert_share(llm.moe.num_experts, llm.moe.experts_per_token, float(tokens), ep)
    return routed * bytes_per_value(precision)


def _moe_compute_share(llm: LLM) -> float:
    """Share of the active parameters that sit in routed experts (0 for a dense model)."""
    if llm.moe is None:
        return 0.0
    per_expert = 3.0 * llm.hidden_size * llm.moe.moe_intermediate_size
    routed_active = llm.moe.num_moe_layers * llm.moe.experts_per_token * per_expert
    return min(1.0, routed_active / llm.active_params)


def layout_comm_time_s(
    llm: LLM, gpu: GPU, layout: Layout, preset: Preset, micro: int, rank_tokens: int, lp: LayoutPhysics
) -> tuple[float, float]:
    """(tensor-parallel, MoE) collectives of one micro-batch through all layers, hand-offs excluded.

    With the preset's communication terms: the rank's tensor-parallel all-reduces and every MoE
    layer's :func:`moe_comm_time_s`. Without them (``seed``), only traffic beyond one
    tensor-parallel group is counted: the MoE layers' exchange when ``ep`` or ``dp_attention`` > 1.
    """
    physics = preset.physics or DEFAULT_PHYSICS
    moe = 0.0
    beyond_tp = layout.ep > 1 or layout.dp_attention > 1
    if llm.moe is not None and (preset.communication or beyond_tp):
        moe = llm.moe.num_moe_layers * moe_comm_time_s(llm, gpu, layout, micro, physics, lp)
    if not preset.communication or preset.physics is None:
        return 0.0, moe
    return rank_comm_time_s(llm, gpu, layout, rank_tokens, physics), moe


def overlapped(core_s: float, moe_comm_s: float, ep: int) -> float:
    """Core time and the MoE exchange of a stage: overlapped with expert parallelism, else added.

    Engines serving wide EP split each batch in two and exchange one half's tokens while the other
    computes (SGLang two-batch overlap, lmsys.org/blog/2025-05-05-large-scale-ep; DeepEP's
    communication hooks), so the longer of the two sets the time; tensor-parallel all-reduces sit
    on the critical path.
    """
    if ep > 1:
        return max(core_s, moe_comm_s)
    return core_s + moe_comm_s


def layout_step(
    llm: LLM, gpu: GPU, layout: Layout, *, precision: str, batch: int, input_tokens: float, output_tokens: float,
    preset: Preset, kv_precision: str | None = None, prefill_flops_per_step: float = 0.0,
    engine: str | None = None, aggregated: bool = False, lp: LayoutPhysics = LAYOUT_PHYSICS,
    prefix_cache_hit_rate: float = 0.0, engine_version: str = "",
) -> StepEstimate:
    """One decode step (one token of every sequence) of a replica laid out as ``layout``.

    Built from the rank's roofline (``decode_step`` at ``tp`` GPUs and ``r`` sequences) as the
    module docstring says: routed experts read once per stage over its ``tp x dp_attention``
    GPUs, MoE compute at the busiest EP rank, layout communication, pipeline imbalance and
    hand-offs; memory checked per GPU on the largest stage.
    """
    micro = micro_batch(batch, layout.pp)
    r = rank_batch(micro, layout.dp_attention)
    rank = decode_step(
        llm, gpu, precision=precision, tp=layout.tp, batch=r, input_tokens=input_tokens,
        output_tokens=output_tokens, preset=preset, kv_precision=kv_precision,
        prefill_flops_per_step=prefill_flops_per_step * r / batch, engine=engine, aggregated=aggregated,
        prefix_cache_hit_rate=prefix_cache_hit_rate, engine_version=engine_version,
    )
    per_byte = rank.memory_time_s / rank.bytes_per_step
    weights_read = (rank.weight_bytes_read - expert_bytes_read(llm, preset, precision, r)
                    + expert_bytes_read(llm, preset, precision, micro, layout.ep) / layout.dp_attention)
    weights_time = weights_read * per_byte
    kv_time = (rank.bytes_per_step - rank.weight_bytes_read) * per_byte * kv_page_factor(
        preset, engine, kv_context_tokens(preset, input_tokens, output_tokens)[0])
    imbalance = lp.ep_load_imbalance if layout.ep > 1 else 1.0
    compute = rank.compute_time_s * (1.0 + (imbalance - 1.0) * _moe_compute_share(llm))
    if preset.composition == "roofline":
        core = max(weights_time + kv_time, compute)
    else:
        core = max(weights_time, compute) + kv_time + rank.prefill_time_s
    scale = preset.factors_for(gpu.id, gpu.family, engine).comm_scale
    tp_comm, moe_comm = (scale * t for t in layout_comm_time_s(llm, gpu, layout, preset, micro, r, lp))
    comm = tp_comm + moe_comm
    stage_factor = pp_imbalance(llm.num_layers, layout.pp)
    handoff = (layout.pp - 1) * pp_handoff_s(llm, gpu, layout, micro, preset.physics or DEFAULT_PHYSICS, lp)
    step = stage_factor * (overlapped(core, moe_comm, layout.ep) + tp_comm + rank.overhead_time_s) + handoff
    return _layout_estimate(llm, layout, rank, batch, weights_read, weights_time, kv_time, compute,
                            comm + handoff, step, stage_factor)


def _layout_estimate(
    llm: LLM, layout: Layout, rank: StepEstimate, batch: int, weights_read: float, weights_time: float,
    kv_time: float, compute: float, comm: float, step: float, stage_factor: float,
) -> StepEstimate:
    """The replica's step estimate from the rank's and the layout's terms."""
    w = rank.weight_bytes
    dense = w * (1.0 - routed_expert_params(llm) / llm.total_params)
    seqs = rank.batch * layout.dp_attention * layout.pp
    parts = {"memory": weights_time + kv_time if weights_time >= compute else kv_time,
             "compute": compute + rank.prefill_time_s, "communication": comm, "overhead": rank.overhead_time_s}
    return dataclasses.replace(
        rank,
        weight_bytes=w,
        bytes_per_step=weights_read + batch * rank.kv_bytes_read_per_sequence,
        flops_per_step=rank.flops_per_step * batch / rank.batch,
        memory_time_s=weights_time + kv_time,
        compute_time_s=compute,
        step_time_s=step,
        bound=max(parts, key=lambda k: parts[k]),
        per_user_tokens_per_s=1.0 / step,
        replica_tokens_per_s=batch / step,
        memory_needed_bytes=w + (layout.dp_attention - 1) * dense + seqs * rank.kv_bytes_held_per_sequence,
        memory_usable_bytes=rank.memory_usable_bytes * layout.dp_attention * layout.pp / stage_factor,
        weight_bytes_read=weights_read,
        weights_time_s=weights_time,
        kv_time_s=kv_time,
        comm_time_s=comm,
        batch=batch,
        batch_cap=None if rank.batch_cap is None else rank.batch_cap * layout.dp_attention * layout.pp,
        ep=layout.ep,
    )


def memory_per_gpu_bytes(llm: LLM, layout: Layout, estimate: StepEstimate) -> float:
    """Bytes the busiest GPU holds: the replica's need over its GPUs, scaled to the largest stage."""
    return estimate.memory_needed_bytes / layout.gpus * pp_imbalance(llm.num_layers, layout.pp)


def weights_per_gpu_bytes(llm: LLM, layout: Layout, precision: str) -> float:
    """Weight bytes the busiest GPU holds: dense / (tp pp) + routed experts / (tp dp pp), on the
    largest stage."""
    w = llm.total_params * bytes_per_value(precision)
    experts = routed_expert_params(llm) * bytes_per_value(precision)
    per_stage = (w - experts) / layout.tp + experts / layout.gpus_per_stage
    return per_stage / layout.pp * pp_imbalance(llm.num_layers, layout.pp)

"""Which replica layouts the search tries: tensor-parallel groups, pipeline stages, expert and
attention-data parallelism, pruned to the ones that can matter.

It owns the search policy over layouts (which degrees, where pipeline stages are worth trying,
the batches searched per layout); the layouts' rules and physics are in
:mod:`fleetplan.models.layout`. It must not time a step or build a candidate.
"""

from __future__ import annotations

from fleetplan.catalogs.schema import GPU, LLM
from fleetplan.models.layout import Layout, layout_problem, pp_imbalance, weights_per_gpu_bytes
from fleetplan.models.memory import held_weight_bytes, usable_memory_bytes
from fleetplan.models.presets import Preset
from fleetplan.optimizer.scenario import Options

# pipeline stages searched: only where the model's weights do not fit the stage's GPUs with fewer
DEFAULT_PP: tuple[int, ...] = (1, 2, 4)
# attention data-parallel ranks searched for mixture-of-experts models (experts over the whole stage)
DEFAULT_DP_ATTENTION: tuple[int, ...] = (1, 8, 16, 32, 64)
# most GPUs in one pipeline stage (tp x dp_attention), a cap on the search: it covers the EP 16-64
# layouts reported for DeepSeek-class models on 8-GPU nodes and most of a 72-GPU NVL72 domain
MAX_STAGE_GPUS = 64


def stage_layouts(llm: LLM, tp: int, options: Options) -> list[Layout]:
    """One-stage layouts of ``tp``-GPU attention ranks: the tensor-parallel group; for a MoE model
    also experts spread over the group (ep = tp) and ``dp_attention`` ranks with experts over the
    whole stage (ep = tp x dp), within :data:`MAX_STAGE_GPUS`; ``options`` restrict ep and dp."""
    out = [Layout(tp)]
    if llm.moe is None:
        return out
    eps = set(options.ep) if options.ep else None
    for dp in sorted(set(options.dp_attention or DEFAULT_DP_ATTENTION)):
        ep = tp * dp
        if ep > 1 and ep <= MAX_STAGE_GPUS and (eps is None or ep in eps):
            out.append(Layout(tp, 1, ep, dp))
    if eps is not None and 1 not in eps:
        out = [lay for lay in out if lay.ep > 1]
    return out


def layout_batches(batches: list[int], layout: Layout, options: Options) -> list[int]:
    """Batches searched for a replica of ``layout``: the options' list when given, else 1 up to
    ``max_batch`` per engine instance, that is per attention rank and pipeline micro-batch
    (``max_batch x dp_attention x pp`` for the replica)."""
    if options.batch or layout.dp_attention * layout.pp == 1:
        return batches
    return list(range(1, options.max_batch * layout.dp_attention * layout.pp + 1))


def replica_layouts(llm: LLM, gpu: GPU, tp: int, precision: str, options: Options, preset: Preset) -> list[Layout]:
    """Layouts searched for one (GPU, TP, precision): each stage layout, and pipeline stages
    (``options.pp`` or :data:`DEFAULT_PP`) only where its weights do not fit with half as many
    stages (dense or EP-in-TP layouts; attention-DP layouts grow by ranks instead)."""
    pps = sorted(set(options.pp or DEFAULT_PP))
    usable = usable_memory_bytes(gpu, preset.usable_memory_fraction)
    out: list[Layout] = []
    for stage in stage_layouts(llm, tp, options):
        for pp in pps:
            lay = Layout(stage.tp, pp, stage.ep, stage.dp_attention)
            fewer = Layout(stage.tp, max(1, pp // 2), stage.ep, stage.dp_attention)
            if pp > 1 and (stage.dp_attention > 1 or weights_per_gpu_bytes(llm, fewer, precision) <= usable):
                continue
            if layout_problem(llm, gpu, lay) is None:
                out.append(lay)
    return out


def pool_stages(
    llm: LLM, gpu: GPU, tp: int, precision: str, kv_bytes: float, options: Options, preset: Preset
) -> list[int]:
    """Pipeline stages of a ``tp``-GPU pool replica that hold the weights and one prompt's KV:
    the fewest of ``options.pp`` (or :data:`DEFAULT_PP`) that fit, none if none does."""
    w = held_weight_bytes(llm, precision, gpu.vendor)
    for pp in sorted(set(options.pp or DEFAULT_PP)):
        if w + kv_bytes <= tp * pp / pp_imbalance(llm.num_layers, pp) * usable_memory_bytes(gpu, preset.usable_memory_fraction):
            return [pp]
    return []

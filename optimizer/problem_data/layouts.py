"""Which replica layouts the search tries: tensor-parallel groups, pipeline stages, expert and
attention-data parallelism, pruned to the ones that can matter.

It owns the search policy over layouts (which degrees, where pipeline stages are worth trying,
the batches searched per layout) and the check that ``options.ep``, ``options.pp`` and
``options.dp_attention`` name degrees some product can run; the layouts' rules and physics are
in :mod:`fleetplan.models.layout`. It must not time a step or build a candidate.

The options restrict exactly: given, a decode replica's ``ep`` (``pp``, ``dp_attention``) is one
of the listed values and every listed value is searched wherever the engines' rules allow it; a
value no product's model can run on any GPU and TP searched is refused by name
(:func:`restriction_problem`), never replaced by another. Left out, the defaults below apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fleetplan.optimizer.common.defaults import MAX_STAGE_GPUS
from fleetplan.catalogs.schema import GPU, LLM
from fleetplan.models.layout import Layout, layout_problem, pp_imbalance, weights_per_gpu_bytes
from fleetplan.models.memory import held_weight_bytes, usable_memory_bytes
from fleetplan.models.presets import Preset
from fleetplan.optimizer.traffic.scenario import Options

# pipeline stages searched: only where the model's weights do not fit the stage's GPUs with fewer
DEFAULT_PP: tuple[int, ...] = (1, 2, 4)
# attention data-parallel ranks searched for mixture-of-experts models (experts over the whole stage)
DEFAULT_DP_ATTENTION: tuple[int, ...] = (1, 8, 16, 32, 64)
# the layout options, as named in a scenario's ``options``
RESTRICTED: tuple[str, ...] = ("ep", "pp", "dp_attention")


def _stage_eps(tp: int, dp: int, options: Options) -> list[int]:
    """Expert-parallel degrees tried for a stage of ``dp`` ranks of ``tp`` GPUs: ``options.ep``
    when given; else experts split by tensor parallelism (ep 1) or over the group (ep = tp) with
    one rank, and over the whole stage (ep = tp x dp) with several."""
    if options.ep:
        return sorted(set(options.ep))
    return sorted({1, tp}) if dp == 1 else [tp * dp]


def stage_layouts(llm: LLM, tp: int, options: Options) -> list[Layout]:
    """One-stage layouts of ``tp``-GPU attention ranks whose ep and dp_attention the options allow:
    for a dense model the tensor-parallel group (when ep and dp_attention may be 1); for a MoE
    model each ``dp_attention`` (``options.dp_attention`` or :data:`DEFAULT_DP_ATTENTION`) with
    each expert-parallel degree of :func:`_stage_eps`, within :data:`MAX_STAGE_GPUS`. Whether the
    model and GPU can run a layout is :func:`~fleetplan.models.layout.layout_problem`'s to say."""
    if llm.moe is None:
        ones = all(getattr(options, name) is None or 1 in getattr(options, name) for name in ("ep", "dp_attention"))
        return [Layout(tp)] if ones else []
    out: list[Layout] = []
    for dp in sorted(set(options.dp_attention or DEFAULT_DP_ATTENTION)):
        if tp * dp <= MAX_STAGE_GPUS:
            out += [Layout(tp, 1, ep, dp) for ep in _stage_eps(tp, dp, options)]
    return out


def layout_batches(batches: Sequence[int], layout: Layout, options: Options) -> Sequence[int]:
    """Batches searched for a replica of ``layout``: the options' list when given, else 1 up to
    ``max_batch`` per engine instance, that is per attention rank and pipeline micro-batch
    (``max_batch x dp_attention x pp`` for the replica). A range, not a list: the searches only
    index it, and at 65,536 x 64 ranks x 8 stages a list would take seconds and gigabytes."""
    if options.batch or layout.dp_attention * layout.pp == 1:
        return batches
    return range(1, options.max_batch * layout.dp_attention * layout.pp + 1)


def replica_layouts(llm: LLM, gpu: GPU, tp: int, precision: str, options: Options, preset: Preset) -> list[Layout]:
    """Layouts searched for one (GPU, TP, precision): each stage layout with each pipeline depth.
    Every depth of ``options.pp`` when given; else those of :data:`DEFAULT_PP`, a depth only where
    half as many stages do not hold its weights (dense or EP-in-TP layouts; attention-DP layouts
    grow by ranks instead and keep one stage)."""
    listed = options.pp is not None
    pps = sorted(set(options.pp or DEFAULT_PP))
    usable = usable_memory_bytes(gpu, preset.usable_memory_fraction)
    out: list[Layout] = []
    for stage in stage_layouts(llm, tp, options):
        for pp in pps:
            lay = Layout(stage.tp, pp, stage.ep, stage.dp_attention)
            if pp > 1 and not listed:
                fewer = Layout(stage.tp, max(1, pp // 2), stage.ep, stage.dp_attention)
                if stage.dp_attention > 1 or weights_per_gpu_bytes(llm, fewer, precision) <= usable:
                    continue
            if layout_problem(llm, gpu, lay) is None:
                out.append(lay)
    return out


def _runnable(llm: LLM, gpus: Iterable[GPU], tps: Iterable[int], options: Options) -> bool:
    """Whether ``llm`` can run some layout the options allow on one of ``gpus`` at one of ``tps``,
    at some pipeline depth (memory not considered)."""
    pps = sorted(set(options.pp or DEFAULT_PP))
    return any(layout_problem(llm, gpu, Layout(tp, pp, stage.ep, stage.dp_attention)) is None
               for gpu in gpus for tp in tps for stage in stage_layouts(llm, tp, options) for pp in pps)


def _why_not(llm: LLM, gpus: list[GPU], tps: list[int], options: Options, name: str, value: int) -> str:
    """Why no layout with ``name`` = ``value`` runs ``llm`` (the first engine rule broken)."""
    if name != "pp" and value > 1 and llm.moe is None:
        return f"{value} applies only to mixture-of-experts models; {llm.id} is dense (use 1)"
    if name == "pp" and value > llm.num_layers:
        return f"{value} exceeds {llm.id}'s {llm.num_layers} layers"
    only = options.model_copy(update={name: [value]})
    problems: list[str] = []
    for tp in tps:
        stages = stage_layouts(llm, tp, only)
        if not stages and name == "dp_attention" and tp * value > MAX_STAGE_GPUS:
            problems.append(f"tp {tp} x dp_attention {value} exceeds the {MAX_STAGE_GPUS} GPUs a stage may have")
        for gpu in gpus:
            problems += [p for s in stages if (p := layout_problem(llm, gpu, Layout(tp, 1, s.ep, s.dp_attention)))]
    reason = problems[0] if problems else "no GPU and tensor-parallel degree searched allows it"
    if name != "pp" and llm.moe is not None and not options.ep:
        reason += f" (experts over each stage's tp x dp_attention GPUs must divide its {llm.moe.num_experts} experts)"
    return f"{value} gives no layout {llm.id} can run: {reason}"


def restriction_problem(llms: list[LLM], gpus: list[GPU], tps: list[int], options: Options) -> str | None:
    """Why ``options.ep``, ``options.pp`` or ``options.dp_attention`` cannot be honoured exactly,
    as one line naming the field, or None: a listed value no model of ``llms`` can run on any of
    ``gpus`` at any of ``tps`` (:func:`_value_problem`), or a model the listed values together
    leave without a layout it has without them (:func:`_model_problem`)."""
    for name in RESTRICTED:
        for value in sorted(set(getattr(options, name) or ())):
            problem = _value_problem(llms, gpus, tps, options, name, value)
            if problem:
                return problem
    return next((p for llm in llms if (p := _model_problem(llm, gpus, tps, options))), None)


def _value_problem(llms: list[LLM], gpus: list[GPU], tps: list[int], options: Options, name: str,
                   value: int) -> str | None:
    """Why no model of ``llms`` can run ``options.{name}`` = ``value``, with the nearest value
    some model can run (none for ep and dp_attention when every model is dense), or None."""
    if any(_runnable(llm, gpus, tps, options.model_copy(update={name: [value]})) for llm in llms):
        return None
    moe = [llm for llm in llms if llm.moe is not None]
    if name != "pp" and not moe:
        return f"options.{name}: " + _why_not(llms[0], gpus, tps, options, name, value)
    llm = moe[0] if name != "pp" else llms[0]
    return f"options.{name}: " + _why_not(llm, gpus, tps, options, name, value) + _nearest(
        llms, gpus, tps, options, name, value)


def _model_problem(llm: LLM, gpus: list[GPU], tps: list[int], options: Options) -> str | None:
    """Why the layout options together leave ``llm`` no layout, naming the first field that alone
    empties it, or None (also when ``llm`` has no layout even without them: not theirs to say)."""
    if _runnable(llm, gpus, tps, options) or not _runnable(llm, gpus, tps, _unrestricted(options)):
        return None
    for name in RESTRICTED:
        values = sorted(set(getattr(options, name) or ()))
        if values and not _runnable(llm, gpus, tps, _unrestricted(options).model_copy(update={name: values})):
            listed = ", ".join(map(str, values))
            return (f"options.{name}: [{listed}] leaves {llm.id} no layout: "
                    + _why_not(llm, gpus, tps, options, name, values[0]))
    listed = "; ".join(f"{n} {sorted(set(getattr(options, n)))}" for n in RESTRICTED if getattr(options, n))
    return f"options: {listed} together leave {llm.id} no layout it can run"


def _unrestricted(options: Options) -> Options:
    """``options`` without its layout restrictions."""
    return options.model_copy(update={name: None for name in RESTRICTED})


def _nearest(llms: list[LLM], gpus: list[GPU], tps: list[int], options: Options, name: str, value: int) -> str:
    """`` (nearest valid choice: N)`` for the closest value of ``name`` some model can run, or ''."""
    limit = max(max(llm.num_layers for llm in llms), MAX_STAGE_GPUS) if name == "pp" else MAX_STAGE_GPUS
    ok = [v for v in range(1, limit + 1)
          if any(_runnable(llm, gpus, tps, options.model_copy(update={name: [v]})) for llm in llms)]
    if not ok:
        return ""
    return f" (nearest valid choice: {min(ok, key=lambda v: (abs(v - value), v))})"


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

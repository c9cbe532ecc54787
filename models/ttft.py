"""Time to first token (TTFT): the one place its model lives.

Every TTFT fleetplan checks or reports (candidate generation, the ``max_ttft_ms`` check, the
plan's ``ttft_ms`` and its explanation, ``estimate`` and ``validate``) comes from one function,
:func:`ttft_s`: a request waits for its admission, for the prefill of the requests ahead of it
and its own, and for the decode steps interleaved with that prefill, all stretched by
queueing, and (from a pool) for its KV hand-off::

    TTFT = admission + ((1 + ahead) x prefill + steps x step) x queue_factor(utilisation) + transfer

:func:`colocated_ttft_s`, :func:`pool_ttft_s` and :func:`benchmark_ttft_s` only say what
``ahead``, ``prefill`` and ``steps`` are in each setting; :func:`prefill_service_s` is the one
prefill service time.

Colocated prefill (and ``headroom`` mode, where prefill also shares the decode steps): a
replica decoding ``B`` sequences of ``O`` output tokens admits ``B / O`` requests per step and
prefills their prompts in chunks, so a new request's prompt is spread over ``max(1, O / B)``
steps of a step that carries prefill::

    TTFT = max(1, O / B) x step_with_prefill x queue_factor(utilisation)

Prefill pool: a pool replica prefills one request at a time in ``service`` seconds, then the
KV cache crosses to a decode replica in ``transfer`` seconds::

    TTFT = service x queue_factor(utilisation) + transfer

Closed-loop benchmark at concurrency ``B`` (``validate``): ahead of a request are the prompts
its arrival pattern leaves ahead (:mod:`fleetplan.models.interference`: with fixed lengths the
share ``s`` of a wave's other ``B - 1`` prompts its engine prefills before its first token; with
lengths drawn from a range, partly the drifted clients in their prefill), prefilled at most
``chunk_tokens`` per engine step, each step also decoding the batch, and ``k`` more steps that
carry none of its prefill (``Physics.first_token_steps``: the step running when it arrives, the
step that returns its first token); the median and the 99th percentile differ by the prompts ahead
and the own prompt's length::

    TTFT = admission + (1 + ahead) x prefill + (ceil((1 + ahead) x I / chunk) + k) x step

Queueing: each replica is an M/D/1 queue, so a request spends ``1 + rho / (2 (1 - rho))``
service times in it at utilisation ``rho``.

With the documented invariants of the decode step (step time non-decreasing in ``B``, step
time per sequence non-increasing), the colocated TTFT of a tensor-parallel replica is
non-increasing in ``B`` up to ``O`` and non-decreasing beyond it. A replica with attention ranks
or micro-batches breaks the second invariant: its step jumps one sequence past each multiple of
them, so below ``O`` its TTFT saw-tooths, and the planner relies only on the first.
"""

from __future__ import annotations

import math

from fleetplan.catalogs.schema import GPU, LLM
from fleetplan.models.physics import DEFAULT_TTFT_QUEUE_MULTIPLE
from fleetplan.models.presets import Preset, normalize_engine
from fleetplan.models.communication import parallel_comm_time_s
from fleetplan.models.interference import WAVES, Arrival, closed_loop_prompts_ahead, wave_share
from fleetplan.models.memory import weight_bytes
from fleetplan.models.layout import Layout
from fleetplan.models.roofline import (
    StepEstimate, bandwidth_efficiency, benchmark_share_ahead, decode_step, model_kind, usable_flop_rate,
)


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


def ttft_s(
    *, prefill_s: float, requests_ahead: float, steps: float, step_s: float, utilisation: float,
    transfer_s: float = 0.0, admission_s: float = 0.0,
) -> float:
    """Time to first token: admission, then the prefill of ``requests_ahead`` prompts and the
    request's own (``prefill_s`` each) and ``steps`` interleaved steps of ``step_s``, stretched by
    the queue at ``utilisation``, then the KV hand-off ``transfer_s``."""
    work = (1.0 + requests_ahead) * prefill_s + steps * step_s
    return admission_s + work * queue_factor(utilisation) + transfer_s


def admission_s(preset: Preset, engine: str | None = None) -> float:
    """Admission and response latency every request pays on ``engine``: its own fitted figure, or
    for an unknown engine the fallback's (the engines' mean), or for None (the planner, which names
    no engine) the physics' shared ``admission_latency_s``; zero without physics: the seed."""
    if preset.physics is None:
        return 0.0
    if engine is None:
        return preset.physics.admission_latency_s
    own = preset.physics.engine(normalize_engine(engine)).admission_latency_s
    return preset.physics.admission_latency_s if own is None else own


def prefill_service_s(llm: LLM, gpu: GPU, preset: Preset, *, precision: str, tp: int, flops: float,
                      engine: str | None = None, pp: int = 1) -> float:
    """Seconds per prompt of ``flops`` prefill work on a replica of ``tp x pp`` GPUs (prompts
    pipelined through ``pp`` stages of ``tp`` GPUs): at its prefill FLOP/s, but never less than
    one read of all its weights (a long prompt touches every expert) at its decode bandwidth, both
    with the preset's calibration; with ``prefill_communication`` the all-reduces of the prompt's
    activations over each stage's ``tp`` GPUs come on top (a stage holds 1/pp of the layers)."""
    factors = preset.factors_for(gpu.id, gpu.family, engine, model_kind(llm), llm.id)
    gpus = tp * pp
    rate = usable_flop_rate(preset, gpu, precision, gpus, factors, prefill=True)
    bandwidth = gpus * gpu.mem_bandwidth_bytes_per_s * bandwidth_efficiency(preset, gpu) * factors.bandwidth_scale
    service = pool_service_s(flops, rate, weight_bytes(llm, precision), bandwidth)
    physics = preset.physics
    if physics is None or not (physics.prefill_communication and preset.communication):
        return service
    tokens = flops / (2.0 * llm.active_params)
    return service + parallel_comm_time_s(llm, gpu, physics, tp=tp, ep=1, tokens=tokens) * factors.comm_scale / pp


def benchmark_ttft_s(preset: Preset, *, prefill_s: float, step_s: float, batch: int, input_tokens: float,
                     engine: str | None, busy_share: float = 0.0, engine_version: str = "",
                     arrival: Arrival = WAVES, output_tokens: float = 0.0) -> float:
    """Median TTFT of a request in a closed-loop continuous-batching benchmark at concurrency
    ``batch`` (:func:`benchmark_ttft_percentiles_s`)."""
    return benchmark_ttft_percentiles_s(
        preset, prefill_s=prefill_s, step_s=step_s, batch=batch, input_tokens=input_tokens, engine=engine,
        busy_share=busy_share, engine_version=engine_version, arrival=arrival, output_tokens=output_tokens)[0]


def benchmark_ttft_percentiles_s(
    preset: Preset, *, prefill_s: float, step_s: float, batch: int, input_tokens: float, engine: str | None,
    busy_share: float = 0.0, engine_version: str = "", arrival: Arrival = WAVES, output_tokens: float = 0.0,
    tail_prefill_s: float | None = None, attention_dp: int = 1, recv_interval_steps: int = 1,
) -> tuple[float, float]:
    """(median, 99th percentile) TTFT of a request in a closed-loop continuous-batching benchmark
    at concurrency ``batch`` whose clients arrive as ``arrival`` says: the prompts ahead of it
    (:func:`~fleetplan.models.interference.closed_loop_prompts_ahead`: the share of a wave its
    engine at ``engine_version`` prefills first, at the benchmark's prefill ``busy_share``, and the
    drifted clients in their prefill) and its own are prefilled in chunks, with decode steps of
    ``step_s`` interleaved and the physics' ``first_token_steps`` more, after the engine's fixed
    latency (no queue: the
    concurrency is the load). ``prefill_s`` is a prompt of the mean drawn length, ``tail_prefill_s``
    (default ``prefill_s``) one of the stated length, the tail's own; ``output_tokens`` the mean
    drawn output length. With ``attention_dp`` ranks, an engine that balances them holds the request
    (:func:`attention_dp_balance_wait_s`). An engine that polls for new requests only every
    ``recv_interval_steps`` decode steps (SGLang's ``--scheduler-recv-interval``) leaves a request
    arriving at a random step waiting ``(N - 1) / 2`` steps more at the median, ``N - 1`` at the tail."""
    share, chunk, drift, latency, waits = 1.0, math.inf, 1.0, 0.0, 0.0
    if preset.physics is not None:
        waits = preset.physics.first_token_steps
        share = benchmark_share_ahead(preset, engine, busy_share, engine_version)
        chunk = float(preset.physics.engine(normalize_engine(engine)).chunk_tokens)
        drift = preset.physics.length_drift_cycles
        latency = admission_s(preset, engine)
    wave = wave_share(arrival, batch, prefill_s, output_tokens, step_s, drift)
    ahead, tail_ahead = closed_loop_prompts_ahead(batch, share, busy_share, wave)
    hold, tail_hold = attention_dp_balance_wait_s(preset, engine, attention_dp, batch,
                                                  latency + output_tokens * step_s, step_s)
    latencies = (latency + hold, latency + tail_hold)
    out = []
    tail_own = prefill_s if tail_prefill_s is None else tail_prefill_s
    polls = ((recv_interval_steps - 1) / 2.0, float(recv_interval_steps - 1))
    for n, own_s, fixed, poll in ((ahead, prefill_s, latencies[0], polls[0]), (tail_ahead, tail_own, latencies[1], polls[1])):
        steps = max(1.0, math.ceil((1.0 + n) * input_tokens * arrival.mean_length_share() / chunk - 1e-9)) + waits + poll
        out.append(ttft_s(prefill_s=prefill_s, requests_ahead=n, steps=steps, step_s=step_s, utilisation=0.0,
                          admission_s=fixed) + (own_s - prefill_s))
    return out[0], out[1]


def attention_dp_balance_wait_s(preset: Preset, engine: str | None, attention_dp: int, batch: int, cycle_s: float,
                                step_s: float) -> tuple[float, float]:
    """(median, tail) time an engine that balances ``attention_dp`` ranks holds a new request of a
    closed loop of ``batch`` clients, each back every ``cycle_s``: until ``attention_dp - 1`` more
    requests arrive (``(d - 1) x cycle / B``) or its limit of decode steps of ``step_s`` passes
    (the tail waits out the limit); nothing for one rank or an engine that does not balance."""
    if preset.physics is None or attention_dp <= 1 or batch <= 0:
        return 0.0, 0.0
    limit = preset.physics.balance_steps(normalize_engine(engine)) * step_s
    return min((attention_dp - 1) * cycle_s / batch, limit), limit


def colocated_configuration_ttft_s(
    llm: LLM, gpu: GPU, preset: Preset, *, precision: str, tp: int, batch: int, input_tokens: float,
    output_tokens: float, kv_precision: str | None, flops_per_request: float, utilisation: float,
    engine: str | None = None, layout: Layout | None = None,
) -> tuple[StepEstimate, float]:
    """(the decode step carrying its steady-state prefill share, the TTFT of a colocated replica
    of this configuration at ``utilisation``): what ``estimate`` reports and the planner checks.
    ``layout``: the replica's pipeline, expert and attention-data parallelism, timed as
    :func:`~fleetplan.models.roofline.decode_step` times it (each rank carries its share of the prefill)."""
    step = decode_step(
        llm, gpu, precision=precision, tp=tp, batch=batch, input_tokens=input_tokens, output_tokens=output_tokens,
        preset=preset, kv_precision=kv_precision, prefill_flops_per_step=batch / output_tokens * flops_per_request,
        engine=engine, layout=layout,
    )
    return step, colocated_ttft_s(step.step_time_s, batch, output_tokens, utilisation, admission_s(preset, engine))


def colocated_prefill_steps(batch: float, output_tokens: float) -> float:
    """Decode steps a new request's prompt is spread over: max(1, output_tokens / batch)."""
    return max(1.0, output_tokens / batch)


def colocated_ttft_s(step_time_s: float, batch: float, output_tokens: float, utilisation: float,
                     admission: float = 0.0) -> float:
    """TTFT of a request whose prompt is prefilled in chunks inside the decode steps.

    ``step_time_s`` is the time of a decode step that carries its share of prefill,
    ``utilisation`` the share of the replica's throughput the demand takes, ``admission`` the
    preset's :func:`admission_s`.
    """
    return ttft_s(prefill_s=0.0, requests_ahead=0.0, steps=colocated_prefill_steps(batch, output_tokens),
                  step_s=step_time_s, utilisation=utilisation, admission_s=admission)


def pool_service_s(flops_per_request: float, flops_per_s: float, weight_bytes: float, bytes_per_s: float) -> float:
    """Seconds a prefill replica takes for one request: its FLOPs at the replica's usable FLOP/s,
    but never less than one read of the weights at its usable bandwidth."""
    return max(flops_per_request / flops_per_s, weight_bytes / bytes_per_s)


def kv_transfer_s(kv_bytes: float, link_bytes_per_s: float) -> float:
    """Seconds to hand a request's KV cache from a prefill to a decode replica."""
    return kv_bytes / link_bytes_per_s


def pool_ttft_s(service_s: float, transfer_s: float, utilisation: float, admission: float = 0.0) -> float:
    """TTFT through a prefill pool at ``utilisation``: queue and prefill, then the KV hand-off."""
    return ttft_s(prefill_s=service_s, requests_ahead=0.0, steps=0.0, step_s=0.0, utilisation=utilisation,
                  transfer_s=transfer_s, admission_s=admission)

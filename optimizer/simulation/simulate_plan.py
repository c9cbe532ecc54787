"""Simulate a plan (its JSON document) against its targets: the wiring of :mod:`fleetplan.optimizer.simulation.simulate`.

Owns choosing the hour, its arrivals (a trace's busiest hour landing on it, or a Poisson sample at
the hour's rate), the replicas of that hour, the step and prefill times of the planned
configuration, and the summary per product. It reads no file itself (the CLI reads the plan and
the trace).

The hour: the ``hour`` setting or the plan's peak hour (the most demand). Its self-hosted rate is its
demand less the API's tokens, over the product's output tokens. From a trace, the hour's
arrivals are those of the busiest trace hour that lands on it (:mod:`fleetplan.optimizer.traffic.trace`),
each sent to the API with the API's share of the hour (a seeded draw); at most ``requests`` of
them are simulated (the first). Targets: a ``max_ttft_ms`` number is checked as a P99 target,
``{p50, p90, p99}`` percentile by percentile; the per-user speed as the median TPOT.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fleetplan.optimizer.common.defaults import DEFAULT_REQUESTS, MAX_SIMULATED_REPLICAS
from fleetplan.catalogs.loader import InputError
from fleetplan.optimizer.simulation.simulate import (
    DecodeReplicas, Requests, StepTime, TokenTimes, decode_fleet, fifo_pool, percentiles_ms, poisson_arrivals, tpot_s,
)
from fleetplan.optimizer.traffic.synthetic import renewal_gaps
from fleetplan.optimizer.traffic.trace import SECONDS_PER_HOUR, Trace
from fleetplan.models.layout import Layout
from fleetplan.models.prefill import prefill_flops
from fleetplan.models.roofline import decode_step
from fleetplan.models.ttft import prefill_service_s
from fleetplan.models.queueing import ServiceTime, ttft_quantile_s
from fleetplan.optimizer.traffic.scenario import PERCENTILES


@dataclass(frozen=True)
class Settings:
    """What to simulate: the plan hour (None: the peak), requests at most, the seed, a trace."""

    hour: int | None = None
    requests: int = DEFAULT_REQUESTS
    seed: int = 0
    trace: Trace | None = None
    # a trace's arrivals: "logged" (as the trace has them) or "plan" (times scaled so that the hour's
    # self-hosted requests arrive at the plan hour's rate, the bursts kept in shape)
    trace_rate: str = "logged"
    arrival_scv: float | None = None  # of drawn arrivals; None: the product's stated arrival_scv, else 1 (Poisson)
    give_up: bool = False  # stop a run once it must miss a TTFT target (a search's verdict, not its figures)
    # step-time models kept across runs that share this dict (a search replaying one plan at
    # several replica counts computes each step time once); None: each run its own
    step_times: dict[tuple[Any, ...], StepTime] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class HourLoad:
    """One product's planned hour: decode and pool replicas and the self-hosted request rate."""

    hour: int
    replicas: int
    pool_replicas: int
    qps: float
    api_share: float


def hour_load(pd: dict[str, Any], hour: int | None) -> HourLoad:
    """The replicas and self-hosted rate of ``pd`` (a product of a plan) in ``hour`` (None: its peak)."""
    hourly = pd.get("hourly") or [{
        "hour": 0, "demand_tokens_per_s": pd["demand_tokens_per_s"], "reserved_replicas": 0,
        "on_demand_replicas": pd["replicas"], "spot_replicas": 0,
        "pool_replicas": (pd.get("prefill") or {}).get("replicas") or 0,
        "api_tokens_per_s": pd["demand_tokens_per_s"] * (pd.get("api_fraction") or 0.0)}]
    if hour is None:
        hour = max(range(len(hourly)), key=lambda h: (hourly[h]["demand_tokens_per_s"], -h))
    if not 0 <= hour < len(hourly):
        raise InputError(f"`hour`: {hour} is outside the plan's hours 0..{len(hourly) - 1}", parameters=("hour",))
    row = hourly[hour]
    demand = row["demand_tokens_per_s"]
    api = min(row["api_tokens_per_s"] or 0.0, demand)
    replicas = row["reserved_replicas"] + row["on_demand_replicas"] + row["spot_replicas"]
    return HourLoad(hour, replicas, row["pool_replicas"] or 0, (demand - api) / mean_output_tokens(pd),
                    api / demand if demand > 0 else 0.0)


def mean_output_tokens(pd: dict[str, Any]) -> float:
    """Output tokens per request: the share-weighted mean of the product's mix (its demand is the
    buckets' demand), else the product's own."""
    buckets = pd.get("requests") or []
    total = sum(b["share"] for b in buckets)
    if not total and pd.get("output_tokens"):
        return float(pd["output_tokens"])
    if not total:
        raise InputError(f"plan: products[{pd.get('name')}] has neither output_tokens nor a requests mix")
    return sum(b["output_tokens"] * b["share"] for b in buckets) / total


def step_model(llm: Any, gpu: Any, preset: Any, pd: dict[str, Any]) -> StepTime:
    """The configuration's decode-step time at (decoding sequences, mean context, prefill tokens),
    scaled so that a full batch at the sizes it is timed at (a mix configuration's
    ``step_input_tokens`` and ``step_output_tokens``, else the plan's sizes; with its steady
    prefill share when colocated) takes the plan's ``step_time_ms`` (the plan's engine and
    calibration), memoised on a grid of contexts (eighths of an octave) and prefill tokens
    (multiples of 64)."""
    layout = Layout(pd["tp"], pd.get("pp") or 1, pd.get("ep") or 1, pd.get("dp_attention") or 1)

    def raw(b: int, context: float, prefill: int) -> float:
        return decode_step(llm, gpu, precision=pd["precision"], tp=pd["tp"], batch=max(b, 1), input_tokens=context,
                           output_tokens=0.0, preset=preset, kv_precision=pd.get("kv_precision"), layout=layout,
                           prefill_flops_per_step=prefill_flops(llm, preset, prefill) if prefill else 0.0).step_time_s

    prefill = pd.get("prefill") or {}
    # the sizes the plan's step time is timed at: a mix's configuration states them
    size_in = pd.get("step_input_tokens") or pd["input_tokens"]
    size_out = pd.get("step_output_tokens") or pd["output_tokens"]
    carried = 0.0  # a colocated plan's step carries its steady prefill share: batch / output tokens prompts
    if prefill.get("mode") == "colocated":
        carried = pd["batch"] / size_out * prefill_flops(llm, preset, size_in, prefill.get("prefix_cache_hit_rate") or 0.0)
    full = decode_step(llm, gpu, precision=pd["precision"], tp=pd["tp"], batch=pd["batch"],
                       input_tokens=size_in, output_tokens=size_out, preset=preset,
                       kv_precision=pd.get("kv_precision"), layout=layout, prefill_flops_per_step=carried).step_time_s
    scale = pd["step_time_ms"] / 1e3 / full if pd.get("step_time_ms") else 1.0
    memo: dict[tuple[int, int, int], float] = {}

    log2 = math.log2

    def step(b: int, context: float, prefill: int) -> float:
        key = (b, round(8 * log2(context if context > 1.0 else 1.0)), -(-prefill // 64))
        seconds = memo.get(key)
        if seconds is None:
            seconds = memo[key] = raw(b, 2 ** (key[1] / 8) if b else 1.0, key[2] * 64) * scale
        return seconds

    return step


def _kept_step_model(llm: Any, gpu: Any, preset: Any, pd: dict[str, Any], settings: Settings) -> StepTime:
    """:func:`step_model`, taken from ``settings.step_times`` when a run sharing it built it for
    the same configuration (every field :func:`step_model` reads)."""
    if settings.step_times is None:
        return step_model(llm, gpu, preset, pd)
    prefill = pd.get("prefill") or {}
    key = (pd["model"], pd["gpu"], preset, prefill.get("mode"), prefill.get("prefix_cache_hit_rate"),
           *(pd.get(k) for k in ("tp", "pp", "ep", "dp_attention", "precision", "kv_precision", "batch", "step_time_ms",
                                 "input_tokens", "output_tokens", "step_input_tokens", "step_output_tokens")))
    if key not in settings.step_times:
        settings.step_times[key] = step_model(llm, gpu, preset, pd)
    return settings.step_times[key]


def _trace_hour(trace: Trace, hour: int, hours: int) -> np.ndarray:
    """Indices of the requests of the busiest trace hour landing on plan ``hour``."""
    k = np.floor(trace.arrival_s / SECONDS_PER_HOUR).astype(np.int64)
    counts = np.bincount(k - k.min())
    candidates = [h for h in range(counts.size) if (h + k.min()) % hours == hour]
    if not candidates:
        raise InputError(f"`trace`: no trace hour lands on plan hour {hour}; give `hour` within the trace's span",
                         parameters=("trace", "hour"))
    best = int(k.min()) + max(candidates, key=lambda h: (counts[h], -h))
    return np.flatnonzero(k == best)


def trace_stretch(requests: int, qps: float) -> float:
    """What a trace hour's arrival times are multiplied by so that its ``requests`` (those the
    self-hosted replicas take) arrive at the planned ``qps`` over the hour: below 1 compresses a
    quieter logged hour into the planned load, gaps and bursts in proportion (1 when either is zero)."""
    return requests / SECONDS_PER_HOUR / qps if requests > 0 and qps > 0 else 1.0


def arrivals(pd: dict[str, Any], load: HourLoad, hours: int, settings: Settings) -> Requests:
    """The hour's self-hosted requests: from the trace, or a sample of the product's sizes
    arriving at the hour's rate (Poisson, or bursty at ``settings.arrival_scv`` or else the
    product's stated ``arrival_scv``: :func:`~fleetplan.optimizer.traffic.synthetic.renewal_gaps`).
    A trace's arrivals are kept as logged, or with ``settings.trace_rate`` "plan" scaled in time to
    the hour's planned rate (:func:`trace_stretch`)."""
    rng = np.random.Generator(np.random.PCG64(settings.seed))
    if settings.trace is not None:
        t = settings.trace
        idx = _trace_hour(t, load.hour, hours)
        idx = idx[rng.uniform(size=idx.size) >= load.api_share]
        stretch = trace_stretch(idx.size, load.qps) if settings.trace_rate == "plan" else 1.0
        idx = idx[:settings.requests]
        start = math.floor(t.arrival_s[idx[0]] / SECONDS_PER_HOUR) * SECONDS_PER_HOUR if idx.size else 0.0
        return Requests((t.arrival_s[idx] - start) * stretch, t.input_tokens[idx], t.output_tokens[idx])
    n = settings.requests
    buckets = pd.get("requests") or [{"input_tokens": pd["input_tokens"], "output_tokens": pd["output_tokens"], "share": 1}]
    shares = np.array([b["share"] * (1.0 - (b.get("api_fraction") or 0.0)) for b in buckets], dtype=np.float64)
    pick = rng.choice(len(buckets), size=n, p=shares / shares.sum())
    tokens_in = np.array([b["input_tokens"] for b in buckets], dtype=np.int64)[pick]
    tokens_out = np.array([b["output_tokens"] for b in buckets], dtype=np.int64)[pick]
    scv = settings.arrival_scv if settings.arrival_scv is not None else pd.get("arrival_scv") or 1.0
    if scv == 1.0:
        times = poisson_arrivals(load.qps, n, rng)
    else:
        times = np.cumsum(renewal_gaps(load.qps, n, scv, rng)) if load.qps > 0 else np.zeros(n)
    return Requests(times, tokens_in, tokens_out)


def _chunk_tokens(preset: Any) -> int:
    """The engine fallback's chunked-prefill budget (2048 tokens without physics)."""
    return int(preset.physics.engine(None).chunk_tokens) if preset.physics is not None else 2048


def _pool_service_s(llm: Any, catalog: Any, preset: Any, pd: dict[str, Any], reqs: Requests) -> tuple[np.ndarray, float]:
    """(each request's prefill service seconds on a pool replica, the KV hand-off seconds)."""
    pool = pd["prefill"]
    if not pool.get("gpu"):
        raise InputError(f"plan: products[{pd['name']}] prefills on a pool but the plan names no pool GPU")
    gpu = catalog.gpu(pool["gpu"], "prefill.gpu")
    hit = pool.get("prefix_cache_hit_rate") or 0.0
    times = {int(s): prefill_service_s(llm, gpu, preset, precision=pool["precision"], tp=pool["tp"],
                                       pp=pool.get("pp") or 1, flops=prefill_flops(llm, preset, float(s), hit))
             for s in np.unique(reqs.input_tokens)}
    transfer = ((pool.get("kv_transfer") or {}).get("transfer_ms_per_request") or 0.0) / 1e3
    return np.array([times[int(s)] for s in reqs.input_tokens]), transfer


def _pool_ready_s(llm: Any, catalog: Any, preset: Any, pd: dict[str, Any], load: HourLoad,
                  reqs: Requests) -> np.ndarray:
    """When each request's KV cache reaches the decode replicas (its first token, as the plan's
    pool TTFT counts it): first come first served on the hour's pool replicas, then the hand-off."""
    service, transfer = _pool_service_s(llm, catalog, preset, pd, reqs)
    return fifo_pool(reqs.arrival_s, service, max(load.pool_replicas, 1)) + service + transfer


def analytic_pool_ttft_ms(pd: dict[str, Any], catalog: Any, preset: Any, load: HourLoad,
                          reqs: Requests) -> dict[str, float | None]:
    """The analytic TTFT percentiles of the pool (:mod:`fleetplan.models.queueing`) at the hour's
    rate, over the service times of the simulated requests: what the simulation checks."""
    service, transfer = _pool_service_s(catalog.model(pd["model"], "model"), catalog, preset, pd, reqs)
    times, counts = np.unique(service, return_counts=True)
    mix = ServiceTime.of_mix(times.tolist(), counts.tolist())
    servers = max(load.pool_replicas, 1)
    rho = load.qps * mix.mean_s / servers
    out = [ttft_quantile_s(q, servers=servers, utilisation=rho, service=mix, fixed_s=transfer) for q in (0.5, 0.9, 0.99)]
    return {k: round(v * 1e3, 1) if math.isfinite(v) else None for k, v in zip(("p50", "p90", "p99"), out)}


def _run(pd: dict[str, Any], catalog: Any, preset: Any, load: HourLoad, reqs: Requests, settings: Settings,
         on_progress: Any, product_requests: int | None = None) -> tuple[Any, float]:
    """One configuration's replicas (``pd``: its fields, ``load.replicas`` of them) serving ``reqs``,
    part of the product's ``product_requests`` (None: all of them; what a TTFT percentile allows
    to be late counts over the product's requests, not the configuration's share)."""
    llm, gpu = catalog.model(pd["model"], "model"), catalog.gpu(pd["gpu"], "gpu")
    prefill = pd.get("prefill") or {}
    pooled = prefill.get("mode") == "pool"
    hit = prefill.get("prefix_cache_hit_rate") or 0.0
    fleet = DecodeReplicas(replicas=max(load.replicas, 1), batch=pd["batch"], step_s=_kept_step_model(llm, gpu, preset, pd, settings),
                  chunk_tokens=_chunk_tokens(preset), prefill_on_decode=not pooled, uncached_share=1.0 - hit)
    ready = _pool_ready_s(llm, catalog, preset, pd, load, reqs) if pooled else reqs.arrival_s
    stop = _certain_miss(reqs, _ttft_targets_ms(pd), product_requests) if settings.give_up else None
    if pooled and stop is not None and stop(math.inf, TokenTimes(ready, ready)):
        return TokenTimes(np.full(reqs.count, np.nan), np.full(reqs.count, np.nan)), 0.0
    timings, busy = decode_fleet(reqs, ready, fleet, load.qps, settings.seed, pd["step_time_ms"] / 1e3, on_progress,
                                 None if pooled else stop)
    if pooled:
        timings.first_s[:] = ready
    return timings, busy


def _certain_miss(reqs: Requests, targets_ms: dict[str, float], product_requests: int | None = None) -> Any:
    """``stop(now, timings)``: true once more requests than a TTFT target's percentile allows
    (of ``product_requests``, the product's requests ``reqs`` are part of; None: ``reqs`` are
    all) have had no first token for longer than its budget (served late, or still waiting at
    ``now``): the product's run must miss that target whatever happens after."""
    count = reqs.count if product_requests is None else product_requests
    limits = [(v / 1e3, math.floor((1.0 - PERCENTILES[k]) * count)) for k, v in targets_ms.items()]

    def stop(now: float, timings: Any) -> bool:
        for budget, allowed in limits:
            first = np.where(np.isnan(timings.first_s), now, timings.first_s)
            if int(np.count_nonzero(first - reqs.arrival_s > budget)) > allowed:
                return True
        return False
    return stop


def simulate_product(pd: dict[str, Any], catalog: Any, preset: Any, hours: int, settings: Settings,
                     on_progress: Any = None) -> dict[str, Any]:
    """One product's hour simulated: its TTFT and TPOT percentiles against its targets."""
    load = hour_load(pd, settings.hour)
    _check_size(pd, load)
    reqs = arrivals(pd, load, hours, settings)
    if pd.get("configurations"):
        timings, busy = _run_mix(pd, catalog, preset, load, reqs, settings, on_progress)
        load = replace(load, replicas=sum(c.get("peak_hour_replicas", c.get("replicas")) or 0
                                          for c in pd["configurations"]))
    else:
        timings, busy = _run(pd, catalog, preset, load, reqs, settings, on_progress)
    row = summary(pd, load, reqs, timings, busy)
    if (pd.get("prefill") or {}).get("mode") == "pool" and not pd.get("configurations"):
        row["analytic_ttft_ms"] = analytic_pool_ttft_ms(pd, catalog, preset, load, reqs)
    return row


def _check_size(pd: dict[str, Any], load: HourLoad) -> None:
    """Refuse an hour with more replicas (decode, a mix's configurations or the pool's) than a
    simulation models (:data:`MAX_SIMULATED_REPLICAS`)."""
    decode = (sum(c.get("peak_hour_replicas", c.get("replicas")) or 0 for c in pd["configurations"])
              if pd.get("configurations") else load.replicas)
    most = max(decode, load.pool_replicas)
    if most > MAX_SIMULATED_REPLICAS:
        raise InputError(f"plan: products[{pd['name']}] runs {most:,} replicas in hour {load.hour}; simulate models "
                         f"each replica and takes at most {MAX_SIMULATED_REPLICAS:,}")


def _configuration_of(pd: dict[str, Any], reqs: Requests, seed: int) -> np.ndarray:
    """Each request's configuration index: its bucket (the nearest in log context length), then a
    seeded draw by the bucket's split of its self-hosted share over configurations."""
    keys = [c["key"] for c in pd["configurations"]]
    buckets = pd["requests"]
    centre = np.log([b["input_tokens"] + b["output_tokens"] for b in buckets])
    own = np.log(reqs.input_tokens + reqs.output_tokens)
    bucket = np.argmin(np.abs(own[:, None] - centre[None, :]), axis=1)
    rng = np.random.Generator(np.random.PCG64(seed + 1))
    out = np.zeros(reqs.count, dtype=np.int64)
    for b, row in enumerate(buckets):
        split = np.zeros(len(keys))
        for c in row.get("configurations") or []:
            split[keys.index(c["key"])] += c["share"]
        mine = np.flatnonzero(bucket == b)
        if mine.size and split.sum() > 0:
            out[mine] = rng.choice(len(keys), size=mine.size, p=split / split.sum())
    return out


def _run_mix(pd: dict[str, Any], catalog: Any, preset: Any, load: HourLoad, reqs: Requests, settings: Settings,
             on_progress: Any) -> tuple[Any, float]:
    """A product planned from a mix: each configuration's replicas at the peak hour
    (``peak_hour_replicas``; ``replicas`` in older plans) serve the
    requests its buckets send it; timings merged, utilisation weighted by replicas."""

    peak = hour_load(pd, None).hour
    if load.hour != peak:
        raise InputError(f"`hour`: a product planned from a mix has its replicas per configuration at its peak hour "
                         f"only; give `hour` {peak} or leave it out", parameters=("hour",))
    which = _configuration_of(pd, reqs, settings.seed)
    out = TokenTimes(np.full(reqs.count, np.nan), np.full(reqs.count, np.nan))
    busy, weight = 0.0, 0
    for k, conf in enumerate(pd["configurations"]):
        idx = np.flatnonzero(which == k)
        replicas = conf.get("peak_hour_replicas", conf.get("replicas")) or 0
        if idx.size == 0 or not replicas:
            continue
        sub = Requests(reqs.arrival_s[idx], reqs.input_tokens[idx], reqs.output_tokens[idx])
        prefill = {**(pd.get("prefill") or {}), "mode": conf.get("prefill_mode") or (pd.get("prefill") or {}).get("mode")}
        fields = {**pd, **conf, "prefill": prefill, "input_tokens": max(1, round(float(np.mean(sub.input_tokens)))),
                  "output_tokens": max(1, round(float(np.mean(sub.output_tokens))))}
        part = replace(load, replicas=replicas, qps=load.qps * idx.size / reqs.count)
        t, b = _run(fields, catalog, preset, part, sub, settings, on_progress, reqs.count)
        out.first_s[idx], out.last_s[idx] = t.first_s, t.last_s
        busy, weight = busy + b * replicas, weight + replicas
    return out, busy / weight if weight else 0.0


def _ttft_targets_ms(pd: dict[str, Any]) -> dict[str, float]:
    """TTFT targets by percentile: a number is a P99 target."""
    target = pd.get("max_ttft_ms")
    if target is None:
        return {}
    return {"p99": float(target)} if isinstance(target, (int, float)) else {k: float(v) for k, v in target.items()}


def summary(pd: dict[str, Any], load: HourLoad, reqs: Requests, timings: Any, busy: float) -> dict[str, Any]:
    """Achieved percentiles, the targets, utilisation, requests that missed and the verdict."""
    ttft = timings.first_s - reqs.arrival_s
    tpot = tpot_s(reqs, timings)
    ttft_ms, tpot_ms = percentiles_ms(ttft), percentiles_ms(tpot)
    targets = _ttft_targets_ms(pd)
    tpot_target_ms = 1e3 / pd["min_tokens_per_s_per_user"] if pd.get("min_tokens_per_s_per_user") else None
    unfinished = ~np.isfinite(timings.last_s)
    missed = unfinished.copy()
    if targets:
        missed |= ttft * 1e3 > max(targets.values())
    if tpot_target_ms is not None:
        missed |= np.nan_to_num(tpot, nan=0.0) * 1e3 > tpot_target_ms
    meets = not unfinished.any() and all((ttft_ms[k] or math.inf) <= v for k, v in targets.items())
    if tpot_target_ms is not None:
        meets = meets and (tpot_ms["p50"] or math.inf) <= tpot_target_ms
    return {
        "name": pd["name"], "hour": load.hour, "requests": reqs.count, "replicas": load.replicas,
        "pool_replicas": load.pool_replicas, "qps": round(load.qps, 4),
        "ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "utilisation": round(busy, 4),
        "missed_requests": int(missed.sum()), "meets_targets": bool(meets),
        "targets": {"ttft_ms": targets, "tpot_ms": round(tpot_target_ms, 3) if tpot_target_ms else None},
        **_run_length(reqs, timings),
    }


def _run_length(reqs: Requests, timings: Any) -> dict[str, Any]:
    """Simulated seconds of arrivals against a request's mean time in the system: a run shorter
    than three lifetimes (``short_run``) may not yet show a queue that builds up; and the rate
    the requests arrived at (``arrival_rate_qps``), which for a trace replayed as it was logged
    can lie far from the hour's planned ``qps``."""
    span = reqs.span_s
    life = timings.last_s - reqs.arrival_s
    lifetime = float(np.mean(life[np.isfinite(life)])) if np.isfinite(life).any() else 0.0
    rate = (reqs.count - 1) / span if span > 0 else None
    return {"simulated_s": round(span, 3), "mean_request_s": round(lifetime, 3), "short_run": span < 3.0 * lifetime,
            "arrival_rate_qps": None if rate is None else round(rate, 4)}


def simulate_plan(plan: dict[str, Any], catalog: Any, preset: Any, settings: Settings,
                  on_progress: Any = None) -> dict[str, Any]:
    """Every self-hosted product of a plan simulated (products on the API only, or sharing pooled
    replicas, are listed in ``skipped``); ``meets_targets`` overall when all simulated do."""
    products = [p for p in plan["products"] if p.get("gpu") and p.get("replicas") and not p.get("pooled_in")]
    skipped = [p["name"] for p in plan["products"] if p not in products]
    if not products:
        raise InputError("plan: no product to simulate: each is on the API or shares pooled replicas (pooled_in), "
                         "which simulate does not model")
    rows = [simulate_product(p, catalog, preset, plan.get("hours") or 1, settings, on_progress) for p in products]
    return {
        "hour": rows[0]["hour"], "seed": settings.seed, "products": rows, "skipped": skipped,
        "trace_rate": settings.trace_rate if settings.trace is not None else None,
        "missed_requests": sum(r["missed_requests"] for r in rows),
        "meets_targets": all(r["meets_targets"] for r in rows),
    }

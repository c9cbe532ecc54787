"""A synthetic request trace: seeded, deterministic arrivals and sizes shaped like public traces.

Owns drawing a trace (:func:`generate`) and its CSV text (:func:`trace_csv`); it reads and
writes no file. Real traces cannot be downloaded at run time, so the sample trace and the
benchmark come from here.

Arrivals: the week's per-minute rate is a diurnal curve (a trough of 20% of the peak at 04:00,
the peak at 16:00), times 0.55 on Saturday and Sunday, times bursts (each day a Poisson number,
3 on average, of bursts of 5 to 20 minutes at 1.3 to 2 times the rate); the requests are spread
over the minutes in proportion (a multinomial draw, so the count is exact) and uniformly within
each minute. Second 0 is Monday 00:00.

Sizes are log-normal, clipped to a context window:

* medians 1,020 prompt tokens and 129 output tokens: the conversation trace of the Azure LLM
  inference trace 2023 (Patel et al., "Splitwise", ISCA 2024, its Table of trace statistics);
* spread ``sigma`` 1.0 (prompt) and 0.9 (output): an assumption, not a fit, that puts the
  99th percentile near ten times the median (10,500 prompt and 1,060 output tokens), the
  long tail the Azure and BurstGPT traces show in their size distributions.

Bursty arrivals (``arrival_scv`` other than 1): the gaps between requests are drawn from a
renewal process with that squared coefficient of variation (SCV) at unit rate and laid on the
same rate curve by a change of time (the arrivals' cumulative count follows the curve's
cumulative rate), so the hourly profile is kept and the count is exact. Above 1 the process is
a two-phase hyperexponential: each gap is, with probability ``1 - p``, a gap inside a burst
(exponential with mean :data:`BURST_GAP_SHARE` of the mean gap) and otherwise a gap between
bursts, ``p`` solved so the gaps' SCV is the one asked (:func:`burst_probability`). Bursts are
so geometric with mean ``1 / p`` requests: at SCV 170 and 2.6 requests/s (the code-completion
trace the planner's verification was built against: busiest 10 s at 33/s) about 95 requests
arrive within about 2 s, then none for about 36 s; SCV 10 gives bursts of about 6, SCV 1.2 (a
conversation trace of the same service family) nearly Poisson. Below 1 the gaps are gamma
(more regular than Poisson), 0 is evenly spaced. :func:`renewal_gaps` draws them, also for
``simulate --arrival-scv``.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np

MINUTES_PER_DAY = 1440
# a gap inside a burst, as a share of the mean gap: at 2.6 requests/s a burst's requests come
# 19 ms apart, "dozens within a second" as the bursty code-completion trace shows
BURST_GAP_SHARE = 0.05
# bisection steps for the burst probability (2^-60 of the interval: exact in floating point)
BURST_BISECTION_STEPS = 60


@dataclass(frozen=True)
class TraceShape:
    """Parameters of a synthetic trace (defaults: a conversational week)."""

    days: int = 7
    median_input_tokens: float = 1020.0  # Azure LLM inference trace 2023, conversation (Splitwise, ISCA 2024)
    median_output_tokens: float = 129.0  # same source
    sigma_input: float = 1.0  # assumed spread (P99 about 10x the median)
    sigma_output: float = 0.9  # assumed spread
    max_input_tokens: int = 32_000
    max_output_tokens: int = 4_096
    trough_share: float = 0.2  # the 04:00 rate as a share of the 16:00 peak
    weekend_factor: float = 0.55
    bursts_per_day: float = 3.0
    arrival_scv: float = 1.0  # inter-arrival SCV inside the rate curve (1: Poisson, the original draw)
    hours: int | None = None  # a flat rate over this many hours instead of the diurnal days


def minute_weights(shape: TraceShape, rng: np.random.Generator) -> np.ndarray:
    """Relative arrival rate of every minute: diurnal x weekly x bursts."""
    minutes = np.arange(shape.days * MINUTES_PER_DAY)
    hour = (minutes % MINUTES_PER_DAY) / 60.0
    diurnal = shape.trough_share + (1.0 - shape.trough_share) * 0.5 * (1.0 - np.cos(2.0 * math.pi * (hour - 4.0) / 24.0))
    weekday = (minutes // MINUTES_PER_DAY) % 7
    weights = diurnal * np.where(weekday >= 5, shape.weekend_factor, 1.0)
    for day in range(shape.days):
        for _ in range(int(rng.poisson(shape.bursts_per_day))):
            start = day * MINUTES_PER_DAY + int(rng.integers(0, MINUTES_PER_DAY))
            length = int(rng.integers(5, 21))
            weights[start:start + length] *= rng.uniform(1.3, 2.0)
    return weights


def _sizes(n: int, median: float, sigma: float, top: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` log-normal token counts with this median and spread, whole, from 1 to ``top``."""
    return np.clip(np.rint(rng.lognormal(math.log(median), sigma, n)), 1, top).astype(np.int64)


def _scv_of(p: float) -> float:
    """SCV of the hyperexponential gaps (unit mean) when a gap is between bursts with probability ``p``."""
    a = BURST_GAP_SHARE
    return 2.0 * ((1.0 - p) * a * a + (1.0 - (1.0 - p) * a) ** 2 / p) - 1.0


def burst_probability(scv: float) -> float:
    """Probability ``p`` that a gap is one between bursts, so the gaps' SCV is ``scv`` (at least 1)."""
    if scv <= 1.0:
        return 1.0
    lo, hi = 0.0, 1.0  # _scv_of falls from infinity (p -> 0) to 1 (p = 1)
    for _ in range(BURST_BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _scv_of(mid) > scv else (lo, mid)
    return hi


def renewal_gaps(rate_per_s: float, count: int, scv: float, rng: np.random.Generator) -> np.ndarray:
    """``count`` gaps between arrivals at ``rate_per_s`` with squared coefficient of variation
    ``scv``: exponential at 1 (the same draws as a Poisson process), hyperexponential above
    (bursts, see the module docstring), gamma below, even at 0."""
    mean = 1.0 / rate_per_s
    if scv == 1.0:
        return rng.exponential(mean, count)
    if scv <= 0.0:
        return np.full(count, mean)
    if scv < 1.0:
        return rng.gamma(1.0 / scv, scv * mean, count)
    p = burst_probability(scv)
    short = BURST_GAP_SHARE * mean
    long = (mean - (1.0 - p) * short) / p
    between = rng.uniform(size=count) < p
    return rng.exponential(1.0, count) * np.where(between, long, short)


def _curve_arrivals(weights: np.ndarray, requests: int, scv: float, rng: np.random.Generator) -> np.ndarray:
    """``requests`` arrival seconds following the per-minute ``weights``: unit-rate renewal
    arrivals (:func:`renewal_gaps`) put on the curve by inverting its cumulative rate."""
    ops = np.cumsum(renewal_gaps(1.0, requests + 1, scv, rng))
    cumulative = np.concatenate([[0.0], np.cumsum(weights)])
    target = ops[:requests] / ops[requests] * cumulative[-1]
    return np.interp(target, cumulative, np.arange(weights.size + 1) * 60.0)


def generate(requests: int, seed: int, shape: TraceShape = TraceShape()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival seconds from Monday 00:00, input tokens, output tokens) of ``requests`` requests,
    in arrival order; the same ``seed`` gives the same trace. ``shape.arrival_scv`` 1 and no
    ``shape.hours`` give the original draw (Poisson inside each minute)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    if shape.hours is not None:
        weights = np.ones(shape.hours * 60)
    else:
        weights = minute_weights(shape, rng)
    if shape.arrival_scv == 1.0 and shape.hours is None:
        counts = rng.multinomial(requests, weights / weights.sum())
        minute = np.repeat(np.arange(weights.size), counts)
        arrival = np.sort(minute * 60.0 + rng.uniform(0.0, 60.0, requests))
    else:
        arrival = _curve_arrivals(weights, requests, shape.arrival_scv, rng)
    tokens_in = _sizes(requests, shape.median_input_tokens, shape.sigma_input, shape.max_input_tokens, rng)
    tokens_out = _sizes(requests, shape.median_output_tokens, shape.sigma_output, shape.max_output_tokens, rng)
    return arrival, tokens_in, tokens_out


def trace_csv(arrival_s: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray) -> str:
    """The trace as CSV text: ``timestamp`` in seconds to the millisecond, then the token counts."""
    buf = io.StringIO()
    buf.write("timestamp,input_tokens,output_tokens\n")
    ms = np.rint(arrival_s * 1000.0).astype(np.int64)
    rows = np.column_stack([ms // 1000, ms % 1000, input_tokens, output_tokens])
    np.savetxt(buf, rows, fmt="%d.%03d,%d,%d")
    return buf.getvalue()

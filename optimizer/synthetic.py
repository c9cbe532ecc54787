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
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

import numpy as np

MINUTES_PER_DAY = 1440


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


def generate(requests: int, seed: int, shape: TraceShape = TraceShape()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival seconds from Monday 00:00, input tokens, output tokens) of ``requests`` requests,
    in arrival order; the same ``seed`` gives the same trace."""
    rng = np.random.Generator(np.random.PCG64(seed))
    weights = minute_weights(shape, rng)
    counts = rng.multinomial(requests, weights / weights.sum())
    minute = np.repeat(np.arange(weights.size), counts)
    arrival = np.sort(minute * 60.0 + rng.uniform(0.0, 60.0, requests))
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

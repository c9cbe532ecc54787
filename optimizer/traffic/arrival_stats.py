"""Arrival variability of a trace, hour by hour: how bursty the requests come, not only how many.

Owns the statistics of one hour's arrival times: the squared coefficient of variation (SCV) of
the inter-arrival times (1 for Poisson arrivals, more for bursty ones), the peak arrival rates
over sliding windows of 1, 10 and 60 seconds, and the longest burst above the hour's mean rate.
It reads no file and plans nothing; :mod:`.trace` hands it the arrival seconds.

Definitions (all over the requests whose arrival falls in one clock hour of the trace):

* ``arrival_scv``: variance over squared mean of the gaps between consecutive arrivals inside
  the hour (0 with fewer than 3 requests: no variability can be measured).
* ``peak_qps_1s``, ``peak_qps_10s``, ``peak_qps_60s``: the most arrivals in any window of that
  length starting at an arrival (the busiest sliding window; a window at any other start holds
  no more), over its length, in requests per second.
* ``longest_burst_s``: the longest run of consecutive 10-second bins of the hour whose arrival
  rate is above the hour's mean rate (requests over 3,600 s), in seconds. Ten seconds, not one:
  at a few requests per second a one-second bin holds 0 to 3 requests, so "above the mean"
  would be noise.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fleetplan.optimizer.common.defaults import BURST_BIN_S, MIN_REQUESTS_FOR_SCV

SECONDS_PER_HOUR = 3600.0
# sliding windows of the peak rates, in seconds (name suffix, length)
PEAK_WINDOWS_S: tuple[tuple[str, float], ...] = (("1s", 1.0), ("10s", 10.0), ("60s", 60.0))


def interarrival_scv(arrival_s: np.ndarray) -> float:
    """Squared coefficient of variation of the gaps between sorted arrivals (0 below 3 arrivals
    or when every gap is 0)."""
    if arrival_s.size < MIN_REQUESTS_FOR_SCV:
        return 0.0
    gaps = np.diff(arrival_s)
    mean = float(gaps.mean())
    return float(gaps.var() / (mean * mean)) if mean > 0 else 0.0


def peak_rate(arrival_s: np.ndarray, window_s: float) -> float:
    """Most arrivals in any ``window_s`` window ``[t, t + window_s)`` over ``window_s``, per second."""
    if arrival_s.size == 0:
        return 0.0
    ends = np.searchsorted(arrival_s, arrival_s + window_s, side="left")
    return float((ends - np.arange(arrival_s.size)).max()) / window_s


def longest_burst_s(arrival_s: np.ndarray, hour_start_s: float) -> float:
    """Longest run of consecutive :data:`BURST_BIN_S` bins of the hour above the hour's mean rate, in seconds."""
    if arrival_s.size == 0:
        return 0.0
    bins = int(SECONDS_PER_HOUR / BURST_BIN_S)
    index = np.clip(((arrival_s - hour_start_s) // BURST_BIN_S).astype(np.int64), 0, bins - 1)
    rate = np.bincount(index, minlength=bins) / BURST_BIN_S
    above = rate > arrival_s.size / SECONDS_PER_HOUR
    best = run = 0
    for flag in above.tolist():
        run = run + 1 if flag else 0
        best = max(best, run)
    return best * BURST_BIN_S


def hour_stats(arrival_s: np.ndarray, hour_start_s: float) -> dict[str, Any]:
    """The statistics of one hour's sorted arrivals (see the module docstring), rounded for output."""
    row: dict[str, Any] = {"requests": int(arrival_s.size), "mean_qps": round(arrival_s.size / SECONDS_PER_HOUR, 4),
                           "arrival_scv": round(interarrival_scv(arrival_s), 3)}
    for name, window in PEAK_WINDOWS_S:
        row[f"peak_qps_{name}"] = round(peak_rate(arrival_s, window), 3)
    row["longest_burst_s"] = longest_burst_s(arrival_s, hour_start_s)
    return row


def trace_hour_stats(arrival_s: np.ndarray) -> dict[int, dict[str, Any]]:
    """Statistics of every clock hour of a trace that has requests, keyed by the trace hour
    (``floor(seconds / 3600)``); ``arrival_s`` sorted."""
    hour = np.floor(arrival_s / SECONDS_PER_HOUR).astype(np.int64)
    if hour.size == 0:
        return {}
    cuts = np.flatnonzero(np.diff(hour)) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [hour.size]])
    return {int(hour[a]): hour_stats(arrival_s[a:b], float(hour[a]) * SECONDS_PER_HOUR)
            for a, b in zip(starts.tolist(), ends.tolist())}


def planned_hour_stats(arrival_s: np.ndarray, horizon: int) -> list[dict[str, Any]]:
    """For each plan hour of a ``horizon``-hour plan, the statistics of the busiest trace hour
    landing on it (most requests; ties: the earliest), as the trace's demand is planned; a plan
    hour no trace hour lands on takes the trace's busiest hour (its ``trace_hour`` says which)."""
    stats = trace_hour_stats(arrival_s)
    busiest = max(stats, key=lambda k: (stats[k]["requests"], -k))
    out: list[dict[str, Any]] = []
    for slot in range(horizon):
        landing = [k for k in stats if k % horizon == slot]
        k = max(landing, key=lambda h: (stats[h]["requests"], -h)) if landing else busiest
        out.append({"trace_hour": k, **stats[k]})
    return out


def planning_scv(hours: list[dict[str, Any]], qps: list[float]) -> float:
    """The arrival SCV a product is planned at: that of its busiest planned hour (the hour whose
    demand sizes the fleet), at least 0; 1 when no hour has one."""
    if not hours:
        return 1.0
    peak = max(range(len(qps)), key=lambda h: (qps[h], -h))
    scv = hours[peak]["arrival_scv"]
    return float(scv) if math.isfinite(scv) and hours[peak]["requests"] >= MIN_REQUESTS_FOR_SCV else 1.0

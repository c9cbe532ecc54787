"""Request traces: a CSV log of requests turned into a product's demand and size mix.

Owns reading a trace (``timestamp, input_tokens, output_tokens``, or the column names of the
public Azure and BurstGPT traces, see :data:`COLUMN_ALIASES`) and deriving from it the hourly
demand profile and the request-size histogram a product is planned from
(:func:`product_fields`). It plans nothing and writes no file.

Timestamps are seconds (any origin: second 0 is the start of the plan's hour 0, as in BurstGPT,
whose seconds count from midnight of its first day) or ISO datetimes (as in the Azure traces),
which are read on the clock: hour 0 is Monday 00:00 of the week of the first request.

The demand of one trace hour is a stated percentile (``trace_percentile``, 0.95 unless given)
of the arrival rates of its minutes, so a burst inside the hour is planned for, not averaged
away. The plan's horizon follows the trace's span: one hour (a trace of at most an hour), a day
(at most 24 hours) or a week (longer). Trace hour ``k`` lands on plan hour ``k mod horizon``;
when several trace hours land on one plan hour (a trace of several weeks) the busiest counts,
and a plan hour no trace hour lands on (a trace shorter than its horizon) takes the busiest
hour of the trace, so that a partial trace never plans too little.

Requests with zero input or output tokens (failed requests: BurstGPT logs them with 0 response
tokens) are left out.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from fleetplan.optimizer.common.defaults import DEFAULT_BUCKETS, DEFAULT_PERCENTILE
from fleetplan.catalogs.fields import TOKENS
from fleetplan.catalogs.loader import InputError, nearest
from fleetplan.optimizer.traffic.arrival_stats import planned_hour_stats, planning_scv

# The canonical columns and the names the public traces give them.
#   Azure LLM inference trace 2023 (Splitwise, Patel et al., ISCA 2024) and 2024 (DynamoLLM,
#   Stojkovic et al., HPCA 2025): TIMESTAMP (datetime), ContextTokens, GeneratedTokens
#   (github.com/Azure/AzurePublicDataset, AzureLLMInferenceDataset2023.md / 2024.md).
#   BurstGPT (Wang et al., arXiv 2401.17644): Timestamp (seconds from 0:00 of the first day),
#   Request tokens, Response tokens (github.com/HPMLL/BurstGPT README, release v1.1).
COLUMN_ALIASES: dict[str, tuple[str, ...]] = {
    "timestamp": ("timestamp", "TIMESTAMP", "Timestamp"),
    "input_tokens": ("input_tokens", "ContextTokens", "Request tokens"),
    "output_tokens": ("output_tokens", "GeneratedTokens", "Response tokens"),
}

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_MINUTE = 60.0
# 1970-01-01, day 0 of the epoch, was a Thursday: Monday is 3 days earlier in the week.
EPOCH_WEEKDAY = 3
# Largest trace file read: it is read whole (pyarrow, then three float64 columns), so 1 GiB (some
# 40 million requests of 25 bytes, a week of the busiest public trace) keeps reading within a few
# GB of memory.
MAX_TRACE_BYTES = 1 << 30
# Most requests in one trace: beyond it the columns alone take gigabytes (and the synthetic
# traces of ``trace generate`` stop at the same count).
MAX_TRACE_REQUESTS = 100_000_000
# Longest span from the first to the last request (a year with a leap day): demand is counted per
# minute of the span (8 bytes a minute, 4 MB a year) and folded onto at most a week; the public
# traces span days to months, so a longer span is a unit error (milliseconds read as seconds).
MAX_TRACE_SPAN_S = 366 * 86_400.0
# Largest timestamp in seconds either side of second 0 (some 3,000 years): beyond it a number is
# no time of a request, and its whole minutes would not fit the 64-bit integers they are counted in.
MAX_TIMESTAMP_S = 1e11


@dataclass(frozen=True)
class Trace:
    """Requests of a trace in arrival order: seconds from the plan's hour 0 and token counts."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray

    @property
    def requests(self) -> int:
        """Number of requests."""
        return int(self.arrival_s.size)

    @property
    def span_s(self) -> float:
        """Seconds from the first to the last arrival."""
        return float(self.arrival_s[-1] - self.arrival_s[0]) if self.requests else 0.0


def column_names(path: Path) -> dict[str, str]:
    """The trace's column for each canonical name (exact name first, then an alias, then any
    case); raises naming the file, the missing column and the nearest name in the header."""
    if not path.exists():
        raise InputError(f"{path}: trace file not found")
    if not path.is_file():
        raise InputError(f"{path}: not a regular file; a trace is a CSV file")
    size = path.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise InputError(f"{path}: {size / 2**30:.1f} GiB; a trace file may hold at most {MAX_TRACE_BYTES / 2**30:.0f} "
                         "GiB (it is read whole into memory): cut it to the weeks to plan for")
    try:
        with path.open("r", encoding="utf-8-sig", newline="") as f:
            header = f.readline()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the trace file: {exc}") from None
    names = [c.strip().strip('"') for c in header.rstrip("\r\n").split(",")]
    if not any(names):
        raise InputError(f"{path}: empty; a trace starts with a header: timestamp,input_tokens,output_tokens")
    found: dict[str, str] = {}
    for canon, aliases in COLUMN_ALIASES.items():
        match = [n for a in aliases for n in names if n == a] or \
                [n for a in aliases for n in names if n.lower() == a.lower()]
        if not match:
            accepted = ", ".join(repr(a) for a in aliases)
            raise InputError(f"{path}: no column {canon!r} (accepted names: {accepted}){nearest(canon, names)}")
        found[canon] = match[0]
    return found


def _read_table(path: Path, cols: dict[str, str]) -> Any:
    """The three columns as a pyarrow table: tokens as float64, the timestamp as parsed."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    types = {cols["input_tokens"]: pa.float64(), cols["output_tokens"]: pa.float64()}
    options = pcsv.ConvertOptions(include_columns=list(cols.values()), column_types=types,
                                  timestamp_parsers=[pcsv.ISO8601])
    try:
        return pcsv.read_csv(path, convert_options=options)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise InputError(f"{path}: {_arrow_problem(str(exc), cols)}") from None


def _arrow_problem(message: str, cols: dict[str, str]) -> str:
    """One line from a pyarrow conversion error: the column and what it holds."""
    for canon, name in cols.items():
        if f"'{name}'" in message or f"column {name}" in message:
            kind = "whole numbers of tokens" if canon != "timestamp" else "seconds or ISO datetimes"
            return f"column {name!r} must hold {kind} ({message.splitlines()[0]})"
    return message.splitlines()[0]


def _seconds(path: Path, column: Any, name: str) -> np.ndarray:
    """Arrival seconds from the plan's hour 0: numbers as they are, datetimes from Monday 00:00
    of the first request's week (UTC for datetimes with a zone)."""
    import pyarrow as pa

    if pa.types.is_timestamp(column.type):
        ns = column.cast(pa.timestamp("ns", tz=column.type.tz)).cast(pa.int64()).to_numpy(zero_copy_only=False)
        if ns.size == 0:
            return ns.astype(np.float64)
        first_day = int(ns.min() // 86_400_000_000_000)
        monday = first_day - (first_day + EPOCH_WEEKDAY) % 7
        return (ns - monday * 86_400_000_000_000) / 1e9
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
        first = column[0].as_py() if len(column) else ""
        raise InputError(f"{path}: column {name!r} must hold seconds or ISO datetimes (first value {str(first)[:40]!r})")
    return column.cast(pa.float64()).to_numpy(zero_copy_only=False)


def _tokens(path: Path, column: Any, name: str) -> np.ndarray:
    """Token counts of one column: whole, non-negative, none missing (the line named otherwise)."""
    values = column.to_numpy(zero_copy_only=False).astype(np.float64)
    bad = ~np.isfinite(values) | (values < 0) | (values > TOKENS.hi) | (values != np.floor(values))
    if bad.any():
        row = int(np.argmax(bad))
        raise InputError(f"{path}: line {row + 2}: column {name!r} must be a whole number of tokens from 0 to "
                         f"{TOKENS.hi:g} ({TOKENS.reason}) "
                         f"(got {'nothing' if not np.isfinite(values[row]) else repr(float(values[row]))})")
    return values.astype(np.int64)


def read_trace(path: Path | str) -> Trace:
    """Read a trace CSV; requests sorted by arrival (stable), failed ones (0 tokens) left out."""
    p = Path(path)
    cols = column_names(p)
    table = _read_table(p, cols)
    if table.num_rows == 0:
        raise InputError(f"{p}: no requests after the header; a trace needs at least one row")
    if table.num_rows > MAX_TRACE_REQUESTS:
        raise InputError(f"{p}: {table.num_rows:,} requests; a trace may hold at most {MAX_TRACE_REQUESTS:,}: "
                         "cut it to the weeks to plan for")
    arrival = _seconds(p, table.column(cols["timestamp"]), cols["timestamp"])
    if np.isnan(arrival).any():
        row = int(np.argmax(np.isnan(arrival)))
        raise InputError(f"{p}: line {row + 2}: column {cols['timestamp']!r} is empty; every request needs a time")
    _check_times(p, arrival, cols["timestamp"])
    tokens_in = _tokens(p, table.column(cols["input_tokens"]), cols["input_tokens"])
    tokens_out = _tokens(p, table.column(cols["output_tokens"]), cols["output_tokens"])
    keep = (tokens_in > 0) & (tokens_out > 0)
    if not keep.any():
        raise InputError(f"{p}: no request with input and output tokens above 0; a trace needs at least one")
    order = np.argsort(arrival[keep], kind="stable")
    return Trace(arrival[keep][order], tokens_in[keep][order], tokens_out[keep][order])


def _check_times(path: Path, arrival: np.ndarray, name: str) -> None:
    """Arrival seconds within :data:`MAX_TIMESTAMP_S` of second 0 and within
    :data:`MAX_TRACE_SPAN_S` of each other; otherwise an error naming the line."""
    far = ~(np.abs(arrival) <= MAX_TIMESTAMP_S)
    if far.any():
        row = int(np.argmax(far))
        raise InputError(f"{path}: line {row + 2}: column {name!r} must be seconds from {-MAX_TIMESTAMP_S:g} to "
                         f"{MAX_TIMESTAMP_S:g} (some 3,000 years either side of second 0) (got {float(arrival[row])!r})")
    first, last = int(np.argmin(arrival)), int(np.argmax(arrival))
    span = float(arrival[last] - arrival[first])
    if span > MAX_TRACE_SPAN_S:
        raise InputError(f"{path}: column {name!r}: the requests span {span / 86_400:,.0f} days (line {first + 2} to "
                         f"line {last + 2}); a trace may span at most {MAX_TRACE_SPAN_S / 86_400:.0f} days (its demand "
                         "is counted minute by minute): are the timestamps milliseconds? give seconds")


def horizon_hours(trace: Trace) -> int:
    """Hours of the plan a trace spans: 1 (at most an hour), 24 (at most a day) or 168."""
    span = trace.span_s
    return 1 if span <= SECONDS_PER_HOUR else 24 if span <= 24 * SECONDS_PER_HOUR else 168


def minute_rates(trace: Trace) -> tuple[int, np.ndarray]:
    """(the trace's first hour, its arrival rates in requests per second per minute as an
    (hours, 60) array, NaN for minutes outside the trace's span)."""
    minute = np.floor(trace.arrival_s / SECONDS_PER_MINUTE).astype(np.int64)
    first_hour = int(minute[0] // 60)
    counts = np.bincount(minute - first_hour * 60).astype(np.float64)
    hours = math.ceil(counts.size / 60)
    rates = np.full(hours * 60, np.nan)
    rates[:counts.size] = counts / SECONDS_PER_MINUTE
    rates[:int(minute[0] - first_hour * 60)] = np.nan  # minutes of the first hour before the trace began
    return first_hour, rates.reshape(hours, 60)


def trace_hourly_qps(trace: Trace, percentile: float) -> list[float]:
    """Requests per second planned in each hour of the horizon (:func:`horizon_hours`): the
    ``percentile`` of the per-minute rates of every trace hour, the busiest trace hour landing on
    each plan hour, the trace's busiest hour on plan hours it does not cover."""
    hours = horizon_hours(trace)
    first, rates = minute_rates(trace)
    per_hour = np.nanpercentile(rates, percentile * 100.0, axis=1, method="linear")
    slots = (first + np.arange(per_hour.size)) % hours
    planned = np.full(hours, -1.0)
    np.maximum.at(planned, slots, per_hour)
    planned[planned < 0] = per_hour.max()
    return [float(x) for x in planned]


def size_histogram(trace: Trace, buckets: int) -> list[dict[str, Any]]:
    """Requests in ``buckets`` log-spaced buckets of context length (input + output tokens), each
    as its request-weighted mean input and output tokens and its share of requests (empty
    buckets left out)."""
    context = (trace.input_tokens + trace.output_tokens).astype(np.float64)
    lo, hi = float(context.min()), float(context.max())
    edges = np.geomspace(lo, hi, buckets + 1) if hi > lo else np.array([lo, hi])
    index = np.clip(np.searchsorted(edges, context, side="right") - 1, 0, edges.size - 2)
    count = np.bincount(index, minlength=edges.size - 1)
    sum_in = np.bincount(index, weights=trace.input_tokens, minlength=edges.size - 1)
    sum_out = np.bincount(index, weights=trace.output_tokens, minlength=edges.size - 1)
    return [{"input_tokens": max(1, round(sum_in[b] / count[b])), "output_tokens": max(1, round(sum_out[b] / count[b])),
             "share": float(count[b] / trace.requests)} for b in range(count.size) if count[b] > 0]


def product_fields(path: Path | str, *, buckets: int = DEFAULT_BUCKETS,
                   percentile: float = DEFAULT_PERCENTILE) -> dict[str, Any]:
    """What a product planned from the trace at ``path`` takes from it: ``peak_qps`` (the
    busiest planned hour), ``profile`` (each plan hour as a multiple of it), the mean
    ``input_tokens`` and ``output_tokens``, the size mix ``requests``, each plan hour's arrival
    variability ``arrivals`` (:func:`.arrival_stats.planned_hour_stats`) and the ``arrival_scv``
    the product is planned at (its busiest hour's). Read once per file version (path, size and
    modification time)."""
    p = Path(path)
    try:
        stat = p.stat()
    except OSError:
        raise InputError(f"{p}: trace file not found") from None
    return copy.deepcopy(_fields(str(p.resolve()), stat.st_size, stat.st_mtime_ns, buckets, percentile))


@lru_cache(maxsize=8)
def _fields(path: str, size: int, mtime_ns: int, buckets: int, percentile: float) -> dict[str, Any]:
    """:func:`product_fields` of one file version (the size and time only key the cache)."""
    trace = read_trace(path)
    qps = trace_hourly_qps(trace, percentile)
    peak = max(qps)
    if peak <= 0:
        raise InputError(f"{path}: no arrivals in any hour")
    return {
        "peak_qps": peak,
        "profile": [q / peak for q in qps],
        "input_tokens": max(1, round(float(trace.input_tokens.mean()))),
        "output_tokens": max(1, round(float(trace.output_tokens.mean()))),
        "requests": size_histogram(trace, buckets),
        **_variability(trace, qps),
    }


def _variability(trace: Trace, qps: list[float]) -> dict[str, Any]:
    """``arrivals`` (each plan hour's arrival statistics) and ``arrival_scv`` (the busiest planned hour's)."""
    hours = planned_hour_stats(trace.arrival_s, len(qps))
    return {"arrival_scv": planning_scv(hours, qps), "arrivals": hours}


def resolve_traces(scenario: Any, folder: Path) -> Any:
    """The scenario with every product that gives a ``trace`` completed from it: ``peak_qps``,
    the mean ``input_tokens`` and ``output_tokens`` and the size mix ``requests`` where the
    product leaves them out (the hourly profile is read by
    :func:`fleetplan.optimizer.traffic.demand.hourly_qps`)."""
    if not any(p.trace for p in scenario.products):
        return scenario
    return scenario.model_copy(update={"products": [_from_trace(p, folder) if p.trace else p
                                                    for p in scenario.products]})


def trace_fields(product: Any, folder: Path) -> dict[str, Any]:
    """:func:`product_fields` of a product's trace, errors prefixed with the product's field."""
    try:
        return product_fields(folder / product.trace, buckets=product.trace_buckets, percentile=product.trace_percentile)
    except InputError as exc:
        raise InputError(f"products[{product.name}].trace: {exc}") from None


def _from_trace(product: Any, folder: Path) -> Any:
    """One product completed from its trace (fields it gives itself are kept): with more than one
    size bucket (``trace_buckets`` above 1 and requests of several sizes) the trace's size mix
    becomes the product's ``requests`` unless it gives its own."""
    fields = trace_fields(product, folder)
    update = {k: fields[k] for k in ("peak_qps", "input_tokens", "output_tokens") if getattr(product, k) is None}
    if product.requests is None and len(fields["requests"]) > 1:
        update["requests"] = trace_mix(fields["requests"])
    return product.model_copy(update=update)


def trace_mix(buckets: list[dict[str, Any]]) -> list[Any]:
    """A trace's size histogram as a product's ``requests`` (shares scaled to sum to exactly 1)."""
    from fleetplan.optimizer.traffic.scenario import RequestBucket

    total = sum(b["share"] for b in buckets)
    return [RequestBucket(input_tokens=b["input_tokens"], output_tokens=b["output_tokens"], share=b["share"] / total)
            for b in buckets]

"""Measured benchmark rows: the CSV format `fleetplan validate` and `fleetplan calibrate` read.

Required columns: ``model, gpu, precision, tp, batch, input_tokens, output_tokens, engine,
measured_tpot_ms``. Optional: ``measured_ttft_ms``, ``ep`` (expert-parallel degree, default 1), ``pp`` and
``dp_attention`` (pipeline stages and attention data-parallel ranks, default
1), ``kv_precision`` (default bf16), ``batching`` (``continuous``, the default: decode
steps carry the prefill of newly admitted requests; or ``static``: every prompt is prefilled
before decoding starts), ``engine_version`` (the engine's release, e.g. ``0.12.0``) and
``prefix_cache_hit_rate`` (share of each prompt the run served from the engine's prefix cache,
0 to 1; empty: the preset's rule for that engine and release, else 0), ``draft_tokens`` and
``accepted_tokens_per_step`` (speculative decoding: tokens drafted per step, and tokens each
sequence gains per step on average, 1 to draft_tokens + 1; empty: the preset's rule for that
engine, release and model, else plain decoding), ``source_id`` (the run's identifier: its
start names the benchmark harness, ``harnesses`` in the catalog), ``arrival_pattern``
(``waves``: fixed lengths; ``steady``: lengths drawn from a range, the clients drifted apart) and
``length_range_ratio`` (the harness draws each length between this share of the stated length and
the stated length, 0 to 1; 1 is fixed lengths), both empty: the harness's, else ``waves``;
``measured_ttft_p99_ms`` (the run's 99th-percentile TTFT). Other columns are kept with the row and
otherwise ignored.

``precision`` is bf16, fp8 or fp4 (fp16 is read as bf16: same bytes and tensor-core rate;
nvfp4 and mxfp4 as fp4); ``batch`` is the concurrency; ``engine`` is free text (vllm, sglang,
trtllm, ...). Every number is checked against its range in :mod:`fleetplan.catalogs.fields`.
Parsing is pure: it takes the text and a name for messages.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.fields import Range
from fleetplan.models.presets import normalize_engine

REQUIRED_COLUMNS: tuple[str, ...] = (
    "model", "gpu", "precision", "tp", "batch", "input_tokens", "output_tokens", "engine", "measured_tpot_ms",
)
OPTIONAL_COLUMNS: tuple[str, ...] = ("measured_ttft_ms", "ep", "pp", "dp_attention", "kv_precision", "batching",
                                     "engine_version", "prefix_cache_hit_rate", "draft_tokens",
                                     "accepted_tokens_per_step", "source_id", "arrival_pattern",
                                     "length_range_ratio", "measured_ttft_p99_ms")
ARRIVAL_PATTERNS: tuple[str, ...] = ("waves", "steady")
PRECISION_ALIASES: dict[str, str] = {
    "bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4",
}


class MeasurementError(ValueError):
    """A measurement file is malformed; the message names the file, line and column."""


@dataclass(frozen=True)
class Measurement:
    """One measured configuration and its time per output token."""

    line: int
    model: str
    gpu: str
    precision: str
    tp: int
    batch: int
    input_tokens: float
    output_tokens: float
    engine: str
    measured_tpot_ms: float
    measured_ttft_ms: float | None = None
    ep: int = 1
    kv_precision: str | None = None
    pp: int = 1
    dp_attention: int = 1
    batching: str = "continuous"
    engine_version: str = ""
    prefix_cache_hit_rate: float | None = None
    draft_tokens: int | None = None
    accepted_tokens_per_step: float | None = None
    source_id: str = ""
    arrival_pattern: str | None = None
    length_range_ratio: float | None = None
    measured_ttft_p99_ms: float | None = None
    raw: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def configuration(self) -> tuple[str, str, str, int, str]:
        """The configuration group, what stays fixed across a batch sweep: model, GPU, engine,
        TP, precision (cross-validation leaves whole groups out)."""
        return (self.model, self.gpu, normalize_engine(self.engine) or "", self.tp, self.precision)


def _count(cells: dict[str, str], where: str, column: str) -> int:
    """An optional parallel degree (``pp``, ``dp_attention``): a whole number of GPUs, 1 when empty."""
    text = cells.get(column) or ""
    return int(_number(text, where, column, F.TP)) if text else 1


def _number(text: str, where: str, column: str, valid: Range) -> float:
    """The cell ``text`` of ``column`` as a number in the range ``valid``."""
    try:
        return valid.check(text, f"{where}: column {column!r}")
    except ValueError as exc:
        raise MeasurementError(str(exc)) from None


def _speculation(cells: dict[str, str], where: str) -> tuple[int | None, float | None]:
    """A row's ``draft_tokens`` and ``accepted_tokens_per_step``: both or neither; accepted at
    least 1 (the verified token) and at most draft_tokens + 1."""
    draft_text = cells.get("draft_tokens") or ""
    accepted_text = cells.get("accepted_tokens_per_step") or ""
    if not draft_text and not accepted_text:
        return None, None
    if not (draft_text and accepted_text):
        missing = "accepted_tokens_per_step" if draft_text else "draft_tokens"
        raise MeasurementError(f"{where}: column {missing!r}: empty cell (draft_tokens and "
                               "accepted_tokens_per_step go together)")
    draft = int(_number(draft_text, where, "draft_tokens", F.DRAFT_TOKENS))
    accepted = _number(accepted_text, where, "accepted_tokens_per_step",
                       Range(1.0, draft + 1.0, "tokens", "a step gains the verified token and at most every drafted one"))
    return draft, accepted


def _arrival(cells: dict[str, str], where: str) -> tuple[str | None, float | None]:
    """A row's ``arrival_pattern`` (waves or steady) and ``length_range_ratio`` (0 to 1), each
    optional; where both are given they must agree (waves: ratio 1; steady: below 1)."""
    pattern = (cells.get("arrival_pattern") or "").lower() or None
    ratio_text = cells.get("length_range_ratio") or ""
    ratio = _number(ratio_text, where, "length_range_ratio", F.FRACTION) if ratio_text else None
    if pattern is not None and pattern not in ARRIVAL_PATTERNS:
        near = "steady" if pattern.startswith("s") else "waves"
        raise MeasurementError(f"{where}: column 'arrival_pattern': must be waves or steady, got {pattern!r} "
                               f"(nearest valid choice: {near})")
    if pattern == "waves" and ratio is not None and ratio < 1.0:
        raise MeasurementError(f"{where}: column 'length_range_ratio': waves are fixed lengths, ratio 1, got {ratio:g} "
                               "(or arrival_pattern steady)")
    if pattern == "steady" and ratio is not None and ratio >= 1.0:
        raise MeasurementError(f"{where}: column 'length_range_ratio': steady needs lengths drawn from a range, "
                               "below 1, got 1 (or arrival_pattern waves)")
    return pattern, ratio


def _precision(text: str, where: str, column: str) -> str:
    p = PRECISION_ALIASES.get(text.strip().lower())
    if p is None:
        raise MeasurementError(f"{where}: column {column!r}: unknown precision {text!r} (valid: bf16, fp8, fp4)")
    return p


def _row(cells: dict[str, str], line: int, where: str) -> Measurement:
    """One measurement from the non-empty ``cells`` of a CSV row (``where``: file and line for errors)."""
    ttft = cells.get("measured_ttft_ms") or ""
    ep = cells.get("ep") or ""
    kv = cells.get("kv_precision") or ""
    batching = (cells.get("batching") or "continuous").lower()
    hits = cells.get("prefix_cache_hit_rate") or ""
    draft, accepted = _speculation(cells, where)
    pattern, ratio = _arrival(cells, where)
    p99 = cells.get("measured_ttft_p99_ms") or ""
    if batching not in ("continuous", "static"):
        raise MeasurementError(f"{where}: column 'batching': must be continuous or static, got {batching!r}")
    return Measurement(
        line=line,
        model=cells["model"],
        gpu=cells["gpu"],
        precision=_precision(cells["precision"], where, "precision"),
        tp=int(_number(cells["tp"], where, "tp", F.TP)),
        batch=int(_number(cells["batch"], where, "batch", F.BATCH)),
        input_tokens=_number(cells["input_tokens"], where, "input_tokens", F.TOKENS),
        output_tokens=_number(cells["output_tokens"], where, "output_tokens", F.TOKENS),
        engine=cells["engine"],
        measured_tpot_ms=_number(cells["measured_tpot_ms"], where, "measured_tpot_ms", F.TPOT_MS),
        measured_ttft_ms=_number(ttft, where, "measured_ttft_ms", F.MEASURED_TTFT_MS) if ttft else None,
        ep=int(_number(ep, where, "ep", F.EP)) if ep else 1,
        kv_precision=_precision(kv, where, "kv_precision") if kv else None,
        batching=batching,
        pp=_count(cells, where, "pp"),
        dp_attention=_count(cells, where, "dp_attention"),
        engine_version=cells.get("engine_version") or "",
        prefix_cache_hit_rate=(_number(hits, where, "prefix_cache_hit_rate", F.FRACTION)
                               if hits else None),
        draft_tokens=draft,
        accepted_tokens_per_step=accepted,
        source_id=cells.get("source_id") or "",
        arrival_pattern=pattern,
        length_range_ratio=ratio,
        measured_ttft_p99_ms=_number(p99, where, "measured_ttft_p99_ms", F.MEASURED_TTFT_MS) if p99 else None,
        raw=cells,
    )


def parse_measurements(text: str, name: str) -> list[Measurement]:
    """Rows of the measurement CSV ``text``; ``name`` (the file) prefixes every error."""
    text = text.removeprefix("\ufeff")
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
        header = reader.fieldnames
    except csv.Error as exc:
        raise MeasurementError(f"{name}: malformed CSV: {exc}") from None
    if not header:
        raise MeasurementError(f"{name}: empty file: no header row (required columns: {', '.join(REQUIRED_COLUMNS)})")
    columns = [h.strip() for h in header]
    if len(set(columns)) != len(columns):
        dup = next(c for c in columns if columns.count(c) > 1)
        raise MeasurementError(f"{name}: column {dup!r} appears twice in the header")
    for col in REQUIRED_COLUMNS:
        if col not in columns:
            raise MeasurementError(f"{name}: missing required column {col!r} (header: {', '.join(columns)})")
    rows: list[Measurement] = []
    try:
        for record in reader:
            line = reader.line_num
            where = f"{name}:{line}"
            if None in record:
                raise MeasurementError(f"{where}: more cells than header columns")
            cells = {k.strip(): (v or "").strip() for k, v in record.items() if k is not None}
            if not any(cells.values()):
                continue
            for col in REQUIRED_COLUMNS:
                if not cells.get(col):
                    raise MeasurementError(f"{where}: column {col!r}: empty cell")
            rows.append(_row(cells, line, where))
    except csv.Error as exc:
        raise MeasurementError(f"{name}:{reader.line_num}: malformed CSV: {exc}") from None
    return rows

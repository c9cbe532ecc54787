"""The model against measurements: predicted time per output token and error statistics.

A measured TPOT in aggregated (continuous-batching) serving includes the prefill chunks of the
other ``batch - 1`` requests that arrive while a request decodes (its own prefill is in its
TTFT); a static-batch measurement includes none. The predicted TTFT under continuous batching is that of a request
arriving at a replica that is decoding ``batch - 1`` others: its prefill (linear layers and
attention, at the compute rate, or the weight read if longer) plus one decode step; under
static batching the whole batch is prefilled first, so ``batch`` prompts' prefill. Queueing
before admission is not modelled.

Error statistics use the ratio measured / predicted: its median, the share of rows within a
factor of 1.25, 1.5 and 2 either way, and the mean absolute percentage error
|predicted - measured| / measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from fleetplan.catalogs.loader import Catalog, nearest
from fleetplan.models.interference import prefill_flops_per_step
from fleetplan.models.layout import Layout, layout_problem
from fleetplan.models.measurements import Measurement
from fleetplan.models.moe import ep_problem
from fleetplan.models.presets import Preset, normalize_engine
from fleetplan.models.prefill import prefill_attention_flops, prefill_linear_flops
from fleetplan.models.roofline import StepEstimate, decode_step

WITHIN: tuple[float, ...] = (1.25, 1.5, 2.0)
GROUPS: tuple[str, ...] = ("gpu", "tp", "engine", "model")


@dataclass(frozen=True)
class Prediction:
    """A measurement with the model's estimate for it."""

    row: Measurement
    estimate: StepEstimate
    predicted_tpot_ms: float
    predicted_ttft_ms: float

    @property
    def ratio(self) -> float:
        """Measured / predicted TPOT."""
        return self.row.measured_tpot_ms / self.predicted_tpot_ms


def row_layout(row: Measurement) -> Layout:
    """The replica layout a measurement row names (``pp``, ``ep``, ``dp_attention`` default 1)."""
    return Layout(row.tp, row.pp, row.ep, row.dp_attention)


def skip_reason(row: Measurement, catalog: Catalog) -> str | None:
    """Why ``row`` cannot be predicted (unknown model or GPU, impossible EP degree), or None."""
    if row.model not in catalog.models:
        return f"unknown model {row.model!r}{nearest(row.model, catalog.models)}"
    if row.gpu not in catalog.gpus:
        return f"unknown GPU {row.gpu!r}{nearest(row.gpu, catalog.gpus)}"
    problem = ep_problem(catalog.models[row.model], row.tp, row.ep)
    if row.pp > 1 or row.dp_attention > 1:  # layout hook: replicas beyond one TP group (models/layout.py)
        problem = layout_problem(catalog.models[row.model], catalog.gpus[row.gpu], row_layout(row))
    if problem:
        return problem
    return None


def predict(row: Measurement, catalog: Catalog, preset: Preset) -> Prediction:
    """The preset's TPOT and TTFT for one measured configuration (model and GPU must be known)."""
    llm, gpu = catalog.models[row.model], catalog.gpus[row.gpu]
    others = max(row.batch - 1, 0)
    prefill = 0.0
    if row.batching == "continuous" and preset.prefill_interference:
        prefill = prefill_flops_per_step(llm, others, row.input_tokens, row.output_tokens)
    est = decode_step(
        llm, gpu, precision=row.precision, tp=row.tp, batch=row.batch, input_tokens=row.input_tokens,
        output_tokens=row.output_tokens, preset=preset, kv_precision=row.kv_precision,
        prefill_flops_per_step=prefill, ep=row.ep, engine=row.engine,
        layout=row_layout(row) if row.pp > 1 or row.dp_attention > 1 else None,  # layout hook
    )
    # TTFT: one prompt's prefill, then the decode step that yields its first token
    flops = prefill_linear_flops(llm, row.input_tokens) + prefill_attention_flops(llm, row.input_tokens)
    if row.batching == "static":
        flops *= row.batch
    factors = preset.factors_for(gpu.id, gpu.family, row.engine)
    rate = row.tp * gpu.flops_per_s(est.compute_precision) * preset.compute_efficiency * factors.compute_scale
    prefill_s = max(flops / rate, est.weights_time_s or est.memory_time_s)
    ttft_s = prefill_s + est.comm_time_s + est.overhead_time_s + est.step_time_s
    return Prediction(row=row, estimate=est, predicted_tpot_ms=est.step_time_s * 1e3, predicted_ttft_ms=ttft_s * 1e3)


def predict_all(
    rows: Iterable[Measurement], catalog: Catalog, preset: Preset
) -> tuple[list[Prediction], list[tuple[Measurement, str]]]:
    """Predictions for every row the catalog can model, and the skipped rows with the reason."""
    done: list[Prediction] = []
    skipped: list[tuple[Measurement, str]] = []
    for r in rows:
        reason = skip_reason(r, catalog)
        if reason:
            skipped.append((r, reason))
        else:
            done.append(predict(r, catalog, preset))
    return done, skipped


def error_stats(measured: Sequence[float], predicted: Sequence[float]) -> dict[str, float | int]:
    """Median measured/predicted ratio, shares within 1.25x/1.5x/2x, MAPE (as fractions)."""
    n = len(measured)
    if n == 0:
        return {"rows": 0}
    ratios = sorted(m / p for m, p in zip(measured, predicted, strict=True))
    mid = n // 2
    median = ratios[mid] if n % 2 else math.sqrt(ratios[mid - 1] * ratios[mid])
    out: dict[str, float | int] = {"rows": n, "median_ratio": median}
    for w in WITHIN:
        out[f"within_{w:g}x"] = sum(1 for r in ratios if max(r, 1 / r) <= w * (1 + 1e-12)) / n
    out["mape"] = sum(abs(p - m) / m for m, p in zip(measured, predicted, strict=True)) / n
    return out


def group_key(row: Measurement, by: str) -> str:
    """The value of column ``by`` used to group rows (engines normalised: vllm, sglang, trtllm...)."""
    if by == "engine":
        return normalize_engine(row.engine) or ""
    if by == "tp":
        return str(row.tp)
    return str(getattr(row, by))


def summarize(
    rows: Sequence[Measurement], predicted_ms: Sequence[float], groups: Sequence[str] = GROUPS
) -> dict[str, Any]:
    """Error statistics overall and per value of each grouping column."""
    summary: dict[str, Any] = {"overall": error_stats([r.measured_tpot_ms for r in rows], predicted_ms)}
    for by in groups:
        buckets: dict[str, tuple[list[float], list[float]]] = {}
        for r, p in zip(rows, predicted_ms, strict=True):
            m_list, p_list = buckets.setdefault(group_key(r, by), ([], []))
            m_list.append(r.measured_tpot_ms)
            p_list.append(p)
        order: Callable[[str], Any] = (lambda k: (len(k), k)) if by == "tp" else (lambda k: k)
        summary[f"by_{by}"] = {k: error_stats(*buckets[k]) for k in sorted(buckets, key=order)}
    return summary


def ttft_stats(predictions: Sequence[Prediction]) -> dict[str, float | int]:
    """Error statistics of TTFT over the rows that report a measured TTFT."""
    pairs = [(p.row.measured_ttft_ms, p.predicted_ttft_ms) for p in predictions if p.row.measured_ttft_ms]
    return error_stats([m for m, _ in pairs if m is not None], [p for _, p in pairs])

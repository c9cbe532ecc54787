"""The JSON form of a request mix's plan: each bucket's split over configurations, every
configuration's replicas and cost, the saving against the best single configuration, and the
percentile TTFT of any product with percentile targets.

Owns these fields only (:mod:`.results` adds them to a product's row); it computes no plan."""

from __future__ import annotations

from typing import Any

from fleetplan.optimizer.problem_data.candidates import Candidate
from fleetplan.optimizer.common.defaults import MONEY_TOLERANCE_USD
from fleetplan.optimizer.mip.solution import Fleet, MixPlan, ProductPlan


def short_key(c: Candidate) -> str:
    """A configuration's short stable name: ``{gpu}/tp{tp}[/pp../ep../dp..]/{precision}/b{batch}/{mode}``."""
    return f"{c.gpu}/tp{c.tp}{c.layout.key_suffix()}/{c.precision}/b{c.batch}/{c.mode}"


def _bucket_rows(mix: MixPlan, h: int) -> list[dict[str, Any]]:
    """Each bucket at hour ``h``: its sizes and share, and how its demand is split (shares of the
    bucket's demand per configuration, and to the API)."""
    keys = {f.part.key: short_key(f.part) for f in mix.fleets if isinstance(f.part, Candidate)}
    rows = []
    for b in mix.buckets:
        split = [{"key": keys[k], "share": round(row[h], 6)} for (i, k), row in sorted(mix.serve.items())
                 if i == b.index and k in keys and row[h] > 1e-9]
        rows.append({"input_tokens": b.input_tokens, "output_tokens": b.output_tokens, "share": round(b.share, 6),
                     "api_fraction": round(mix.api_share[b.index][h], 6),
                     "configurations": sorted(split, key=lambda r: r["key"])})
    return rows


def _configuration_row(f: Fleet, pp: ProductPlan) -> dict[str, Any]:
    """One configuration of a mix: its shape, replicas and GPUs at its own busiest hour, its
    replicas at the product's busiest hour (``peak_hour_replicas``), its cost."""
    c = f.part
    assert isinstance(c, Candidate)
    usd = sum(f.cost_by_tier(pp.hours_per_month, pp.hour_weight).values())
    return {
        "key": short_key(c), "gpu": c.gpu, "tp": c.tp, "pp": c.pp, "ep": c.ep, "dp_attention": c.dp_attention,
        "layout": c.layout.label(), "batch": c.batch, "precision": c.precision,
        "kv_precision": c.estimate.kv_precision, "prefill_mode": c.mode, "replicas": f.peak,
        "peak_hour_replicas": f.in_hour(pp.peak_hour), "gpus": f.gpus,
        "step_time_ms": round(c.estimate.step_time_s * 1e3, 4), **_timed_at(c, pp), "usd_per_month": round(usd, 2),
    }


def _timed_at(c: Candidate, pp: ProductPlan) -> dict[str, int]:
    """The request sizes ``c``'s ``step_time_ms`` is timed at (``step_input_tokens``,
    ``step_output_tokens``): those of the first bucket it was generated for, whose capacity on
    it is the configuration's own."""
    assert pp.mix is not None
    for b in pp.mix.buckets:
        if b.capacity.get(c.key) == c.usable_tokens_per_s and b.output_tokens == round(c.output_tokens):
            return {"step_input_tokens": b.input_tokens, "step_output_tokens": b.output_tokens}
    return {}


def mix_saving_usd(pp: ProductPlan) -> float | None:
    """The best single-configuration plan's monthly cost less the mix's (None when not solved).
    The single plan is a plan of the mix's own MIP, so the difference is never negative beyond
    the solvers' gap; within :data:`MONEY_TOLERANCE_USD` it reads 0."""
    if pp.mix is None or pp.mix.single is None:
        return None
    saving = float(pp.mix.single["cost_difference_usd"])
    return round(saving, 2) if saving > MONEY_TOLERANCE_USD else 0.0


def mix_fields(pp: ProductPlan) -> dict[str, Any]:
    """The fields a product planned from a mix adds (none for others; ``ttft_percentiles_ms`` for
    any product with percentile targets)."""
    out: dict[str, Any] = {}
    if pp.mix is not None:
        out["requests"] = _bucket_rows(pp.mix, pp.peak_hour)
        out["configurations"] = [_configuration_row(f, pp) for f in pp.mix.fleets]
        out["mix_saving_usd"] = mix_saving_usd(pp)
        single = pp.mix.single
        out["single_configuration_monthly_cost_usd"] = single["monthly_cost_usd"] if single else None
        out["runner_ups_left_out"] = pp.mix.left_out
    if pp.ttft_percentiles_ms is not None:
        out["ttft_percentiles_ms"] = pp.ttft_percentiles_ms
    return out


def counted_row(pp: ProductPlan, d: dict[str, Any]) -> dict[str, Any]:
    """The replicas and GPUs a product's row adds to the plan's totals: for a mix, every
    configuration's at its busiest hour."""
    if pp.mix is None:
        return d
    return {**d, "replicas": sum(f.peak for f in pp.mix.fleets), "gpus": sum(f.gpus for f in pp.mix.fleets)}

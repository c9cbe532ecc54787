"""Percentile TTFT of a solved plan (``ttft_percentiles_ms``), read from its replicas and loads
with the queueing model of :mod:`fleetplan.models.queueing` and the one-server rule of
:mod:`fleetplan.optimizer.problem_data.percentiles`.

Every queue a request of the product may wait in is evaluated at its busiest hour's load: the
prefill pool (service time of the mix, KV hand-off and admission added), and each colocated or
headroom-mode configuration (a prompt's admission spread over the decode steps, for each bucket
it serves, as the planner checks it). Each percentile reported is the worst over these queues.

Owns this reading of a plan; it changes nothing."""

from __future__ import annotations

from fleetplan.catalogs.loader import Catalog
from fleetplan.models.presets import Preset
from fleetplan.models.queueing import ServiceTime
from fleetplan.models.ttft import admission_s
from fleetplan.optimizer.problem_data.candidates import Candidate, colocated_spread_s
from fleetplan.optimizer.problem_data.mix import bucket_product
from fleetplan.optimizer.problem_data.percentiles import arrival_scv, percentiles_ms
from fleetplan.optimizer.mip.solution import Fleet, ProductPlan


def _worst(rows: list[dict[str, float]]) -> dict[str, float] | None:
    """Each percentile's largest value over ``rows`` (rounded to 0.1 ms), None without rows."""
    if not rows:
        return None
    return {k: round(max(r[k] for r in rows), 1) for k in rows[0]}


def _pool_row(pp: ProductPlan) -> dict[str, float] | None:
    """The pool's percentiles at its peak utilisation."""
    k = pp.pool
    if k is None or pp.prefill_pool.peak == 0:
        return None
    return percentiles_ms(k.service_time, pp.pool_peak_utilisation or 0.0, k.transfer_s + k.admission_s,
                          arrival_scv(pp.product))


def _colocated_rows(pp: ProductPlan, f: Fleet, catalog: Catalog, preset: Preset) -> list[dict[str, float]]:
    """A colocated (or headroom-mode) configuration's percentiles at its peak load: one row for
    each bucket it serves, each with its own (deterministic) admission time, as the planner checks
    them (:func:`~fleetplan.optimizer.problem_data.candidates.bucket_capacity`)."""
    c = f.part
    assert isinstance(c, Candidate)
    llm, gpu = catalog.models[pp.product.model], catalog.gpus[c.gpu]
    if pp.mix is None:
        return [percentiles_ms(ServiceTime(colocated_spread_s(pp.product, llm, gpu, c, preset)),
                               pp.decode_peak_utilisation or 0.0, admission_s(preset), arrival_scv(pp.product))]
    load = max((pp.mix_load(f, h) for h in range(len(f.on_demand))), default=0.0)
    served = [b for b in pp.mix.buckets if any(x > 0 for x in pp.mix.serve.get((b.index, c.key), []))]
    return [percentiles_ms(ServiceTime(colocated_spread_s(bucket_product(pp.product, b.index), llm, gpu, c, preset)),
                           load, admission_s(preset), arrival_scv(pp.product)) for b in served]


def ttft_percentiles(pp: ProductPlan, catalog: Catalog, preset: Preset, *, always: bool = False
                     ) -> dict[str, float] | None:
    """p50, p90 and p99 of TTFT in ms when the product has percentile targets (or ``always``: some
    product of the plan has them), else None; None too for a product all on its API."""
    if (pp.product.ttft_percentiles_ms is None and not always) or pp.candidate is None:
        return None
    rows = [r for r in [_pool_row(pp)] if r is not None]
    for f in pp.fleets:
        if isinstance(f.part, Candidate) and f.part.mode != "pool" and f.peak > 0:
            rows.extend(_colocated_rows(pp, f, catalog, preset))
    return _worst(rows)

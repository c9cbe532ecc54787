"""Calibration profiles: hierarchical offsets of TPOT and TTFT fitted to a user's measurements.

A user's measurements fix what is systematic in their setup: how fast their engine runs, on
their GPU family, for their kind of model. Each configuration group (model, GPU, engine, TP,
precision: a batch sweep moves together) gives the median over its rows of
log(measured / predicted), and :mod:`fleetplan.models.hierarchy` splits those values into
offsets at the levels all, model kind, engine, GPU family, engine x family, setup (GPU id,
engine, kind) and model (model, GPU id, engine), each shrunk toward the levels above it by an
amount chosen by cross-validation; a level that does not predict held-out groups better (and
never worse with single groups held out) is left out, and a pooled level's cell applies only
where its offset is systematic (two standard errors from no change).

Two quantities are calibrated apart. The TPOT factor ``exp(s)`` multiplies every term of the
step (bandwidth and compute factors ``exp(-s)``, overhead and communication ``exp(s)``), so the
prefill time, and the TTFT with it, move too. The TTFT factor ``exp(t)`` then multiplies the
benchmark TTFT that :func:`fleetplan.models.validation.predict` gives (its residuals are taken
against the TTFT the calibrated step gives): the harnesses and schedulers that decide a measured
TTFT differ far more between setups than the step does. The planner's open-loop TTFT is not
scaled by ``t``; it moves with the step.

``calibrate`` cross-validates the whole procedure (the choice of levels and shrinkage inside
every fold) and keeps a quantity for a model kind (dense, MoE) only when its held-out error on
that kind's groups is lower than uncalibrated on the same rows (the profile's ``kinds``); when
neither quantity is kept for any kind it writes no profile.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from fleetplan.catalogs.loader import Catalog, InputError, parse_yaml, read_text
from fleetplan.models import hierarchy as H
from fleetplan.models.measurements import Measurement
from fleetplan.models.presets import CalibrationFactors, Preset, normalize_engine
from fleetplan.models.profile import (
    PROFILE_VERSION, AnyProfile, CalibrationProfile, FactorEntry, Level, LevelFit, LevelOffset, ProfileV1, QuantityFit,
    read_profile,
)
from fleetplan.models.roofline import model_kind
from fleetplan.models.validation import predict

__all__ = ["PROFILE_VERSION"]
LOG_BOUND = 3.0  # a factor beyond e^3 (20x) is a wrong row, not a setup's offset
QUANTITIES: tuple[str, ...] = ("tpot", "ttft")
KINDS: tuple[str, ...] = ("dense", "moe")
# Standard errors (over the outer folds) by which a quantity's held-out gain must exceed 0 for a kind
KEEP_ERRORS = 1.0


@dataclass(frozen=True)
class Components:
    """The terms of one row's predicted step time at unit factors (seconds), the tokens a step
    gains each sequence (above 1 with speculative decoding), its uncalibrated TTFT split into the
    part a step scale leaves alone (admission) and the part it scales, and the row's groups."""

    weights: float
    compute: float
    kv: float
    prefill: float
    comm: float
    overhead: float
    measured: float
    family: str
    gpu: str
    engine: str
    kind: str = "dense"
    group: str = ""
    tokens_per_step: float = 1.0
    draft: float = 0.0
    ttft_fixed: float = 0.0
    ttft_scaled: float = 0.0
    measured_ttft: float = 0.0
    cluster: str = ""
    model: str = ""


def _uniform(scale: float) -> CalibrationFactors:
    """Factors that scale every term of the step by ``scale`` on any GPU, engine and kind."""
    return CalibrationFactors(bandwidth_scale=1 / scale, compute_scale=1 / scale, overhead_scale=scale,
                              comm_scale=scale)


def components(row: Measurement, catalog: Catalog, preset: Preset) -> Components:
    """The terms of the uncalibrated ``preset``'s TPOT for ``row``, and its TTFT at a unit and a
    doubled step scale (a TTFT is affine in the step's scale: admission plus work)."""
    base = dataclasses.replace(preset, factors=(), calibration=None)
    p = predict(row, catalog, base)
    e = p.estimate
    doubled = predict(row, catalog, dataclasses.replace(base, factors=(_uniform(2.0),))).predicted_ttft_ms / 1e3
    one = p.predicted_ttft_ms / 1e3
    fixed = min(max(2.0 * one - doubled, 0.0), one)
    gpu = catalog.gpus[row.gpu]
    if preset.composition == "roofline":
        weights, kv, prefill = e.memory_time_s, 0.0, 0.0
    else:
        weights, kv, prefill = e.weights_time_s, e.kv_time_s, e.prefill_time_s
    return Components(
        weights=weights, compute=e.compute_time_s, kv=kv, prefill=prefill, comm=e.comm_time_s,
        overhead=e.overhead_time_s, measured=row.measured_tpot_ms / 1e3, family=gpu.family, gpu=gpu.id,
        engine=normalize_engine(row.engine) or "", kind=model_kind(catalog.models[row.model]),
        group=repr(row.configuration), tokens_per_step=e.accepted_tokens_per_step, draft=e.draft_time_s,
        ttft_fixed=fixed, ttft_scaled=one - fixed, measured_ttft=(row.measured_ttft_ms or 0.0) / 1e3,
        cluster=repr((row.model, gpu.id, normalize_engine(row.engine) or "")), model=row.model,
    )


def _base_s(c: Components) -> float:
    """The uncalibrated time per output token of a row (seconds): its step's terms at unit
    factors (a speculative step's draft passes included) over the tokens a step gains a sequence."""
    terms = max(c.weights, c.compute) + c.kv + c.prefill + c.comm + c.overhead
    return (terms + c.draft) / c.tokens_per_step


def level_keys(c: Components) -> dict[str, tuple[str, ...]]:
    """The cell of each level of :data:`~fleetplan.models.hierarchy.LEVELS` a row's group is in."""
    return {"all": (), "kind": (c.kind,), "engine": (c.engine,), "family": (c.family,),
            "engine_family": (c.engine, c.family), "setup": (c.gpu, c.family, c.engine, c.kind),
            "model": (c.model, c.gpu, c.family, c.engine, c.kind)}


@dataclass(frozen=True)
class Table:
    """A measurement set as the estimator reads it: per row its group and uncalibrated figures,
    per group its cells and its TPOT value (median log measured / predicted)."""

    comp: tuple[Components, ...]
    row_group: np.ndarray
    cells: H.Cells
    tpot_ratio: np.ndarray  # predicted / measured TPOT per row, uncalibrated
    ttft_fixed: np.ndarray
    ttft_scaled: np.ndarray
    ttft_measured: np.ndarray  # NaN where the row reports none
    tpot_values: np.ndarray
    clusters: np.ndarray  # per group: its model x GPU x engine, held out together


def table(comp: Sequence[Components]) -> Table:
    """The :class:`Table` of rows' components (groups in sorted order)."""
    groups = sorted({c.group for c in comp})
    where = {g: i for i, g in enumerate(groups)}
    first = {c.group: c for c in reversed(comp)}
    row_group = np.array([where[c.group] for c in comp], dtype=np.int64)
    ratio = np.array([_base_s(c) / c.measured for c in comp])
    values = np.array([statistics.median(-math.log(ratio[i]) for i in np.flatnonzero(row_group == g))
                       for g in range(len(groups))]) if comp else np.zeros(0)
    return Table(
        comp=tuple(comp), row_group=row_group, cells=H.cells_of([level_keys(first[g]) for g in groups]),
        tpot_ratio=ratio, ttft_fixed=np.array([c.ttft_fixed for c in comp]),
        ttft_scaled=np.array([c.ttft_scaled for c in comp]),
        ttft_measured=np.array([c.measured_ttft if c.measured_ttft > 0 else math.nan for c in comp]),
        tpot_values=np.clip(values, -LOG_BOUND, LOG_BOUND),
        clusters=np.unique([first[g].cluster for g in groups], return_inverse=True)[1].reshape(-1)
        if comp else np.zeros(0, dtype=np.int64),
    )


def predicted_ttft(t: Table, s: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Each row's TTFT (seconds) under per-group log multipliers ``s`` (TPOT) and ``f`` (TTFT)."""
    g = t.row_group
    out: np.ndarray = np.exp(f[g]) * (t.ttft_fixed + np.exp(s[g]) * t.ttft_scaled)
    return out


def ttft_values(t: Table, s: np.ndarray) -> np.ndarray:
    """Per group, the median over its rows with a measured TTFT of log(measured / the TTFT under
    TPOT log multipliers ``s``); NaN for a group without one."""
    logs = np.log(t.ttft_measured / predicted_ttft(t, s, np.zeros_like(s)))
    out = np.full(t.cells.groups, math.nan)
    for g in range(t.cells.groups):
        mine = logs[(t.row_group == g) & np.isfinite(logs)]
        if len(mine):
            out[g] = float(np.clip(np.median(mine), -LOG_BOUND, LOG_BOUND))
    return out


def tpot_loss(t: Table) -> H.Loss:
    """Summed |calibrated / measured - 1| of TPOT over the rows of the held-out groups (every
    fold: log multipliers and held-out masks are folds x groups)."""
    def loss(logm: np.ndarray, held: np.ndarray) -> np.ndarray:
        rows = held[:, t.row_group]
        out: np.ndarray = np.sum(np.where(rows, np.abs(np.exp(logm[:, t.row_group]) * t.tpot_ratio - 1.0), 0.0), axis=1)
        return out
    return loss


def ttft_loss(t: Table, s: np.ndarray) -> H.Loss:
    """Summed |log(calibrated / measured)| of TTFT, capped at log 1.5 (beyond 1.5x, the band the
    TTFT figures count, a row counts as 1.5x off: one queued row ten times off does not decide),
    over the held-out groups' rows that report one, with TPOT log multipliers ``s``."""
    logs = np.log(predicted_ttft(t, s, np.zeros_like(s)) / t.ttft_measured)
    has = np.isfinite(logs)
    logs = np.where(has, logs, 0.0)
    cap = math.log(1.5)

    def loss(logm: np.ndarray, held: np.ndarray) -> np.ndarray:
        rows = held[:, t.row_group] & has[None, :]
        out: np.ndarray = np.sum(np.where(rows, np.minimum(np.abs(logm[:, t.row_group] + logs), cap), 0.0), axis=1)
        return out
    return loss


@dataclass(frozen=True)
class QuantityResult:
    """One quantity fitted on every group: the levels' shrinkage and choices, the cells' offsets,
    each group's log multiplier in sample (0 for a kind not kept), its held-out log multiplier
    from the nested cross-validation (NaN without a fold), whether that held-out error is below
    no calibration's for some model kind (``better``), whether the quantity is kept (better, or
    forced) and the kinds it is kept for."""

    shrink: H.Shrink
    choices: tuple[H.LevelChoice, ...]
    offsets: tuple[np.ndarray, ...]
    log: np.ndarray
    held_out: np.ndarray
    kept: bool
    better: bool
    kinds: tuple[str, ...] = KINDS


@dataclass(frozen=True)
class Calibration:
    """A measurement set calibrated: TPOT and TTFT (each kept or not), and the outer folds."""

    table: Table
    tpot: QuantityResult
    ttft: QuantityResult
    folds: int
    forced: bool

    @property
    def method(self) -> str:
        """How the held-out figures were obtained."""
        if self.folds == 0:
            return "none: a single configuration group, so none can be held out"
        if self.folds < H.MAX_FOLDS or self.folds == self.table.cells.groups:
            return ("leave-one-group-out (each configuration group held out alone), levels chosen again inside every "
                    "fold; kept only if no worse with each model x GPU x engine held out whole")
        return (f"{self.folds}-fold by configuration group, levels chosen again inside every fold; kept only if no "
                "worse with each model x GPU x engine held out whole")


def _fit_one(values: np.ndarray, train: np.ndarray, cells: H.Cells, loss: H.Loss, allow_off: bool,
             clusters: np.ndarray, only: frozenset[str] | None = None,
             ) -> tuple[H.Shrink, list[H.LevelChoice], list[np.ndarray], np.ndarray]:
    """Levels (of ``only``, default all) chosen on ``train`` by cross-validation (``clusters``
    held out whole), their offsets fitted on ``train`` and every group's log multiplier."""
    shrink, choices = H.select(values, train, cells, loss, allow_off, clusters, only)
    offsets = H.fit(values, train, cells, shrink)
    return shrink, choices, offsets, H.log_multipliers(offsets, cells)


def _nested(t: Table, value_of: list[np.ndarray], loss_of: list[H.Loss], outer: np.ndarray,
            allow_off: bool, only: frozenset[str] | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each group's held-out log multiplier: in fold ``i`` (``outer[i]`` held out), levels chosen
    and fitted on the rest with values ``value_of[i]`` and loss ``loss_of[i]``; and every fold's
    multipliers of all groups."""
    held_out = np.full(t.cells.groups, math.nan)
    per_fold = []
    for held, values, loss in zip(outer, value_of, loss_of, strict=True):
        *_, logm = _fit_one(values, ~held, t.cells, loss, allow_off, t.clusters, only)
        held_out[held] = logm[held]
        per_fold.append(logm)
    return held_out, per_fold


def group_kinds(t: Table) -> np.ndarray:
    """The model kind (``dense`` / ``moe``) of every group."""
    return np.array([t.cells.keys["kind"][i][0] for i in t.cells.index["kind"]], dtype=object)


def _better(loss: H.Loss, held_out: np.ndarray, baseline: np.ndarray, outer: np.ndarray,
            among: np.ndarray | None = None) -> bool:
    """Whether the held-out multipliers lose less than ``baseline`` on the groups held out (of
    those ``among`` marks), by more than one standard error of the gain over the outer folds that
    hold some out (the rule levels are chosen by, applied to the whole procedure: a calibration
    whose gain is a few groups' luck is not kept)."""
    gain = _fold_gains(loss, held_out, baseline, outer, among)
    return len(gain) >= 2 and bool(gain.sum() > KEEP_ERRORS * H.standard_error(gain))


def _fold_gains(loss: H.Loss, held_out: np.ndarray, baseline: np.ndarray, outer: np.ndarray,
                among: np.ndarray | None = None) -> np.ndarray:
    """What the held-out multipliers lose less than ``baseline`` in each fold of ``outer`` that
    holds out some of the groups ``among`` marks (default every group) with a held-out value."""
    held = np.isfinite(held_out) & (True if among is None else among)
    masks = outer & held[None, :]
    masks = masks[masks.any(axis=1)]
    if not len(masks):
        return np.zeros(0)
    gain: np.ndarray = (loss(np.where(held, baseline, 0.0)[None, :], masks)
                        - loss(np.where(held, held_out, 0.0)[None, :], masks))
    return gain


def _better_kinds(t: Table, loss: H.Loss, held_out: np.ndarray, outer: np.ndarray) -> tuple[str, ...]:
    """The model kinds whose groups :func:`_better` finds better calibrated than not (each kind
    judged on its own groups: an offset systematic in dense models does not carry MoE ones)."""
    kinds = group_kinds(t)
    zeros = np.zeros(t.cells.groups)
    return tuple(k for k in KINDS if _better(loss, held_out, zeros, outer, kinds == k))


def _within_kept(t: Table, s: np.ndarray, f_held: np.ndarray, band: float = 1.5,
                 among: np.ndarray | None = None) -> bool:
    """Whether the held-out TTFT factors keep at least as many rows (of the groups ``among``
    marks) within ``band`` of the measured TTFT as no factor (the figure users read for TTFT)."""
    f = np.where(np.isfinite(f_held), f_held, 0.0)
    measured = t.ttft_measured
    rows = np.isfinite(measured) & (np.isfinite(f_held) & (True if among is None else among))[t.row_group]

    def share(pred: np.ndarray) -> int:
        return int(np.sum(np.abs(np.log(pred[rows] / measured[rows])) <= math.log(band) * (1 + 1e-12)))
    return share(predicted_ttft(t, s, f)) >= share(predicted_ttft(t, s, np.zeros_like(f)))


def _quantity(t: Table, values: np.ndarray, loss: H.Loss, held_out: np.ndarray, better: tuple[str, ...],
              force: bool, only: frozenset[str] | None = None) -> QuantityResult:
    """A quantity fitted on every group (levels of ``only``, default all), applied to the kinds
    ``better`` names (nothing, at every level, unless some kind is better; ``force``: every kind)."""
    kinds = tuple(k for k in KINDS if k in set(group_kinds(t))) if force else better
    kept, allow_off = bool(kinds) or force, not force
    everyone = np.ones(t.cells.groups, dtype=bool)
    shrink, choices, offsets, logm = _fit_one(values, everyone, t.cells, loss, allow_off, t.clusters, only)
    if not kept:
        shrink = tuple([None] * len(H.LEVELS))
        offsets, logm = H.fit(values, everyone, t.cells, shrink), np.zeros(t.cells.groups)
    logm = np.where(np.isin(group_kinds(t), kinds), logm, 0.0)
    return QuantityResult(shrink, tuple(choices), tuple(offsets), logm, held_out, kept, bool(better), kinds)


def _not_worse(loss: H.Loss, held_out: np.ndarray, outer: np.ndarray, among: np.ndarray) -> bool:
    """Whether the held-out multipliers lose no more than none on the groups ``among`` marks,
    summed over the folds ``outer`` (true without such a fold)."""
    return bool(_fold_gains(loss, held_out, np.zeros_like(held_out), outer, among).sum() >= 0.0)


def _tpot_nested(t: Table, outer: np.ndarray, by_cluster: np.ndarray, force: bool) -> tuple[
        np.ndarray, list[np.ndarray], np.ndarray, list[np.ndarray], tuple[str, ...], frozenset[str] | None]:
    """TPOT's nested cross-validation with single groups (``outer``) and whole clusters
    (``by_cluster``) held out: held-out multipliers and every fold's, the kinds kept (better
    with single groups held out, not worse with clusters) and the levels allowed. Where a kind
    is better with single groups but worse on unseen clusters (a pooled offset that was chance),
    the pooled levels are left out and the model level alone tried: it cannot touch a cluster it
    has not measured, so it keeps what the other TP degrees of a measured one tell."""
    loss, kinds = tpot_loss(t), group_kinds(t)
    best: tuple[Any, ...] | None = None
    for only in (None, frozenset(H.SINGLE_GROUP_LEVELS)):
        held, folds_ = _nested(t, [t.tpot_values] * len(outer), [loss] * len(outer), outer, not force, only)
        new, folds_new = _nested(t, [t.tpot_values] * len(by_cluster), [loss] * len(by_cluster), by_cluster,
                                 not force, only)
        candidates = _better_kinds(t, loss, held, outer)
        better = tuple(k for k in candidates if _not_worse(loss, new, by_cluster, kinds == k))
        if best is None or len(better) > len(best[4]):
            best = (held, folds_, new, folds_new, better, only)
        if force or better == candidates:
            break
    assert best is not None
    return best


def calibrate(t: Table, force: bool = False) -> Calibration:
    """TPOT, then TTFT against the TTFT of the calibrated step, each cross-validated with the
    levels chosen again inside every fold; a quantity is kept for a model kind when its error on
    that kind's groups, each held out alone, is below no calibration's on the same rows by more
    than one standard error, and no worse with whole model x GPU x engine clusters held out (a
    configuration of a model, GPU and engine the user has not measured at all); TTFT also needs
    no fewer rows within 1.5x. ``force``: always, for every kind, every level at its best
    shrinkage."""
    every, kinds = np.ones(t.cells.groups, dtype=bool), group_kinds(t)
    outer, by_cluster = H.folds(every), H.folds(every, t.clusters)
    tpot_loss_ = tpot_loss(t)
    s_held, s_folds, s_new, s_folds_new, better, only = _tpot_nested(t, outer, by_cluster, force)
    tpot = _quantity(t, t.tpot_values, tpot_loss_, s_held, better, force, only)
    applied = np.isin(kinds, tpot.kinds)

    def ttft_held(folds: np.ndarray, s_per_fold: list[np.ndarray]) -> np.ndarray:
        s_use = [np.where(applied, s, 0.0) for s in s_per_fold]
        held, _ = _nested(t, [ttft_values(t, s) for s in s_use], [ttft_loss(t, s) for s in s_use], folds, not force)
        return held

    f_held, f_new = ttft_held(outer, s_folds), ttft_held(by_cluster, s_folds_new)
    s_cv = np.where(np.isfinite(s_held) & applied, s_held, 0.0)
    s_cv_new = np.where(np.isfinite(s_new) & applied, s_new, 0.0)
    better = tuple(k for k in _better_kinds(t, ttft_loss(t, s_cv), f_held, outer)
                   if _within_kept(t, s_cv, f_held, among=kinds == k)
                   and _not_worse(ttft_loss(t, s_cv_new), f_new, by_cluster, kinds == k)
                   and _within_kept(t, s_cv_new, f_new, among=kinds == k))
    ttft = _quantity(t, ttft_values(t, tpot.log), ttft_loss(t, tpot.log), f_held, better, force)
    return Calibration(t, tpot, ttft, len(outer), force)


def row_predictions(c: Calibration, which: str) -> dict[str, np.ndarray]:
    """Per row, in seconds: the uncalibrated ``which`` (``tpot`` or ``ttft``; TTFT NaN where the
    row reports none), the profile's in sample (a quantity not kept predicts as uncalibrated) and
    the nested cross-validation's held out, as calibration would predict it kept (for the kinds
    it is kept for, when it is kept for some; NaN where the row's group had no fold)."""
    t, g = c.table, c.table.row_group
    zeros = np.zeros(t.cells.groups)
    s_cv = c.tpot.held_out
    if c.tpot.kept:
        s_cv = np.where(np.isin(group_kinds(t), c.tpot.kinds), s_cv, np.where(np.isfinite(s_cv), 0.0, s_cv))
    if which == "tpot":
        base = t.tpot_ratio * np.array([x.measured for x in t.comp])
        return {"uncalibrated": base, "in_sample": base * np.exp(c.tpot.log[g]), "held_out": base * np.exp(s_cv[g])}
    s_used = np.where(np.isfinite(s_cv), s_cv, 0.0) if c.tpot.kept else zeros
    f_cv = np.where(np.isfinite(c.ttft.held_out), c.ttft.held_out, 0.0)
    if c.ttft.kept:
        f_cv = np.where(np.isin(group_kinds(t), c.ttft.kinds), f_cv, 0.0)
    held = predicted_ttft(t, s_used, f_cv)
    held[~np.isfinite(s_cv[g])] = math.nan
    return {"uncalibrated": predicted_ttft(t, zeros, zeros), "in_sample": predicted_ttft(t, c.tpot.log, c.ttft.log),
            "held_out": held}


_FIELDS: dict[str, tuple[str, ...]] = {
    "all": (), "kind": ("kind",), "engine": ("engine",), "family": ("family",),
    "engine_family": ("engine", "family"), "setup": ("gpu", "family", "engine", "kind"),
    "model": ("model", "gpu", "family", "engine", "kind"),
}


def _cell_counts(c: Calibration, which: str, level: str) -> tuple[np.ndarray, np.ndarray]:
    """Per cell of ``level``: the groups and rows that informed ``which`` (TTFT: those with a
    measured TTFT)."""
    t = c.table
    idx, size = t.cells.index[level], len(t.cells.keys[level])
    informed = np.ones(len(t.comp), dtype=bool) if which == "tpot" else np.isfinite(t.ttft_measured)
    rows_per_group = np.bincount(t.row_group, informed.astype(float), t.cells.groups)
    return np.bincount(idx, (rows_per_group > 0).astype(float), size), np.bincount(idx, rows_per_group, size)


def level_fits(c: Calibration, which: str) -> list[LevelFit]:
    """The :class:`~fleetplan.models.profile.LevelFit` of every level of ``which`` (``tpot`` or
    ``ttft``), most general first; a left-out level has no offsets."""
    q: QuantityResult = getattr(c, which)
    out = []
    for level, k, choice, offsets in zip(H.LEVELS, q.shrink, q.choices, q.offsets, strict=True):
        groups, rows = _cell_counts(c, which, level)
        cells = [] if k is None else [
            LevelOffset.model_validate({**dict(zip(_FIELDS[level], key, strict=True)), "groups": int(groups[i]),
                                        "scale": round(math.exp(offsets[i]), 6), "rows": int(rows[i])})
            for i, key in enumerate(c.table.cells.keys[level]) if groups[i] >= H.min_groups(level)
        ]
        per_row = max(int(rows.sum()), 1)
        out.append(LevelFit(
            level=cast(Level, level), shrink_groups=k, offsets=cells,
            cv_error_without=None if choice.loss_without is None else round(choice.loss_without / per_row, 6),
            cv_error_with=None if choice.loss_with is None or k is None else round(choice.loss_with / per_row, 6),
        ))
    return out


def _log_offsets(levels: Sequence[Any]) -> dict[str, dict[tuple[str | None, ...], float]]:
    """A profile quantity's levels as {level: {cell key: log multiplier}}."""
    out: dict[str, dict[tuple[str | None, ...], float]] = {level: {} for level in H.LEVELS}
    for lv in levels:
        for o in lv.offsets:
            out[lv.level][tuple(getattr(o, f) for f in _FIELDS[lv.level])] = math.log(o.scale)
    return out


def _composed(levels: dict[str, dict[tuple[str | None, ...], float]], family: str | None, engine: str | None,
              kind: str | None, gpu: str | None = None, model: str | None = None,
              kinds: Sequence[str] | None = None) -> float:
    """The log multiplier of a configuration: its cells' offsets summed over the levels (a level
    it has no cell in, or names nothing of, adds nothing); 0 for a kind not in ``kinds`` (None:
    every kind), and for any kind unless ``kinds`` holds them all."""
    if kinds is not None and (kind not in kinds if kind else not set(KINDS) <= set(kinds)):
        return 0.0
    total = levels["all"].get((), 0.0)
    total += levels["kind"].get((kind,), 0.0) if kind else 0.0
    total += levels["engine"].get((engine,), 0.0) if engine else 0.0
    total += levels["family"].get((family,), 0.0) if family else 0.0
    total += levels["engine_family"].get((engine, family), 0.0) if engine and family else 0.0
    total += levels["setup"].get((gpu, family, engine, kind), 0.0) if gpu else 0.0
    total += levels["model"].get((model, gpu, family, engine, kind), 0.0) if model and gpu else 0.0
    return total


def factors_of(profile: CalibrationProfile) -> tuple[CalibrationFactors, ...]:
    """The profile as the preset's :class:`CalibrationFactors`: one entry per family (or any) x
    engine (or any) x kind (or any), and one per measured setup, each the product of its cells'
    multipliers, so that :meth:`Preset.factors_for`'s most specific entry is the hierarchy's
    answer for any GPU, engine and kind (measured or not), and one per measured model x GPU x
    engine; a kind the profile's ``kinds`` leaves out of a quantity gets no change in it."""
    tpot, ttft = _log_offsets(profile.tpot.levels), _log_offsets(profile.ttft.levels)
    kt, kf = profile.tpot.kinds, profile.ttft.kinds
    families = sorted({k[-1] for lv in ("family", "engine_family") for d in (tpot, ttft) for k in d[lv]}, key=str)
    engines = sorted({k[0] for lv in ("engine", "engine_family") for d in (tpot, ttft) for k in d[lv]}, key=str)
    setups = sorted({k for d in (tpot, ttft) for k in d["setup"]}, key=repr)
    out = []
    for kind in (None, "dense", "moe"):
        for engine in (None, *engines):
            for family in (None, *families):
                out.append(_entry(family, engine, kind, _composed(tpot, family, engine, kind, kinds=kt),
                                  _composed(ttft, family, engine, kind, kinds=kf)))
    for gpu, family, engine, kind in setups:
        out.append(_entry(gpu, engine, kind, _composed(tpot, family, engine, kind, gpu, kinds=kt),
                          _composed(ttft, family, engine, kind, gpu, kinds=kf)))
    models = sorted({k for d in (tpot, ttft) for k in d["model"]}, key=repr)
    for model, gpu, family, engine, kind in models:
        out.append(_entry(gpu, engine, kind, _composed(tpot, family, engine, kind, gpu, model, kt),
                          _composed(ttft, family, engine, kind, gpu, model, kf), model))
    return tuple(out)


def _entry(gpu: str | None, engine: str | None, kind: str | None, log_tpot: float, log_ttft: float,
           model: str | None = None) -> CalibrationFactors:
    """Factors that scale every term of the step by ``exp(log_tpot)`` and the TTFT by ``exp(log_ttft)``."""
    up, down = round(math.exp(log_tpot), 6), round(math.exp(-log_tpot), 6)
    return CalibrationFactors(gpu=gpu, engine=engine, kind=kind, model=model, bandwidth_scale=down,
                              compute_scale=down, overhead_scale=up, comm_scale=up,
                              ttft_scale=round(math.exp(log_ttft), 6))


def factors_from_entries(entries: Sequence[FactorEntry]) -> tuple[CalibrationFactors, ...]:
    """A format-1 profile's factor entries as the preset's :class:`CalibrationFactors`."""
    return tuple(
        CalibrationFactors(
            gpu=f.gpu, engine=normalize_engine(f.engine), kind=f.kind, bandwidth_scale=f.bandwidth_scale,
            compute_scale=f.compute_scale, overhead_scale=f.overhead_scale, comm_scale=f.comm_scale,
            unnamed_engine=f.unnamed_engine,
        )
        for f in entries
    )


def profile_factors(profile: AnyProfile) -> tuple[CalibrationFactors, ...]:
    """The preset factors of a profile of either format."""
    return factors_from_entries(profile.factors) if isinstance(profile, ProfileV1) else factors_of(profile)


def load_profile(path: Path) -> AnyProfile:
    """The profile at ``path``, validated by its schema (one line naming the field if not)."""
    text = read_text(path, "file", InputError, "`calibration`: ")
    try:
        return read_profile(parse_yaml(text, path), str(path))
    except ValueError as exc:
        raise InputError(str(exc)) from None


def apply_profile(preset: Preset, path: Path, preset_hint: str = "use the preset {fitted}") -> Preset:
    """``preset`` adjusted by the calibration profile at ``path``.

    The profile must have been fitted against the same preset; its factors become the preset's
    :class:`CalibrationFactors` and ``calibration`` names the profile file. A profile fitted for
    another preset is refused with ``preset_hint`` (``{fitted}`` is replaced by the profile's
    preset): how the caller's user chooses the preset.
    """
    profile = load_profile(path)
    if profile.preset != preset.name:
        hint = preset_hint.format(fitted=profile.preset, used=preset.name)
        raise InputError(f"{path}: profile was fitted for preset {profile.preset!r}, not {preset.name!r} ({hint})")
    return dataclasses.replace(preset, factors=profile_factors(profile), calibration=path.name)


def build_profile(c: Calibration, preset: Preset, measurements: str = "", skipped_rows: int = 0,
                  error: dict[str, Any] | None = None) -> CalibrationProfile:
    """The :class:`CalibrationProfile` of a calibration."""
    measures = {"tpot": "TPOT mean |calibrated / measured - 1| (MAPE)",
                "ttft": "TTFT mean |log(calibrated / measured)|"}
    return CalibrationProfile(
        fleetplan_calibration=PROFILE_VERSION, preset=preset.name, measurements=measurements,
        rows=len(c.table.comp), skipped_rows=skipped_rows, groups=c.table.cells.groups, forced=c.forced,
        method={
            "model": "TPOT: every term of the step times the product of the configuration's cells' multipliers; "
                     "TTFT: the benchmark TTFT of the calibrated step times its own product",
            "estimator": "per configuration group the median log(measured / predicted); levels all, kind, engine, "
                         "family, engine_family, setup, model fitted in turn on what the levels above left, each "
                         "cell shrunk by its groups n / (n + k); a pooled level's cell applies only when its mean "
                         f"is {H.SYSTEMATIC_ERRORS:g} standard errors from no change",
            "selection": f"k per level from {list(H.SHRINK_GRID)} or left out, by cross-validation over whole "
                         "model x GPU x engine clusters (level model: single groups), never worse with single "
                         "groups held out; a quantity kept for a model kind only when nested cross-validation "
                         "finds it better than none on that kind's groups",
        },
        tpot=QuantityFit(kept=c.tpot.kept, error_measure=measures["tpot"], levels=level_fits(c, "tpot"),
                         kinds=list(c.tpot.kinds) if c.tpot.kept else []),
        ttft=QuantityFit(kept=c.ttft.kept, error_measure=measures["ttft"], levels=level_fits(c, "ttft"),
                         kinds=list(c.ttft.kinds) if c.ttft.kept else []),
        error=error or {},
    )


def calibration_of(rows: Sequence[Measurement], catalog: Catalog, preset: Preset, force: bool = False) -> Calibration:
    """``rows`` (each one the planner would run) calibrated against ``preset``."""
    return calibrate(table([components(r, catalog, preset) for r in rows]), force)


def refused(c: Calibration) -> bool:
    """Whether ``calibrate`` refuses (writes no profile unless forced): nested cross-validation
    finds neither quantity's calibration better than none."""
    return not (c.tpot.better or c.ttft.better)


def fitted_preset(preset: Preset, rows: Sequence[Measurement], catalog: Catalog, name: str = "fit") -> Preset:
    """``preset`` calibrated on ``rows`` as ``calibrate --force`` would calibrate it."""
    c = calibration_of(rows, catalog, preset, force=True)
    return dataclasses.replace(preset, factors=factors_of(build_profile(c, preset)), calibration=name)


def calibrated_unless_worse(preset: Preset, rows: Sequence[Measurement], catalog: Catalog, name: str = "fit") -> Preset:
    """What a user who runs ``calibrate`` on ``rows`` ends up with: the calibrated preset (the
    quantities cross-validation kept), or ``preset`` itself where ``calibrate`` refuses."""
    c = calibration_of(rows, catalog, preset)
    if refused(c) and not c.forced:
        return preset
    return dataclasses.replace(preset, factors=factors_of(build_profile(c, preset)), calibration=name)

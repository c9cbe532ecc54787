"""Calibration profiles: one scale factor per GPU, engine and model kind, fitted to measurements.

A user's measurements fix what is systematic in their setup: how fast their engine build runs
on their GPUs, for their kind of model. Each configuration group (model, GPU, engine, TP,
precision: a batch sweep moves together) gives one number, the median over its rows of

    r = log(measured TPOT / predicted TPOT)

and every scope (a GPU id, its family or any GPU; an engine or any; dense, MoE or any kind)
that groups were measured in gets the log factor

    s = sum of r over its groups / (groups + SHRINK_GROUPS)

shrunk towards zero (no change) by the number of groups, not rows: a batch sweep of forty
points is one configuration a user measured. A profile scales every term of the step by
``exp(s)`` of the most specific scope that matches (bandwidth and compute factors ``exp(-s)``,
overhead and communication ``exp(s)``), so the prefill time and TTFT move with it. One factor
per scope, because what calibration must fix is a setup's offset on configurations it has not
measured: with the physics fitted on other configuration groups, calibrating on half of the
rest of silicon-train.csv's groups and predicting the other half
(``python benchmarks/bench_fidelity.py --nested``), bandwidth and overhead factors per level
each shrunk by a prior made dense TPOT worse (14.7% -> 19.5%), where this one scale helps.

Cross-validation refits on all rows but one configuration group and predicts the held-out
group, as a user predicting a configuration they have not measured; with more than
:data:`MAX_LOCO_CONFIGS` groups it uses that many grouped folds instead.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fleetplan.catalogs.loader import Catalog, InputError, parse_yaml, read_text
from fleetplan.models.measurements import Measurement
from fleetplan.models.presets import CalibrationFactors, Preset, normalize_engine
from fleetplan.models.profile import PROFILE_VERSION, CalibrationProfile, FactorEntry, read_profile
from fleetplan.models.roofline import model_kind
from fleetplan.models.validation import predict

__all__ = ["PROFILE_VERSION"]
MAX_LOCO_CONFIGS = 40
LOG_BOUND = 3.0
# Groups' worth of "no change" each scope's factor is shrunk with. Chosen by cross-validation on
# ../shared/reference/measurements/silicon-train.csv (physics fitted on half of the groups,
# calibration on a quarter, prediction of the last quarter, 4 random splits: dense TPOT MAPE
# 10.3%, 10.3%, 10.4%, 10.5% for 1, 2, 3, 4 groups, 10.8% uncalibrated) and on the public
# measurements (calibrated on half of their 24 groups, the other half predicted: dense 14.1%,
# 13.5%, 13.3%, 13.2% against 13.3% uncalibrated). At 3 calibration is worse than none on
# neither; at 1 it lost 0.8 point on the public file, where a half holds only 12 groups.
SHRINK_GROUPS = 3.0


@dataclass(frozen=True)
class Components:
    """The terms of one row's predicted step time at unit factors (seconds), the tokens a step
    gains each sequence (above 1 with speculative decoding) and the row's groups."""

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


def components(row: Measurement, catalog: Catalog, preset: Preset) -> Components:
    """The terms of the uncalibrated ``preset``'s TPOT for ``row``."""
    base = dataclasses.replace(preset, factors=(), calibration=None)
    e = predict(row, catalog, base).estimate
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
    )


Scope = tuple[str | None, str | None, str | None]  # (GPU id or family, engine, kind); None: any


def _base_s(c: Components) -> float:
    """The uncalibrated time per output token of a row (seconds): its step's terms at unit
    factors (a speculative step's draft passes included) over the tokens a step gains a sequence."""
    terms = max(c.weights, c.compute) + c.kv + c.prefill + c.comm + c.overhead
    return (terms + c.draft) / c.tokens_per_step


def group_log_ratios(comp: Sequence[Components]) -> dict[str, tuple[float, Components]]:
    """Per configuration group: the median of log(measured / predicted) over its rows, and one
    of its rows (for its GPU, family, engine and kind)."""
    by_group: dict[str, list[Components]] = {}
    for c in comp:
        by_group.setdefault(c.group, []).append(c)
    return {g: (statistics.median(math.log(c.measured / _base_s(c)) for c in cs), cs[0])
            for g, cs in sorted(by_group.items())}


def _scopes_of(c: Components) -> list[Scope]:
    """The scopes a row of ``c``'s group calibrates: its GPU and model kind pooled over engines
    (engine None: what the planner, which names no engine, uses) and with its engine."""
    return [(c.gpu, None, c.kind), (c.gpu, c.engine, c.kind)]


@dataclass
class Fit:
    """Fitted log factors of every scope with measured groups, with their group and row counts."""

    log_scale: dict[Scope, float]
    groups: dict[Scope, int]
    rows: dict[Scope, int]

    def factors(self) -> tuple[CalibrationFactors, ...]:
        """The fit as a preset's calibration factors, one per scope."""
        return tuple(_factors(scope, s) for scope, s in self.log_scale.items())


def _factors(scope: Scope, log_scale: float) -> CalibrationFactors:
    """The multipliers that scale every term of the step by ``exp(log_scale)``."""
    up, down = round(math.exp(log_scale), 6), round(math.exp(-log_scale), 6)
    return CalibrationFactors(gpu=scope[0], engine=scope[1], kind=scope[2], bandwidth_scale=down,
                              compute_scale=down, overhead_scale=up, comm_scale=up, unnamed_engine=scope[1] is None)


def fit(comp: Sequence[Components]) -> Fit:
    """One shrunk log factor per scope: the sum of its groups' median log ratios over the
    number of its groups plus :data:`SHRINK_GROUPS`."""
    sums: dict[Scope, float] = {}
    groups: dict[Scope, int] = {}
    rows: dict[Scope, int] = {}
    for r, c in group_log_ratios(comp).values():
        for scope in _scopes_of(c):
            sums[scope] = sums.get(scope, 0.0) + r
            groups[scope] = groups.get(scope, 0) + 1
    for c in comp:
        for scope in _scopes_of(c):
            rows[scope] = rows.get(scope, 0) + 1
    log_scale = {k: float(np.clip(v / (groups[k] + SHRINK_GROUPS), -LOG_BOUND, LOG_BOUND))
                 for k, v in sorted(sums.items(), key=lambda kv: repr(kv[0]))}
    return Fit(log_scale=log_scale, groups=groups, rows=rows)


def predict_with_fit(comp: Sequence[Components], f: Fit) -> np.ndarray:
    """Predicted step times (seconds) of ``comp`` under fitted factors: each row's most specific
    matching scope, chosen as the planner chooses (:meth:`Preset.factors_for`)."""
    preset = Preset(name="fit", factors=f.factors())
    out = []
    for c in comp:
        scale = preset.factors_for(c.gpu, c.family, c.engine, c.kind).overhead_scale
        out.append(_base_s(c) * scale)
    return np.array(out)


def cross_validated_predictions(comp: Sequence[Components], configs: Sequence[tuple[Any, ...]]) -> tuple[np.ndarray, str, int]:
    """Held-out predictions (seconds) of every row, the method's name and the number of folds.

    A row whose fold leaves nothing to fit on (all rows come from one configuration) has no
    held-out prediction: NaN, for the caller to leave out."""
    distinct = sorted(set(configs), key=repr)
    if len(distinct) <= MAX_LOCO_CONFIGS:
        fold_of = {cfg: i for i, cfg in enumerate(distinct)}
        method = "leave-one-configuration-group-out"
    else:
        fold_of = {cfg: i % MAX_LOCO_CONFIGS for i, cfg in enumerate(distinct)}
        method = f"{MAX_LOCO_CONFIGS}-fold, grouped by configuration group"
    folds = sorted(set(fold_of.values()))
    out = np.full(len(comp), math.nan)
    for k in folds:
        test = [i for i, cfg in enumerate(configs) if fold_of[cfg] == k]
        train = [i for i, cfg in enumerate(configs) if fold_of[cfg] != k]
        if not train:
            continue
        f = fit([comp[i] for i in train])
        out[test] = predict_with_fit([comp[i] for i in test], f)
    return out, method, len(folds)


def profile_factors(f: Fit, comp: Sequence[Components]) -> list[FactorEntry]:
    """Every factor entry of a profile, most general first: one per scope with measured groups,
    with the rows it was fitted on."""
    del comp  # the fit holds its own counts
    order = sorted(f.log_scale, key=lambda k: (sum(x is not None for x in k), repr(k)))
    entries = []
    for scope in order:
        fac = _factors(scope, f.log_scale[scope])
        entries.append(FactorEntry(
            gpu=scope[0], engine=scope[1], kind=scope[2], rows=f.rows[scope],  # type: ignore[arg-type]
            unnamed_engine=fac.unnamed_engine, bandwidth_scale=fac.bandwidth_scale,
            compute_scale=fac.compute_scale, overhead_scale=fac.overhead_scale, comm_scale=fac.comm_scale,
        ))
    return entries


def load_profile(path: Path) -> CalibrationProfile:
    """The profile at ``path``, validated by its schema (one line naming the field if not)."""
    text = read_text(path, "file", InputError, "`calibration`: ")
    try:
        return read_profile(parse_yaml(text, path), str(path))
    except ValueError as exc:
        raise InputError(str(exc)) from None


def apply_profile(preset: Preset, path: Path, preset_hint: str = "use the preset {fitted}") -> Preset:
    """``preset`` adjusted by the calibration profile at ``path``.

    The profile must have been fitted against the same preset; its factor entries become the
    preset's :class:`CalibrationFactors` and ``calibration`` names the profile file. A profile
    fitted for another preset is refused with ``preset_hint`` (``{fitted}`` is replaced by the
    profile's preset): how the caller's user chooses the preset.
    """
    profile = load_profile(path)
    if profile.preset != preset.name:
        hint = preset_hint.format(fitted=profile.preset, used=preset.name)
        raise InputError(f"{path}: profile was fitted for preset {profile.preset!r}, not {preset.name!r} ({hint})")
    return dataclasses.replace(preset, factors=factors_from_entries(profile.factors), calibration=path.name)


def factors_from_entries(entries: Sequence[FactorEntry]) -> tuple[CalibrationFactors, ...]:
    """A profile's factor entries as the preset's :class:`CalibrationFactors`."""
    return tuple(
        CalibrationFactors(
            gpu=f.gpu, engine=normalize_engine(f.engine), kind=f.kind, bandwidth_scale=f.bandwidth_scale,
            compute_scale=f.compute_scale, overhead_scale=f.overhead_scale, comm_scale=f.comm_scale,
            unnamed_engine=f.unnamed_engine,
        )
        for f in entries
    )


def fitted_preset(preset: Preset, rows: Sequence[Measurement], catalog: Catalog, name: str = "fit") -> Preset:
    """``preset`` calibrated on ``rows`` exactly as a profile written by ``calibrate`` would
    calibrate it (for cross-validation of everything a profile changes, TTFT included)."""
    comp = [components(r, catalog, preset) for r in rows]
    entries = profile_factors(fit(comp), comp)
    return dataclasses.replace(preset, factors=factors_from_entries(entries), calibration=name)


def cross_validated_mape(comp: Sequence[Components], configs: Sequence[tuple[Any, ...]]) -> tuple[float, float] | None:
    """(calibrated, uncalibrated) TPOT MAPE over the rows cross-validation could hold out, or
    None when no row could be held out: the figures ``calibrate`` compares before writing."""
    cv, _, _ = cross_validated_predictions(comp, configs)
    held = [i for i, v in enumerate(cv) if math.isfinite(v)]
    if not held:
        return None
    plain = np.array([_base_s(comp[i]) for i in held])
    measured = np.array([comp[i].measured for i in held])
    calibrated = float(np.mean(np.abs(cv[held] - measured) / measured))
    return calibrated, float(np.mean(np.abs(plain - measured) / measured))


def calibrated_unless_worse(preset: Preset, rows: Sequence[Measurement], catalog: Catalog) -> Preset:
    """What a user who runs ``calibrate`` on ``rows`` ends up with: the calibrated preset, or
    ``preset`` itself when cross-validation finds calibration worse (``calibrate`` refuses)."""
    comp = [components(r, catalog, preset) for r in rows]
    mapes = cross_validated_mape(comp, [r.configuration for r in rows])
    if mapes is not None and mapes[0] > mapes[1]:
        return preset
    return fitted_preset(preset, rows, catalog)

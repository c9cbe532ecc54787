"""Calibration profiles: efficiency factors and overheads fitted to measurements.

The decode step of a preset decomposes into terms that each scale with one physical factor
(:func:`components`):

    step = max(weights / b, compute / c) + kv / b + prefill / c + comm x m + overhead x o

``b`` scales the bandwidth efficiency, ``c`` the compute efficiency, ``m`` the communication
time and ``o`` the fixed overhead. A fit estimates them in log space:

    log b = b_global + b_kind + b_family + b_gpu + b_engine + b_gpu,engine     (likewise log o)
    log c = c_global,  log m = m_global

``kind`` separates dense and mixture-of-experts models. Each level's deviations have a
Gaussian prior centred on zero (shrinkage: a GPU or engine measured in few configurations
stays near its family's or the global value) and the rows enter through a Huber loss
(threshold :data:`HUBER_K` noise standard deviations, :data:`NOISE_STD` in log units) on
log(predicted / measured), so a few outliers cannot drag the fit. Each row weighs one over
the rows of its configuration group, so the data count by groups, not rows: a batch sweep of
forty points is one configuration a user measured, and shrinks the levels no more than a
single point would. The minimisation is iteratively reweighted Levenberg-Marquardt with the
analytic Jacobian.

Cross-validation refits on all rows but one configuration group (model, GPU, engine, TP,
precision: a batch sweep moves together) and predicts the held-out group, as a user predicting
a configuration they have not measured; with more than :data:`MAX_LOCO_CONFIGS` groups it uses
that many grouped folds instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
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
NOISE_STD = 0.12
HUBER_K = 1.345
MAX_LOCO_CONFIGS = 40
LOG_BOUND = 3.0
# Prior standard deviations (log units) of each level's deviation for (bandwidth, overhead),
# and of the global log factors (bandwidth, compute, overhead, communication). Chosen by
# leave-configuration-groups-out cross-validation on ../shared/reference/measurements/
# silicon-train.csv (all 784 rows the planner would run, 44 groups): priors 0.3 times these
# wider gave MAPE 19.6% held out against 20.1% uncalibrated; 0.1x and 0.5x gave 19.9% and 20.0%,
# and wider priors overfit (1x: 23.0%, worse than no calibration).
PRIOR_STD_GLOBAL: tuple[float, float, float, float] = (0.15, 0.15, 0.3, 0.3)
PRIOR_STD_LEVEL: dict[str, tuple[float, float]] = {
    "kind": (0.045, 0.12),
    "family": (0.075, 0.15),
    "gpu": (0.045, 0.12),
    "engine": (0.045, 0.15),
    "gpu_engine": (0.03, 0.12),
}
LEVELS: tuple[str, ...] = ("kind", "family", "gpu", "engine", "gpu_engine")


@dataclass(frozen=True)
class Components:
    """The terms of one row's predicted step time at unit factors (seconds) and its groups."""

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
        group=repr(row.configuration),
    )


def _level_key(c: Components, level: str) -> str:
    if level == "kind":
        return c.kind
    if level == "family":
        return c.family
    if level == "gpu":
        return c.gpu
    if level == "engine":
        return c.engine
    return f"{c.gpu}|{c.engine}"


@dataclass
class Fit:
    """Fitted log factors: four globals and (bandwidth, overhead) deviations per level value."""

    global_log: np.ndarray
    levels: dict[str, dict[str, np.ndarray]]
    rows: dict[str, dict[str, int]]

    def log_factors(self, family: str, gpu: str | None, engine: str | None, kind: str | None = None) -> np.ndarray:
        """(log b, log c, log o, log m) for a group; unknown level values contribute zero."""
        out = self.global_log.copy()
        keys = {"kind": kind, "family": family, "gpu": gpu, "engine": engine,
                "gpu_engine": f"{gpu}|{engine}" if gpu is not None and engine is not None else None}
        for level, key in keys.items():
            if key is not None and key in self.levels[level]:
                dev = self.levels[level][key]
                out[0] += dev[0]
                out[2] += dev[1]
        return out


def _predict(comp: Sequence[Components], logf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Predicted step times and d(log pred)/d(log b, log c, log o, log m) for each row."""
    w = np.array([c.weights for c in comp])
    cc = np.array([c.compute for c in comp])
    kv = np.array([c.kv for c in comp])
    pf = np.array([c.prefill for c in comp])
    cm = np.array([c.comm for c in comp])
    ov = np.array([c.overhead for c in comp])
    b, c, o, m = (np.exp(logf[:, i]) for i in range(4))
    wt, ct = w / b, cc / c
    mem_wins = wt >= ct
    pred = np.where(mem_wins, wt, ct) + kv / b + pf / c + cm * m + ov * o
    d = np.stack([
        -(np.where(mem_wins, wt, 0.0) + kv / b),
        -(np.where(mem_wins, 0.0, ct) + pf / c),
        ov * o,
        cm * m,
    ], axis=1) / pred[:, None]
    return pred, d


def group_weights(comp: Sequence[Components]) -> np.ndarray:
    """Each row's weight in the loss: one over the rows of its configuration group, so every
    group counts once, however many batches it sweeps."""
    counts: dict[str, int] = {}
    for c in comp:
        counts[c.group] = counts.get(c.group, 0) + 1
    return np.array([1.0 / counts[c.group] for c in comp])


def _incidence(comp: Sequence[Components], index: list[tuple[str, str, int]]) -> list[np.ndarray]:
    """Which parameters add to each row's (log b, log c, log o, log m): four 0/1 matrices."""
    pos = {key: 4 + i for i, key in enumerate(index)}
    inc = [np.zeros((len(comp), 4 + len(index))) for _ in range(4)]
    for j in range(4):
        inc[j][:, j] = 1.0
    for r, c in enumerate(comp):
        for lv in LEVELS:
            k = _level_key(c, lv)
            inc[0][r, pos[(lv, k, 0)]] = 1.0
            inc[2][r, pos[(lv, k, 1)]] = 1.0
    return inc


Objective = Callable[[np.ndarray], tuple[float, np.ndarray, np.ndarray]]


def _minimise(objective: Objective, prior: np.ndarray, row_w: np.ndarray, iterations: int) -> np.ndarray:
    """Iteratively reweighted Levenberg-Marquardt from zero: Huber weights times ``row_w``."""
    theta = np.zeros(len(prior))
    lam = 1e-3
    value, res, jac = objective(theta)
    for _ in range(iterations):
        weights = row_w * np.where(np.abs(res) <= HUBER_K, 1.0, HUBER_K / np.maximum(np.abs(res), 1e-12))
        h = jac.T @ (jac * weights[:, None]) + np.diag(1.0 / prior**2)
        g = jac.T @ (weights * res) + theta / prior**2
        improved = False
        for _ in range(12):
            step = np.linalg.solve(h + lam * np.diag(np.diag(h)), -g)
            cand = np.clip(theta + step, -LOG_BOUND, LOG_BOUND)
            v, r2, j2 = objective(cand)
            if v < value - 1e-12:
                theta, value, res, jac = cand, v, r2, j2
                lam = max(lam / 3.0, 1e-9)
                improved = True
                break
            lam *= 4.0
        if not improved or float(np.max(np.abs(step))) < 1e-7:
            break
    return theta


def fit(comp: Sequence[Components], iterations: int = 60) -> Fit:
    """Robust, shrunk least squares of log(predicted / measured) over ``comp``, each
    configuration group weighing as one observation."""
    keys: dict[str, list[str]] = {lv: sorted({_level_key(c, lv) for c in comp}) for lv in LEVELS}
    index = [(lv, k, j) for lv in LEVELS for k in keys[lv] for j in (0, 1)]  # j: 0 bandwidth, 1 overhead
    prior = np.array(list(PRIOR_STD_GLOBAL) + [PRIOR_STD_LEVEL[lv][j] for lv, _, j in index])
    inc_b, inc_c, inc_o, inc_m = _incidence(comp, index)
    log_meas = np.log(np.array([c.measured for c in comp]))
    row_w = group_weights(comp)

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        logf = np.stack([inc_b @ theta, inc_c @ theta, inc_o @ theta, inc_m @ theta], axis=1)
        pred, d = _predict(comp, logf)
        res = (np.log(pred) - log_meas) / NOISE_STD
        a = np.abs(res)
        huber = np.where(a <= HUBER_K, 0.5 * res**2, HUBER_K * (a - 0.5 * HUBER_K))
        value = float(np.sum(row_w * huber) + 0.5 * np.sum((theta / prior) ** 2))
        jac = (d[:, 0:1] * inc_b + d[:, 1:2] * inc_c + d[:, 2:3] * inc_o + d[:, 3:4] * inc_m) / NOISE_STD
        return value, res, jac

    theta = _minimise(objective, prior, row_w, iterations)
    pos = {key: 4 + i for i, key in enumerate(index)}
    levels = {lv: {k: np.array([theta[pos[(lv, k, 0)]], theta[pos[(lv, k, 1)]]]) for k in keys[lv]} for lv in LEVELS}
    counts: dict[str, dict[str, int]] = {lv: {} for lv in LEVELS}
    for c in comp:
        for lv in LEVELS:
            k = _level_key(c, lv)
            counts[lv][k] = counts[lv].get(k, 0) + 1
    return Fit(global_log=theta[:4].copy(), levels=levels, rows=counts)


def predict_with_fit(comp: Sequence[Components], f: Fit) -> np.ndarray:
    """Predicted step times (seconds) of ``comp`` under fitted factors."""
    logf = np.stack([f.log_factors(c.family, c.gpu, c.engine, c.kind) for c in comp])
    return _predict(comp, logf)[0]


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


def _factor_dict(logf: np.ndarray) -> dict[str, float]:
    return {
        "bandwidth_scale": round(float(math.exp(logf[0])), 6),
        "compute_scale": round(float(math.exp(logf[1])), 6),
        "overhead_scale": round(float(math.exp(logf[2])), 6),
        "comm_scale": round(float(math.exp(logf[3])), 6),
    }


def profile_factors(f: Fit, comp: Sequence[Components]) -> list[FactorEntry]:
    """Every factor entry of a profile, most general first: for each scope (global, engine,
    family, family and engine, GPU, GPU and engine) one entry for any model kind, then one per
    kind fitted (each the sum of the levels that apply, with its row count)."""
    family_of = {c.gpu: c.family for c in comp}
    engines: list[str | None] = [None, *sorted({c.engine for c in comp})]
    kinds = sorted({c.kind for c in comp})
    scopes: list[tuple[str | None, str, str | None]] = [(None, "", None)]  # (entry gpu, family, gpu id)
    scopes += [(fam, fam, None) for fam in sorted(set(family_of.values()))]
    scopes += [(g, family_of[g], g) for g in sorted(family_of)]
    entries: list[FactorEntry] = []
    for gpu, family, gpu_id in scopes:
        for e in engines:
            for kind in (None, *kinds):
                rows = sum(1 for c in comp if gpu in (None, c.gpu, c.family) and e in (None, c.engine)
                           and kind in (None, c.kind))
                logf = f.log_factors(family, gpu_id, e, kind)
                entries.append(FactorEntry(gpu=gpu, engine=e, kind=kind, rows=rows, **_factor_dict(logf)))
    return entries


def load_profile(path: Path) -> CalibrationProfile:
    """The profile at ``path``, validated by its schema (one line naming the field if not)."""
    text = read_text(path, "file", InputError, "--calibration: ")
    try:
        return read_profile(parse_yaml(text, path), str(path))
    except ValueError as exc:
        raise InputError(str(exc)) from None


def apply_profile(preset: Preset, path: Path, preset_hint: str = "use --preset {fitted}") -> Preset:
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
    plain = _predict([comp[i] for i in held], np.zeros((len(held), 4)))[0]
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

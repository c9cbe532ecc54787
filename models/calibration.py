"""Calibration profiles: efficiency factors and overheads fitted to measurements.

The decode step of a preset decomposes into terms that each scale with one physical factor
(:func:`components`):

    step = max(weights / b, compute / c) + kv / b + prefill / c + comm x m + overhead x o

``b`` scales the bandwidth efficiency, ``c`` the compute efficiency, ``m`` the communication
time and ``o`` the fixed overhead. A fit estimates them in log space:

    log b = b_global + b_family + b_gpu + b_engine + b_gpu,engine     (likewise log o)
    log c = c_global,  log m = m_global

Each level's deviations have a Gaussian prior centred on zero (shrinkage: a GPU or engine
with few rows stays near its family's or the global value) and the rows enter through a
Huber loss (threshold :data:`HUBER_K` noise standard deviations, :data:`NOISE_STD` in log
units) on log(predicted / measured), so a few outliers cannot drag the fit. The
minimisation is iteratively reweighted Levenberg-Marquardt with the analytic Jacobian.

Cross-validation refits on all rows but one configuration (model, GPU, precision, TP, EP,
engine: a batch sweep moves together) and predicts the held-out configuration; with more than
:data:`MAX_LOCO_CONFIGS` configurations it uses that many grouped folds instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.loader import Catalog, InputError, parse_yaml, read_text
from fleetplan.models.measurements import Measurement
from fleetplan.models.presets import CalibrationFactors, Preset, normalize_engine
from fleetplan.models.validation import predict

PROFILE_VERSION = 1
NOISE_STD = 0.12
HUBER_K = 1.345
MAX_LOCO_CONFIGS = 40
LOG_BOUND = 3.0
# Prior standard deviations (log units) of each level's deviation for (bandwidth, overhead),
# and of the global log factors (bandwidth, compute, overhead, communication).
PRIOR_STD_GLOBAL: tuple[float, float, float, float] = (0.5, 0.5, 1.0, 1.0)
PRIOR_STD_LEVEL: dict[str, tuple[float, float]] = {
    "family": (0.25, 0.5),
    "gpu": (0.15, 0.4),
    "engine": (0.15, 0.5),
    "gpu_engine": (0.1, 0.4),
}
LEVELS: tuple[str, ...] = ("family", "gpu", "engine", "gpu_engine")


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
        engine=normalize_engine(row.engine) or "",
    )


def _level_key(c: Components, level: str) -> str:
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

    def log_factors(self, family: str, gpu: str | None, engine: str | None) -> np.ndarray:
        """(log b, log c, log o, log m) for a group; unknown level values contribute zero."""
        out = self.global_log.copy()
        keys = {"family": family, "gpu": gpu, "engine": engine,
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


def fit(comp: Sequence[Components], iterations: int = 60) -> Fit:
    """Robust, shrunk least squares of log(predicted / measured) over ``comp``."""
    keys: dict[str, list[str]] = {lv: sorted({_level_key(c, lv) for c in comp}) for lv in LEVELS}
    index: list[tuple[str, str, int]] = []  # (level, key, 0 = bandwidth / 1 = overhead)
    for lv in LEVELS:
        for k in keys[lv]:
            index.extend([(lv, k, 0), (lv, k, 1)])
    n_par = 4 + len(index)
    prior = np.array(list(PRIOR_STD_GLOBAL) + [PRIOR_STD_LEVEL[lv][j] for lv, _, j in index])
    # incidence: which parameters add to each row's (log b, log o)
    pos = {(lv, k, j): 4 + i for i, (lv, k, j) in enumerate(index)}
    n = len(comp)
    inc_b = np.zeros((n, n_par))
    inc_o = np.zeros((n, n_par))
    inc_b[:, 0] = 1.0
    inc_o[:, 2] = 1.0
    for r, c in enumerate(comp):
        for lv in LEVELS:
            k = _level_key(c, lv)
            inc_b[r, pos[(lv, k, 0)]] = 1.0
            inc_o[r, pos[(lv, k, 1)]] = 1.0
    inc_c = np.zeros((n, n_par))
    inc_c[:, 1] = 1.0
    inc_m = np.zeros((n, n_par))
    inc_m[:, 3] = 1.0
    log_meas = np.log(np.array([c.measured for c in comp]))

    def row_logf(theta: np.ndarray) -> np.ndarray:
        return np.stack([inc_b @ theta, inc_c @ theta, inc_o @ theta, inc_m @ theta], axis=1)

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        pred, d = _predict(comp, row_logf(theta))
        res = (np.log(pred) - log_meas) / NOISE_STD
        a = np.abs(res)
        huber = np.where(a <= HUBER_K, 0.5 * res**2, HUBER_K * (a - 0.5 * HUBER_K))
        value = float(huber.sum() + 0.5 * np.sum((theta / prior) ** 2))
        jac = (d[:, 0:1] * inc_b + d[:, 1:2] * inc_c + d[:, 2:3] * inc_o + d[:, 3:4] * inc_m) / NOISE_STD
        return value, res, jac

    theta = np.zeros(n_par)
    lam = 1e-3
    value, res, jac = objective(theta)
    for _ in range(iterations):
        weights = np.where(np.abs(res) <= HUBER_K, 1.0, HUBER_K / np.maximum(np.abs(res), 1e-12))
        jw = jac * weights[:, None]
        h = jac.T @ jw + np.diag(1.0 / prior**2)
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

    levels: dict[str, dict[str, np.ndarray]] = {lv: {} for lv in LEVELS}
    for lv in LEVELS:
        for k in keys[lv]:
            levels[lv][k] = np.array([theta[pos[(lv, k, 0)]], theta[pos[(lv, k, 1)]]])
    counts: dict[str, dict[str, int]] = {lv: {} for lv in LEVELS}
    for c in comp:
        for lv in LEVELS:
            k = _level_key(c, lv)
            counts[lv][k] = counts[lv].get(k, 0) + 1
    return Fit(global_log=theta[:4].copy(), levels=levels, rows=counts)


def predict_with_fit(comp: Sequence[Components], f: Fit) -> np.ndarray:
    """Predicted step times (seconds) of ``comp`` under fitted factors."""
    logf = np.stack([f.log_factors(c.family, c.gpu, c.engine) for c in comp])
    return _predict(comp, logf)[0]


def cross_validated_predictions(comp: Sequence[Components], configs: Sequence[tuple[Any, ...]]) -> tuple[np.ndarray, str, int]:
    """Held-out predictions (seconds) of every row, the method's name and the number of folds.

    A row whose fold leaves nothing to fit on (all rows come from one configuration) has no
    held-out prediction: NaN, for the caller to leave out."""
    distinct = sorted(set(configs), key=repr)
    if len(distinct) <= MAX_LOCO_CONFIGS:
        fold_of = {cfg: i for i, cfg in enumerate(distinct)}
        method = "leave-one-configuration-out"
    else:
        fold_of = {cfg: i % MAX_LOCO_CONFIGS for i, cfg in enumerate(distinct)}
        method = f"{MAX_LOCO_CONFIGS}-fold, grouped by configuration"
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


def profile_factors(f: Fit, comp: Sequence[Components]) -> list[dict[str, Any]]:
    """Every factor entry of a profile, most general first: global, engine, family, family and
    engine, GPU, GPU and engine (each the sum of the levels that apply, with its row count)."""
    family_of = {c.gpu: c.family for c in comp}
    families = sorted({c.family for c in comp})
    gpus = sorted(family_of)
    engines = sorted({c.engine for c in comp})

    def n_rows(gpu: str | None, engine: str | None) -> int:
        return sum(1 for c in comp if gpu in (None, c.gpu, c.family) and engine in (None, c.engine))

    entries: list[dict[str, Any]] = [{"gpu": None, "engine": None, "rows": len(comp), **_factor_dict(f.global_log)}]
    for e in engines:
        entries.append({"gpu": None, "engine": e, "rows": n_rows(None, e), **_factor_dict(f.log_factors("", None, e))})
    for fam in families:
        entries.append({"gpu": fam, "engine": None, "rows": n_rows(fam, None),
                        **_factor_dict(f.log_factors(fam, None, None))})
        for e in engines:
            entries.append({"gpu": fam, "engine": e, "rows": n_rows(fam, e), **_factor_dict(f.log_factors(fam, None, e))})
    for g in gpus:
        entries.append({"gpu": g, "engine": None, "rows": n_rows(g, None),
                        **_factor_dict(f.log_factors(family_of[g], g, None))})
        for e in engines:
            entries.append({"gpu": g, "engine": e, "rows": n_rows(g, e),
                            **_factor_dict(f.log_factors(family_of[g], g, e))})
    return entries


def load_profile(path: Path) -> dict[str, Any]:
    """The profile document at ``path``, checked for its version and factor entries."""
    text = read_text(path, "file", InputError, "--calibration: ")
    doc = parse_yaml(text, path)
    if not isinstance(doc, dict) or doc.get("fleetplan_calibration") != PROFILE_VERSION:
        raise InputError(f"{path}: not a fleetplan calibration profile (expected 'fleetplan_calibration: {PROFILE_VERSION}')")
    factors = doc.get("factors")
    if not isinstance(factors, list) or not factors:
        raise InputError(f"{path}: factors: must be a non-empty list")
    for i, f in enumerate(factors):
        if not isinstance(f, dict):
            raise InputError(f"{path}: factors[{i}]: must be a mapping")
        for key in ("bandwidth_scale", "compute_scale", "overhead_scale", "comm_scale"):
            try:
                F.CALIBRATION_SCALE.check(f.get(key))
            except ValueError as exc:
                raise InputError(f"{path}: factors[{i}].{key}: {exc}") from None
        for key in ("gpu", "engine"):
            if f.get(key) is not None and not isinstance(f.get(key), str):
                raise InputError(f"{path}: factors[{i}].{key}: must be a string or null")
    return doc


def apply_profile(preset: Preset, path: Path, preset_hint: str = "use --preset {fitted}") -> Preset:
    """``preset`` adjusted by the calibration profile at ``path``.

    The profile must have been fitted against the same preset; its factor entries become the
    preset's :class:`CalibrationFactors` and ``calibration`` names the profile file. A profile
    fitted for another preset is refused with ``preset_hint`` (``{fitted}`` is replaced by the
    profile's preset): how the caller's user chooses the preset.
    """
    doc = load_profile(path)
    fitted = doc.get("preset")
    if fitted != preset.name:
        hint = preset_hint.format(fitted=fitted, used=preset.name)
        raise InputError(f"{path}: profile was fitted for preset {fitted!r}, not {preset.name!r} ({hint})")
    factors = tuple(
        CalibrationFactors(
            gpu=f.get("gpu"), engine=normalize_engine(f.get("engine")),
            bandwidth_scale=float(f["bandwidth_scale"]), compute_scale=float(f["compute_scale"]),
            overhead_scale=float(f["overhead_scale"]), comm_scale=float(f["comm_scale"]),
        )
        for f in doc["factors"]
    )
    return dataclasses.replace(preset, factors=factors, calibration=path.name)

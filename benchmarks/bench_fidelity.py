"""Fidelity benchmark: seed vs default vs calibrated on measured TPOT and TTFT, by configuration group.

Usage: python benchmarks/bench_fidelity.py [MEASUREMENTS.csv ...] [--folds N] [--nested SPLITS]

For each measurement file (default: ``../shared/reference/measurements/silicon-train.csv`` and
the public measurements in ``benchmarks/data/``) it predicts every row the planner would run with
the ``seed`` and ``default`` presets, and with the default preset calibrated by a profile fitted
on the other configuration groups only (leave-groups-out: each held-out group, a (model, GPU,
engine, TP, precision) batch sweep, is predicted by a profile that never saw it, as a user
predicting a configuration they have not measured). It prints TPOT and TTFT error (rows, share
within 1.25x / 1.5x / 2x, MAPE, median measured/predicted) overall and by engine, TP, model kind
(dense / MoE) and GPU, then the "calibrate on half of the groups, predict the other half" figure
(both halves in turn) against the uncalibrated preset on the same rows. That figure is in sample
for the physics, which was fitted on every group; ``--nested SPLITS`` measures calibration where
the physics has not seen the groups either: physics fitted on half of the groups, calibration on
a quarter, prediction of the last quarter.

The default preset's physical parameters were fitted on silicon-train.csv and inferencemax-train.csv
(``benchmarks/fit_physics.py``); their own leave-groups-out error is printed by
``python benchmarks/fit_physics.py --cv``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from fleetplan.catalogs import load_catalog
from fleetplan.catalogs.loader import Catalog
from fleetplan.models.calibration import calibrated_unless_worse, fitted_preset
from fleetplan.models.measurements import Measurement, parse_measurements
from fleetplan.models.presets import Preset, get_preset, normalize_engine
from fleetplan.models.roofline import model_kind
from fleetplan.models.validation import error_stats, predict, skip_reason

HERE = Path(__file__).resolve().parent
DEFAULT_FILES = (HERE.parent.parent / "shared" / "reference" / "measurements" / "silicon-train.csv",
                 HERE / "data" / "public-measurements.csv")
BY: tuple[str, ...] = ("engine", "tp", "kind", "gpu")
Pred = tuple[float, float]  # (TPOT ms, TTFT ms)


def key(row: Measurement, by: str, catalog: Catalog) -> str:
    """The value of ``by`` for ``row``: normalised engine, TP, dense/moe, GPU id."""
    if by == "engine":
        return normalize_engine(row.engine) or ""
    if by == "kind":
        return model_kind(catalog.models[row.model])
    return str(getattr(row, by))


def plain(rows: list[Measurement], catalog: Catalog, preset: Preset) -> list[Pred]:
    """Predictions of ``preset`` as it is."""
    out = []
    for r in rows:
        p = predict(r, catalog, preset)
        out.append((p.predicted_tpot_ms, p.predicted_ttft_ms))
    return out


def folds_of(rows: list[Measurement], folds: int) -> list[int]:
    """Fold of each row: configuration groups in sorted order, dealt round-robin to ``folds``."""
    groups = sorted({r.configuration for r in rows}, key=repr)
    fold = {g: i % folds for i, g in enumerate(groups)}
    return [fold[r.configuration] for r in rows]


def held_out(rows: list[Measurement], catalog: Catalog, base: Preset, fold: list[int],
             as_calibrate: bool = False) -> list[Pred | None]:
    """Each row predicted by a profile fitted on the rows of every other fold (None if none);
    ``as_calibrate``: the profile ``calibrate`` would write, or none where it refuses."""
    out: list[Pred | None] = [None] * len(rows)
    for k in sorted(set(fold)):
        train = [r for r, f in zip(rows, fold, strict=True) if f != k]
        if len(train) < 3:
            continue
        preset = (calibrated_unless_worse if as_calibrate else fitted_preset)(base, train, catalog)
        for i, (r, f) in enumerate(zip(rows, fold, strict=True)):
            if f == k:
                p = predict(r, catalog, preset)
                out[i] = (p.predicted_tpot_ms, p.predicted_ttft_ms)
    return out


def line(label: str, s: dict[str, Any]) -> str:
    """One Markdown table row of error statistics."""
    if not s.get("rows"):
        return f"| {label} | 0 | | | | | |"
    return (f"| {label} | {s['rows']} | {s['within_1.25x']:.0%} | {s['within_1.5x']:.0%} | {s['within_2x']:.0%} | "
            f"{s['mape']:.1%} | {s['median_ratio']:.2f} |")


def stats(rows: list[Measurement], preds: list[Pred | None], which: int, keep: Any = None) -> dict[str, Any]:
    """Error statistics of TPOT (``which`` 0) or TTFT (1) over rows with a prediction (and a
    measured TTFT) for which ``keep(row)`` holds."""
    pairs = []
    for r, p in zip(rows, preds, strict=True):
        measured = r.measured_tpot_ms if which == 0 else r.measured_ttft_ms
        if p is not None and measured and (keep is None or keep(r)):
            pairs.append((measured, p[which]))
    return error_stats([m for m, _ in pairs], [p for _, p in pairs])


def table(title: str, rows: list[Measurement], results: dict[str, list[Pred | None]], catalog: Catalog) -> None:
    """TPOT and TTFT tables: every model overall, then by each column of :data:`BY`."""
    for which, name in ((0, "TPOT"), (1, "TTFT")):
        print(f"\n{title}: {name}\n")
        print("| model | rows | within 1.25x | within 1.5x | within 2x | MAPE | median measured/predicted |")
        print("|---|---|---|---|---|---|---|")
        for label, preds in results.items():
            print(line(label, stats(rows, preds, which)))
        for by in BY:
            for value in sorted({key(r, by, catalog) for r in rows}, key=lambda v: (len(v), v)):
                for label, preds in results.items():
                    print(line(f"{by} {value}, {label}", stats(rows, preds, which, lambda r: key(r, by, catalog) == value)))


def halves(rows: list[Measurement], catalog: Catalog, base: Preset, default: list[Pred]) -> None:
    """Calibrate on half of the configuration groups, predict the other half (both ways)."""
    fold = folds_of(rows, 2)
    cal = held_out(rows, catalog, base, fold, as_calibrate=True)
    print("\ncalibrated on half of the configuration groups, predicting the other half (both halves in turn; "
          "the profile `calibrate` writes, none where it refuses):\n")
    print("| rows | model | rows | within 1.25x | within 1.5x | within 2x | MAPE | median measured/predicted |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in ("dense", "moe"):
        keep = (lambda r, k=kind: model_kind(catalog.models[r.model]) == k)
        for label, preds in (("uncalibrated", list(default)), ("calibrated", cal)):
            held = [p if c is not None else None for p, c in zip(preds, cal, strict=True)]
            print(f"| {kind} TPOT " + line(label, stats(rows, held, 0, keep)))


def _mape_by_kind(rows: list[Measurement], preds: list[float], catalog: Catalog, kind: str) -> float:
    """TPOT MAPE of the rows of model kind ``kind`` (dense / moe)."""
    pairs = [(r.measured_tpot_ms, p) for r, p in zip(rows, preds, strict=True)
             if model_kind(catalog.models[r.model]) == kind]
    return float(error_stats([m for m, _ in pairs], [p for _, p in pairs])["mape"])


def _nested_split(rows: list[Measurement], catalog: Catalog, physics: list[Any],
                  user: list[Any]) -> dict[str, list[Any]]:
    """Physics fitted on the groups ``physics``; the groups ``user`` halved: calibrated on one half,
    the other half predicted (both ways). Returns the predicted rows and three predictions of each."""
    from fit_physics import current, fit, preset_of

    base = preset_of(fit([r for r in rows if r.configuration in set(physics)], catalog, current(), 12))
    out: dict[str, list[Any]] = {"rows": [], "uncalibrated": [], "calibrated": [], "forced": []}
    for mine, theirs in ((user[::2], user[1::2]), (user[1::2], user[::2])):
        train = [r for r in rows if r.configuration in set(mine)]
        test = [r for r in rows if r.configuration in set(theirs)]
        for label, preset in (("uncalibrated", base), ("calibrated", calibrated_unless_worse(base, train, catalog)),
                              ("forced", fitted_preset(base, train, catalog))):
            out[label] += [predict(r, catalog, preset).predicted_tpot_ms for r in test]
        out["rows"] += test
    return out


def nested(rows: list[Measurement], catalog: Catalog, splits: int) -> None:
    """A user's calibration on configurations no fit has seen: for each of ``splits`` random
    halvings of the configuration groups (seeds 0, 1, ...), the physics is fitted on one half (as
    ``fit_physics.py`` does), and the other half is split again: calibrated on one quarter, the
    last quarter predicted (then the other way round, then the halves swapped)."""
    import numpy as np

    groups = sorted({r.configuration for r in rows}, key=repr)
    acc: dict[str, list[Any]] = {"rows": [], "uncalibrated": [], "calibrated": [], "forced": []}
    for seed in range(splits):
        perm = [groups[i] for i in np.random.default_rng(seed).permutation(len(groups))]
        for physics, user in ((perm[::2], perm[1::2]), (perm[1::2], perm[::2])):
            for k, v in _nested_split(rows, catalog, physics, user).items():
                acc[k] += v
    print(f"\nphysics fitted on half of the configuration groups, calibrated on a quarter, predicting the last "
          f"quarter ({splits} random halvings, every quarter predicted once per halving):\n")
    print("| TPOT MAPE | uncalibrated | calibrated (the profile `calibrate` writes, none where it refuses) | forced |")
    print("|---|---|---|---|")
    for kind in ("dense", "moe"):
        cells = [f"{_mape_by_kind(acc['rows'], acc[k], catalog, kind):.1%}"
                 for k in ("uncalibrated", "calibrated", "forced")]
        print(f"| {kind} | " + " | ".join(cells) + " |")


def run(path: Path, catalog: Catalog, folds: int, splits: int = 0) -> None:
    """Every table for one measurement file."""
    all_rows = parse_measurements(path.read_text(encoding="utf-8"), path.name)
    t0 = time.perf_counter()
    base = get_preset("default")
    rows = [r for r in all_rows if skip_reason(r, catalog, base) is None]
    seed_ok = [skip_reason(r, catalog, get_preset("seed")) is None for r in rows]
    seed = [p if ok else None for p, ok in zip(plain(rows, catalog, get_preset("seed")), seed_ok, strict=True)]
    default = plain(rows, catalog, base)
    n_groups = len({r.configuration for r in rows})
    cv = held_out(rows, catalog, base, folds_of(rows, min(folds, n_groups)))
    results: dict[str, list[Pred | None]] = {"seed": seed, "default": list(default), "calibrated (held out)": cv}
    print(f"## {path.name}: {len(rows)} rows in {n_groups} configuration groups the planner would run "
          f"({len(all_rows) - len(rows)} skipped); calibration cross-validated over {min(folds, n_groups)} "
          f"folds of whole groups")
    table(path.name, rows, results, catalog)
    if n_groups >= 4:
        halves(rows, catalog, base, default)
    if splits and n_groups >= 30:
        nested(rows, catalog, splits)
    print(f"\n({time.perf_counter() - t0:.1f} s)\n")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("files", nargs="*", default=[str(f) for f in DEFAULT_FILES])
    ap.add_argument("--folds", type=int, default=44, help="folds of whole configuration groups (default 44)")
    ap.add_argument("--nested", type=int, default=0, metavar="SPLITS",
                    help="also fit the physics on half of the groups and calibrate on a quarter, SPLITS times")
    args = ap.parse_args(argv)
    catalog = load_catalog()
    for f in args.files:
        run(Path(f), catalog, args.folds, args.nested)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

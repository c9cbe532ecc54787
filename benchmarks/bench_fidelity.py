"""Fidelity benchmark: seed vs default vs calibrated on measured TPOT and TTFT, by configuration group.

Usage: python benchmarks/bench_fidelity.py [MEASUREMENTS.csv ...] [--folds N] [--halves SPLITS]
                                           [--unseen engine,gpu,half] [--splits N] [--no-tables]

For each measurement file (default: ``silicon-train.csv`` and ``inferencemax-train.csv`` in
``../shared/reference/measurements/`` and the public measurements in ``benchmarks/data/``) it
predicts every row the planner would run with the ``seed`` and ``default`` presets, and with
the default preset calibrated by the profile ``calibrate`` writes on the other configuration
groups only (none where it refuses; leave-groups-out: each held-out group, a (model, GPU,
engine, TP, precision) batch sweep, is predicted by a profile that never saw it, as a user
predicting a configuration they have not measured). It prints TPOT and TTFT error (rows, share
within 1.25x / 1.5x / 2x, MAPE, median measured/predicted) overall and by engine, TP, model
kind (dense / MoE) and GPU.

The halves experiment (``--halves SPLITS``, default 5): the configuration groups of a file are
halved at random SPLITS times (seeds 0, 1, ...); ``calibrate`` runs on one half and the other
half is predicted, then the other way round. It prints, over those 2 x SPLITS predictions, the
median and the worst (the split where calibration did most harm) of TPOT MAPE (dense, MoE, all
rows) and TTFT within 1.5x and MAPE, calibrated against uncalibrated on the same rows, and how
often ``calibrate`` refused. It runs on each file, on the files together, and across files:
calibrated on one file, every row of another predicted.

That figure is in sample for the physics, which was fitted on these groups. The calibration
figure of record, ``--unseen engine,gpu,half --splits N``, measures calibration where the
physics has not seen the configurations either, on the rows it was fitted to (silicon-train.csv
and inferencemax-train.csv): for each engine (each GPU) in turn, the physics is fitted without
its rows (the fast path of ``fit_physics.py --cv``, an unmeasured engine or GPU family getting
the figures an unknown one gets), and that engine's (GPU's) configuration groups, a user's own
measurements, are halved N times at random: calibrated on one half, the other half predicted,
then the other way round; ``half``: the physics fitted on a random half of all the groups (N
halvings, both ways) and the other half's groups halved again for the user. It prints TPOT MAPE
(dense, MoE, all) and TTFT within 1.5x over every predicted row, uncalibrated against
calibrated (the profile ``calibrate`` writes; none where it refuses), and on how many of the
predictions calibration made dense or all-row TPOT MAPE worse.

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
REFERENCE = HERE.parent.parent / "shared" / "reference" / "measurements"
DEFAULT_FILES = (REFERENCE / "silicon-train.csv", REFERENCE / "inferencemax-train.csv",
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
             as_calibrate: bool = True) -> list[Pred | None]:
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


def split_figures(test: list[Measurement], catalog: Catalog, base: Preset, calibrated: Preset) -> dict[str, Pred]:
    """(uncalibrated, calibrated) figures of one predicted half: TPOT MAPE of dense, MoE and all
    rows, TTFT within 1.5x and TTFT MAPE (over rows with a measured TTFT)."""
    plain_p, cal_p = plain(test, catalog, base), plain(test, catalog, calibrated)
    out: dict[str, Pred] = {}
    kinds = (("dense TPOT MAPE", "dense"), ("MoE TPOT MAPE", "moe"), ("all TPOT MAPE", None))
    for label, kind in kinds:
        keep = None if kind is None else (lambda r, k=kind: model_kind(catalog.models[r.model]) == k)
        a, b = stats(test, list(plain_p), 0, keep), stats(test, list(cal_p), 0, keep)
        if a.get("rows"):
            out[label] = (float(a["mape"]), float(b["mape"]))
    a, b = stats(test, list(plain_p), 1), stats(test, list(cal_p), 1)
    if a.get("rows"):
        out["TTFT within 1.5x"] = (float(a["within_1.5x"]), float(b["within_1.5x"]))
        out["TTFT MAPE"] = (float(a["mape"]), float(b["mape"]))
    return out


def halving(rows: list[Measurement], seed: int) -> tuple[list[Measurement], list[Measurement]]:
    """The rows of a random half of the configuration groups (seeded) and of the other half."""
    import numpy as np

    groups = sorted({r.configuration for r in rows}, key=repr)
    perm = [groups[i] for i in np.random.default_rng(seed).permutation(len(groups))]
    mine = set(perm[: len(perm) // 2])
    return [r for r in rows if r.configuration in mine], [r for r in rows if r.configuration not in mine]


def summarise_splits(title: str, results: list[tuple[dict[str, Pred], bool]]) -> None:
    """Median and worst split of each figure, calibrated against uncalibrated on the same rows."""
    import numpy as np

    refused = sum(1 for _, r in results if r)
    print(f"\n{title}: {len(results)} predictions, calibrate refused {refused}\n")
    print("| figure | uncalibrated, median | calibrated, median | worst split: uncalibrated -> calibrated |")
    print("|---|---|---|---|")
    labels = [k for k in ("dense TPOT MAPE", "MoE TPOT MAPE", "all TPOT MAPE", "TTFT within 1.5x", "TTFT MAPE")
              if any(k in f for f, _ in results)]
    for label in labels:
        pairs = [f[label] for f, _ in results if label in f]
        harm = [(c - u) * (-1 if "within" in label else 1) for u, c in pairs]
        worst = pairs[int(np.argmax(harm))]
        print(f"| {label} | {np.median([u for u, _ in pairs]):.1%} | {np.median([c for _, c in pairs]):.1%} | "
              f"{worst[0]:.1%} -> {worst[1]:.1%} |")


def halves(title: str, rows: list[Measurement], catalog: Catalog, base: Preset, splits: int) -> None:
    """Calibrate on a random half of the groups, predict the other half; both ways, ``splits`` times."""
    results = []
    for seed in range(splits):
        a, b = halving(rows, seed)
        for train, test in ((a, b), (b, a)):
            calibrated = calibrated_unless_worse(base, train, catalog)
            results.append((split_figures(test, catalog, base, calibrated), calibrated is base))
    summarise_splits(f"{title}, calibrated on a random half of the configuration groups, the other half predicted "
                     f"({splits} halvings, both ways)", results)


def across(named: list[tuple[str, list[Measurement]]], catalog: Catalog, base: Preset) -> None:
    """Calibrated on every row of one file, every row of another predicted."""
    for name_a, rows_a in named:
        for name_b, rows_b in named:
            if name_a == name_b:
                continue
            calibrated = calibrated_unless_worse(base, rows_a, catalog)
            summarise_splits(f"calibrated on {name_a}, {name_b} predicted",
                             [(split_figures(rows_b, catalog, base, calibrated), calibrated is base)])


def _physics_without(rows: list[Measurement], out: set[int], catalog: Catalog,
                     full: tuple[Any, Any]) -> Preset:
    """The default preset with its physics fitted without the rows whose indices are in ``out``:
    ``fit_physics.py --cv``'s fast path from the shipped fit (its ``full`` residuals and Jacobian
    over ``rows``), an engine, GPU family or release no training row measures given the figures
    an unknown one gets."""
    import numpy as np
    from fit_physics import current, fold_fit, preset_of, residual_rows, unmeasured_engines, \
        unmeasured_families, unmeasured_releases

    train = [r for i, r in enumerate(rows) if i not in out]
    keep = np.array([i not in out for i in range(len(rows))])
    x = fold_fit(current(), full[0], full[1], train, keep[residual_rows(rows)], catalog)
    return preset_of(unmeasured_families(unmeasured_engines(unmeasured_releases(x, train), train), train, catalog))


def _user_halves(groups: list[Any], splits: int) -> list[tuple[set[Any], set[Any]]]:
    """(calibrated on, predicted) group sets: ``groups`` halved at random ``splits`` times (seeds
    0, 1, ...), both ways."""
    import numpy as np

    out = []
    for seed in range(splits):
        perm = [groups[i] for i in np.random.default_rng(seed).permutation(len(groups))]
        a, b = set(perm[: len(perm) // 2]), set(perm[len(perm) // 2:])
        out += [(a, b), (b, a)]
    return out


def _slices(rows: list[Measurement], catalog: Catalog, what: str, splits: int) -> list[tuple[str, set[int], list[Any]]]:
    """(label, row indices the physics leaves out, the user's groups among them) of slice ``what``:
    each engine, each GPU, or (``half``) each half of ``splits`` random halvings of the groups."""
    import numpy as np

    if what in ("engine", "gpu"):
        keys = [(normalize_engine(r.engine) or "") if what == "engine" else r.gpu for r in rows]
        out = []
        for k in sorted(set(keys)):
            idx = {i for i, v in enumerate(keys) if v == k}
            out.append((f"{what} {k}", idx, sorted({rows[i].configuration for i in idx}, key=repr)))
        return out
    groups = sorted({r.configuration for r in rows}, key=repr)
    out = []
    for seed in range(splits):
        perm = [groups[i] for i in np.random.default_rng(seed).permutation(len(groups))]
        for n, user in enumerate((perm[::2], perm[1::2])):
            mine = set(user)
            out.append((f"half {seed}.{n}", {i for i, r in enumerate(rows) if r.configuration in mine}, user))
    return out


def unseen(rows: list[Measurement], catalog: Catalog, what: str, splits: int) -> dict[str, Any]:
    """Calibration on configurations the physics never saw (slice ``what``, see the module's
    text): every predicted row's (uncalibrated, calibrated) predictions and, per prediction,
    whether ``calibrate`` refused and its figures."""
    from fit_physics import current, jacobian

    full = jacobian(current(), rows, catalog)
    acc: dict[str, Any] = {"rows": [], "uncalibrated": [], "calibrated": [], "splits": []}
    for label, out, user in _slices(rows, catalog, what, splits):
        if len(user) < 4:
            print(f"  unseen {label}: {len(user)} groups, too few to halve", file=sys.stderr, flush=True)
            continue
        base = _physics_without(rows, out, catalog, full)
        for mine, theirs in _user_halves(user, splits):
            train = [r for r in rows if r.configuration in mine]
            test = [r for r in rows if r.configuration in theirs]
            calibrated = calibrated_unless_worse(base, train, catalog)
            acc["splits"].append((label, split_figures(test, catalog, base, calibrated), calibrated is base))
            acc["rows"] += test
            acc["uncalibrated"] += plain(test, catalog, base)
            acc["calibrated"] += plain(test, catalog, calibrated)
        print(f"  unseen {label}: {len(user)} groups", file=sys.stderr, flush=True)
    return acc


def print_unseen(what: str, acc: dict[str, Any], catalog: Catalog, splits: int) -> None:
    """The figures of :func:`unseen` for slice ``what``."""
    rows = acc["rows"]
    title = {"engine": "each engine in turn", "gpu": "each GPU in turn", "half": "a random half of the groups"}[what]
    print(f"\nphysics fitted without {title}; its groups halved {splits} times, calibrated on one half, the other "
          f"predicted (both ways): {len(acc['splits'])} predictions, {len(rows)} rows, calibrate refused "
          f"{sum(1 for *_, r in acc['splits'] if r)}\n")
    print("| figure | uncalibrated | calibrated | predictions made worse |")
    print("|---|---|---|---|")
    for label, which, kind in (("dense TPOT MAPE", 0, "dense"), ("MoE TPOT MAPE", 0, "moe"), ("all TPOT MAPE", 0, None),
                               ("TTFT within 1.5x", 1, None)):
        keep = None if kind is None else (lambda r, k=kind: model_kind(catalog.models[r.model]) == k)
        a = stats(rows, list(acc["uncalibrated"]), which, keep)
        b = stats(rows, list(acc["calibrated"]), which, keep)
        if not a.get("rows"):
            continue
        field = "mape" if which == 0 else "within_1.5x"
        sign = -1 if which == 1 else 1
        split_label = label if which == 0 else "TTFT within 1.5x"
        pairs = [f[split_label] for _, f, _ in acc["splits"] if split_label in f]
        worse = sum(1 for u, c in pairs if sign * (c - u) > 1e-9)
        print(f"| {label} | {a[field]:.1%} | {b[field]:.1%} | {worse} of {len(pairs)} |")


def usable(path: Path, catalog: Catalog, base: Preset) -> list[Measurement]:
    """The rows of a measurement file the planner would run."""
    all_rows = parse_measurements(path.read_text(encoding="utf-8"), path.name)
    return [r for r in all_rows if skip_reason(r, catalog, base) is None]


def run(path: Path, catalog: Catalog, folds: int, halvings: int = 5, tables: bool = True) -> None:
    """Every table for one measurement file."""
    all_rows = parse_measurements(path.read_text(encoding="utf-8"), path.name)
    t0 = time.perf_counter()
    base = get_preset("default")
    rows = usable(path, catalog, base)
    n_groups = len({r.configuration for r in rows})
    print(f"## {path.name}: {len(rows)} rows in {n_groups} configuration groups the planner would run "
          f"({len(all_rows) - len(rows)} skipped)")
    if tables:
        seed_ok = [skip_reason(r, catalog, get_preset("seed")) is None for r in rows]
        seed = [p if ok else None for p, ok in zip(plain(rows, catalog, get_preset("seed")), seed_ok, strict=True)]
        default = plain(rows, catalog, base)
        cv = held_out(rows, catalog, base, folds_of(rows, min(folds, n_groups)))
        results: dict[str, list[Pred | None]] = {"seed": seed, "default": list(default), "calibrated (held out)": cv}
        print(f"\ncalibration cross-validated over {min(folds, n_groups)} folds of whole groups")
        table(path.name, rows, results, catalog)
    if halvings and n_groups >= 4:
        halves(path.name, rows, catalog, base, halvings)
    print(f"\n({time.perf_counter() - t0:.1f} s)\n")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("files", nargs="*", default=[str(f) for f in DEFAULT_FILES])
    ap.add_argument("--folds", type=int, default=44, help="folds of whole configuration groups (default 44)")
    ap.add_argument("--halves", type=int, default=5, metavar="SPLITS",
                    help="random halvings of the groups for the halves experiment (default 5; 0: none)")
    ap.add_argument("--unseen", default="", metavar="SLICES",
                    help="comma list of engine, gpu, half: physics fitted without each slice, calibration on half "
                         "of its groups, the other half predicted (the calibration figure of record); only this")
    ap.add_argument("--splits", type=int, default=2, help="random halvings per slice for --unseen (default 2)")
    ap.add_argument("--no-tables", action="store_true", help="only the halves and cross-file experiments")
    args = ap.parse_args(argv)
    catalog = load_catalog()
    if args.unseen:
        return run_unseen(args.unseen, args.splits, catalog)
    for f in args.files:
        run(Path(f), catalog, args.folds, args.halves, not args.no_tables)
    base = get_preset("default")
    named = [(Path(f).name, usable(Path(f), catalog, base)) for f in args.files]
    if len(named) > 1 and args.halves:
        together = [r for _, rows in named for r in rows]
        print(f"## {' + '.join(n for n, _ in named)} together")
        halves("the files together", together, catalog, base, args.halves)
        print("\n## across files")
        across(named, catalog, base)
    return 0


def run_unseen(slices: str, splits: int, catalog: Catalog) -> int:
    """``--unseen``: each slice's table, on the rows the physics is fitted to."""
    from fit_physics import INFERENCEMAX, SILICON, load

    whats = [w.strip() for w in slices.split(",") if w.strip()]
    bad = [w for w in whats if w not in ("engine", "gpu", "half")]
    if bad or not whats:
        print(f"bench_fidelity: error: --unseen takes a comma list of engine, gpu, half, not {slices!r}", file=sys.stderr)
        return 2
    if splits < 1:
        print(f"bench_fidelity: error: --splits must be at least 1, not {splits}", file=sys.stderr)
        return 2
    rows = load([SILICON, INFERENCEMAX], catalog)
    print(f"## calibration on configurations the physics never saw: {len(rows)} rows in "
          f"{len({r.configuration for r in rows})} configuration groups")
    for what in whats:
        t0 = time.perf_counter()
        print_unseen(what, unseen(rows, catalog, what, splits), catalog, splits)
        print(f"\n({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

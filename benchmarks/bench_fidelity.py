"""Fidelity benchmark: seed vs default vs calibrated (cross-validated) on measured TPOT.

Usage: python benchmarks/bench_fidelity.py [MEASUREMENTS.csv] [--by gpu|tp|engine|model]

Predicts every row with the ``seed`` and ``default`` presets, then fits a calibration profile
with leave-one-configuration-out cross-validation (each held-out configuration is predicted
by a fit that never saw it) and prints, for each: rows, share within 1.25x / 1.5x / 2x of
measured, mean absolute percentage error and the median measured/predicted ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from fleetplan.catalogs import load_catalog
from fleetplan.models import calibration as cal
from fleetplan.models.measurements import parse_measurements
from fleetplan.models.presets import get_preset
from fleetplan.models.validation import GROUPS, predict_all, summarize

DEFAULT_FILE = Path(__file__).resolve().parent / "data" / "public-measurements.csv"


def row(label: str, s: dict) -> str:
    return (f"| {label} | {s['rows']} | {s['within_1.25x']:.0%} | {s['within_1.5x']:.0%} | {s['within_2x']:.0%} | "
            f"{s['mape']:.1%} | {s['median_ratio']:.2f} |")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", default=str(DEFAULT_FILE))
    ap.add_argument("--by", choices=GROUPS, help="also break the table down by this column")
    args = ap.parse_args(argv)
    path = Path(args.file)
    catalog = load_catalog()
    rows = parse_measurements(path.read_text(encoding="utf-8"), path.name)
    t0 = time.perf_counter()
    results = {}
    for name in ("seed", "default"):
        preds, skipped = predict_all(rows, catalog, get_preset(name))
        used = [p.row for p in preds]
        results[name] = summarize(used, [p.predicted_tpot_ms for p in preds])
    preset = get_preset("default")
    comp = [cal.components(r, catalog, preset) for r in used]
    cv, method, folds = cal.cross_validated_predictions(comp, [r.configuration for r in used])
    results["default, calibrated (cross-validated)"] = summarize(used, list(cv * 1e3))
    elapsed = time.perf_counter() - t0
    print(f"{path.name}: {len(used)} rows ({len(skipped)} skipped); calibration cross-validated by {method}, {folds} folds; {elapsed:.2f} s")
    print()
    print("| model | rows | within 1.25x | within 1.5x | within 2x | MAPE | median measured/predicted |")
    print("|---|---|---|---|---|---|---|")
    for name, s in results.items():
        print(row(f"`{name}`" if "," not in name else name, s["overall"]))
    if args.by:
        for name, s in results.items():
            print()
            print(f"by {args.by}, {name}:")
            for group, gs in s[f"by_{args.by}"].items():
                print(row(group, gs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

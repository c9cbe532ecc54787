"""`fleetplan validate` and `fleetplan calibrate`: the model against measured benchmarks.

``validate FILE`` predicts every row of a measurement CSV (format in
:mod:`fleetplan.models.measurements`) and prints the error statistics overall and by GPU, TP,
engine and model. ``calibrate FILE --out PROFILE.yaml`` fits the calibration factors of
:mod:`fleetplan.models.calibration`, reports their cross-validated error and writes the
profile that ``estimate``, ``plan`` and ``validate`` accept with ``--calibration``.

Owns the commands' arguments and output only; fitting and predicting live in :mod:`fleetplan.models`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

MIN_CALIBRATION_ROWS = 3


def _read_measurements(path_text: str) -> tuple[Path, list[Any]]:
    from fleetplan.catalogs.loader import InputError, read_text
    from fleetplan.models.measurements import MeasurementError, parse_measurements

    path = Path(path_text)
    text = read_text(path, "measurement file")
    try:
        rows = parse_measurements(text, str(path))
    except MeasurementError as exc:
        raise InputError(str(exc)) from None
    return path, rows


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(float(x), digits)


def _stats_json(stats: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in stats.items():
        out[k] = _stats_json(v) if isinstance(v, dict) else (v if isinstance(v, int) else _r(v))
    return out


def _stats_line(label: str, s: dict[str, Any]) -> str:
    if not s.get("rows"):
        return f"  {label:<28} rows 0"
    return (
        f"  {label:<28} rows {s['rows']:>4}  median meas/pred {s['median_ratio']:6.3f}  "
        f"within 1.25x {s['within_1.25x']:6.1%}  1.5x {s['within_1.5x']:6.1%}  2x {s['within_2x']:6.1%}  "
        f"MAPE {s['mape']:6.1%}"
    )


def _print_summary(title: str, summary: dict[str, Any]) -> None:
    print(title)
    print(_stats_line("overall", summary["overall"]))
    for key, value in summary.items():
        if not key.startswith("by_"):
            continue
        print(f" {key.replace('_', ' ')}:")
        for group, s in value.items():
            print(_stats_line(group, s))


def _whole_or_float(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def typed_cells(m: Any) -> dict[str, Any]:
    """A measurement row's cells as read, with the numeric columns as JSON numbers (whole
    numbers as integers, an empty optional cell as null); other columns stay text."""
    d: dict[str, Any] = dict(m.raw)
    numbers = {"tp": m.tp, "batch": m.batch, "ep": m.ep, "input_tokens": _whole_or_float(m.input_tokens),
               "output_tokens": _whole_or_float(m.output_tokens), "measured_tpot_ms": m.measured_tpot_ms,
               "measured_ttft_ms": m.measured_ttft_ms}
    for key, value in numbers.items():
        if key in d:
            d[key] = value
    return d


def cmd_validate(args: argparse.Namespace) -> int:
    """Predict every measured row and print error statistics."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.io import dumps, resolve_preset
    from fleetplan.models.validation import predict_all, summarize, ttft_stats

    catalog = load_catalog(args.catalog)
    preset = resolve_preset(args.preset, args.calibration)
    path, rows = _read_measurements(args.file)
    preds, skipped = predict_all(rows, catalog, preset)
    summary = summarize([p.row for p in preds], [p.predicted_tpot_ms for p in preds])
    summary["ttft"] = ttft_stats(preds)
    if args.json:
        out_rows = []
        for p in preds:
            d: dict[str, Any] = {"line": p.row.line, **typed_cells(p.row)}
            d["predicted_tpot_ms"] = _r(p.predicted_tpot_ms)
            d["predicted_ttft_ms"] = _r(p.predicted_ttft_ms)
            d["ratio_measured_to_predicted"] = _r(p.ratio)
            d["bound"] = p.estimate.bound
            d["fits"] = p.estimate.fits
            out_rows.append(d)
        doc = {
            "file": path.name,
            "preset": preset.name,
            "calibration": preset.calibration,
            "rows": out_rows,
            "skipped": [{"line": r.line, "model": r.model, "gpu": r.gpu, "reason": why} for r, why in skipped],
            "summary": _stats_json(summary),
        }
        sys.stdout.write(dumps(doc))
        return 0
    label = preset.name + (f" calibrated by {preset.calibration}" if preset.calibration else "")
    print(f"{path.name}: {len(preds)} rows predicted with preset {label}, {len(skipped)} skipped")
    for r, why in skipped:
        print(f"  skipped line {r.line}: {why}")
    _print_summary("time per output token (ratio = measured / predicted):", {k: v for k, v in summary.items() if k != "ttft"})
    if summary["ttft"].get("rows"):
        print("time to first token (rows that report it; queueing not modelled):")
        print(_stats_line("overall", summary["ttft"]))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Fit calibration factors, report cross-validated error, write the profile."""
    import yaml

    from fleetplan.catalogs import load_catalog
    from fleetplan.catalogs.files import check_output_file, write_atomically
    from fleetplan.catalogs.loader import InputError
    from fleetplan.io import catalog_inputs, dumps
    from fleetplan.models import calibration as cal
    from fleetplan.models.presets import get_preset
    from fleetplan.models.validation import predict_all, summarize

    out = check_output_file(args.out, "--out", [args.file, *catalog_inputs(args.catalog)])
    catalog = load_catalog(args.catalog)
    preset = get_preset(args.preset)
    path, rows = _read_measurements(args.file)
    preds, skipped = predict_all(rows, catalog, preset)
    if len(preds) < MIN_CALIBRATION_ROWS:
        raise InputError(f"{path}: calibration needs at least {MIN_CALIBRATION_ROWS} rows with a known model and GPU, got {len(preds)}")
    used = [p.row for p in preds]
    comp = [cal.components(r, catalog, preset) for r in used]
    fitted = cal.fit(comp)
    in_sample = cal.predict_with_fit(comp, fitted) * 1e3
    cv, method, folds = cal.cross_validated_predictions(comp, [r.configuration for r in used])
    cv_ms = [float(v) * 1e3 if math.isfinite(v) else None for v in cv]
    held = [i for i, v in enumerate(cv_ms) if v is not None]
    if not held:
        method, folds = "none: every row is of one configuration, so none can be held out", 0
    uncal = summarize(used, [p.predicted_tpot_ms for p in preds])
    fit_s = summarize(used, list(in_sample))
    cv_s = summarize([used[i] for i in held], [cv_ms[i] for i in held])
    profile: dict[str, Any] = {
        "fleetplan_calibration": cal.PROFILE_VERSION,
        "preset": preset.name,
        "measurements": path.name,
        "rows": len(used),
        "skipped_rows": len(skipped),
        "method": {
            "model": "step = max(weights/b, compute/c) + kv/b + prefill/c + comm*m + overhead*o",
            "loss": f"Huber (k {cal.HUBER_K}) on log(predicted/measured TPOT) / {cal.NOISE_STD}",
            "levels": "log b and log o = global + family + gpu + engine + gpu x engine; log c, log m global",
            "prior_std_global_b_c_o_m": list(cal.PRIOR_STD_GLOBAL),
            "prior_std_levels_b_o": {k: list(v) for k, v in cal.PRIOR_STD_LEVEL.items()},
        },
        "factors": cal.profile_factors(fitted, comp),
        "error": {
            "uncalibrated": _stats_json(uncal["overall"]),
            "in_sample": _stats_json(fit_s["overall"]),
            "cross_validated": {"method": method, "folds": folds, **_stats_json(cv_s["overall"])},
        },
    }
    write_atomically(out, yaml.safe_dump(profile, sort_keys=False, allow_unicode=True))
    if args.json:
        doc = {
            "profile": str(args.out),
            **{k: profile[k] for k in ("preset", "measurements", "rows", "skipped_rows", "factors")},
            "error": {
                "uncalibrated": _stats_json(uncal),
                "in_sample": _stats_json(fit_s),
                "cross_validated": {"method": method, "folds": folds, **_stats_json(cv_s)},
            },
            "cross_validated_rows": [
                {"line": r.line, "measured_tpot_ms": _r(r.measured_tpot_ms), "predicted_tpot_ms": _r(v)}
                for r, v in zip(used, cv_ms, strict=True)
            ],
        }
        sys.stdout.write(dumps(doc))
        return 0
    print(f"{path.name}: fitted preset {preset.name} on {len(used)} rows ({len(skipped)} skipped); profile written to {args.out}")
    for r, why in skipped:
        print(f"  skipped line {r.line}: {why}")
    g = profile["factors"][0]
    print(
        f"global factors: bandwidth x{g['bandwidth_scale']:.3f}, compute x{g['compute_scale']:.3f}, "
        f"overhead x{g['overhead_scale']:.3f}, communication x{g['comm_scale']:.3f}"
    )
    for f in profile["factors"][1:]:
        if f["rows"] and (f["engine"] is None or f["gpu"] is None or "-" in str(f["gpu"])):
            who = " / ".join(x for x in (f["gpu"], f["engine"]) if x)
            print(f"  {who:<28} rows {f['rows']:>4}  bandwidth x{f['bandwidth_scale']:.3f}  overhead x{f['overhead_scale']:.3f}")
    print(_stats_line("uncalibrated", uncal["overall"]))
    print(_stats_line("calibrated, in sample", fit_s["overall"]))
    print(_stats_line("calibrated, cross-validated", cv_s["overall"]))
    if held:
        print(f"  (cross-validation: {method}, {folds} folds; every held-out row predicted by a fit that never saw it)")
    else:
        print("  (no cross-validation: every row is of one configuration; measure a second one to check the fit)")
    return 0


def register(sub: Any) -> None:
    """Add the fidelity subcommands to the CLI's subparsers."""
    from fleetplan.flags import add_catalog_flag, add_preset_flags

    v = sub.add_parser("validate", help="predict measured benchmarks and print error statistics")
    v.add_argument("file", help="measurement CSV (model, gpu, precision, tp, batch, input_tokens, output_tokens, engine, measured_tpot_ms)")
    add_preset_flags(v)
    add_catalog_flag(v)
    v.add_argument("--json", action="store_true", help="print JSON: rows with predictions, skipped rows, summary")
    v.set_defaults(func=cmd_validate)

    c = sub.add_parser("calibrate", help="fit efficiency factors and overheads to measured benchmarks")
    c.add_argument("file", help="measurement CSV")
    c.add_argument("--out", required=True, help="calibration profile YAML to write")
    add_preset_flags(c, calibration=False)
    add_catalog_flag(c)
    c.add_argument("--json", action="store_true", help="print JSON: factors and uncalibrated, in-sample, cross-validated error")
    c.set_defaults(func=cmd_calibrate)

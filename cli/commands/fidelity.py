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

from fleetplan.rendering.escape import terminal

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
            print(terminal(_stats_line(group, s)))


def _whole_or_float(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def typed_cells(m: Any) -> dict[str, Any]:
    """A measurement row's cells as read, with the numeric columns as JSON numbers (whole
    numbers as integers, an empty optional cell as null); other columns stay text."""
    d: dict[str, Any] = dict(m.raw)
    numbers = {"tp": m.tp, "batch": m.batch, "ep": m.ep, "input_tokens": _whole_or_float(m.input_tokens),
               "output_tokens": _whole_or_float(m.output_tokens), "measured_tpot_ms": m.measured_tpot_ms,
               "measured_ttft_ms": m.measured_ttft_ms, "measured_ttft_p99_ms": m.measured_ttft_p99_ms,
               "length_range_ratio": m.length_range_ratio}
    for key, value in numbers.items():
        if key in d:
            d[key] = value
    return d


def _validation(
    args: argparse.Namespace,
) -> tuple[Path, Any, list[Any], list[Any], list[Any], dict[str, Any]]:
    """Every measured row of ``args.file`` predicted: the file, the preset, the predictions, the
    rows skipped (with why), the model errors (measured running but not held by the model; with
    why) and the error statistics."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.commands.io import resolve_preset
    from fleetplan.models.validation import MODEL_ERROR, arrival_counts, predict_all, summarize, ttft_p99_stats, ttft_stats

    catalog = load_catalog(args.catalog)
    preset = resolve_preset(args.preset, args.calibration)
    path, rows = _read_measurements(args.file)
    preds, skipped = predict_all(rows, catalog, preset)
    errors = [(r, why.removeprefix(MODEL_ERROR)) for r, why in skipped if why.startswith(MODEL_ERROR)]
    skipped = [(r, why) for r, why in skipped if not why.startswith(MODEL_ERROR)]
    summary = summarize([p.row for p in preds], [p.predicted_tpot_ms for p in preds])
    summary["ttft"] = ttft_stats(preds)
    if any(p.row.measured_ttft_p99_ms for p in preds):
        summary["ttft_p99"] = ttft_p99_stats(preds)
    summary["arrival_patterns"] = arrival_counts(preds)
    return path, preset, preds, skipped, errors, summary


def validation_document(args: argparse.Namespace) -> dict[str, Any]:
    """``validate --json``'s document: every row with its prediction, the skipped rows and the
    statistics (the command and :func:`fleetplan.commands.api.validate` both give it)."""
    path, preset, preds, skipped, errors, summary = _validation(args)
    out_rows = []
    for p in preds:
        d: dict[str, Any] = {"line": p.row.line, **typed_cells(p.row)}
        d["predicted_tpot_ms"] = _r(p.predicted_tpot_ms)
        d["predicted_ttft_ms"] = _r(p.predicted_ttft_ms)
        if p.row.measured_ttft_p99_ms is not None:
            d["predicted_ttft_p99_ms"] = _r(p.predicted_ttft_p99_ms)
        d["arrival_pattern"] = p.arrival.pattern
        d["arrival_source"] = p.arrival.source
        d["step_time_ms"] = _r(p.decode_step_time_ms)
        d["prefill_flops_per_request"] = p.prefill_flops_per_request
        d["prefix_cache_hit_rate"] = p.prefix_cache_hit_rate
        d["draft_tokens"] = p.draft_tokens
        d["accepted_tokens_per_step"] = p.accepted_tokens_per_step
        d["running_batch"] = p.running_batch
        d["engine_known"] = p.engine_known
        d["ratio_measured_to_predicted"] = _r(p.ratio)
        d["bound"] = p.estimate.bound
        d["fits"] = p.estimate.fits
        out_rows.append(d)
    return {
        "file": path.name,
        "preset": preset.name,
        "calibration": preset.calibration,
        "rows": out_rows,
        "skipped": [{"line": r.line, "model": r.model, "gpu": r.gpu, "reason": why} for r, why in skipped],
        "model_errors": [{"line": r.line, "model": r.model, "gpu": r.gpu, "reason": why} for r, why in errors],
        "summary": {**_stats_json(summary), "model_error_rows": len(errors)},
    }


def cmd_validate(args: argparse.Namespace) -> int:
    """Predict every measured row and print error statistics."""
    from fleetplan.commands.io import dumps

    if args.json:
        sys.stdout.write(dumps(validation_document(args)))
        return 0
    path, preset, preds, skipped, errors, summary = _validation(args)
    label = preset.name + (f" calibrated by {preset.calibration}" if preset.calibration else "")
    queued = sum(1 for p in preds if p.running_batch < p.row.batch)
    print(terminal(f"{path.name}: {len(preds)} rows predicted with preset {label} ({queued} at the running batch "
                   f"that fits, the rest of their concurrency queued), {len(skipped)} skipped, {len(errors)} model "
                   "errors (measured running, but the model cannot hold their weights and one sequence)"))
    for r, why in skipped:
        print(terminal(f"  skipped line {r.line}: {why}"))
    for r, why in errors:
        print(terminal(f"  model error line {r.line}: {why}"))
    unknown = sorted({p.row.engine for p in preds if not p.engine_known})
    if unknown:
        print(terminal(f"  note: no fitted figures for engine {', '.join(unknown)}: the engines' mean prefill share "
                       "and fixed latency used"))
    _print_summary("time per output token (ratio = measured / predicted):",
                   {k: v for k, v in summary.items() if k not in ("ttft", "ttft_p99", "arrival_patterns")})
    _print_ttft(summary)
    return 0


def _print_ttft(summary: dict[str, Any]) -> None:
    """The TTFT lines of ``validate``: how the rows' clients arrived, the median's and the P99's errors."""
    counts = summary["arrival_patterns"]
    print(f"closed-loop arrivals: {counts['waves']} rows in waves (fixed lengths), {counts['steady']} steady "
          "(lengths drawn from a range)")
    if summary["ttft"].get("rows"):
        print("time to first token (rows that report it; ratio = measured / predicted):")
        print(_stats_line("overall", summary["ttft"]))
    if summary.get("ttft_p99", {}).get("rows"):
        print("99th-percentile time to first token (rows that report it):")
        print(_stats_line("overall", summary["ttft_p99"]))


def _fit_rows(rows: list[Any], catalog: Any, preset: Any) -> dict[str, Any]:
    """Fit calibration factors to ``rows``, with predictions uncalibrated, in sample and
    cross-validated by configuration group; the rows the planner would not run are skipped."""
    from fleetplan.models import calibration as cal
    from fleetplan.models.validation import predict_all

    preds, skipped = predict_all(rows, catalog, preset)
    used = [p.row for p in preds]
    comp = [cal.components(r, catalog, preset) for r in used]
    fitted = cal.fit(comp) if len(used) >= MIN_CALIBRATION_ROWS else None
    cv, method, folds = cal.cross_validated_predictions(comp, [r.configuration for r in used]) if fitted else ([], "", 0)
    cv_ms = [float(v) * 1e3 if math.isfinite(v) else None for v in cv]
    held = [i for i, v in enumerate(cv_ms) if v is not None]
    if not held:
        method, folds = "none: every row is of one configuration group, so none can be held out", 0
    return {"preds": preds, "skipped": skipped, "used": used, "comp": comp, "fit": fitted, "cv_ms": cv_ms,
            "held": held, "method": method, "folds": folds}


def _calibration_errors(r: dict[str, Any]) -> dict[str, Any]:
    """Summaries uncalibrated (all rows and the held-out ones), in sample and cross-validated."""
    from fleetplan.models import calibration as cal
    from fleetplan.models.validation import summarize

    used, held, cv_ms = r["used"], r["held"], r["cv_ms"]
    plain = [p.predicted_tpot_ms for p in r["preds"]]
    return {
        "uncalibrated": summarize(used, plain),
        "uncalibrated_held": summarize([used[i] for i in held], [plain[i] for i in held]),
        "in_sample": summarize(used, list(cal.predict_with_fit(r["comp"], r["fit"]) * 1e3)),
        "cross_validated": summarize([used[i] for i in held], [cv_ms[i] for i in held]),
    }


def _refuse_or_force(path: Path, errors: dict[str, Any], held: list[int], force: bool, out: str) -> bool:
    """Whether the profile is worse, cross-validated, than no profile on the same held-out rows:
    refused (exit 2 with both figures) unless ``force``, which says so on stderr."""
    from fleetplan.catalogs.loader import InputError

    if not held:
        return False
    calibrated = errors["cross_validated"]["overall"]["mape"]
    plain = errors["uncalibrated_held"]["overall"]["mape"]
    if calibrated <= plain:
        return False
    why = (f"cross-validated MAPE calibrated {calibrated:.1%} is worse than uncalibrated {plain:.1%} "
           f"on the same held-out rows")
    if not force:
        raise InputError(f"{path}: calibrate: {why}; profile not written (--force writes it anyway)")
    print(terminal(f"fleetplan: warning: {why}; profile written to {out} anyway (--force)"), file=sys.stderr)
    return True


def _profile(path: Path, preset: Any, r: dict[str, Any], errors: dict[str, Any], forced: bool) -> Any:
    """The :class:`~fleetplan.models.profile.CalibrationProfile` of a fit."""
    from fleetplan.models import calibration as cal
    from fleetplan.models.profile import CalibrationProfile

    cv = {"method": r["method"], "folds": r["folds"], **_stats_json(errors["cross_validated"]["overall"])}
    return CalibrationProfile(
        fleetplan_calibration=cal.PROFILE_VERSION, preset=preset.name, measurements=path.name, rows=len(r["used"]),
        skipped_rows=len(r["skipped"]), groups=len({u.configuration for u in r["used"]}), forced=forced,
        method={
            "model": "every term of the step times exp(s) of the most specific scope (GPU id or family, engine, kind)",
            "estimator": "per configuration group the median log(measured/predicted TPOT); per scope the sum over "
                         f"its groups / (groups + {cal.SHRINK_GROUPS:g})",
        },
        factors=cal.profile_factors(r["fit"], r["comp"]),
        error={"uncalibrated": _stats_json(errors["uncalibrated"]["overall"]),
               "in_sample": _stats_json(errors["in_sample"]["overall"]), "cross_validated": cv},
    )


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Fit calibration factors, report cross-validated error, write the profile unless it is
    worse than none (``--force`` writes it anyway)."""
    import yaml

    from fleetplan.catalogs import load_catalog
    from fleetplan.catalogs.files import check_output_file, write_atomically
    from fleetplan.catalogs.loader import InputError
    from fleetplan.commands.io import catalog_inputs
    from fleetplan.models.presets import get_preset
    from fleetplan.models.profile import profile_document

    out = check_output_file(args.out, "--out", [args.file, *catalog_inputs(args.catalog)])
    catalog = load_catalog(args.catalog)
    preset = get_preset(args.preset)
    path, rows = _read_measurements(args.file)
    r = _fit_rows(rows, catalog, preset)
    if r["fit"] is None:
        raise InputError(f"{path}: calibration needs at least {MIN_CALIBRATION_ROWS} rows with a known model and GPU, "
                         f"got {len(r['used'])}")
    errors = _calibration_errors(r)
    forced = _refuse_or_force(path, errors, r["held"], args.force, args.out)
    profile = _profile(path, preset, r, errors, forced)
    write_atomically(out, yaml.safe_dump(profile_document(profile), sort_keys=False, allow_unicode=True))
    if args.json:
        _print_calibration_json(args.out, profile, r, errors)
    else:
        _print_calibration(args.out, profile, r, errors)
    return 0


def _print_calibration_json(out: str, profile: Any, r: dict[str, Any], errors: dict[str, Any]) -> None:
    from fleetplan.commands.io import dumps

    doc = {
        "profile": str(out),
        **{k: getattr(profile, k) for k in ("preset", "measurements", "rows", "skipped_rows", "groups", "forced")},
        "factors": [f.model_dump(mode="json") for f in profile.factors],
        "error": {
            "uncalibrated": _stats_json(errors["uncalibrated"]),
            "uncalibrated_held_out_rows": _stats_json(errors["uncalibrated_held"]),
            "in_sample": _stats_json(errors["in_sample"]),
            "cross_validated": {"method": r["method"], "folds": r["folds"], **_stats_json(errors["cross_validated"])},
        },
        "cross_validated_rows": [
            {"line": u.line, "measured_tpot_ms": _r(u.measured_tpot_ms), "predicted_tpot_ms": _r(v)}
            for u, v in zip(r["used"], r["cv_ms"], strict=True)
        ],
    }
    sys.stdout.write(dumps(doc))


def _print_calibration(out: str, profile: Any, r: dict[str, Any], errors: dict[str, Any]) -> None:
    used, skipped = r["used"], r["skipped"]
    print(terminal(f"{profile.measurements}: fitted preset {profile.preset} on {len(used)} rows in {profile.groups} "
                   f"configuration groups ({len(skipped)} skipped); profile written to {out}"))
    for row, why in skipped:
        print(terminal(f"  skipped line {row.line}: {why}"))
    print("step time scale per GPU, engine and model kind (engine 'any': the planner's, pooled over engines):")
    for f in profile.factors:
        who = " / ".join((str(f.gpu), "any" if f.unnamed_engine else str(f.engine), str(f.kind)))
        print(terminal(f"  {who:<36} rows {f.rows:>4}  step time x{f.overhead_scale:.3f}"))
    print(_stats_line("uncalibrated", errors["uncalibrated"]["overall"]))
    print(_stats_line("calibrated, in sample", errors["in_sample"]["overall"]))
    if r["held"]:
        print(_stats_line("uncalibrated, held-out rows", errors["uncalibrated_held"]["overall"]))
        print(_stats_line("calibrated, cross-validated", errors["cross_validated"]["overall"]))
        print(f"  (cross-validation: {r['method']}, {r['folds']} folds; every held-out configuration group "
              "predicted by a fit that never saw it)")
    else:
        print("  (no cross-validation: every row is of one configuration group; measure a second one to check the fit)")


def register(sub: Any) -> None:
    """Add the fidelity subcommands to the CLI's subparsers."""
    from fleetplan.commands.flags import add_catalog_flag, add_preset_flags

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
    c.add_argument("--force", action="store_true",
                   help="write the profile even when cross-validation finds it worse than uncalibrated")
    c.set_defaults(func=cmd_calibrate)

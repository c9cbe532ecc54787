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


def _fit_rows(rows: list[Any], catalog: Any, preset: Any, force: bool) -> dict[str, Any]:
    """Calibrate on the rows the planner would run (the others skipped), with every row's TPOT and
    TTFT uncalibrated, in sample and held out (nested cross-validation by configuration group)."""
    from fleetplan.models import calibration as cal
    from fleetplan.models.validation import predict_all

    preds, skipped = predict_all(rows, catalog, preset)
    used = [p.row for p in preds]
    if len(used) < MIN_CALIBRATION_ROWS:
        return {"used": used, "skipped": skipped, "calibration": None}
    c = cal.calibration_of(used, catalog, preset, force)
    ms = {q: {k: v * 1e3 for k, v in cal.row_predictions(c, q).items()} for q in cal.QUANTITIES}
    held = [i for i, v in enumerate(ms["tpot"]["held_out"]) if math.isfinite(v)]
    return {"used": used, "skipped": skipped, "calibration": c, "ms": ms, "held": held}


def _ttft_summary(rows: list[Any], predicted: Any, keep: list[int]) -> dict[str, Any]:
    """TTFT error statistics over the rows ``keep`` that report a measured TTFT."""
    from fleetplan.models.validation import error_stats

    pairs = [(rows[i].measured_ttft_ms, float(predicted[i])) for i in keep
             if rows[i].measured_ttft_ms and math.isfinite(float(predicted[i]))]
    return error_stats([m for m, _ in pairs], [p for _, p in pairs])


def _calibration_errors(r: dict[str, Any]) -> dict[str, Any]:
    """TPOT and TTFT summaries uncalibrated (all rows and the held-out ones), in sample (the
    profile as written) and cross-validated (calibration as it would predict held-out groups)."""
    from fleetplan.models.validation import summarize

    used, held, ms = r["used"], r["held"], r["ms"]
    every = list(range(len(used)))
    tp = ms["tpot"]
    tt = ms["ttft"]
    return {
        "tpot": {
            "uncalibrated": summarize(used, list(tp["uncalibrated"])),
            "uncalibrated_held_out_rows": summarize([used[i] for i in held], [tp["uncalibrated"][i] for i in held]),
            "in_sample": summarize(used, list(tp["in_sample"])),
            "cross_validated": summarize([used[i] for i in held], [tp["held_out"][i] for i in held]),
        },
        "ttft": {
            "uncalibrated": _ttft_summary(used, tt["uncalibrated"], every),
            "uncalibrated_held_out_rows": _ttft_summary(used, tt["uncalibrated"], held),
            "in_sample": _ttft_summary(used, tt["in_sample"], every),
            "cross_validated": _ttft_summary(used, tt["held_out"], held),
        },
    }


def _figures(errors: dict[str, Any]) -> str:
    """The held-out figures calibrate decides by, calibrated against uncalibrated on the same rows."""
    tp, tt = errors["tpot"], errors["ttft"]
    text = (f"TPOT MAPE {tp['cross_validated']['overall']['mape']:.1%} calibrated against "
            f"{tp['uncalibrated_held_out_rows']['overall']['mape']:.1%} uncalibrated")
    if tt["cross_validated"].get("rows"):
        text += (f", TTFT within 1.5x {tt['cross_validated']['within_1.5x']:.1%} against "
                 f"{tt['uncalibrated_held_out_rows']['within_1.5x']:.1%}")
    return text + " on the same held-out rows"


def _refuse_or_force(path: Path, r: dict[str, Any], errors: dict[str, Any], force: bool, out: str) -> None:
    """Refuse (exit 2, one line with the figures) when cross-validation kept neither TPOT nor TTFT,
    unless ``force``, which writes the profile every level at its best shrinkage and says so."""
    from fleetplan.catalogs.loader import InputError
    from fleetplan.models import calibration as cal

    if not cal.refused(r["calibration"]):
        return
    if not r["held"]:
        why = "every row is of one configuration group, so none can be held out to check a level on"
    else:
        why = f"no level predicts held-out configuration groups better than none ({_figures(errors)})"
    if not force:
        raise InputError(f"{path}: calibrate: {why}; profile not written (--force writes it anyway)")
    print(terminal(f"fleetplan: warning: profile forced, every level kept at its best shrinkage: {why}; "
                   f"written to {out} anyway (--force)"), file=sys.stderr)


def _error_document(r: dict[str, Any], errors: dict[str, Any]) -> dict[str, Any]:
    """The profile's and ``--json``'s error block."""
    c = r["calibration"]
    out: dict[str, Any] = {}
    for q in ("tpot", "ttft"):
        e = errors[q]
        out[q] = {"uncalibrated": _stats_json(e["uncalibrated"]),
                  "uncalibrated_held_out_rows": _stats_json(e["uncalibrated_held_out_rows"]),
                  "in_sample": _stats_json(e["in_sample"]),
                  "cross_validated": {"method": c.method, "folds": c.folds, **_stats_json(e["cross_validated"])}}
    return out


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Fit the hierarchical calibration, report its cross-validated error, write the profile
    unless cross-validation kept nothing (``--force`` writes it anyway)."""
    import yaml

    from fleetplan.catalogs import load_catalog
    from fleetplan.catalogs.files import check_output_file, write_atomically
    from fleetplan.catalogs.loader import InputError
    from fleetplan.commands.io import catalog_inputs
    from fleetplan.models import calibration as cal
    from fleetplan.models.presets import get_preset
    from fleetplan.models.profile import profile_document

    out = check_output_file(args.out, "--out", [args.file, *catalog_inputs(args.catalog)])
    catalog = load_catalog(args.catalog)
    preset = get_preset(args.preset)
    path, rows = _read_measurements(args.file)
    r = _fit_rows(rows, catalog, preset, args.force)
    if r["calibration"] is None:
        raise InputError(f"{path}: calibration needs at least {MIN_CALIBRATION_ROWS} rows with a known model and GPU, "
                         f"got {len(r['used'])}")
    errors = _calibration_errors(r)
    _refuse_or_force(path, r, errors, args.force, args.out)
    profile = cal.build_profile(r["calibration"], preset, path.name, len(r["skipped"]), _error_document(r, errors))
    write_atomically(out, yaml.safe_dump(profile_document(profile), sort_keys=False, allow_unicode=True))
    if args.json:
        _print_calibration_json(args.out, profile, r)
    else:
        _print_calibration(args.out, profile, r, errors)
    return 0


def _print_calibration_json(out: str, profile: Any, r: dict[str, Any]) -> None:
    from fleetplan.commands.io import dumps

    ms = r["ms"]
    doc = {
        "profile": str(out),
        **{k: getattr(profile, k) for k in ("preset", "measurements", "rows", "skipped_rows", "groups", "forced")},
        "tpot": profile.tpot.model_dump(mode="json"),
        "ttft": profile.ttft.model_dump(mode="json"),
        "error": profile.error,
        "cross_validated_rows": [
            {"line": u.line, "measured_tpot_ms": _r(u.measured_tpot_ms), "predicted_tpot_ms": _finite(ms["tpot"]["held_out"][i]),
             "measured_ttft_ms": _r(u.measured_ttft_ms), "predicted_ttft_ms": _finite(ms["ttft"]["held_out"][i])
             if u.measured_ttft_ms else None}
            for i, u in enumerate(r["used"])
        ],
    }
    sys.stdout.write(dumps(doc))


def _finite(x: float) -> float | None:
    return _r(x) if math.isfinite(float(x)) else None


def _print_levels(name: str, q: Any) -> None:
    """One quantity's levels: the shrinkage chosen (or left out) with the held-out error, and the cells."""
    kept = "not kept (no change)" if not q.kept else "kept" if q.kinds is None else f"kept for {', '.join(q.kinds)} models"
    print(f"{name}: {kept}; levels by cross-validation ({q.error_measure}):")
    for lv in q.levels:
        if lv.shrink_groups is None:
            print(f"  {lv.level:<14} left out" + (f" (held-out error {lv.cv_error_without:.4f} without it)"
                                                  if lv.cv_error_without is not None else ""))
            continue
        judged = (f", held-out error {lv.cv_error_without:.4f} -> {lv.cv_error_with:.4f}"
                  if lv.cv_error_with is not None and lv.cv_error_without is not None else "")
        print(f"  {lv.level:<14} shrunk by {lv.shrink_groups:g} groups{judged}")
        for o in lv.offsets:
            who = " / ".join(str(v) for v in (o.model, o.gpu, o.family, o.engine, o.kind) if v is not None) or "every row"
            print(terminal(f"    {who:<40} groups {o.groups:>3}  rows {o.rows:>4}  x{o.scale:.3f}"))


def _print_calibration(out: str, profile: Any, r: dict[str, Any], errors: dict[str, Any]) -> None:
    used, skipped, c = r["used"], r["skipped"], r["calibration"]
    print(terminal(f"{profile.measurements}: fitted preset {profile.preset} on {len(used)} rows in {profile.groups} "
                   f"configuration groups ({len(skipped)} skipped); profile written to {out}"))
    for row, why in skipped:
        print(terminal(f"  skipped line {row.line}: {why}"))
    _print_levels("TPOT (every term of the step)", profile.tpot)
    _print_levels("TTFT (on top of the step's scale)", profile.ttft)
    tp = errors["tpot"]
    print(_stats_line("TPOT uncalibrated", tp["uncalibrated"]["overall"]))
    print(_stats_line("TPOT calibrated, in sample", tp["in_sample"]["overall"]))
    if r["held"]:
        print(_stats_line("TPOT uncalibrated, held out", tp["uncalibrated_held_out_rows"]["overall"]))
        print(_stats_line("TPOT calibrated, held out", tp["cross_validated"]["overall"]))
        tt = errors["ttft"]
        if tt["cross_validated"].get("rows"):
            print(_stats_line("TTFT uncalibrated, held out", tt["uncalibrated_held_out_rows"]))
            print(_stats_line("TTFT calibrated, held out", tt["cross_validated"]))
        print(f"  (cross-validation: {c.method}, {c.folds} folds; every held-out configuration group predicted by a "
              "calibration that never saw it)")
    else:
        print("  (no cross-validation: every row is of one configuration group; measure another to check the fit)")


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
    c.add_argument("--json", action="store_true", help="print JSON: levels, offsets and uncalibrated, in-sample, cross-validated error")
    c.add_argument("--force", action="store_true",
                   help="write the profile even when cross-validation keeps no level (every level at its best shrinkage)")
    c.set_defaults(func=cmd_calibrate)

"""The ``fleetplan`` command line: estimate, plan, catalog.

Every user error ends with exit code 2 and one line on stderr naming the field and the
nearest valid choice; nothing is written to an output file unless the command succeeded, and
every output path is checked (:mod:`fleetplan.catalogs.files`) before any solving. Ctrl-C ends
with one line and exit code 130, SIGTERM with 143 (:mod:`fleetplan.interrupts`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from fleetplan.catalogs.files import check_output_file, one_line, write_atomically

EXIT_USER_ERROR = 2
EXIT_SOLVER_ERROR = 3


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) instead of usage dumps."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"fleetplan: error: {message} (see '{self.prog} --help')\n")


def _number_flag(valid: Any) -> Any:
    """An argparse type: the flag's text as a number in the range ``valid`` (a
    :class:`fleetplan.catalogs.fields.Range`, shared with the files' schemas), whole when the
    range is."""
    def parse(text: str) -> float | int:
        try:
            v = valid.check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return int(v) if valid.integer else v

    return parse


def dumps(data: Any) -> str:
    """Canonical JSON: sorted keys are NOT used so the documented key order is kept; stable floats.

    Strict JSON: a non-finite number (which JSON cannot hold) raises ``ValueError`` instead of
    being written as ``Infinity`` or ``NaN``."""
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _version() -> str:
    """The installed package's version, from its metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fleetplan")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree that is not installed
        return "unknown"


def _console() -> Any:
    from rich.console import Console

    from fleetplan.layout import terminal_width

    return Console(width=terminal_width(), highlight=False)


def scenario_inputs(path: str | Path, scenario: Any, folder: Path, catalogs: list[str] | tuple[str, ...] = (),
                    calibration: str | None = None) -> list[Path]:
    """Every file a plan of the scenario at ``path`` reads: the scenario, its catalogs and demand
    profiles, the ``--catalog`` files and the calibration profile (no output may be one of them)."""
    files = [Path(path), *(folder / c for c in scenario.catalogs), *catalog_inputs(catalogs)]
    files += [folder / p.demand_profile for p in scenario.products if p.demand_profile]
    return files + ([Path(calibration)] if calibration else [])


def catalog_inputs(catalogs: list[str] | tuple[str, ...] = ()) -> list[Path]:
    """The shipped catalog files and the ``--catalog`` files: inputs of every command."""
    from fleetplan.catalogs.loader import DATA_DIR, SHIPPED_FILES

    return [*(DATA_DIR / name for name in SHIPPED_FILES), *(Path(c) for c in catalogs)]


# How a scenario chooses its preset, for a calibration profile fitted for another one.
SCENARIO_PRESET_HINT = ("the scenario sets preset {used!r}: write 'preset: {fitted}' in the scenario file, "
                        "or calibrate with --preset {used}")


def resolve_preset(name: str, calibration: str | None, preset_hint: str = "use --preset {fitted}") -> Any:
    """The named preset, adjusted by a calibration profile file when one is given; ``preset_hint``
    tells the user how to choose the preset a profile was fitted for."""
    from fleetplan.models.presets import get_preset

    preset = get_preset(name)
    if calibration:
        from fleetplan.models.calibration import apply_profile

        preset = apply_profile(preset, Path(calibration), preset_hint)
    return preset


# ---------------------------------------------------------------- estimate
def _benchmark_prediction(catalog: Any, preset: Any, args: argparse.Namespace) -> dict[str, Any]:
    """What ``validate`` predicts for a closed-loop continuous-batching benchmark of this
    configuration at concurrency ``--batch`` on ``--engine``: the same function, on the same row."""
    from fleetplan.models.measurements import Measurement
    from fleetplan.models.validation import predict

    row = Measurement(line=0, model=args.model, gpu=args.gpu, precision=args.precision, tp=args.tp, batch=args.batch,
                      input_tokens=args.input_tokens, output_tokens=args.output_tokens, engine=args.engine or "",
                      measured_tpot_ms=1.0, kv_precision=args.kv_precision)
    p = predict(row, catalog, preset)
    return {"engine": args.engine, "benchmark_tpot_ms": p.predicted_tpot_ms, "benchmark_ttft_ms": p.predicted_ttft_ms}


def cmd_estimate(args: argparse.Namespace) -> int:
    """Roofline breakdown of one configuration."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.models.parallel import tp_problem
    from fleetplan.models.prefill import prefill_flops
    from fleetplan.models.roofline import decode_step
    from fleetplan.models.ttft import colocated_configuration_ttft_s, prefill_service_s
    from fleetplan.catalogs.loader import InputError

    catalog = load_catalog(args.catalog)
    llm = catalog.model(args.model, "--model")
    gpu = catalog.gpu(args.gpu, "--gpu")
    preset = resolve_preset(args.preset, args.calibration)
    problem = tp_problem(llm, gpu, args.tp)
    if problem:
        raise InputError(f"--tp: {problem}")
    e = decode_step(
        llm, gpu, precision=args.precision, tp=args.tp, batch=args.batch, input_tokens=args.input_tokens,
        output_tokens=args.output_tokens, preset=preset, kv_precision=args.kv_precision, engine=args.engine,
    )
    d: dict[str, Any] = {
        "model": llm.id, "gpu": gpu.id, "tp": args.tp, "batch": args.batch, "precision": args.precision,
        "input_tokens": args.input_tokens, "output_tokens": args.output_tokens, "preset": preset.name,
        "calibration": preset.calibration,
    }
    d.update(e.as_dict())
    work = prefill_flops(llm, preset, args.input_tokens)
    d["prefill_flops_per_request"] = work
    d["prefill_service_ms"] = prefill_service_s(llm, gpu, preset, precision=args.precision, tp=args.tp, flops=work) * 1e3
    mixed, ttft = colocated_configuration_ttft_s(
        llm, gpu, preset, precision=args.precision, tp=args.tp, batch=args.batch, input_tokens=args.input_tokens,
        output_tokens=args.output_tokens, kv_precision=args.kv_precision, flops_per_request=work, utilisation=0.0,
        engine=args.engine,
    )
    d["colocated_step_time_ms"] = mixed.step_time_s * 1e3
    d["ttft_ms"] = ttft * 1e3
    d.update(_benchmark_prediction(catalog, preset, args))
    if args.json:
        sys.stdout.write(dumps(d))
    else:
        from fleetplan.report import print_estimate

        print_estimate(d, _console())
    return 0


# ---------------------------------------------------------------- plan
def cmd_plan(args: argparse.Namespace) -> int:
    """Cheapest fleet for a scenario; several scenarios, or a directory of them, as a batch."""
    from fleetplan.batch import Settings, is_batch, run_batch

    if is_batch(args.scenario):
        settings = Settings(catalogs=tuple(args.catalog), solver=args.solver, calibration=args.calibration,
                            alternatives=not args.no_alternatives)
        return run_batch(args.scenario, settings, args.out, args.json, args.jobs, _console())

    from fleetplan.catalogs import load_catalog
    from fleetplan.optimizer.plan import make_plan
    from fleetplan.optimizer.results import plan_to_dict
    from fleetplan.optimizer.scenario import load_scenario

    from fleetplan.optimizer.deadline import DEFAULT_TIME_LIMIT_S, Deadline, Progress

    scenario, folder = load_scenario(args.scenario[0])
    out = None
    if args.out:
        inputs = scenario_inputs(args.scenario[0], scenario, folder, args.catalog, args.calibration)
        out = check_output_file(args.out, "--out", inputs)
    catalog = load_catalog([*(folder / c for c in scenario.catalogs), *args.catalog])
    preset = resolve_preset(scenario.preset, args.calibration, SCENARIO_PRESET_HINT) if args.calibration else None
    progress = Progress.for_terminal(quiet=args.json)
    deadline = Deadline.after(scenario.options.time_limit_s or DEFAULT_TIME_LIMIT_S, progress)
    try:
        plan = make_plan(scenario, catalog, solver=args.solver, alternatives=not args.no_alternatives, preset=preset,
                         folder=folder, jobs=args.jobs, deadline=deadline)
    finally:
        progress.close()
    d = plan_to_dict(plan)
    if d["status"] != "optimal":
        print(f"fleetplan: warning: {d['termination']}: not proven optimal", file=sys.stderr)
    for what in d.get("stopped_by_time_limit", []):
        print(f"fleetplan: note: time limit ({d['time_limit_s']:g} s): {what} cut short", file=sys.stderr)
    text = dumps(d)
    if out is not None:
        write_atomically(out, text)
    if args.json:
        sys.stdout.write(text)
    else:
        from fleetplan.report import print_plan

        print_plan(d, _console())
    return 0


# ---------------------------------------------------------------- breakeven
def cmd_breakeven(args: argparse.Namespace) -> int:
    """All-API vs self-host only vs the optimal blend as volume scales."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.optimizer.breakeven import DEFAULT_SCALES, breakeven, plot
    from fleetplan.optimizer.scenario import load_scenario

    scenario, folder = load_scenario(args.scenario)
    plot_path = None
    if args.plot:
        plot_path = check_output_file(args.plot, "--plot", scenario_inputs(args.scenario, scenario, folder, args.catalog),
                                      suffixes=(".png", ".svg"))
    catalog = load_catalog([*(folder / c for c in scenario.catalogs), *args.catalog])
    scales = tuple(args.scales) if args.scales else DEFAULT_SCALES
    def show(p: dict[str, Any]) -> None:
        if not args.json:
            own = "-" if p["self_host_usd"] is None else f"${p['self_host_usd']:,.0f}"
            blend = "-" if p["blend_usd"] is None else f"${p['blend_usd']:,.0f}"
            print(f"scale {p['scale']:g}: all API ${p['all_api_usd']:,.0f}, self-host {own}, blend {blend}"
                  + ("" if p["proven_optimal"] else " (not proven optimal: time limit)"), file=sys.stderr, flush=True)

    result = breakeven(scenario, catalog, folder, scales, solver=args.solver, on_point=show)
    for what in result["stopped"]:
        print(f"fleetplan: note: time limit reached: {what} not computed", file=sys.stderr)
    if plot_path is not None:
        plot(result, plot_path, f"build vs buy: {Path(args.scenario).name}")
    if args.json:
        sys.stdout.write(dumps(result))
    else:
        from fleetplan.layout import Col, fit_table

        rows = []
        for p in result["points"]:
            opts = {"all API": p["all_api_usd"], "self-host": p["self_host_usd"], "blend": p["blend_usd"]}
            best = min((v, k) for k, v in opts.items() if v is not None)[1]
            rows.append((f"{p['scale']:g}", f"{p['all_api_usd']:,.0f}", "-" if p["self_host_usd"] is None else f"{p['self_host_usd']:,.0f}",
                         "-" if p["blend_usd"] is None else f"{p['blend_usd']:,.0f}", best))
        cols = [Col(c) for c in ("demand x", "all API $/month", "self-host $/month", "blend $/month", "cheapest")]
        con = _console()
        from rich.markup import escape

        con.print(fit_table(con, f"build vs buy: {escape(args.scenario)}", cols, rows))
        c = result["crossovers"]
        con.print(f"self-hosting alone beats all-API from {c['self_host_beats_api_at_scale'] or 'no scale tried'}x the scenario's demand; "
                  f"the blend beats all-API from {c['blend_beats_api_at_scale'] or 'no scale tried'}x")
        if args.plot:
            con.print(f"plot written to {escape(args.plot)}")
    return 0


# ---------------------------------------------------------------- catalog
def cmd_catalog_list(args: argparse.Namespace) -> int:
    """List what the catalog holds, with sources."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.models.memory import kv_bytes_per_token

    catalog = load_catalog(args.catalog)
    rows: list[dict[str, Any]]
    if args.kind == "gpus":
        rows = [
            {
                "id": g.id, "memory_GB": g.memory_bytes / 1e9, "bandwidth_TB_per_s": g.mem_bandwidth_bytes_per_s / 1e12,
                "dense_TFLOPS": " ".join(f"{k}:{v / 1e12:g}" for k, v in g.dense_flops_per_s.items()),
                "scaleup_gpus": g.scaleup_domain_gpus, "source": g.source, "as_of": g.as_of.isoformat(),
            }
            for g in sorted(catalog.gpus.values(), key=lambda g: g.id)
        ]
    elif args.kind == "models":
        rows = [
            {
                "id": m.id, "total_params_B": round(m.total_params / 1e9, 2), "active_params_B": round(m.active_params / 1e9, 2),
                "attention": m.attention + (" +moe" if m.moe else ""), "kv_bytes_per_token_bf16": int(kv_bytes_per_token(m, "bf16")),
                "source": m.source, "as_of": m.as_of.isoformat(),
            }
            for m in sorted(catalog.models.values(), key=lambda m: m.id)
        ]
    elif args.kind == "prices":
        rows = [
            {"gpu": r.gpu, "provider": "reference", "kind": "reference", "usd_per_gpu_hour": r.usd_per_gpu_hour,
             "source": r.source, "as_of": r.as_of.isoformat()}
            for r in sorted(catalog.reference.values(), key=lambda r: r.gpu)
        ] + [
            {"gpu": p.gpu, "provider": p.provider, "kind": p.kind, "usd_per_gpu_hour": p.usd_per_gpu_hour,
             "source": p.source, "as_of": p.as_of.isoformat()}
            for p in sorted(catalog.prices, key=lambda p: (p.gpu, p.kind, p.usd_per_gpu_hour, p.provider))
        ]
    else:
        rows = [
            {"id": a.id, "model": a.model, "input_usd_per_M": a.input_usd_per_million_tokens,
             "output_usd_per_M": a.output_usd_per_million_tokens, "cached_input_usd_per_M": a.cached_input_usd_per_million_tokens,
             "source": a.source, "as_of": a.as_of.isoformat()}
            for a in sorted(catalog.api_prices.values(), key=lambda a: a.id)
        ]
    if args.json:
        sys.stdout.write(dumps(rows))
    else:
        from fleetplan.report import print_catalog

        print_catalog(args.kind, rows, _console())
    return 0


def cmd_catalog_add_model(args: argparse.Namespace) -> int:
    """Import a model from a local config.json into a user catalog file."""
    import yaml

    from fleetplan.catalogs.hf_config import entry_from_hf_config
    from fleetplan.catalogs.files import read_json, read_text
    from fleetplan.catalogs.loader import CatalogError, load_catalog, parse_yaml

    shipped = load_catalog().models
    if args.id in shipped and not args.replace:
        raise CatalogError(
            f"--id: {args.id!r} is a model of the shipped catalog ({shipped[args.id].name}); an entry with this id "
            f"would replace it wherever --catalog {args.out} is given: choose another id (e.g. {args.id}-custom) "
            f"or pass --replace to replace it on purpose"
        )
    src = Path(args.config)
    out = check_output_file(args.out, "--out", [src, *catalog_inputs()])
    cfg = read_json(src, "config.json", CatalogError, "add-model: ")
    if not isinstance(cfg, dict):
        raise CatalogError(f"{src}: config.json must be a JSON object")
    entry = entry_from_hf_config(cfg, args.id, source=f"config.json ({src.name})")
    if args.name:
        entry["name"] = args.name
    for flag, key in (("total_params", "total_params"), ("active_params", "active_params")):
        if getattr(args, flag) is not None:
            entry[key] = getattr(args, flag)
    doc: dict[str, Any] = {}
    if out.exists():
        doc = parse_yaml(read_text(out, "catalog file", CatalogError, "--out: "), args.out, CatalogError) or {}
        if not isinstance(doc, dict):
            raise CatalogError(f"{args.out}: not a catalog file (expected a mapping)")
    models = [m for m in doc.get("models", []) if not (isinstance(m, dict) and m.get("id") == args.id)]
    models.append(entry)
    doc["models"] = models
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    import tempfile

    # validate the result with the shipped catalog before writing anything
    fd, tmp = tempfile.mkstemp(suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        load_catalog([tmp])
    except CatalogError as exc:
        raise CatalogError(str(exc).replace(tmp, str(args.out))) from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    write_atomically(out, text)
    print(
        f"added {args.id} to {args.out}: {entry['total_params'] / 1e9:.2f}B parameters "
        f"({entry['active_params'] / 1e9:.2f}B active), use it with --catalog {args.out}"
    )
    return 0


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    from fleetplan.catalogs import fields as F

    p = _Parser(prog="fleetplan", description="Cheapest GPU fleet for LLM inference, as a mixed-integer program.")
    p.add_argument("--version", action="version", version=f"fleetplan {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    catalog_help = "extra catalog YAML file merged over the shipped one (repeatable)"

    e = sub.add_parser("estimate", help="roofline breakdown of one configuration")
    e.add_argument("--model", required=True)
    e.add_argument("--gpu", required=True)
    e.add_argument("--tp", type=_number_flag(F.TP), default=1)
    e.add_argument("--batch", type=_number_flag(F.BATCH), default=1)
    e.add_argument("--precision", choices=("bf16", "fp8", "fp4"), default="bf16")
    e.add_argument("--kv-precision", choices=("bf16", "fp8", "fp4"), default=None)
    e.add_argument("--input-tokens", type=_number_flag(F.WHOLE_TOKENS), required=True)
    e.add_argument("--output-tokens", type=_number_flag(F.WHOLE_TOKENS), required=True)
    e.add_argument("--preset", choices=("seed", "default"), default="default")
    e.add_argument("--engine", default=None,
                   help="serving engine (vllm, sglang, trtllm): its calibration factors and prefill scheduling in the "
                        "benchmark prediction")
    e.add_argument("--calibration", help="calibration profile YAML (from `fleetplan calibrate`)")
    e.add_argument("--catalog", action="append", default=[], help=catalog_help)
    e.add_argument("--json", action="store_true", help="print JSON")
    e.set_defaults(func=cmd_estimate)

    pl = sub.add_parser(
        "plan", help="cheapest fleet for a scenario file, or for a batch of them",
        description="Plan one scenario file, or a batch: several files and/or directories (every *.yaml and *.yml "
                    "directly in a directory). A batch solves every scenario, sorted by file name without extension, even when some fail; "
                    "it prints a summary table (one row per scenario and per product; --json prints it as JSON), "
                    "names each failed scenario on stderr and then exits with code 2.",
    )
    pl.add_argument("scenario", nargs="+", help="scenario YAML file(s) or directories of them")
    pl.add_argument("--solver", choices=("highs", "ortools"), default="highs")
    pl.add_argument("--catalog", action="append", default=[], help=catalog_help)
    pl.add_argument("--json", action="store_true", help="print JSON (a batch: the summary)")
    pl.add_argument(
        "--out",
        help="one scenario: also write the JSON plan to this file; a batch: write each plan to OUT/<stem>.json and "
             "the summary to OUT/summary.csv and OUT/summary.json in this directory (created if needed; a failed "
             "scenario writes and removes nothing); without --out a batch writes no files. An output that is one "
             "of the inputs is refused",
    )
    pl.add_argument("--jobs", type=_number_flag(F.JOBS), default=1,
                    help="a batch: plan this many scenarios at once in worker processes; one scenario: solve this many "
                         "independent multi-hour components at once (same results for any value)")
    pl.add_argument("--calibration", help="calibration profile YAML (from `fleetplan calibrate`)")
    pl.add_argument("--no-alternatives", action="store_true", help="skip the per-GPU-type runner-up solves")
    pl.set_defaults(func=cmd_plan)

    be = sub.add_parser("breakeven", help="all-API vs self-host vs blend as demand scales")
    be.add_argument("scenario")
    be.add_argument("--scales", type=_number_flag(F.DEMAND_SCALE), nargs="+", help="demand multiples to evaluate")
    be.add_argument("--solver", choices=("highs", "ortools"), default="highs")
    be.add_argument("--catalog", action="append", default=[], help=catalog_help)
    be.add_argument("--plot", help="write the curves to this PNG or SVG file")
    be.add_argument("--json", action="store_true", help="print JSON")
    be.set_defaults(func=cmd_breakeven)

    c = sub.add_parser("catalog", help="list or extend the catalogs")
    csub = c.add_subparsers(dest="catalog_command", required=True, parser_class=_Parser)
    cl = csub.add_parser("list", help="show loaded entries with sources")
    cl.add_argument("kind", choices=("gpus", "models", "prices", "api"))
    cl.add_argument("--catalog", action="append", default=[], help=catalog_help)
    cl.add_argument("--json", action="store_true")
    cl.set_defaults(func=cmd_catalog_list)
    ca = csub.add_parser("add-model", help="import a model from a local Hugging Face config.json",
                         description="Import a model from a local Hugging Face config.json into a user catalog file. "
                                     "An --id that names a shipped model is refused unless --replace is given.")
    ca.add_argument("config")
    ca.add_argument("--id", required=True, help="id of the new model entry (an id of a shipped model needs --replace)")
    ca.add_argument("--name")
    ca.add_argument("--total-params", type=_number_flag(F.MODEL_PARAMS_FLAG))
    ca.add_argument("--active-params", type=_number_flag(F.MODEL_PARAMS_FLAG))
    ca.add_argument("--out", default="fleetplan-catalog.yaml", help="user catalog file to create or update")
    ca.add_argument("--replace", action="store_true",
                    help="allow an --id of the shipped catalog: the entry then replaces the shipped model wherever "
                         "this catalog file is given (without it such an id is refused)")
    ca.set_defaults(func=cmd_catalog_add_model)

    from fleetplan.fidelity import register

    register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point: run a subcommand, turning user errors into one line and exit code 2, an
    interrupt (Ctrl-C) into one line and exit code 130, SIGTERM into one line and 143."""
    from fleetplan.interrupts import exit_code, install_handlers, message

    restore = install_handlers()
    try:
        args = build_parser().parse_args(argv)
        from fleetplan.catalogs.loader import InputError

        return _dispatch(args, InputError)
    except KeyboardInterrupt as exc:  # SIGTERM too (Terminated); cleanup ran in the finally blocks on the way
        detail = f": {one_line(str(exc))}" if str(exc) else ""
        print(f"{message(exit_code(exc))}{detail}", file=sys.stderr)
        return exit_code(exc)
    finally:
        restore()


def _dispatch(args: argparse.Namespace, input_error: type[Exception]) -> int:
    """Run the parsed subcommand; every error except an interrupt becomes one line on stderr."""
    try:
        return int(args.func(args))
    except input_error as exc:
        print(f"fleetplan: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BrokenPipeError:  # pragma: no cover - e.g. piped into head
        return 0
    except Exception as exc:  # noqa: BLE001 - reported as one line; FLEETPLAN_DEBUG=1 shows the traceback
        if os.environ.get("FLEETPLAN_DEBUG"):
            raise
        from fleetplan.optimizer.plan import SolverError

        if isinstance(exc, SolverError):
            print(f"fleetplan: error: {one_line(str(exc))}", file=sys.stderr)
            return EXIT_SOLVER_ERROR
        print(f"fleetplan: internal error: {type(exc).__name__}: {one_line(str(exc))} (FLEETPLAN_DEBUG=1 shows details)",
              file=sys.stderr)
        return 1


def run() -> NoReturn:
    """Console-script entry: run ``main`` and leave without interpreter teardown.

    Tearing down the imported solver and modelling libraries takes a fifth of a second and
    serves no purpose once every output is flushed and every file closed.
    """
    code = main()
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        # what interpreter teardown would run for multiprocessing: finalizers release the
        # semaphores of a pool stopped by an interrupt (no "leaked semaphore" warning)
        util._exit_function()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()

"""The ``fleetplan`` command line: estimate, plan, breakeven, catalog.

Every user error ends with exit code 2 and one line on stderr naming the field and the
nearest valid choice; nothing is written to an output file unless the command succeeded, and
every output path is checked (:mod:`fleetplan.catalogs.files`) before any solving. Ctrl-C ends
with one line and exit code 130, SIGTERM with 143 (:mod:`fleetplan.commands.interrupts`).

This module parses arguments, calls the planner and prints; the rules it applies live in
``catalogs/``, ``models/`` and ``optimizer/``, the tables in :mod:`fleetplan.rendering.tables`.

Owns argument parsing and printing only: no business rule is decided here.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.files import check_output_file, one_line
from fleetplan.commands.cluster import SCHEDULER_HELP
from fleetplan.rendering.escape import chart_text, terminal
from fleetplan.optimizer.common.enums import Alternatives, Status
from fleetplan.optimizer.runtime.workers import MAX_DEFAULT_JOBS, default_jobs
from fleetplan.commands.flags import (
    CALIBRATION_HELP, Parser, add_catalog_flag, add_precision_flags, add_preset_flags, add_solver_flag, number_flag,
)
from fleetplan.commands.io import (
    SCENARIO_PRESET_HINT, catalog_inputs, console, dumps, emit, resolve_preset, run_command, scenario_inputs,
    write_atomically,
)


def _version() -> str:
    """The installed package's version, from its metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fleetplan")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree that is not installed
        return "unknown"


# ---------------------------------------------------------------- estimate
def _benchmark_prediction(catalog: Any, preset: Any, args: argparse.Namespace) -> dict[str, Any]:
    """What ``validate`` predicts for a closed-loop continuous-batching benchmark of this
    configuration at concurrency ``--batch`` on ``--engine``: the same function, on the same row."""
    from fleetplan.models.measurements import Measurement
    from fleetplan.models.validation import predict

    row = Measurement(line=0, model=args.model, gpu=args.gpu, precision=args.precision, tp=args.tp, batch=args.batch,
                      input_tokens=args.input_tokens, output_tokens=args.output_tokens, engine=args.engine or "",
                      measured_tpot_ms=1.0, kv_precision=args.kv_precision, pp=args.pp, ep=args.ep,
                      dp_attention=args.dp_attention)
    p = predict(row, catalog, preset)
    return {"engine": args.engine, "benchmark_tpot_ms": p.predicted_tpot_ms, "benchmark_ttft_ms": p.predicted_ttft_ms}


def cmd_estimate(args: argparse.Namespace) -> int:
    """Roofline breakdown of one configuration (:func:`estimate_document`), as a table or JSON."""
    from fleetplan.rendering.tables import print_estimate

    return emit(estimate_document(args), args.json, print_estimate)


def estimate_document(args: argparse.Namespace) -> dict[str, Any]:
    """Roofline breakdown of one configuration, every field through its layout as the planner
    computes it: the decode step and the colocated step and TTFT on the whole replica (each
    attention rank with its share of the batch and of the prefill), the prefill service time on
    ``tp x pp`` GPUs as a prefill pool of that layout runs it (pools have no attention ranks).
    The command and :func:`fleetplan.commands.api.estimate` both print this document."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.catalogs.loader import InputError
    from fleetplan.models.layout import Layout, layout_problem, memory_per_gpu_bytes
    from fleetplan.models.prefill import prefill_flops
    from fleetplan.models.roofline import decode_step
    from fleetplan.models.ttft import colocated_configuration_ttft_s, prefill_service_s

    catalog = load_catalog(args.catalog)
    llm = catalog.model(args.model, "--model")
    gpu = catalog.gpu(args.gpu, "--gpu")
    preset = resolve_preset(args.preset, args.calibration)
    layout = Layout(args.tp, args.pp, args.ep, args.dp_attention)
    problem = layout_problem(llm, gpu, layout)
    if problem:
        flag = problem.split()[0] if problem.split()[0] in ("pp", "ep", "dp_attention") else "tp"
        raise InputError(f"--{flag.replace('_', '-')}: {problem}")
    e = decode_step(
        llm, gpu, precision=args.precision, tp=args.tp, batch=args.batch, input_tokens=args.input_tokens,
        output_tokens=args.output_tokens, preset=preset, kv_precision=args.kv_precision, engine=args.engine,
        layout=layout,
    )
    d: dict[str, Any] = {
        "model": llm.id, "gpu": gpu.id, "tp": args.tp, "pp": args.pp, "ep": args.ep, "dp_attention": args.dp_attention,
        "gpus_per_replica": layout.gpus, "nodes_per_replica": layout.nodes(gpu), "layout": layout.label(),
        "memory_per_gpu_bytes": memory_per_gpu_bytes(llm, layout, e),
        "batch": args.batch, "precision": args.precision,
        "input_tokens": args.input_tokens, "output_tokens": args.output_tokens, "preset": preset.name,
        "calibration": preset.calibration,
    }
    d.update(e.as_dict())
    work = prefill_flops(llm, preset, args.input_tokens)
    d["prefill_flops_per_request"] = work
    d["prefill_service_ms"] = prefill_service_s(llm, gpu, preset, precision=args.precision, tp=args.tp, flops=work,
                                                pp=args.pp) * 1e3
    mixed, ttft = colocated_configuration_ttft_s(
        llm, gpu, preset, precision=args.precision, tp=args.tp, batch=args.batch, input_tokens=args.input_tokens,
        output_tokens=args.output_tokens, kv_precision=args.kv_precision, flops_per_request=work, utilisation=0.0,
        engine=args.engine, layout=layout,
    )
    d["colocated_step_time_ms"] = mixed.step_time_s * 1e3
    d["ttft_ms"] = ttft * 1e3
    d.update(_benchmark_prediction(catalog, preset, args))
    return d


# ---------------------------------------------------------------- plan
def cmd_plan(args: argparse.Namespace) -> int:
    """Cheapest fleet for a scenario; several scenarios, or a directory of them, as a batch."""
    from fleetplan.commands.batch import BatchSettings, is_batch, run_batch

    if is_batch(args.scenario):
        settings = BatchSettings(catalogs=tuple(args.catalog), solver=args.solver, calibration=args.calibration,
                            alternatives=_alternatives(args))
        return run_batch(args.scenario, settings, args.out, args.json, args.jobs or 1, console(), args.scheduler)
    return _plan_one(args)


def _alternatives(args: argparse.Namespace) -> Alternatives:
    """Which comparisons ``plan`` searches, from its flags."""
    return (Alternatives.NONE if args.no_alternatives else Alternatives.ALL if args.all_alternatives
            else Alternatives.DEFAULT)


def _plan_one(args: argparse.Namespace) -> int:
    """Plan one scenario file: notes on stderr, the JSON plan to ``--out``, JSON or tables on stdout."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.optimizer.runtime.deadline import DEFAULT_TIME_LIMIT_S, Deadline
    from fleetplan.rendering.progress import ProgressLine
    from fleetplan.optimizer.plan import make_plan
    from fleetplan.optimizer.explanation.results import plan_to_dict
    from fleetplan.optimizer.traffic.scenario import load_scenario
    from fleetplan.optimizer.simulation.verify import make_verified_plan
    from fleetplan.rendering.tables import print_plan

    scenario, folder = load_scenario(args.scenario[0])
    out = None
    if args.out:
        inputs = scenario_inputs(args.scenario[0], scenario, folder, args.catalog, args.calibration)
        out = check_output_file(args.out, "--out", inputs)
    catalog = load_catalog([*(folder / c for c in scenario.catalogs), *args.catalog])
    preset = resolve_preset(scenario.preset, args.calibration, SCENARIO_PRESET_HINT) if args.calibration else None
    progress = ProgressLine.for_terminal(quiet=args.json)
    deadline = Deadline.after(scenario.options.time_limit_s or DEFAULT_TIME_LIMIT_S, progress)
    keywords = dict(solver=args.solver, alternatives=_alternatives(args), preset=preset,
                    jobs=args.jobs or default_jobs())
    try:
        plan = make_verified_plan(scenario, catalog, folder, deadline, make_plan, verify=not args.no_verify,
                                  **keywords)
    finally:
        progress.close()
    d = plan_to_dict(plan)
    _plan_notes(d)
    text = dumps(d)  # strict JSON: a number JSON cannot hold fails here, before anything is written
    if out is not None:
        write_atomically(out, text)
    return emit(d, args.json, print_plan)


def _plan_notes(d: dict[str, Any]) -> None:
    """A warning on stderr when the plan is not proven optimal, a note per stage the time limit cut."""
    if d["status"] != Status.OPTIMAL:
        print(terminal(f"fleetplan: warning: {d['termination']}: not proven optimal"), file=sys.stderr)
    for what in d.get("stopped_by_time_limit", []):
        print(terminal(f"fleetplan: note: time limit ({d['time_limit_s']:g} s): {what} cut short"), file=sys.stderr)
    v = d.get("verification")
    if v is not None and v["meets_targets"] is None:
        print(terminal(f"fleetplan: note: unverified: {v['method']}"), file=sys.stderr)


# ---------------------------------------------------------------- breakeven
def cmd_breakeven(args: argparse.Namespace) -> int:
    """All-API vs self-host only vs the optimal blend as volume scales: each scale's costs on
    stderr as it finishes (unless ``--json``), then the table or the JSON document."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.optimizer.decisions.breakeven import DEFAULT_SCALES, PLOT_SUFFIXES, BreakevenPoint, breakeven, plot
    from fleetplan.optimizer.traffic.scenario import load_scenario
    from fleetplan.rendering.tables import breakeven_line, print_breakeven

    scenario, folder = load_scenario(args.scenario)
    plot_path = None
    if args.plot:
        plot_path = check_output_file(args.plot, "--plot", scenario_inputs(args.scenario, scenario, folder, args.catalog),
                                      suffixes=PLOT_SUFFIXES)
    catalog = load_catalog([*(folder / c for c in scenario.catalogs), *args.catalog])
    scales = tuple(args.scales) if args.scales else DEFAULT_SCALES

    def show(p: BreakevenPoint) -> None:
        if not args.json:
            print(breakeven_line(p), file=sys.stderr, flush=True)

    result = breakeven(scenario, catalog, folder, scales, solver=args.solver, on_point=show)
    for what in result.stopped:
        print(terminal(f"fleetplan: note: time limit reached: {what} not computed"), file=sys.stderr)
    if plot_path is not None:
        plot(result, plot_path, chart_text(f"build vs buy: {Path(args.scenario).name}"))
    if args.json:
        sys.stdout.write(dumps(result.as_dict()))
    else:
        print_breakeven(result, args.scenario, args.plot, console())
    return 0


# ---------------------------------------------------------------- catalog
def _gpu_rows(catalog: Any) -> list[dict[str, Any]]:
    """One row per GPU: memory, bandwidth and dense FLOP/s per precision in display units."""
    return [
        {
            "id": g.id, "memory_GB": g.memory_bytes / 1e9, "bandwidth_TB_per_s": g.mem_bandwidth_bytes_per_s / 1e12,
            "dense_TFLOPS": " ".join(f"{k}:{v / 1e12:g}" for k, v in g.dense_flops_per_s.items()),
            "scaleup_gpus": g.scaleup_domain_gpus, "source": g.source, "as_of": g.as_of.isoformat(),
        }
        for g in sorted(catalog.gpus.values(), key=lambda g: g.id)
    ]


def _model_rows(catalog: Any) -> list[dict[str, Any]]:
    """One row per model: parameters in billions, attention kind and KV bytes per token in bf16."""
    from fleetplan.models.memory import kv_bytes_per_token

    return [
        {
            "id": m.id, "total_params_B": round(m.total_params / 1e9, 2), "active_params_B": round(m.active_params / 1e9, 2),
            "attention": m.attention + (" +moe" if m.moe else ""), "kv_bytes_per_token_bf16": int(kv_bytes_per_token(m, "bf16")),
            "source": m.source, "as_of": m.as_of.isoformat(),
        }
        for m in sorted(catalog.models.values(), key=lambda m: m.id)
    ]


def _price_rows(catalog: Any) -> list[dict[str, Any]]:
    """The reference GPU-hour prices, then every provider's, cheapest first per GPU and kind."""
    return [
        {"gpu": r.gpu, "provider": "reference", "kind": "reference", "usd_per_gpu_hour": r.usd_per_gpu_hour,
         "source": r.source, "as_of": r.as_of.isoformat()}
        for r in sorted(catalog.reference.values(), key=lambda r: r.gpu)
    ] + [
        {"gpu": p.gpu, "provider": p.provider, "kind": p.kind, "usd_per_gpu_hour": p.usd_per_gpu_hour,
         "source": p.source, "as_of": p.as_of.isoformat()}
        for p in sorted(catalog.prices, key=lambda p: (p.gpu, p.kind, p.usd_per_gpu_hour, p.provider))
    ]


def _api_rows(catalog: Any) -> list[dict[str, Any]]:
    """One row per hosted-API offer: USD per million input, output and cached input tokens."""
    return [
        {"id": a.id, "model": a.model, "input_usd_per_M": a.input_usd_per_million_tokens,
         "output_usd_per_M": a.output_usd_per_million_tokens, "cached_input_usd_per_M": a.cached_input_usd_per_million_tokens,
         "source": a.source, "as_of": a.as_of.isoformat()}
        for a in sorted(catalog.api_prices.values(), key=lambda a: a.id)
    ]


# What ``catalog list KIND`` shows, by KIND (the flag's choices).
LISTINGS = {"gpus": _gpu_rows, "models": _model_rows, "prices": _price_rows, "api": _api_rows}


def cmd_catalog_list(args: argparse.Namespace) -> int:
    """List what the catalog holds, with sources."""
    from fleetplan.catalogs import load_catalog
    from fleetplan.rendering.tables import print_catalog

    rows = LISTINGS[args.kind](load_catalog(args.catalog))
    return emit(rows, args.json, lambda data, con: print_catalog(args.kind, data, con))


def cmd_catalog_add_model(args: argparse.Namespace) -> int:
    """Import a model from a local config.json into a user catalog file (:mod:`fleetplan.catalogs.user`)."""
    import yaml

    from fleetplan.catalogs.files import read_json, read_text
    from fleetplan.catalogs.hf_config import entry_from_hf_config
    from fleetplan.catalogs.loader import CatalogError, parse_yaml
    from fleetplan.catalogs.user import check_model_id, merge_model

    check_model_id(args.id, args.replace, args.out)  # before any file is read
    src = Path(args.config)
    out = check_output_file(args.out, "--out", [src, *catalog_inputs()])
    cfg = read_json(src, "config.json", CatalogError, "add-model: ")
    if not isinstance(cfg, dict):
        raise CatalogError(f"{src}: config.json must be a JSON object")
    entry = entry_from_hf_config(cfg, args.id, source=f"config.json ({src.name})")
    overrides = {"name": args.name or None, "total_params": args.total_params, "active_params": args.active_params}
    entry.update({k: v for k, v in overrides.items() if v is not None})
    doc = parse_yaml(read_text(out, "catalog file", CatalogError, "--out: "), args.out, CatalogError) if out.exists() else None
    merged = merge_model(doc, entry, args.replace, str(args.out))
    write_atomically(out, yaml.safe_dump(merged, sort_keys=False, allow_unicode=True))
    print(terminal(
        f"added {args.id} to {args.out}: {entry['total_params'] / 1e9:.2f}B parameters "
        f"({entry['active_params'] / 1e9:.2f}B active), use it with --catalog {args.out}"
    ))
    return 0


# ---------------------------------------------------------------- parser
def _add_estimate(sub: Any) -> None:
    """The ``estimate`` subcommand's flags."""
    e = sub.add_parser("estimate", help="roofline breakdown of one configuration")
    e.add_argument("--model", required=True)
    e.add_argument("--gpu", required=True)
    e.add_argument("--tp", type=number_flag(F.TP), default=1)
    e.add_argument("--pp", type=number_flag(F.TP), default=1, help="pipeline stages")
    e.add_argument("--ep", type=number_flag(F.TP), default=1, help="expert-parallel degree (MoE)")
    e.add_argument("--dp-attention", type=number_flag(F.TP), default=1, help="attention data-parallel ranks (MoE)")
    e.add_argument("--batch", type=number_flag(F.BATCH), default=1)
    add_precision_flags(e)
    e.add_argument("--input-tokens", type=number_flag(F.WHOLE_TOKENS), required=True)
    e.add_argument("--output-tokens", type=number_flag(F.WHOLE_TOKENS), required=True)
    e.add_argument("--engine", default=None,
                   help="serving engine (vllm, sglang, trtllm): its calibration factors and prefill scheduling in the "
                        "benchmark prediction")
    add_preset_flags(e)
    add_catalog_flag(e)
    e.add_argument("--json", action="store_true", help="print JSON")
    e.set_defaults(func=cmd_estimate)


PLAN_DESCRIPTION = (
    "Plan one scenario file, or a batch: several files and/or directories (every *.yaml and *.yml "
    "directly in a directory). A batch solves every scenario, sorted by file name without extension, even when some fail; "
    "it prints a summary table (one row per scenario and per product; --json prints it as JSON), "
    "names each failed scenario on stderr and then exits with code 2."
)
PLAN_OUT_HELP = (
    "one scenario: also write the JSON plan to this file; a batch: write each plan to OUT/<stem>.json and "
    "the summary to OUT/summary.csv and OUT/summary.json in this directory (created if needed; a failed "
    "scenario writes and removes nothing); without --out a batch writes no files. An output that is one "
    "of the inputs is refused"
)


def _add_plan(sub: Any) -> None:
    """The ``plan`` subcommand's flags."""
    pl = sub.add_parser("plan", help="cheapest fleet for a scenario file, or for a batch of them",
                        description=PLAN_DESCRIPTION)
    pl.add_argument("scenario", nargs="+", help="scenario YAML file(s) or directories of them")
    add_solver_flag(pl)
    add_catalog_flag(pl)
    pl.add_argument("--json", action="store_true", help="print JSON (a batch: the summary)")
    pl.add_argument("--out", help=PLAN_OUT_HELP)
    pl.add_argument("--jobs", type=number_flag(F.JOBS), default=None,
                    help="a batch: plan this many scenarios at once in worker processes (default 1); one scenario: "
                         "use this many worker processes for independent multi-hour components, a long request "
                         "mix's hours and the runner-ups (default: the CPUs here, at most "
                         f"{MAX_DEFAULT_JOBS}; the same plan for any value)")
    pl.add_argument("--calibration", help=CALIBRATION_HELP)
    pl.add_argument("--scheduler", help="a batch: " + SCHEDULER_HELP)
    pl.add_argument("--no-verify", action="store_true",
                    help="a scenario with a trace: return the plan without replaying the trace's peak hour on it "
                         "(the plan is then unverified)")
    which = pl.add_mutually_exclusive_group()
    which.add_argument("--no-alternatives", action="store_true",
                       help="skip the per-GPU-type runner-up solves (and, for a request mix, the mix kept to each "
                            "prefill mode)")
    which.add_argument("--all-alternatives", action="store_true",
                       help="also search the runner-ups and prefill-mode costs of a large request mix over 48 "
                            "distinct hours or more (each as long a search as the plan's own; by default they are "
                            "listed by lower bound, unsearched)")
    pl.set_defaults(func=cmd_plan)


def _add_breakeven(sub: Any) -> None:
    """The ``breakeven`` subcommand's flags."""
    be = sub.add_parser("breakeven", help="all-API vs self-host vs blend as demand scales")
    be.add_argument("scenario")
    be.add_argument("--scales", type=number_flag(F.DEMAND_SCALE), nargs="+", help="demand multiples to evaluate")
    add_solver_flag(be)
    add_catalog_flag(be)
    be.add_argument("--plot", help="write the curves to this PNG or SVG file")
    be.add_argument("--json", action="store_true", help="print JSON")
    be.set_defaults(func=cmd_breakeven)


def _add_catalog(sub: Any) -> None:
    """The ``catalog list`` and ``catalog add-model`` subcommands' flags."""
    c = sub.add_parser("catalog", help="list or extend the catalogs")
    csub = c.add_subparsers(dest="catalog_command", required=True, parser_class=Parser)
    cl = csub.add_parser("list", help="show loaded entries with sources")
    cl.add_argument("kind", choices=tuple(LISTINGS))
    add_catalog_flag(cl)
    cl.add_argument("--json", action="store_true")
    cl.set_defaults(func=cmd_catalog_list)
    ca = csub.add_parser("add-model", help="import a model from a local Hugging Face config.json",
                         description="Import a model from a local Hugging Face config.json into a user catalog file. "
                                     "An --id that names a shipped model is refused unless --replace is given.")
    ca.add_argument("config")
    ca.add_argument("--id", required=True, help="id of the new model entry (an id of a shipped model needs --replace)")
    ca.add_argument("--name")
    ca.add_argument("--total-params", type=number_flag(F.MODEL_PARAMS_FLAG))
    ca.add_argument("--active-params", type=number_flag(F.MODEL_PARAMS_FLAG))
    ca.add_argument("--out", default="fleetplan-catalog.yaml", help="user catalog file to create or update")
    ca.add_argument("--replace", action="store_true",
                    help="allow an --id of the shipped catalog: the entry then replaces the shipped model wherever "
                         "this catalog file is given (without it such an id is refused)")
    ca.set_defaults(func=cmd_catalog_add_model)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    from fleetplan.commands.fidelity import register
    from fleetplan.commands.report import register as register_report
    from fleetplan.commands.sweep import register as register_sweep
    from fleetplan.commands.deploy import register as register_deploy
    from fleetplan.commands.simulate import register as register_simulate
    from fleetplan.commands.trace import register as register_trace
    from fleetplan.commands.commit import register as register_commit

    p = Parser(prog="fleetplan", description="Cheapest GPU fleet for LLM inference, as a mixed-integer program.")
    p.add_argument("--version", action="version", version=f"fleetplan {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for add in (_add_estimate, _add_plan, _add_breakeven, _add_catalog, register, register_report, register_sweep,
                register_deploy, register_trace, register_simulate, register_commit):
        add(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point: run a subcommand, turning user errors into one line and exit code 2, an
    interrupt (Ctrl-C) into one line and exit code 130, SIGTERM into one line and 143."""
    from fleetplan.commands.interrupts import exit_code, install_handlers, message

    restore = install_handlers()
    try:
        return run_command(build_parser().parse_args(argv))
    except KeyboardInterrupt as exc:  # SIGTERM too (Terminated); cleanup ran in the finally blocks on the way
        detail = f": {terminal(one_line(str(exc)))}" if str(exc) else ""
        print(f"{message(exit_code(exc))}{detail}", file=sys.stderr)
        return exit_code(exc)
    finally:
        restore()


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

"""``fleetplan estimate``: the roofline breakdown of one configuration, as a table or JSON.

Owns this command's flags and output; every number comes from :mod:`fleetplan.models`."""

from __future__ import annotations

import argparse
from typing import Any

from fleetplan.catalogs import fields as F
from fleetplan.commands.flags import add_catalog_flag, add_precision_flags, add_preset_flags, number_flag
from fleetplan.commands.io import emit, resolve_preset


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


def register(sub: Any) -> None:
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

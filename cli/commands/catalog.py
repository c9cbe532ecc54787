"""``fleetplan catalog list`` and ``fleetplan catalog add-model``: the catalog shown, and a model
entry written to a user catalog.

Owns these commands' flags and output; reading and checking catalogs is :mod:`fleetplan.catalogs`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.files import check_output_file
from fleetplan.rendering.escape import terminal
from fleetplan.commands.flags import Parser, add_catalog_flag, number_flag
from fleetplan.commands.io import catalog_inputs, emit, write_atomically


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


def register(sub: Any) -> None:
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

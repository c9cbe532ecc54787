"""Human-readable tables for the CLI (rich)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _gb(x: float) -> str:
    return f"{x / 1e9:,.1f} GB"


def print_estimate(d: dict[str, Any], console: Console) -> None:
    """The roofline breakdown of one configuration."""
    t = Table(title=f"{d['model']} on {d['tp']}x {d['gpu']} ({d['precision']}), batch {d['batch']}, preset {d['preset']}")
    t.add_column("quantity")
    t.add_column("value", justify="right")
    rows = [
        ("weights", _gb(d["weight_bytes"])),
        (f"KV read per sequence ({d['kv_precision']})", _gb(d["kv_bytes_read_per_sequence"])),
        ("bytes per step", _gb(d["bytes_per_step"])),
        ("FLOPs per step", f"{d['flops_per_step']:.3e}"),
        ("memory time", f"{d['memory_time_ms']:.2f} ms"),
        (f"compute time ({d['compute_precision']} rate)", f"{d['compute_time_ms']:.2f} ms"),
        ("step time", f"{d['step_time_ms']:.2f} ms ({d['bound']}-bound)"),
        ("per-user speed", f"{d['per_user_tokens_per_s']:,.1f} tokens/s"),
        ("replica throughput", f"{d['replica_tokens_per_s']:,.0f} tokens/s"),
        ("memory needed / usable", f"{_gb(d['memory_needed_bytes'])} / {_gb(d['memory_usable_bytes'])}"
         + ("" if d["fits_in_memory"] else "  DOES NOT FIT")),
        ("prefill per request", f"{d['prefill_flops_per_request']:.3e} FLOPs"),
    ]
    for k, v in rows:
        t.add_row(k, v)
    console.print(t)


def print_plan(d: dict[str, Any], console: Console) -> None:
    """The plan: one line per product, the total, the reasons and alternatives."""
    t = Table(title=f"fleetplan: {d['status']} ({d['solver']}, preset {d['preset']})")
    for col in ("product", "model", "gpu", "tp", "prec", "batch", "replicas", "GPUs", "tok/s/user", "tok/s/replica", "$/month", "$/M tok"):
        t.add_column(col, justify="right" if col not in ("product", "model", "gpu", "prec") else "left")
    for p in d["products"]:
        t.add_row(
            p["name"], p["model"], p["gpu"], str(p["tp"]), p["precision"], str(p["batch"]), f"{p['replicas']:,}",
            f"{p['gpus']:,}", f"{p['per_user_tokens_per_s']:,.1f}", f"{p['replica_tokens_per_s']:,.0f}",
            f"{p['monthly_cost_usd']:,.0f}",
            "-" if p["cost_per_million_output_tokens_usd"] is None else f"{p['cost_per_million_output_tokens_usd']:.3f}",
        )
    t.add_section()
    t.add_row("total", "", "", "", "", "", "", f"{sum(p['gpus'] for p in d['products']):,}", "", "", f"{d['monthly_cost_usd']:,.0f}", "")
    console.print(t)
    for p in d["products"]:
        console.print(f"[bold]{p['name']}[/bold]: {p['why']}.")
        console.print(f"  price: ${p['usd_per_gpu_hour']:.2f}/GPU-hour from {p['price_source']}")
        if p["alternatives"]:
            alt = Table(title=f"{p['name']}: cheapest plan on each other GPU type", title_justify="left")
            for col in ("gpu", "tp", "prec", "batch", "replicas", "GPUs", "$/month", "vs plan"):
                alt.add_column(col, justify="left" if col in ("gpu", "prec") else "right")
            for a in p["alternatives"]:
                alt.add_row(
                    a["gpu"], str(a["tp"]), a["precision"], str(a["batch"]), f"{a['replicas']:,}", f"{a['gpus']:,}",
                    f"{a['monthly_cost_usd']:,.0f}", f"+{a['cost_difference_usd']:,.0f}",
                )
            console.print(alt)
    counts = d["candidates"]
    for name, c in counts.items():
        console.print(
            f"[dim]{name}: {c['generated']:,} candidates generated, {c['feasible']:,} feasible, "
            f"{c['after_pruning']} after pruning; MIP {d['model_size']['variables']} variables, "
            f"{d['model_size']['constraints']} constraints[/dim]"
        )


def print_catalog(kind: str, rows: list[dict[str, Any]], console: Console) -> None:
    """A catalog listing with sources."""
    if not rows:
        console.print(f"no {kind} loaded")
        return
    t = Table(title=f"catalog: {kind} ({len(rows)})")
    cols = list(rows[0])
    for col in cols:
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(*("" if r[c] is None else str(r[c]) for c in cols))
    console.print(t)

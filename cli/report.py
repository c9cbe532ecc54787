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


def _n(x: Any, fmt: str = "{:,.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def print_plan(d: dict[str, Any], console: Console) -> None:
    """The plan: decode and prefill lines per product, product totals, reasons and alternatives."""
    hours = d.get("hours", 1)
    title = f"fleetplan: {d['status']} ({d['solver']}, preset {d['preset']}"
    title += f", calibration {d['calibration']}" if d.get("calibration") else ""
    title += f", {hours} h horizon, tiers {'/'.join(d['tiers'])})" if hours > 1 else ")"
    t = Table(title=title)
    for col in ("product", "part", "gpu", "tp", "prec", "batch", "replicas", "GPUs", "tok/s/user", "tok/s/replica",
                "TTFT ms", "$/month", "$/M tok"):
        t.add_column(col, justify="left" if col in ("product", "part", "gpu", "prec") else "right", no_wrap=True)
    for p in d["products"]:
        pre = p["prefill"]
        t.add_row(
            p["name"], f"decode ({pre['mode'] or 'api'})", p["gpu"] or "-", _n(p["tp"], "{}"), p["precision"] or "-",
            _n(p["batch"], "{}"), f"{p['replicas']:,}", f"{p['gpus']:,}", _n(p["per_user_tokens_per_s"], "{:,.1f}"),
            _n(p["replica_tokens_per_s"]), _n(p["ttft_ms"]),
            f"{p['monthly_cost_usd'] - pre['monthly_cost_usd'] - p['monthly_cost_breakdown_usd']['api'] - p['monthly_cost_breakdown_usd']['fixed']:,.0f}",
            "",
        )
        if pre["gpu"]:
            t.add_row("", "prefill pool", pre["gpu"], str(pre["tp"]), pre["precision"], "", f"{pre['replicas']:,}",
                      f"{pre['gpus']:,}", "", "", "", f"{pre['monthly_cost_usd']:,.0f}", "")
        b = p["monthly_cost_breakdown_usd"]
        if b["api"]:
            t.add_row("", f"api ({p['api_fraction']:.0%} of tokens)", p["api"]["id"], "", "", "", "", "", "", "", "",
                      f"{b['api']:,.0f}", "")
        if b["fixed"]:
            t.add_row("", "fixed self-hosting", "", "", "", "", "", "", "", "", "", f"{b['fixed']:,.0f}", "")
        t.add_row(f"[bold]{p['name']} total[/bold]", "", "", "", "", "", "", f"{p['gpus'] + (pre['gpus'] or 0):,}", "", "", "",
                  f"[bold]{p['monthly_cost_usd']:,.0f}[/bold]", _n(p["cost_per_million_tokens_usd"], "{:.3f}"))
        t.add_section()
    gpus = sum(p["gpus"] + (p["prefill"]["gpus"] or 0) for p in d["products"])
    t.add_row("[bold]total[/bold]", "", "", "", "", "", "", f"{gpus:,}", "", "", "", f"[bold]{d['monthly_cost_usd']:,.0f}[/bold]", "")
    console.print(t)
    if hours > 1 or any(v for k, v in d["monthly_cost_breakdown_usd"].items() if k != "on_demand"):
        b = d["monthly_cost_breakdown_usd"]
        console.print("cost breakdown per month: " + ", ".join(f"{k} ${v:,.0f}" for k, v in b.items()))
    for p in d["products"]:
        console.print(f"[bold]{p['name']}[/bold]: {p['why']}.")
        if p["usd_per_gpu_hour"] is not None:
            console.print(f"  price: ${p['usd_per_gpu_hour']:.2f}/GPU-hour from {p['price_source']}")
        if hours > 1 and p["utilisation"] is not None:
            console.print(
                f"  utilisation {p['utilisation']:.0%} of self-hosted capacity; cost ${p['cost_per_million_tokens_usd']:.3f} "
                f"per million tokens against ${p['ideal_cost_per_million_tokens_usd']:.3f} for the fleet at 100%; "
                f"API share {p['api_fraction']:.1%}"
            )
        chk = p.get("prefill_check")
        if chk and p["prefill"]["mode"] != "headroom":
            console.print(f"  prefill check: {chk['verdict']}")
        kv = p["prefill"].get("kv_transfer")
        if kv:
            console.print(
                f"  KV hand-off: {kv['bytes_per_request'] / 1e6:,.0f} MB per request, {kv['peak_bytes_per_s'] / 1e9:,.1f} GB/s at peak "
                f"over the {kv['link']} link ({kv['link_utilisation']:.1%} of {kv['link_bytes_per_s'] / 1e9:,.0f} GB/s), "
                f"{kv['transfer_ms_per_request']:.1f} ms per request"
            )
        if p["alternatives"]:
            alt = Table(title=f"{p['name']}: cheapest plan on each other GPU type", title_justify="left")
            for col in ("gpu", "tp", "prec", "batch", "replicas", "GPUs", "product $/month", "plan vs chosen"):
                alt.add_column(col, justify="left" if col in ("gpu", "prec") else "right")
            for a in p["alternatives"]:
                alt.add_row(
                    a["gpu"], str(a["tp"]), a["precision"], str(a["batch"]), f"{a['replicas']:,}", f"{a['gpus']:,}",
                    f"{a['monthly_cost_usd']:,.0f}", f"+{a['cost_difference_usd']:,.0f}",
                )
            console.print(alt)
    print_portfolio(d, console)
    for name, c in d["candidates"].items():
        console.print(
            f"[dim]{name}: {c['generated']:,} candidates generated, {c['feasible']:,} feasible, "
            f"{c['after_pruning']} after pruning[/dim]"
        )
    console.print(f"[dim]MIP: {d['model_size']['variables']:,} variables, {d['model_size']['constraints']:,} constraints[/dim]")


def print_portfolio(d: dict[str, Any], console: Console) -> None:
    """Shared limits: GPUs per type against availability and instances, components, pools, the
    first-come comparison. Printed only when the plan has several products or GPU limits."""
    usage = d.get("gpu_usage") or {}
    if len(d["products"]) < 2 and not any(u["available"] is not None or u.get("available_by_tier") or u["instances"]
                                          for u in usage.values()):
        return
    if usage:
        t = Table(title="GPUs per type at the busiest hour", title_justify="left")
        for col in ("gpu", "GPUs", "by tier", "available", "instances", "stranded GPUs"):
            t.add_column(col, justify="left" if col in ("gpu", "by tier", "available") else "right")
        for gpu, u in usage.items():
            avail = "-" if u["available"] is None else f"{u['available']:,}"
            if u.get("available_by_tier"):
                avail += " (" + ", ".join(f"{k} {v:,}" for k, v in u["available_by_tier"].items()) + ")"
            t.add_row(gpu, f"{u['gpus']:,}", ", ".join(f"{k} {v:,}" for k, v in u.get("gpus_by_tier", {}).items()),
                      avail, _n(u["instances"], "{:,}") if u["instances"] is not None else "-",
                      f"{u['stranded_gpus']:,}")
        console.print(t)
    comps = d.get("components") or []
    if len(d["products"]) > 1 and comps:
        joint = [c for c in comps if len(c) > 1]
        console.print(f"components: {len(comps)} ({len(joint)} planned jointly"
                      + (": " + "; ".join(", ".join(c) for c in joint) if joint else "") + ")")
    for pool in d.get("pools") or []:
        console.print(
            f"{pool['name']}: {', '.join(pool['products'])} share {pool['replicas']:,} replicas ({pool['gpus']:,} GPUs) "
            f"for ${pool['monthly_cost_usd']:,.0f}; separately {_n(pool.get('separate_gpus'), '{:,}')} GPUs for "
            f"${_n(pool.get('separate_monthly_cost_usd'))}"
        )
    if d.get("first_come_monthly_cost_usd"):
        fc, total = d["first_come_monthly_cost_usd"], d["monthly_cost_usd"]
        console.print(f"planned one after another, first come first served: ${fc:,.0f} a month; the joint plan saves "
                      f"${fc - total:,.0f} ({(fc - total) / fc:.0%})")


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

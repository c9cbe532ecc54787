"""Human-readable tables for the CLI (rich).

Owns how a plan reads in a terminal; it computes nothing a plan does not already hold."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fleetplan.rendering.table_fit import Col, Row, fit_table
from fleetplan.optimizer.common.defaults import RUNNER_UP_TYPES
from fleetplan.optimizer.common.enums import LeftOut, PrefillMode, Tier
from fleetplan.optimizer.common.text import gap_split, pct

if TYPE_CHECKING:
    from rich.console import Console

    from fleetplan.optimizer.decisions.breakeven import BreakevenPoint, BreakevenResult

# The plan table's columns; at narrow widths the speed, price-per-token and configuration
# details stack beneath their neighbours (``give_way`` order), then the rows become a list.
PLAN_COLUMNS: tuple[Col, ...] = (
    Col("product", "left", lead=True),
    Col("part", "left", give_way=7, under="product", lead=True),
    Col("gpu", "left", give_way=8, under="product"),
    Col("tp"),
    Col("prec", "left", give_way=5, under="tp"),
    Col("batch", give_way=4, under="tp"),
    Col("replicas", give_way=6, under="GPUs"),
    Col("GPUs"),
    Col("tokens/s\nper user", short="tok/s/user"),
    Col("tokens/s\nper replica", give_way=1, under="tokens/s\nper user", short="tok/s/replica"),
    Col("TTFT\nms", give_way=2, under="tokens/s\nper user", short="TTFT ms"),
    Col("$/month"),
    Col("$ per million\noutput tokens", give_way=3, under="$/month", short="$/M output tok"),
)


def layout_cell(p: dict[str, Any]) -> str:
    """The TP column: the TP degree of a tensor-parallel replica, else its layout (``tp8·pp2``, ``dp16·ep16``)."""
    layout = p.get("layout")
    if p.get("tp") is None:
        return "-"
    return str(p["tp"]) if layout in (None, f"tp{p['tp']}") else str(layout)


# One key per column of PLAN_COLUMNS, in its order: how the rows name their cells.
PLAN_KEYS: tuple[str, ...] = (
    "product", "part", "gpu", "tp", "prec", "batch", "replicas", "gpus", "user_tps", "replica_tps", "ttft", "cost", "per_m",
)
# tiers: the pricing tier every plan can use; a plan that pays only it over one hour shows no breakdown line.
ALTERNATIVE_COLUMNS: tuple[Col, ...] = (
    Col("gpu", "left"), Col("tp"), Col("prec", "left", give_way=2, under="tp"), Col("batch", give_way=1, under="tp"),
    Col("replicas", give_way=3, under="GPUs"), Col("GPUs"), Col("product\n$/month", short="product $/month"),
    Col("plan vs\nchosen ($)", give_way=4, under="product\n$/month", short="vs chosen ($)"),
)
USAGE_COLUMNS: tuple[Col, ...] = (
    Col("gpu", "left"), Col("GPUs"), Col("by tier", "left"), Col("available", "left"), Col("instances"),
    Col("stranded GPUs", give_way=1, under="instances"),
)


def escaped(data: Any) -> Any:
    """``data`` with every string escaped for a rich console (:func:`fleetplan.rendering.escape.for_terminal`):
    names and sources from the user's files print as written (a product called ``chat[/b]`` is
    not a closing tag) and their control characters show escaped (no line break, no escape sequence)."""
    from fleetplan.rendering.escape import for_terminal

    return for_terminal(data)


def _gb(x: float) -> str:
    return f"{x / 1e9:,.1f} GB"


def print_estimate(d: dict[str, Any], console: Console) -> None:
    """The roofline breakdown of one configuration."""
    d = escaped(d)
    rows: list[Row] = [
        ("weights", _gb(d["weight_bytes"])),
        (f"KV read per sequence ({d['kv_precision']})", _gb(d["kv_bytes_read_per_sequence"])),
        ("bytes per step", _gb(d["bytes_per_step"])),
        ("FLOPs per step", f"{d['flops_per_step']:.3e}"),
        ("memory time", f"{d['memory_time_ms']:.2f} ms"),
        (f"compute time ({d['compute_precision']} rate)", f"{d['compute_time_ms']:.2f} ms"),
        ("step time", f"{d['step_time_ms']:.2f} ms ({d['bound']}-bound)"),
        ("speed per user", f"{d['per_user_tokens_per_s']:,.1f} tokens/s"),
        ("replica throughput", f"{d['replica_tokens_per_s']:,.0f} tokens/s"),
        ("memory needed / usable", f"{_gb(d['memory_needed_bytes'])} / {_gb(d['memory_usable_bytes'])}"
         + ("" if d["fits_in_memory"] else "  DOES NOT FIT")),
        ("prefill per request", f"{d['prefill_flops_per_request']:.3e} FLOPs, {d['prefill_service_ms']:.1f} ms alone"),
        ("TTFT, colocated at zero load", f"{d['ttft_ms']:,.1f} ms (steps carrying prefill: {d['colocated_step_time_ms']:.2f} ms)"),
    ]
    shape = d.get("layout") or f"tp{d['tp']}"
    gpus = d.get("gpus_per_replica") or d["tp"]
    title = f"{d['model']} on {gpus}x {d['gpu']} {shape} ({d['precision']}), batch {d['batch']}, preset {d['preset']}"
    console.print(fit_table(console, title, (Col("quantity", "left"), Col("value")), rows))


def _n(x: Any, fmt: str = "{:,.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def whole_dollars(parts: list[float], total: float) -> list[int]:
    """``parts`` rounded to whole dollars so that they add up to ``total`` rounded (largest
    remainder; ties to the earlier part): a table's column then sums to its total line."""
    target = round(total)
    floors = [int(x // 1) for x in parts]
    left = target - sum(floors)
    order = sorted(range(len(parts)), key=lambda i: (-(parts[i] - floors[i]), i))
    out = list(floors)
    for i in order[: max(0, left)]:
        out[i] += 1
    for i in order[::-1][: max(0, -left)]:
        out[i] -= 1
    return out


def _product_parts(p: dict[str, Any]) -> list[float]:
    """Decode (with stranded GPUs), prefill pool, API and fixed cost of a product row, in USD."""
    b = p["monthly_cost_breakdown_usd"]
    pre = p["prefill"]["monthly_cost_usd"] or 0.0
    return [p["monthly_cost_usd"] - pre - b["api"] - b["fixed"], pre, b["api"], b["fixed"]]


def price_lines(p: dict[str, Any]) -> list[str]:
    """The GPU-hour prices a product's replicas pay, per tier used, with their sources."""
    out = []
    for part, paid, gpu in (("decode", p.get("prices_paid") or {}, p["gpu"]),
                            ("prefill pool", p["prefill"].get("prices_paid") or {}, p["prefill"]["gpu"])):
        if paid:
            out.append(f"{part} price paid ({gpu}): " + "; ".join(
                f"{tier.replace('_', ' ')} ${v['usd_per_gpu_hour']:.2f}/GPU-hour from {v['source']}"
                for tier, v in paid.items()))
    if not out and p["usd_per_gpu_hour"] is not None:
        out.append(f"price: ${p['usd_per_gpu_hour']:.2f}/GPU-hour from {p['price_source']}")
    return out


def _plan_title(d: dict[str, Any]) -> str:
    """The plan table's title: status, solver, preset, calibration and, over several hours, the tiers."""
    hours = d.get("hours", 1)
    title = f"fleetplan: {d['status']} ({d['solver']}, preset {d['preset']}"
    title += f", calibration {d['calibration']}" if d.get("calibration") else ""
    return title + (f", {hours} h horizon, tiers {'/'.join(d['tiers'])})" if hours > 1 else ")")


def _sections(d: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The plan's products in table sections: (pool name, its members) for a pooled group, else
    ("", [the product])."""
    sections: list[tuple[str, list[dict[str, Any]]]] = []
    for p in d["products"]:
        name = p.get("pooled_in")
        if name and sections and sections[-1][0] == name:
            sections[-1][1].append(p)
        else:
            sections.append((name or "", [p]))
    return sections


class _PlanRows:
    """The rows of the plan table, one cell per key of :data:`PLAN_KEYS` (a key left out is blank)."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def add(self, **cells: str) -> None:
        """One row; ``cells`` by column key."""
        self.rows.append(tuple(cells.get(key, "") for key in PLAN_KEYS))

    def decode(self, label: str, p: dict[str, Any], part: str, replicas: int, gpus: int, cost: str) -> None:
        """The decode replicas of ``p`` (a product, or a pooled group's first member)."""
        self.add(product=label, part=part, gpu=p["gpu"] or "-", tp=layout_cell(p), prec=p["precision"] or "-",
                 batch=_n(p["batch"], "{}"), replicas=f"{replicas:,}", gpus=f"{gpus:,}",
                 user_tps=_n(p["per_user_tokens_per_s"], "{:,.1f}"), replica_tps=_n(p["replica_tokens_per_s"]),
                 ttft=_n(p["ttft_ms"]), cost=cost)

    def prefill(self, gpu: str, tp: str, precision: str, replicas: int, gpus: int, cost: str = "") -> None:
        """A prefill pool's replicas."""
        self.add(part="prefill pool", gpu=gpu, tp=str(tp), prec=precision, replicas=f"{replicas:,}", gpus=f"{gpus:,}",
                 cost=cost)

    def total(self, label: str, gpus: int, usd: int, per_million: str = "") -> None:
        """A total line in bold: GPUs counted once, whole dollars."""
        self.add(product=f"[bold]{label}[/bold]", gpus=f"{gpus:,}", cost=f"[bold]{usd:,}[/bold]", per_m=per_million)

    def pool(self, label: str, pool: dict[str, Any], members: list[dict[str, Any]], total_shown: int) -> None:
        """A pooled group: its shared decode (and prefill) replicas, each member's share, its total."""
        first = members[0]
        pre = first["prefill"]
        self.decode(label, first, f"decode ({pre['mode'] or 'api'})", pool["replicas"], pool["gpus"], "")
        if pool.get("prefill_gpu"):
            self.prefill(pool["prefill_gpu"], layout_cell(pre), pre["precision"], pool["prefill_replicas"], pool["prefill_gpus"])
        member_shown = whole_dollars([p["monthly_cost_usd"] for p in members], total_shown)
        for p, cost in zip(members, member_shown):
            self.add(product=f"  {p['name']}", part=f"share: {pct(p['pool_share'])} of tokens", replicas="-", gpus="-",
                     cost=f"{cost:,}", per_m=_n(p["cost_per_million_tokens_usd"], "{:.3f}"))
        self.total(f"{label} total", pool["gpus"] + (pool.get("prefill_gpus") or 0), total_shown)

    def mix(self, p: dict[str, Any], dollars: list[int]) -> None:
        """A request mix's decode configurations, one line each (``dollars``: their whole-dollar costs)."""
        for i, (c, usd) in enumerate(zip(p["configurations"], dollars)):
            self.add(product=p["name"] if i == 0 else "", part=f"decode ({c['prefill_mode']})", gpu=c["gpu"],
                     tp=layout_cell(c), prec=c["precision"], batch=str(c["batch"]), replicas=f"{c['replicas']:,}",
                     gpus=f"{c['gpus']:,}", cost=f"{usd:,}")

    def product(self, p: dict[str, Any], total_shown: int) -> None:
        """A product of its own: decode (a line per configuration of a mix), prefill pool, API and
        fixed cost lines, then its total."""
        pre, b = p["prefill"], p["monthly_cost_breakdown_usd"]
        configs = p.get("configurations") or []
        parts = _product_parts(p)
        if configs:  # the decode cost split by configuration (idle instance GPUs with the last)
            usd = [c["usd_per_month"] for c in configs]
            usd[-1] += parts[0] - sum(usd)
            parts = usd + parts[1:]
        shown = whole_dollars(parts, total_shown)
        pre_usd, api_usd, fixed_usd = shown[-3:]
        if configs:
            self.mix(p, shown[:-3])
        else:
            self.decode(p["name"], p, f"decode ({pre['mode'] or 'api'})", p["replicas"], p["gpus"], f"{shown[0]:,}")
        if pre["gpu"]:
            self.prefill(pre["gpu"], layout_cell(pre), pre["precision"], pre["replicas"], pre["gpus"], f"{pre_usd:,}")
        if b["api"]:
            self.add(part=f"api ({pct(p['api_fraction'])} of tokens)", gpu=p["api"]["id"], cost=f"{api_usd:,}")
        if b["fixed"]:
            self.add(part="fixed self-hosting", cost=f"{fixed_usd:,}")
        gpus = sum(c["gpus"] for c in configs) if configs else p["gpus"]
        self.total(f"{p['name']} total", gpus + (pre["gpus"] or 0), total_shown,
                   _n(p["cost_per_million_tokens_usd"], "{:.3f}"))


def _plan_rows(d: dict[str, Any], pools: dict[str, dict[str, Any]]) -> list[Row]:
    """The plan table's rows: a section per product or pooled group (numbered when there are
    several pools), then the plan's total; dollars rounded so that every section adds up."""
    sections = _sections(d)
    shown = whole_dollars([sum(p["monthly_cost_usd"] for p in members) for _, members in sections], d["monthly_cost_usd"])
    n_pools = sum(1 for name, _ in sections if name)
    seen_pools = 0
    table = _PlanRows()
    for (pool_name, members), total_shown in zip(sections, shown):
        if pool_name:
            seen_pools += 1
            label = "shared pool" + (f" {seen_pools}" if n_pools > 1 else "")
            table.pool(label, pools[pool_name], members, total_shown)
        else:
            table.product(members[0], total_shown)
        table.rows.append(None)
    totals = d.get("totals") or {}
    gpus = totals.get("all_gpus", sum(p["gpus"] + (p["prefill"]["gpus"] or 0) for p in d["products"]))
    table.total("total", gpus, round(d["monthly_cost_usd"]))
    return table.rows


def print_plan(d: dict[str, Any], console: Console) -> None:
    """The plan: decode and prefill lines per product (a pooled group once, with its members'
    shares of the cost), product totals, reasons and alternatives. Every column that has a total
    line adds up to it: GPUs are counted once and dollars are rounded so the parts sum."""
    d = escaped(d)
    hours = d.get("hours", 1)
    pools = {pool["name"]: pool for pool in d.get("pools") or []}
    console.print(fit_table(console, _plan_title(d), PLAN_COLUMNS, _plan_rows(d, pools)))
    if hours > 1 or any(v for k, v in d["monthly_cost_breakdown_usd"].items() if k != Tier.ON_DEMAND):
        b = d["monthly_cost_breakdown_usd"]
        console.print("cost breakdown per month: " + ", ".join(f"{k} ${v:,.0f}" for k, v in b.items()))
    if d.get("gap_breakdown_usd") and d.get("mip_gap"):
        console.print(f"gap {pct(d['mip_gap'])}: {gap_split(d['gap_breakdown_usd'])}")
    explained: set[str] = set()
    for p in d["products"]:
        name = p["name"]
        if p.get("pooled_in"):  # a pooled group's reasons are those of its shared replicas: once
            if p["pooled_in"] in explained:
                continue
            explained.add(p["pooled_in"])
            name = f"shared pool ({', '.join(pools[p['pooled_in']]['products'])})"
        _print_reasons(p, name, hours, console)
    print_portfolio(d, console)
    _print_model_notes(d, console)
    line = verification_line(d.get("verification"))
    if line:
        console.print(line)


def verification_line(v: dict[str, Any] | None) -> str | None:
    """One sentence on the replay of a plan from a trace (None for a plan without a trace)."""
    if v is None:
        return None
    if v["meets_targets"] is None:
        return f"verification: unverified ({v['method']})"
    verdict = "meets its targets" if v["meets_targets"] else "MISSES its targets"
    t, s = v["ttft_ms"], v["tpot_ms"]
    return (f"verification: {verdict} on the replay of hour(s) {', '.join(str(h) for h in v['hours'])} after "
            f"{v['rounds']} round(s): TTFT p50/p90/p99 {t['p50']}/{t['p90']}/{t['p99']} ms, TPOT p50/p90/p99 "
            f"{s['p50']}/{s['p90']}/{s['p99']} ms, {v['missed_requests']:,} requests missed a target "
            f"({v['method']})")


def _print_reasons(p: dict[str, Any], name: str, hours: int, console: Console) -> None:
    """Why the product (or pooled group ``name``) got its fleet: the reason, prices paid,
    utilisation over several hours, an under-sized prefill, the KV hand-off, the runner-ups."""
    console.print(f"[bold]{name}[/bold]: {p['why']}.")
    for line in price_lines(p):
        console.print(f"  {line}")
    if hours > 1 and p["utilisation"] is not None:
        console.print(
            f"  utilisation {pct(p['utilisation'])} of self-hosted capacity; cost ${p['cost_per_million_tokens_usd']:.3f} "
            f"per million output tokens against ${p['ideal_cost_per_million_tokens_usd']:.3f} for the fleet at 100%; "
            f"API share {pct(p['api_fraction'])}"
        )
    chk = p.get("prefill_check")
    if chk and p["prefill"]["mode"] == PrefillMode.HEADROOM and not chk["covered"]:
        console.print(f"  [bold]prefill under-sized[/bold]: {chk['verdict']} (set prefill: auto to size it)")
    kv = p["prefill"].get("kv_transfer")
    if kv:
        console.print(
            f"  KV hand-off: {kv['bytes_per_request'] / 1e6:,.0f} MB per request, {kv['peak_bytes_per_s'] / 1e9:,.1f} GB/s at peak "
            f"over the {kv['link']} link ({pct(kv['link_utilisation'])} of {kv['link_bytes_per_s'] / 1e9:,.0f} GB/s), "
            f"{kv['transfer_ms_per_request']:.1f} ms per request"
        )
    if p["alternatives"]:
        alt_rows: list[Row] = [
            (a["gpu"] + (" (one configuration)" if a.get("single_configuration") else ""), layout_cell(a),
             a["precision"], str(a["batch"]), f"{a['replicas']:,}", f"{a['gpus']:,}",
             f"{a['monthly_cost_usd']:,.0f}", f"+{a['cost_difference_usd']:,.0f}")
            for a in p["alternatives"]
        ]
        title = (f"{name}: the best single configuration, and the mix on each GPU type alone" if p.get("configurations")
                 else f"{name}: cheapest plan on each other GPU type")
        console.print(fit_table(console, title, ALTERNATIVE_COLUMNS, alt_rows, title_justify="left"))
    for reason, why in ((LeftOut.OUTRANKED, f"as no plan on them can be among the {RUNNER_UP_TYPES} cheapest GPU "
                                            "types"),
                        (LeftOut.NOT_SEARCHED, "each as long a search as the plan's own (--all-alternatives "
                                               "searches them)")):
        left_out = [a for a in p.get("runner_ups_left_out") or [] if a["reason"] == reason]
        if left_out:
            console.print(f"  the mix on each GPU type, not searched, {why} (lower bound, USD/month): " + ", ".join(
                f"{a['gpu']} >= {a['monthly_cost_at_least_usd']:,.0f} (+{a['cost_difference_at_least_usd']:,.0f})"
                for a in left_out))


def _print_model_notes(d: dict[str, Any], console: Console) -> None:
    """GPUs left out for want of a price, the candidates per product and the MIP's size."""
    unpriced = d.get("unpriced_gpus") or []
    if unpriced:
        console.print(f"no price for {', '.join(unpriced)}: left out of the plan (give one in options.gpu_hour_usd "
                      "or a prices catalog)")
    for name, c in d["candidates"].items():
        line = (f"{name}: decode configurations (GPU x TP x precision x mode x batch): {c['generated']:,} generated, "
                f"{c['feasible']:,} feasible; {c['after_pruning']:,} decode candidates after pruning "
                f"(per shape the feasible batch with the most throughput per replica, dominated dropped)")
        if c.get("pool_generated"):
            line += (f"; prefill-pool shapes (GPU x TP x precision): {c['pool_generated']:,} generated, "
                     f"{c['pool_feasible']:,} feasible, {c['pool_after_pruning']:,} after pruning")
        console.print(f"[dim]{line}[/dim]")
    console.print(f"[dim]MIP: {d['model_size']['variables']:,} variables, {d['model_size']['constraints']:,} constraints[/dim]")


def print_portfolio(d: dict[str, Any], console: Console) -> None:
    """Shared limits: GPUs per type against availability and instances, components, pools, the
    first-come comparison, power and sites. Printed only when the plan has several products, GPU
    limits or sites."""
    usage = d.get("gpu_usage") or {}
    if len(d["products"]) < 2 and not d.get("sites") and not any(
            u["available"] is not None or u.get("available_by_tier") or u["instances"] for u in usage.values()):
        return
    if usage:
        use_rows: list[Row] = []
        for gpu, u in usage.items():
            avail = "-" if u["available"] is None else f"{u['available']:,}"
            if u.get("available_by_tier"):
                avail += " (" + ", ".join(f"{k} {v:,}" for k, v in u["available_by_tier"].items()) + ")"
            use_rows.append((gpu, f"{u['gpus']:,}", ", ".join(f"{k} {v:,}" for k, v in u.get("gpus_by_tier", {}).items()),
                             avail, _n(u["instances"], "{:,}") if u["instances"] is not None else "-",
                             f"{u['stranded_gpus']:,}"))
        console.print(fit_table(console, "GPUs per type at the busiest hour", USAGE_COLUMNS, use_rows, title_justify="left"))
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
                      f"${fc - total:,.0f} ({pct((fc - total) / fc)})")
    print_power(d, console)
    print_binding_limits(d, console)


def print_power(d: dict[str, Any], console: Console) -> None:
    """The plan's power and carbon beside its cost, and each site's peak against its limit."""
    from fleetplan.rendering.escape import rich_text as escape

    pw = d.get("power")
    if not pw:
        return
    console.print(f"power: ${d['monthly_cost_usd']:,.0f} a month and {pw['tco2_per_month']:,.1f} tCO2 a month; "
                  f"IT peak {pw['it_kw_peak']:,.1f} kW, facility peak {pw['facility_kw_peak']:,.1f} kW, "
                  f"{pw['energy_mwh_per_month']:,.1f} MWh a month, {pw['tokens_per_joule']:g} output tokens per joule")
    for s in d.get("sites") or []:
        owned = "".join(f"; owned {escape(o['gpu'])} ${o['amortised_usd_per_gpu_hour']:.3f}/GPU-hour amortised "
                        f"+ ${o['energy_usd_per_gpu_hour']:.3f} energy" for o in s["owned"])
        console.print(f"site {escape(s['name'])}: peak {s['peak_mw']:g} MW of {s['limit_mw']:g} MW at full load, "
                      f"{s['hours_at_limit']:g} hours a month at the limit{owned}")


def print_binding_limits(d: dict[str, Any], console: Console) -> None:
    """One line per binding limit: what one more step of it would save a month."""
    from fleetplan.optimizer.explanation.binding import binding_sentence

    for entry in d.get("binding_limits") or []:
        console.print(f"binding limit {entry['limit']}: {binding_sentence(entry)}")


def print_catalog(kind: str, rows: list[dict[str, Any]], console: Console) -> None:
    """A catalog listing with sources."""
    rows = escaped(rows)
    if not rows:
        console.print(f"no {kind} loaded")
        return
    cols = list(rows[0])
    table_rows: list[Row] = [tuple("" if r[c] is None else str(r[c]) for c in cols) for r in rows]
    console.print(fit_table(console, f"catalog: {kind} ({len(rows)})", [Col(c, "left") for c in cols], table_rows))


BREAKEVEN_COLUMNS: tuple[Col, ...] = tuple(
    Col(c) for c in ("demand x", "all API $/month", "self-host $/month", "blend $/month", "cheapest"))


def _dollars(usd: float | None) -> str:
    """Whole dollars with thousands separators, or "-" for a strategy without a plan."""
    return "-" if usd is None else f"{usd:,.0f}"


def breakeven_line(p: BreakevenPoint) -> str:
    """One scale's costs on one line, printed as the scale finishes."""
    from fleetplan.optimizer.decisions.breakeven import ALL_API, BLEND, SELF_HOST

    cost = p.costs_usd()
    own, blend = ("-" if cost[s] is None else f"${cost[s]:,.0f}" for s in (SELF_HOST, BLEND))
    return (f"scale {p.scale:g}: all API ${cost[ALL_API]:,.0f}, self-host {own}, blend {blend}"
            + ("" if p.proven_optimal else " (not proven optimal: time limit)"))


def print_breakeven(result: BreakevenResult, scenario: str, plot: str | None, console: Console) -> None:
    """The costs per scale with the cheapest strategy, the crossovers and where the plot went."""
    from fleetplan.rendering.escape import rich_text as escape
    from fleetplan.optimizer.decisions.breakeven import ALL_API, BLEND, SELF_HOST

    rows: list[Row] = []
    for p in result.points:
        cost = p.costs_usd()
        rows.append((f"{p.scale:g}", *(_dollars(cost[s]) for s in (ALL_API, SELF_HOST, BLEND)), p.cheapest))
    console.print(fit_table(console, f"build vs buy: {escape(scenario)}", BREAKEVEN_COLUMNS, rows))
    own, blend = result.self_host_beats_api_at_scale, result.blend_beats_api_at_scale
    console.print(f"self-hosting alone beats all-API from {own or 'no scale tried'}x the scenario's demand; "
                  f"the blend beats all-API from {blend or 'no scale tried'}x")
    for c in result.owned:
        od, rs = c.owned_beats_on_demand_above, c.owned_beats_reserved_above
        console.print(f"owned {escape(c.gpu)} on site {escape(c.site)}: beats on demand above "
                      f"{'never' if od is None else f'{od:.1%}'} utilisation, reserved above "
                      f"{'never' if rs is None else f'{rs:.1%}'} (a GPU-month owned costs ${c.owned_usd[0]:,.0f} idle, "
                      f"${c.owned_usd[-1]:,.0f} busy; on demand ${c.on_demand_usd[-1]:,.0f} busy; reserved ${c.reserved_usd:,.0f})")
    if plot:
        console.print(f"plot written to {escape(plot)}")

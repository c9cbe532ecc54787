"""Why a plan is what it is, in words and numbers: the reason for each product's configuration
and its prices (:func:`why`), long-TTFT notes, the KV hand-off of a prefill pool and the check
of a flat prefill headroom.

Owns explanations only: it never changes a plan."""

from __future__ import annotations

import bisect
import math
from typing import Any

from fleetplan.catalogs.loader import Catalog
from fleetplan.models.memory import kv_bytes_per_token
from fleetplan.models.physics import DEFAULT_TTFT_QUEUE_MULTIPLE, TTFT_WARNING_S
from fleetplan.models.presets import Preset
from fleetplan.models.roofline import decode_step
from fleetplan.models.ttft import colocated_prefill_steps, queue_factor
from fleetplan.optimizer.problem_data.candidates import (
    kv_link,
    prefill_work_per_request,
)
from fleetplan.optimizer.decomposition.components import Solved
from fleetplan.optimizer.runtime.deadline import Deadline
from fleetplan.optimizer.common.defaults import CEILING_TOLERANCE, SEED_HEADROOM
from fleetplan.optimizer.common.enums import Alternatives, BatchLimit, Tier
from fleetplan.optimizer.explanation.runner_ups import Compared, comparisons, single_configuration
from fleetplan.optimizer.mip.solution import ProductPlan
from fleetplan.optimizer.mip.solvers import Solver
from fleetplan.optimizer.explanation.tail import ttft_percentiles
from fleetplan.optimizer.common.text import format_ms, pct


def kv_transfer_report(pp: ProductPlan, catalog: Catalog, preset: Preset) -> dict[str, Any] | None:
    """KV-cache hand-off from the prefill pool to decode: bytes per request, peak bytes/s and
    the link it crosses (scale-up fabric or the pool GPUs' NICs)."""
    if pp.pool is None or pp.candidate is None:
        return None
    llm = catalog.models[pp.product.model]
    kv_prec = pp.candidate.estimate.kv_precision
    per_request = pp.product.input_tokens * kv_bytes_per_token(llm, kv_prec)
    peak_qps = max((d - a) / pp.product.output_tokens for d, a in zip(pp.data.demand_tokens_per_s, pp.api_tokens_per_s))
    link, per_gpu = kv_link(catalog.gpus[pp.pool.gpu])
    link_bps = pp.prefill_pool.gpus * per_gpu
    peak = peak_qps * per_request
    return {
        "bytes_per_request": round(per_request),
        "peak_bytes_per_s": round(peak, 1),
        "link": link,
        "link_bytes_per_s": round(link_bps, 1),
        "link_utilisation": round(peak / link_bps, 6) if link_bps else None,
        "transfer_ms_per_request": round(pp.pool.transfer_s * 1e3, 3),
    }


def prefill_headroom_check(pp: ProductPlan, catalog: Catalog, preset: Preset, options: Any) -> dict[str, Any] | None:
    """Does a flat headroom cover prefill? On the chosen GPU/TP/precision at the batch the headroom
    rule would run (the largest meeting speed and memory without prefill), compare the rule's
    usable throughput (decode-only less the headroom: the product's own ``headroom`` when it sets
    one, else the seed's 30%) with what the replica keeps when each step also carries its share of new
    requests' prefill (colocated, nothing held back)."""
    c = pp.candidate
    if c is None or pp.mix is not None:
        return None
    llm, gpu = catalog.models[pp.product.model], catalog.gpus[c.gpu]
    work = prefill_work_per_request(llm, pp.product, preset)
    batches = sorted(set(options.batch)) if options.batch else list(range(1, options.max_batch + 1))

    def step(b: int, prefill: bool) -> Any:
        return decode_step(
            llm, gpu, precision=c.precision, tp=c.tp, batch=b, input_tokens=pp.product.input_tokens, layout=c.layout,
            output_tokens=pp.product.output_tokens, preset=preset, kv_precision=pp.product.kv_precision,
            prefill_flops_per_step=b / pp.product.output_tokens * work if prefill else 0.0,
        )

    def ok(b: int) -> bool:
        e = step(b, False)
        return e.fits and e.per_user_tokens_per_s >= pp.product.min_tokens_per_s_per_user

    n = bisect.bisect_left(range(len(batches)), True, key=lambda i: not ok(batches[i]))
    if n == 0:
        return None
    b = batches[n - 1]
    plain, mixed = step(b, False), step(b, True)
    rule = pp.product.headroom if pp.product.headroom is not None else SEED_HEADROOM
    assumed = plain.replica_tokens_per_s * (1 - rule)
    computed = mixed.replica_tokens_per_s
    margin = computed / assumed - 1
    demand = pp.demand_tokens_per_s
    replicas_rule = math.ceil(demand / assumed - CEILING_TOLERANCE) if demand else 0
    replicas_needed = math.ceil(demand / computed - CEILING_TOLERANCE) if demand else 0
    added = mixed.step_time_s - plain.step_time_s
    verdict = (
        f"{rule:.0%} headroom {'covers' if margin >= 0 else 'does not cover'} prefill on {c.gpu} {c.layout.label()} {c.precision} batch {b}: "
        f"with prefill computed a replica serves {computed:,.0f} tokens/s against {assumed:,.0f} assumed "
        f"({'over-provisions' if margin >= 0 else 'misses'} by {abs(margin):.0%}: {replicas_needed:,} replicas needed "
        f"against {replicas_rule:,}); prefill lengthens a {plain.step_time_s * 1e3:.1f} ms step by {added * 1e3:.1f} ms "
        f"and per-user speed falls to {mixed.per_user_tokens_per_s:.1f} tokens/s"
    )
    return {
        "rule_headroom": rule,
        "batch": b,
        "assumed_tokens_per_s": round(assumed, 3),
        "computed_tokens_per_s": round(computed, 3),
        "covered": margin >= 0,
        "margin": round(margin, 6),
        "replicas_by_rule": replicas_rule,
        "replicas_with_prefill": replicas_needed,
        "prefill_ms_per_step": round(added * 1e3, 4),
        "step_time_ms_with_prefill": round(mixed.step_time_s * 1e3, 4),
        "per_user_tokens_per_s_with_prefill": round(mixed.per_user_tokens_per_s, 4),
        "verdict": verdict,
    }


TIER_WORDS = {Tier.RESERVED: "reserved", Tier.ON_DEMAND: "on demand", Tier.SPOT: "spot"}


def why(pp: ProductPlan) -> str:
    """Why the product runs what it runs, quoting the GPU-hour price paid in each tier used."""
    c = pp.candidate
    if c is None:
        assert pp.data.api is not None
        return (
            f"all traffic goes to the API ({pp.data.api.price.id}, ${pp.data.api.usd_per_million_output_tokens:.2f} per "
            f"million output tokens): cheaper than any self-hosted fleet plus ${pp.data.fixed_monthly_usd:,.0f}/month fixed cost"
        )
    parts = [_mix_note(pp), _configuration_reason(pp), _runner_up_note(pp), _api_note(pp), _pool_note(pp),
             _headroom_note(pp), ttft_note(pp), _mode_note(pp)]
    return "".join(parts)


def _configuration_reason(pp: ProductPlan) -> str:
    """The configuration, what limits its batch, what bounds its step and what a replica costs."""
    c = pp.candidate
    assert c is not None
    e = c.estimate
    limiter = {
        BatchLimit.PER_USER_SPEED: f"a larger batch would drop below {pp.product.min_tokens_per_s_per_user:g} "
                                   f"tokens/s per user",
        BatchLimit.MEMORY: "a larger batch would not fit in memory",
        BatchLimit.BATCH_OPTIONS: "the largest batch allowed",
        BatchLimit.RANK_ROUNDING: "a larger batch would put one more sequence on every attention rank or "
                                  "micro-batch for fewer tokens/s per replica",
        BatchLimit.MAX_TTFT: "a larger batch would break the " + (
            f"{pp.product.max_ttft_ms:g} ms TTFT target" if pp.product.max_ttft_ms else "TTFT percentile targets"),
    }[BatchLimit(c.batch_limited_by)]
    paid = []
    for tier in pp.decode_tiers() or [Tier.ON_DEMAND]:
        month = c.usd_per_replica_hour_in(tier) * pp.hours_per_month
        paid.append(
            f"${month:,.0f}/month {TIER_WORDS[tier]} at ${c.price.tier(tier):,.2f}/GPU-hour "
            f"(${month / c.usable_tokens_per_s * 1000:,.0f} per 1,000 tokens/s-month)"
        )
    return (
        f"{c.gpu} {c.layout.label()} {c.precision} at batch {c.batch} ({limiter}) is {e.bound}-bound at "
        f"{e.step_time_s * 1e3:.1f} ms per step and delivers {c.usable_tokens_per_s:,.0f} usable tokens/s per replica; "
        f"a replica costs " + ", ".join(paid)
    )


def _mix_note(pp: ProductPlan) -> str:
    """For a request mix: how its buckets are spread over configurations, and what it saves
    against the best single-configuration plan."""
    mix = pp.mix
    if mix is None:
        return ""
    runs = ", ".join(f"{f.peak} x {f.part.gpu} {f.part.layout.label()} {f.part.precision} b{f.part.batch} "  # type: ignore[union-attr]
                     f"{f.part.mode}" for f in mix.fleets if f.part is not None)  # type: ignore[union-attr]
    text = f"{len(mix.buckets)} request-size buckets on {len(mix.fleets)} configuration(s) ({runs})"
    if mix.single is not None:
        s = mix.single
        text += (f", ${s['cost_difference_usd']:,.0f}/month less than the best single configuration ({s['gpu']} "
                 f"{s['layout']} {s['precision']} batch {s['batch']}, {s['replicas']} replicas)")
    return text + "; largest: "


def _runner_up_note(pp: ProductPlan) -> str:
    """How much more the cheapest plan on another GPU type costs."""
    others = [a for a in pp.alternatives if not a.get("single_configuration")]
    if not others:
        return ""
    a = others[0]
    return (
        f"; the runner-up on another GPU type ({a['gpu']} tp{a['tp']} {a['precision']} batch {a['batch']}, "
        f"{a['replicas']} replicas) costs ${a['cost_difference_usd']:,.0f}/month more"
    )


def _api_note(pp: ProductPlan) -> str:
    """Which share of tokens the API takes, in how many hours and why."""
    api_hours = [h for h, a in enumerate(pp.api_tokens_per_s) if a > 1e-6]
    if not api_hours or pp.data.api is None:
        return ""
    demand = pp.data.demand_tokens_per_s
    share = sum(pp.api_tokens_per_s) / sum(demand) if sum(demand) else 0.0
    busiest = sorted(api_hours, key=lambda h: (-demand[h], h))[:3]
    return (
        f"; the API ({pp.data.api.price.id}) takes {pct(share)} of output tokens in {len(api_hours)} of "
        f"{len(demand)} hours (busiest: hour {', '.join(str(h) for h in busiest)}), where sending the remainder "
        f"costs less than another replica"
    )


# why a default bound on queueing applies
NO_TTFT_TARGET = f"no max_ttft_ms: the default keeps queueing within {DEFAULT_TTFT_QUEUE_MULTIPLE:g}x the zero-load TTFT"


def _pool_note(pp: ProductPlan) -> str:
    """The prefill pool and the utilisation it is sized to."""
    if pp.pool is None:
        return ""
    return (
        f"; prefill runs on {pp.prefill_pool.peak} x {pp.pool.gpus_per_replica} {pp.pool.gpu} ({pp.pool.precision}) sized to "
        f"{pp.pool.max_utilisation:.0%} utilisation at most" + ("" if _has_ttft_target(pp) else f" ({NO_TTFT_TARGET})")
    )


def _has_ttft_target(pp: ProductPlan) -> bool:
    """Whether the product sets a TTFT target (a number or percentiles)."""
    return bool(pp.product.max_ttft_ms) or pp.product.ttft_percentiles_ms is not None


def _headroom_note(pp: ProductPlan) -> str:
    """A headroom raised above the product's own to keep queueing bounded."""
    c = pp.candidate
    if c is None or c.requested_headroom is None or c.headroom <= c.requested_headroom + 1e-12:
        return ""
    return f"; headroom raised from {c.requested_headroom:.0%} to {c.headroom:.0%} ({NO_TTFT_TARGET})"


def _mode_note(pp: ProductPlan) -> str:
    """The cost of each prefill mode, when the plan chose between several."""
    if len(pp.mode_costs) < 2 or pp.candidate is None:
        return ""
    parts = [f"{m} ${v:,.0f}" if v is not None else f"{m} infeasible" for m, v in sorted(pp.mode_costs.items())]
    if pp.mix is not None:  # each bucket has its own mode: say what one mode for all would cost
        used = sorted({f.part.mode for f in pp.mix.fleets if f.part is not None and f.peak})
        return (f"; prefill {' and '.join(used)} by bucket; the mix kept to one prefill mode costs "
                f"{', '.join(parts)} per month")
    return f"; prefill mode {pp.candidate.mode} chosen by cost ({', '.join(parts)} per month for the whole plan)"


def ttft_note(pp: ProductPlan) -> str:
    """Why the modelled TTFT is long, when it exceeds ``TTFT_WARNING_S``; else nothing."""
    c, ttft = pp.candidate, pp.ttft_s
    if c is None or ttft is None or ttft <= TTFT_WARNING_S:
        return ""
    head = f"; modelled TTFT {format_ms(ttft)} ms exceeds {TTFT_WARNING_S:g} s"
    if c.mode == "pool" and pp.pool is not None:
        rho = pp.pool_peak_utilisation or 0.0
        return head + (
            f": one {pp.product.input_tokens:,}-token prefill takes {format_ms(pp.pool.service_s)} ms on a "
            f"{pp.pool.gpu} {pp.pool.layout.label()} pool replica, x{queue_factor(rho):.2f} queueing at {rho:.0%} utilisation, "
            f"plus {format_ms(pp.pool.transfer_s)} ms KV hand-off (set max_ttft_ms to size the pool for a target)"
        )
    rho = pp.decode_peak_utilisation or 0.0
    steps = colocated_prefill_steps(c.batch, c.output_tokens)
    where = "colocated" if c.mode == "colocated" else "sharing the decode steps (headroom mode)"
    return head + (
        f": each {pp.product.input_tokens:,}-token prompt is prefilled {where} over {steps:,.1f} steps of "
        f"{format_ms(c.ttft_step_time_s)} ms at batch {c.batch}, x{queue_factor(rho):.2f} queueing at {rho:.0%} "
        f"utilisation (set max_ttft_ms, or prefill: pool)"
    )


def explain_products(products: list[ProductPlan], solved: Solved, catalog: Catalog, preset: Preset, options: Any,
                     solver: Solver, deadline: Deadline, alternatives: Alternatives = Alternatives.DEFAULT) -> None:
    """Fill in each product's explanations within ``deadline``: runner-ups on other GPU types (as
    ``alternatives`` asks) and the cost of each prefill mode for a product solved on its own (in
    worker processes at once when allowed, see :func:`~.runner_ups.comparisons`), then the
    reason in words, the KV hand-off and the prefill-headroom check."""
    percentiles = any(pp.product.ttft_percentiles_ms is not None for pp in products)  # then every product reports them
    for i, pp in enumerate(products):
        part = solved.parts[pp.product.name]
        mine = deadline.share(1.0 / (len(products) - i))
        if len(part.whole.products) == 1:
            base = float(part.result.objective or 0.0)
            if pp.mix is not None:
                pp.mix.single = single_configuration(part.whole, pp, base, solver, mine.share(0.5), options.mip_rel_gap)
            compared = Compared(part.whole, pp, base, solver, part.base_lp, proven=part.result.optimal)
            alts, pp.mode_costs, left_out = comparisons(compared, mine, alternatives)
            if alternatives != Alternatives.NONE:
                pp.alternatives = alts
                if pp.mix is not None:
                    pp.mix.left_out = left_out
                if pp.mix is not None and pp.mix.single is not None:
                    pp.alternatives = [pp.mix.single, *pp.alternatives]
        pp.why = why(pp)
        pp.ttft_percentiles_ms = ttft_percentiles(pp, catalog, preset, always=percentiles)
        pp.kv_transfer = kv_transfer_report(pp, catalog, preset)
        pp.prefill_check = prefill_headroom_check(pp, catalog, preset, options)

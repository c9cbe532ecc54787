"""Percentile TTFT targets in the planner: which prefill queues they cap, and how.

A percentile target ``{p50, p90, p99}`` (``ttft_percentiles_ms``) is checked with the analytic
model of :mod:`fleetplan.models.queueing`, on each queue a request's prefill waits in:

    prefill pool  a pool replica prefills one request at a time; its service time is the mix's
                  (:meth:`ServiceTime.of_mix` over the buckets' prefill times, weighted by their
                  shares; deterministic for one request size). The pool's utilisation is capped
                  at the highest one whose every target quantile, plus the KV hand-off and
                  admission, stays within its budget (:func:`pool_utilisation_cap`).
    colocated     a decode replica admits a request's prompt in chunks spread over the decode
    (and headroom steps (``max(1, O / B)`` steps); that spread is the service time of the
                  replica's admission queue, loaded at 1 - headroom (the most the plan loads a
                  replica). A batch qualifies only when every target quantile meets its budget
                  there (:func:`colocated_ratio`).

Server count: every queue is taken as ONE server (:data:`SERVERS`). For a fixed utilisation per
server, waits only shrink as servers are added, so the percentiles of a planned pool of many
replicas are at most those reported: the check is conservative and needs no fixed point between
the replica count and the utilisation cap. The per-user speed target is untouched by this: it is
checked at the chosen batch as for any product, so it stays a guarantee.

Owns these rules; the queueing formulas live in :mod:`fleetplan.models.queueing`."""

from __future__ import annotations

from fleetplan.models.queueing import ServiceTime, max_utilisation_for_quantile, ttft_quantile_s
from fleetplan.optimizer.scenario import PERCENTILES, Product

# servers of each prefill queue in the percentile model: one (conservative, see the module docstring)
SERVERS = 1

Targets = list[tuple[float, float]]  # (quantile, budget in seconds)


def targets(product: Product) -> Targets:
    """The product's percentile targets as (quantile, seconds); empty without them."""
    return product.ttft_percentiles_ms.targets_s() if product.ttft_percentiles_ms is not None else []


def pool_utilisation_cap(service: ServiceTime, fixed_s: float, goals: Targets) -> float:
    """Highest pool utilisation meeting every target (0 when an idle pool misses one)."""
    return min(max_utilisation_for_quantile(q, budget, servers=SERVERS, service=service, fixed_s=fixed_s)
               for q, budget in goals)


def colocated_ratio(spread_s: float, utilisation: float, admission_s: float, goals: Targets) -> float:
    """Largest ratio of a target quantile of colocated TTFT to its budget (at most 1: all met)."""
    service = ServiceTime(spread_s)
    return max(ttft_quantile_s(q, servers=SERVERS, utilisation=utilisation, service=service, fixed_s=admission_s)
               / budget for q, budget in goals)


def percentiles_ms(service: ServiceTime, utilisation: float, fixed_s: float) -> dict[str, float]:
    """p50, p90 and p99 of TTFT in milliseconds for one queue at ``utilisation``."""
    return {name: ttft_quantile_s(q, servers=SERVERS, utilisation=utilisation, service=service,
                                  fixed_s=fixed_s) * 1e3 for name, q in PERCENTILES.items()}

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

Arrival variability: each queue is checked at the product's stated inter-arrival SCV
(:func:`arrival_scv`; 1 without one), carried with the targets (:class:`Targets`), by the
queue's Allen-Cunneen term only: the wait behind one's own burst (``burst_wait``) is left out,
since on the one server below a whole burst would queue on one replica, which the planned fleet
spreads over its replicas. A plan from a trace is replayed on the trace's arrivals and
tightened until it holds (:mod:`fleetplan.optimizer.simulation.verify`), which sizes for the bursts the trace really has.

Server count: every queue is taken as ONE server (:data:`SERVERS`). For a fixed utilisation per
server, waits only shrink as servers are added, so the percentiles of a planned pool of many
replicas are at most those reported: the check is conservative and needs no fixed point between
the replica count and the utilisation cap. The per-user speed target is untouched by this: it is
checked at the chosen batch as for any product, so it stays a guarantee.

Owns these rules; the queueing formulas live in :mod:`fleetplan.models.queueing`."""

from __future__ import annotations

from fleetplan.models.queueing import ServiceTime, max_utilisation_for_quantile, ttft_quantile_s
from fleetplan.optimizer.traffic.scenario import PERCENTILES, Product

# servers of each prefill queue in the percentile model: one (conservative, see the module docstring)
SERVERS = 1

# arrivals are taken as Poisson (inter-arrival SCV 1) unless the product says otherwise
POISSON_SCV = 1.0


class Targets(list[tuple[float, float]]):
    """(quantile, budget in seconds) of each percentile target, with the inter-arrival SCV the
    product's queues are checked at (``arrival_scv``: the product's, else Poisson's 1)."""

    arrival_scv: float = POISSON_SCV


def targets(product: Product) -> Targets:
    """The product's percentile targets as (quantile, seconds), at its arrival SCV; empty without them."""
    goals = Targets(product.ttft_percentiles_ms.targets_s() if product.ttft_percentiles_ms is not None else [])
    goals.arrival_scv = arrival_scv(product)
    return goals


def arrival_scv(product: Product) -> float:
    """The inter-arrival SCV a product is planned at: its stated ``arrival_scv``, else 1. A trace's
    measured SCV is not used here: on the one-server queues below it overbuys 4-6x at SCV 100-170
    where the replay of the trace shows the SCV-1 plan holding; a plan from a trace is sized for
    its bursts by replaying them (:mod:`fleetplan.optimizer.simulation.verify`)."""
    return product.arrival_scv if product.arrival_scv is not None else POISSON_SCV


def _scv(goals: list[tuple[float, float]]) -> float:
    """The arrival SCV of ``goals`` (1 for a plain list)."""
    return getattr(goals, "arrival_scv", POISSON_SCV)


def pool_utilisation_cap(service: ServiceTime, fixed_s: float, goals: Targets) -> float:
    """Highest pool utilisation meeting every target (0 when an idle pool misses one)."""
    return min(max_utilisation_for_quantile(q, budget, servers=SERVERS, service=service, fixed_s=fixed_s,
                                            arrival_scv=_scv(goals), burst_wait=False) for q, budget in goals)


def colocated_ratio(spread_s: float, utilisation: float, admission_s: float, goals: Targets) -> float:
    """Largest ratio of a target quantile of colocated TTFT to its budget (at most 1: all met)."""
    service = ServiceTime(spread_s)
    return max(ttft_quantile_s(q, servers=SERVERS, utilisation=utilisation, service=service, fixed_s=admission_s,
                               arrival_scv=_scv(goals), burst_wait=False) / budget for q, budget in goals)


def percentiles_ms(service: ServiceTime, utilisation: float, fixed_s: float,
                   scv: float = POISSON_SCV) -> dict[str, float]:
    """p50, p90 and p99 of TTFT in milliseconds for one queue at ``utilisation`` and arrival SCV ``scv``."""
    return {name: ttft_quantile_s(q, servers=SERVERS, utilisation=utilisation, service=service,
                                  fixed_s=fixed_s, arrival_scv=scv, burst_wait=False) * 1e3
            for name, q in PERCENTILES.items()}

"""Percentiles of waiting time in a multi-server queue: the analytic model of TTFT percentiles.

A pool of ``c`` identical servers (replicas) takes Poisson arrivals at utilisation ``rho`` (the
share of the pool's service capacity the demand takes); service times have mean ``m`` and
squared coefficient of variation ``scv`` (0: deterministic, 1: exponential; a mix of prompt
lengths gives its own value, see :meth:`ServiceTime.of_mix`).

The probability that a request waits at all is Erlang's C formula for ``c`` servers at offered
load ``a = c rho``. Given that it waits, its wait is taken as exponential with the M/M/c rate
``c (1 - rho) / m``, slowed by the Allen-Cunneen factor ``(1 + scv) / 2`` so that the mean wait
is the Allen-Cunneen approximation of M/G/c::

    P(W > t) = C(c, a) x exp(-t x c (1 - rho) / m x 2 / (1 + scv))

so the ``q`` quantile of the wait is ``max(0, ln(C / (1 - q))) x m (1 + scv) / (2 c (1 - rho))``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True)
class ServiceTime:
    """Distribution of one request's service time: its mean and squared coefficient of variation."""

    mean_s: float
    scv: float = 0.0

    @classmethod
    def of_mix(cls, times_s: Iterable[float], shares: Iterable[float]) -> ServiceTime:
        """Mean and scv of a mix: service time ``times_s[i]`` with probability ``shares[i]``."""
        pairs = [(t, w) for t, w in zip(times_s, shares, strict=True) if w > 0]
        total = sum(w for _, w in pairs)
        mean = sum(t * w for t, w in pairs) / total
        second = sum(t * t * w for t, w in pairs) / total
        return cls(mean_s=mean, scv=max(0.0, second / (mean * mean) - 1.0) if mean > 0 else 0.0)


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability that an arrival waits in an M/M/c queue with ``servers`` at ``offered_load``
    (in Erlangs, below ``servers``), by the stable recurrence of Erlang's B formula."""
    if offered_load <= 0:
        return 0.0
    if offered_load >= servers:
        return 1.0
    b = 1.0
    for k in range(1, servers + 1):
        b = offered_load * b / (k + offered_load * b)
    rho = offered_load / servers
    return b / (1.0 - rho + rho * b)


def wait_quantile_s(q: float, *, servers: int, utilisation: float, service: ServiceTime) -> float:
    """The ``q`` quantile (0 < q < 1) of the wait before service starts."""
    if utilisation >= 1.0:
        return math.inf
    p_wait = erlang_c(servers, servers * utilisation)
    if p_wait <= 1.0 - q:
        return 0.0
    rate = servers * (1.0 - utilisation) / service.mean_s * 2.0 / (1.0 + service.scv)
    return math.log(p_wait / (1.0 - q)) / rate


def ttft_quantile_s(q: float, *, servers: int, utilisation: float, service: ServiceTime,
                    fixed_s: float = 0.0) -> float:
    """The ``q`` quantile of TTFT: the wait's quantile, plus the mean service, plus ``fixed_s``
    (admission, KV hand-off). Adding the quantile of the wait to the mean service is exact for
    deterministic service and errs high when waits dominate."""
    return wait_quantile_s(q, servers=servers, utilisation=utilisation, service=service) + service.mean_s + fixed_s


def max_utilisation_for_quantile(q: float, budget_s: float, *, servers: int, service: ServiceTime,
                                 fixed_s: float = 0.0) -> float:
    """Highest utilisation whose ``q`` quantile of TTFT stays within ``budget_s`` (0 if even an
    idle pool misses it), by bisection on the quantile, which rises with utilisation."""
    def meets(rho: float) -> bool:
        return ttft_quantile_s(q, servers=servers, utilisation=rho, service=service, fixed_s=fixed_s) <= budget_s

    if not meets(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    return lo

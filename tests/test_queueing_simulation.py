"""The analytic TTFT percentiles (:mod:`fleetplan.models.queueing`) against the simulated pool.

A first-come-first-served pool of ``c`` servers with Poisson arrivals is simulated
(:func:`fleetplan.optimizer.simulate.fifo_pool`); the analytic P99 of wait plus service must
be within 25% of the simulated one at utilisations up to 0.85, for deterministic service and
for mixes of prompt lengths.
"""

from __future__ import annotations

import numpy as np
import pytest

from fleetplan.models.queueing import ServiceTime, ttft_quantile_s
from fleetplan.optimizer.simulate import fifo_pool, poisson_arrivals

MIXES = {
    "deterministic": ((0.2,), (1.0,)),
    "two sizes": ((0.1, 0.6), (0.8, 0.2)),
    "long tail": ((0.05, 0.2, 1.0), (0.6, 0.3, 0.1)),
}


def simulated_p99(times: tuple[float, ...], shares: tuple[float, ...], servers: int, rho: float) -> float:
    """P99 of wait plus service of 60,000 simulated requests (seed 1)."""
    rng = np.random.Generator(np.random.PCG64(1))
    service = ServiceTime.of_mix(times, shares)
    arrival = poisson_arrivals(rho * servers / service.mean_s, 60_000, rng)
    s = rng.choice(np.array(times), size=arrival.size, p=np.array(shares))
    return float(np.percentile(fifo_pool(arrival, s, servers) + s - arrival, 99))


@pytest.mark.parametrize("mix", sorted(MIXES))
@pytest.mark.parametrize("servers", [1, 4, 16])
@pytest.mark.parametrize("rho", [0.3, 0.6, 0.85])
def test_analytic_p99_within_25_percent_of_simulation(mix, servers, rho):
    times, shares = MIXES[mix]
    analytic = ttft_quantile_s(0.99, servers=servers, utilisation=rho, service=ServiceTime.of_mix(times, shares))
    simulated = simulated_p99(times, shares, servers, rho)
    assert abs(analytic / simulated - 1.0) <= 0.25, (analytic, simulated)


def test_p99_of_a_mix_at_low_load_is_the_long_prompts_own_service():
    # 16 servers at 30%: almost nobody waits, so the P99 is the 1 s service of the longest tenth
    service = ServiceTime.of_mix((0.05, 0.2, 1.0), (0.6, 0.3, 0.1))
    assert ttft_quantile_s(0.99, servers=16, utilisation=0.3, service=service) == pytest.approx(1.0, rel=1e-6)
    assert ttft_quantile_s(0.5, servers=16, utilisation=0.3, service=service) == pytest.approx(0.05, rel=1e-6)


def test_fifo_pool_by_hand():
    # one server: the second request waits for the first (start 1.0), the third finds it free
    start = fifo_pool(np.array([0.0, 0.5, 3.0]), np.array([1.0, 1.0, 1.0]), 1)
    assert start.tolist() == [0.0, 1.0, 3.0]
    # two servers: nobody waits
    assert fifo_pool(np.array([0.0, 0.5, 0.6]), np.array([1.0, 1.0, 1.0]), 2).tolist() == [0.0, 0.5, 1.0]

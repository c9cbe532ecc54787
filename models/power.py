"""Power, energy, carbon and the cost of owning a GPU: pure formulas, no catalog, no solver.

Draw of a GPU at utilisation u (0 idle, 1 busy) in an hour, in watts:

    P_gpu(u) = P_idle + (P_busy - P_idle) x u

and of the servers it runs in (IT power), per GPU, with ``n`` GPUs per node:

    P_it(u) = P_gpu(u) + P_overhead_node / n

A site draws the IT power times its PUE (facility power). u is the share of the hour's capacity
the replicas use: output tokens served / (replicas x usable tokens/s of one replica), where a
replica's usable tokens/s come from the roofline at the configuration's batch (memory- or
compute-bound, whichever sets the step time) less its headroom; a replica sized for exactly the
demand is busy (u = 1).

Owned hardware, USD per GPU-hour, paid every hour whether busy or not:

    owned = capex_per_server x CRF(rate, years) / (GPUs per server x 8760)
          + colocation USD per kW-month x kW per GPU / 730

with CRF(r, n) = r (1 + r)^n / ((1 + r)^n - 1) (1 / n at r = 0) the capital recovery factor,
and kW per GPU the full-load IT draw P_it(1) / 1000; the energy is paid on top."""

from __future__ import annotations

HOURS_PER_YEAR = 8760.0
HOURS_PER_MONTH = 730.0
JOULES_PER_KWH = 3.6e6
GRAMS_PER_TONNE = 1e6


def clamp_utilisation(u: float) -> float:
    """``u`` kept to [0, 1]."""
    return min(1.0, max(0.0, u))


def gpu_draw_w(idle_w: float, busy_w: float, utilisation: float) -> float:
    """Draw of one GPU in watts at ``utilisation`` (0 idle, 1 busy), linear between the two."""
    return idle_w + (busy_w - idle_w) * clamp_utilisation(utilisation)


def it_draw_w_per_gpu(idle_w: float, busy_w: float, overhead_w_per_node: float, gpus_per_node: int,
                      utilisation: float) -> float:
    """IT draw per GPU in watts: the GPU at ``utilisation`` plus its share of the node's overhead."""
    return gpu_draw_w(idle_w, busy_w, utilisation) + overhead_w_per_node / gpus_per_node


def capital_recovery_factor(rate: float, years: float) -> float:
    """The share of a capital sum paid each year to repay it over ``years`` at ``rate`` a year:
    r (1 + r)^n / ((1 + r)^n - 1), and 1 / n at r = 0."""
    if years <= 0:
        raise ValueError("years must be positive")
    if rate == 0:
        return 1.0 / years
    g = (1.0 + rate) ** years
    return rate * g / (g - 1.0)


def owned_usd_per_gpu_hour(capex_usd_per_server: float, gpus_per_server: int, rate: float, years: float,
                           colocation_usd_per_kw_month: float, kw_per_gpu: float) -> float:
    """Amortised USD per GPU-hour of owned hardware, energy excluded (see the module docstring)."""
    capital = capex_usd_per_server * capital_recovery_factor(rate, years) / (gpus_per_server * HOURS_PER_YEAR)
    return capital + colocation_usd_per_kw_month * kw_per_gpu / HOURS_PER_MONTH


def energy_usd_per_gpu_hour(it_w_per_gpu: float, pue: float, usd_per_kwh: float) -> float:
    """USD of facility energy for one GPU-hour at ``it_w_per_gpu`` of IT draw."""
    return it_w_per_gpu / 1000.0 * pue * usd_per_kwh


def tonnes_co2(energy_kwh: float, gco2_per_kwh: float) -> float:
    """Tonnes of CO2 of ``energy_kwh`` at a carbon intensity of ``gco2_per_kwh``."""
    return energy_kwh * gco2_per_kwh / GRAMS_PER_TONNE


def tokens_per_joule(tokens_per_s: float, watts: float) -> float:
    """Output tokens per joule at a steady ``tokens_per_s`` and ``watts`` (0 when nothing is drawn)."""
    return tokens_per_s / watts if watts > 0 else 0.0

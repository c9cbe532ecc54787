"""Prefill work that decode steps carry in aggregated (colocated) serving.

With continuous batching and chunked prefill, a replica holding ``B`` sequences that each
generate ``O`` tokens finishes B/O sequences per step in steady state and admits as many new
ones, whose ``I``-token prompts are prefilled in chunks inside the decode steps. On average
every step therefore carries

    B x I / O prefill tokens                                   (steady state: the planner)

A closed-loop benchmark at concurrency ``B`` admits requests in waves instead: the ``B - 1``
others' prompts are prefilled around a request's start, a share ``s`` of them (the engine's
``prefill_before_first_token``) before its first token and the rest inside its ``O`` decode
steps, so its time per output token (TPOT) carries

    (1 - s) x (B - 1) x I / O prefill tokens per step           (measured TPOT: ``validate``)

How synchronised the waves stay depends on how much of a request's cycle its engine spends
prefilling: the busy share ``rho = B x prefill / (B x prefill + O x step)`` (prefill of the ``B``
prompts against the ``O`` decode steps of a request). Where prefill takes a large part of the
cycle, the first tokens of a wave spread over that prefill, the requests finish and return
staggered, and fewer of the others' prompts are ahead of a request:

    s = s_engine x (1 - rho)^gamma                               (``busy_share_exponent``)

Static-batch benchmarks (all prompts prefilled before decoding starts) carry none.

How the clients of a closed loop arrive (:class:`Arrival`) decides how many prompts are ahead of a
request. With fixed lengths (``waves``) a wave finishes together and the next wave's prompts
arrive together: ``s x (B - 1)`` of them are ahead. Where the harness draws lengths from a range
(``steady``: each output between ``r x O`` and ``O`` tokens), the clients' cycles differ, so a wave's
next prompts arrive spread over a window ``W = cycles x (1 - r) x O x step`` (``cycles``: how many
cycles of drift a run accumulates, ``Physics.length_drift_cycles``). While the window is shorter
than the wave's prefill ``B x prefill`` a backlog still builds and the wave's share
``f = 1 - W / (B x prefill)`` of the prompts queue as a wave does; the rest find the others
mostly decoding, each one in its prefill for ``prefill / cycle`` of its cycle, which is
``(B - 1) / B x rho`` prompts ahead on average::

    ahead = f x s x (B - 1) + (1 - f) x (B - 1) / B x rho

Its 99th percentile: within a wave a request's place is uniform, so up to ``2 s (B - 1)`` prompts
(at most ``B - 1``) are ahead at the tail; the drifted requests ahead are binomial, ``B - 1``
clients each in its prefill with probability ``rho / B``.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetplan.catalogs.schema import LLM
from fleetplan.models.prefill import prefill_flops_per_request


def prefill_tokens_per_step(batch: float, input_tokens: float, output_tokens: float) -> float:
    """Average prompt tokens prefilled per decode step in steady-state aggregated serving."""
    return batch * input_tokens / max(output_tokens, 1.0)


def prefill_flops_per_step(llm: LLM, batch: float, input_tokens: float, output_tokens: float, share: float = 1.0,
                           hit_rate: float = 0.0) -> float:
    """Average prefill FLOPs per decode step: ``share`` of ``batch`` prompts (linear layers plus
    attention, the first ``hit_rate`` of each prompt from the prefix cache) spread over
    ``output_tokens`` steps."""
    requests_per_step = share * batch / max(output_tokens, 1.0)
    return requests_per_step * prefill_flops_per_request(llm, input_tokens, hit_rate, attention=True)


def prefill_busy_share(batch: float, prefill_s: float, output_tokens: float, decode_step_s: float) -> float:
    """Share of a closed-loop request's cycle its engine spends prefilling: ``batch`` prompts of
    ``prefill_s`` each against ``output_tokens`` decode steps of ``decode_step_s`` (0 to 1)."""
    prefill = batch * prefill_s
    total = prefill + max(output_tokens, 1.0) * decode_step_s
    return prefill / total if total > 0 else 0.0


def share_before_first_token(engine_share: float, busy_share: float, exponent: float) -> float:
    """Share of a benchmark's other prompts prefilled before a request's first token: the engine's
    share ``engine_share`` times ``(1 - busy_share)^exponent`` (the engine's share at exponent 0)."""
    if exponent <= 0:
        return engine_share
    return engine_share * (1.0 - min(max(busy_share, 0.0), 1.0)) ** exponent


# The percentile of TTFT a benchmark reports next to its median
TAIL_QUANTILE = 0.99


@dataclass(frozen=True)
class Arrival:
    """How a closed-loop benchmark's clients arrive: ``pattern`` ``waves`` (fixed lengths) or
    ``steady`` (lengths drawn from a range); ``length_range_ratio`` the share of the stated length
    the shortest drawn length has (None for ``steady``: clients fully drifted apart; 1 for
    ``waves``); ``source``: where it was read (``row``, a harness id, or ``default``);
    ``harness``: the benchmark harness the row's ``source_id`` names ("" for none)."""

    pattern: str = "waves"
    length_range_ratio: float | None = 1.0
    source: str = "default"
    harness: str = ""

    def mean_length_share(self) -> float:
        """Mean drawn length over the stated length: (1 + r) / 2 (1 for fixed lengths or an
        unstated range)."""
        r = self.length_range_ratio
        return 1.0 if r is None else 0.5 * (1.0 + r)


WAVES = Arrival()


def wave_share(arrival: Arrival, batch: float, prefill_s: float, output_tokens: float, step_s: float,
               drift_cycles: float) -> float:
    """Share of a closed loop's prompts that still arrive as a wave (0 to 1): 1 for ``waves``, 0
    for ``steady`` without a stated range, else ``1 - W / (batch x prefill_s)`` with the arrival
    window ``W = drift_cycles x (1 - r) x output_tokens x step_s``."""
    if arrival.pattern == "waves":
        return 1.0
    r = arrival.length_range_ratio
    work = batch * prefill_s
    if r is None or work <= 0:
        return 0.0
    window = drift_cycles * (1.0 - r) * output_tokens * step_s
    return min(1.0, max(0.0, 1.0 - window / work))


def steady_prompts_ahead(batch: float, busy_share: float) -> float:
    """Prompts ahead of a request that finds the other ``batch - 1`` clients drifted apart, each in
    its prefill for ``busy_share / batch`` of its cycle: (B - 1) / B x rho."""
    if batch <= 1:
        return 0.0
    return (batch - 1.0) / batch * min(max(busy_share, 0.0), 1.0)


def binomial_quantile(n: int, p: float, q: float = TAIL_QUANTILE) -> int:
    """Smallest k with P(Binomial(n, p) <= k) >= q."""
    p = min(max(p, 0.0), 1.0)
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    pmf = (1.0 - p) ** n
    cdf = pmf
    k = 0
    while cdf < q - 1e-12 and k < n:
        pmf *= (n - k) / (k + 1) * p / (1.0 - p)
        k += 1
        cdf += pmf
    return k


def closed_loop_prompts_ahead(batch: int, share: float, busy_share: float, wave: float) -> tuple[float, float]:
    """(median, 99th percentile) of the prompts ahead of a request in a closed loop of ``batch``
    clients: the wave part ``wave x share x (B - 1)`` (tail ``2 x share x (B - 1)``, at most
    ``B - 1``) plus the drifted part ``(1 - wave) x (B - 1) / B x rho`` (tail the binomial's)."""
    others = max(batch - 1, 0)
    median = wave * share * others + (1.0 - wave) * steady_prompts_ahead(batch, busy_share)
    wave_tail = min(float(others), 2.0 * TAIL_QUANTILE * share * others)
    drifted_tail = binomial_quantile(others, busy_share / batch if batch > 0 else 0.0)
    tail = wave * wave_tail + (1.0 - wave) * drifted_tail
    return median, max(median, tail)

"""A discrete-event simulation of a planned product's replicas serving one hour's requests.

Owns the event loop that checks a plan against its targets: it reads no file and plans nothing.

Decode replicas run continuous batching: a replica holds up to ``batch`` sequences and runs one
step after another while it has work; each step's time is the one decode-step function
(:func:`fleetplan.models.roofline.decode_step`) at the step's number of decoding sequences and
their mean context, plus the prompt tokens it prefills. With prefill on the decode replicas
(``colocated`` or ``headroom``) a newly admitted request's prompt is prefilled in chunks of at
most ``chunk_tokens`` a step (first come first served); the step that finishes a prompt gives
its first token. With a prefill pool, a pool of ``servers`` replicas serves prompts first come
first served (:func:`fifo_pool`) in :func:`fleetplan.models.ttft.prefill_service_s` each, the
first token comes with the prefill, and after the KV hand-off the request decodes on a decode
replica. Requests go to the decode replica with the fewest requests (ties: the lowest index).

The fleet starts in steady state: each replica holds the sequences Little's law gives it at
the hour's rate, at uniformly spread progress (they are not counted), so a short run does not
see an empty fleet. TTFT runs from a request's arrival to its first token; TPOT is the time
from the first token to the last over the tokens after the first.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from fleetplan.optimizer.traffic.trace import Trace

# events between progress calls (and early-stop checks)
PROGRESS_EVENTS = 4096
# arrivals between early-stop checks as well: a batch that only decodes runs its steps without
# events, so step events alone can leave a run that must miss going for a long stretch; a check
# scans every request (tens of microseconds at 20,000), so at most a hundred or so a run
STOP_ARRIVALS = 256
StepTime = Callable[[int, float, int], float]  # (decoding sequences, their mean context tokens, prefill tokens) -> s


class Requests(Trace):
    """Requests in arrival order, as a trace holds them (seconds, prompt tokens to prefill,
    output tokens), with what the simulation asks of them."""

    @property
    def count(self) -> int:
        """Number of requests."""
        return self.requests

    @cached_property
    def mean_input_tokens(self) -> float:
        """Mean prompt tokens (the context of the sequences a warm start puts on the replicas)."""
        return float(np.mean(self.input_tokens)) if self.count else 0.0


@dataclass(frozen=True)
class DecodeReplicas:
    """The decode replicas of one product and how their steps are timed."""

    replicas: int
    batch: int
    step_s: StepTime
    chunk_tokens: int = 2048
    prefill_on_decode: bool = True
    uncached_share: float = 1.0  # share of prompt tokens prefilled (the rest hit the prefix cache)


@dataclass
class Replica:
    """One decode replica's state: queued request ids and active ``[id, prompt left, tokens made,
    prompt tokens, output tokens]`` (the sizes copied in, so a step reads no array)."""

    waiting: deque[int] = field(default_factory=deque)
    active: list[list[int]] = field(default_factory=list)
    running: bool = False
    busy_s: float = 0.0
    occupancy_s: float = 0.0

    @property
    def load(self) -> int:
        """Requests held (queued and active)."""
        return len(self.waiting) + len(self.active)


@dataclass
class TokenTimes:
    """Per request: first-token and last-token times (NaN until reached)."""

    first_s: np.ndarray
    last_s: np.ndarray


def fifo_pool(arrival_s: np.ndarray, service_s: np.ndarray, servers: int) -> np.ndarray:
    """Start times of service in a first-come-first-served pool of ``servers`` identical servers
    (arrivals in order): each request takes the server that frees first."""
    free = [0.0] * servers
    start = np.empty(arrival_s.size)
    for i in range(arrival_s.size):
        t = max(arrival_s[i], free[0])
        start[i] = t
        heapq.heapreplace(free, t + service_s[i])
    return start


def _admit(r: Replica, reqs: Requests, fleet: DecodeReplicas) -> None:
    """Move queued requests into the batch while it has room."""
    while r.waiting and len(r.active) < fleet.batch:
        i = r.waiting.popleft()
        prompt = max(1, math.ceil(reqs.input_tokens[i] * fleet.uncached_share)) if fleet.prefill_on_decode else 0
        r.active.append([i, prompt, 0 if fleet.prefill_on_decode else 1, int(reqs.input_tokens[i]),
                         int(reqs.output_tokens[i])])


def _warm_start(replicas: list[Replica], rate_per_s: float, reqs: Requests, fleet: DecodeReplicas, step_guess_s: float,
                rng: np.random.Generator) -> None:
    """Fill each replica with the sequences Little's law gives at ``rate_per_s``: ids below 0
    encode their length (``-output tokens``), their progress spread uniformly."""
    mean_out = float(np.mean(reqs.output_tokens)) if reqs.count else 1.0
    per_replica = rate_per_s / len(replicas) * mean_out * step_guess_s
    for r in replicas:
        for _ in range(min(fleet.batch, int(round(per_replica)))):
            length = max(2, int(round(mean_out)))
            r.active.append([-length, 0, int(rng.integers(1, length)), reqs.mean_input_tokens, length])


def decode_fleet(reqs: Requests, ready_s: np.ndarray, fleet: DecodeReplicas, rate_per_s: float, seed: int = 0,
                 step_guess_s: float = 0.03, on_progress: Callable[[float], None] | None = None,
                 stop: Callable[[float, TokenTimes], bool] | None = None) -> tuple[TokenTimes, float]:
    """Simulate the decode replicas; request ``i`` reaches them at ``ready_s[i]`` (its arrival,
    or its KV hand-off from a pool). Returns the timings and the replicas' busy share (steps
    weighted by their share of the batch in use). ``stop(now, timings)``, asked as often as
    ``on_progress``, ends the run early when true (requests not yet served keep NaN times)."""
    replicas = [Replica() for _ in range(fleet.replicas)]
    _warm_start(replicas, rate_per_s, reqs, fleet, step_guess_s, np.random.Generator(np.random.PCG64(seed)))
    out = TokenTimes(np.full(reqs.count, np.nan), np.full(reqs.count, np.nan))
    events: list[tuple[float, int, int, int]] = []  # (time, order, kind 0 ready / 1 step end, index)
    order = np.argsort(ready_s, kind="stable")
    for n, i in enumerate(order):
        events.append((float(ready_s[i]), n, 0, int(i)))
    heapq.heapify(events)
    pending: dict[int, list[int]] = {}
    counter, start, end = len(events), float(np.min(ready_s)) if reqs.count else 0.0, 0.0
    for k, r in enumerate(replicas):
        counter = _start_step(k, r, reqs, fleet, start, events, pending, counter)
    pop = heapq.heappop
    arriving = np.append(np.asarray(ready_s, dtype=np.float64)[order], math.inf).tolist()
    arrived = 0
    while events:
        now, _, kind, idx = pop(events)
        if now > end:
            end = now
        if kind == 0:
            arrived += 1
            if stop is not None and arrived % STOP_ARRIVALS == 0 and stop(now, out):
                break
            k = min(range(len(replicas)), key=lambda j: (replicas[j].load, j))
            replicas[k].waiting.append(idx)
            if not replicas[k].running:
                counter = _start_step(k, replicas[k], reqs, fleet, now, events, pending, counter)
            continue
        r = replicas[idx]
        chunks = _finish_step_admit_plan(r, reqs, fleet, pending.pop(idx), now, out)
        r.running = False
        if counter % PROGRESS_EVENTS == 0:
            if on_progress is not None:
                on_progress(now)
            if stop is not None and stop(now, out):
                break
        if chunks is not None:
            if not chunks[2]:
                now, chunks = _coast(r, fleet, now, chunks, arriving[arrived])
            counter = _run_step(idx, r, fleet, now, chunks, events, pending, counter)
    span = max(end - start, 1e-12)
    return out, sum(r.occupancy_s for r in replicas) / (span * len(replicas))


def _start_step(k: int, r: Replica, reqs: Requests, fleet: DecodeReplicas, now: float,
                events: list[tuple[float, int, int, int]], pending: dict[int, list[int]], counter: int) -> int:
    """Start replica ``k``'s next step if it has work; returns the next event order number."""
    _admit(r, reqs, fleet)
    if not r.active:
        return counter
    return _run_step(k, r, fleet, now, _chunks(r, fleet), events, pending, counter)


# a step's layout: (decoding sequences, their context tokens summed, prompt tokens prefilled in
# all, prompt tokens each active sequence prefills)
StepPlan = tuple[int, float, int, list[int]]


def _lay_out(seqs: list[list[int]], budget: int, put: Callable[[int], None]) -> tuple[int, int, float]:
    """Lay ``seqs`` out in a step: prompts take what is left of the chunk ``budget`` first come
    first served, the others decode a token each; ``put`` gets each one's prompt tokens. Returns
    the budget left, the decoding sequences and their summed context (whole tokens, so exact)."""
    decoding, context = 0, 0.0
    for seq in seqs:
        left = seq[1]
        if left:
            take = left if left < budget else budget
            budget -= take
            put(take)
        else:
            put(0)
            decoding += 1
            context += seq[3] + seq[2]
    return budget, decoding, context


def _chunks(r: Replica, fleet: DecodeReplicas) -> StepPlan:
    """The layout of the replica's next step: prompts take the step's chunk first come first
    served, the other sequences decode a token each."""
    chunks: list[int] = []
    budget, decoding, context = _lay_out(r.active, fleet.chunk_tokens, chunks.append)
    return decoding, context, fleet.chunk_tokens - budget, chunks


def _run_step(k: int, r: Replica, fleet: DecodeReplicas, now: float, plan: StepPlan,
              events: list[tuple[float, int, int, int]], pending: dict[int, list[int]], counter: int) -> int:
    """Start replica ``k``'s step as ``plan`` lays it out; returns the next event order number."""
    decoding, context, prefill, chunks = plan
    dt = fleet.step_s(decoding, context / decoding if decoding else 0.0, prefill)
    r.running = True
    r.busy_s += dt
    r.occupancy_s += dt * len(r.active) / fleet.batch
    pending[k] = chunks
    heapq.heappush(events, (now + dt, counter, 1, k))
    return counter + 1


def _coast(r: Replica, fleet: DecodeReplicas, now: float, plan: StepPlan, before: float) -> tuple[float, StepPlan]:
    """Run, without events, the steps of a replica whose batch only decodes that end before
    ``before`` (the next arrival anywhere: none can join or be routed meanwhile) with no
    sequence finishing in them; returns when the next step starts and its layout. Each step's
    time, token and busy share are those its own event would give, in the same order, so the
    timings are the same; what it saves is the event queue's round trip of every plain step."""
    decoding, context, prefill, chunks = plan
    active = r.active
    if prefill or decoding != len(active):
        return now, plan
    room = min(seq[4] - seq[2] for seq in active)  # steps until the first sequence ends (it ends in its own event)
    # whole prompt sizes (not a warm start's mean) sum exactly, so a step's context is the last
    # one's plus a token per sequence, and the tokens are added when the run ends
    whole = all(type(seq[3]) is int for seq in active)
    step_s, batch, steps = fleet.step_s, fleet.batch, 0
    while room > 1:
        dt = step_s(decoding, context / decoding, 0)
        end = now + dt
        if end >= before:
            break
        r.busy_s += dt
        r.occupancy_s += dt * decoding / batch
        if whole:
            context += decoding
            steps += 1
        else:
            context = 0.0
            for seq in active:
                seq[2] += 1
                context += seq[3] + seq[2]
        now, room = end, room - 1
    if steps:
        for seq in active:
            seq[2] += steps
    return now, (decoding, context, 0, chunks)


def _finish_step_admit_plan(r: Replica, reqs: Requests, fleet: DecodeReplicas, chunks: list[int], now: float,
                            out: TokenTimes) -> StepPlan | None:
    """A finished step applied (prompts advance by their chunk, decoding sequences make a token,
    done ones leave), the queue admitted (:func:`_admit`) and the next step laid out as
    :func:`_chunks` would, in one pass over the batch (the event loop's hot path: one walk of
    the batch a step, not two); None when the replica is left with no work."""
    keep: list[list[int]] = []
    nxt: list[int] = []
    add, put = keep.append, nxt.append
    budget, decoding, context = fleet.chunk_tokens, 0, 0.0
    first_s, last_s = out.first_s, out.last_s
    for seq, take in zip(r.active, chunks):
        if seq[1] > 0:
            seq[1] -= take
            left = seq[1]
            if left:
                add(seq)
                take = left if left < budget else budget
                budget -= take
                put(take)
                continue
            seq[2] = 1
            if seq[0] >= 0:
                first_s[seq[0]] = now
        else:
            seq[2] += 1
        if seq[2] >= seq[4]:
            if seq[0] >= 0:
                last_s[seq[0]] = now
            continue
        add(seq)
        put(0)
        decoding += 1
        context += seq[3] + seq[2]
    r.active = keep
    if r.waiting and len(keep) < fleet.batch:
        admitted = len(keep)
        _admit(r, reqs, fleet)
        budget, new_decoding, new_context = _lay_out(keep[admitted:], budget, put)
        decoding += new_decoding
        context += new_context
    return (decoding, context, fleet.chunk_tokens - budget, nxt) if keep else None


def percentiles_ms(values_s: np.ndarray) -> dict[str, float | None]:
    """P50, P90 and P99 in milliseconds (None without values), to 0.1 ms."""
    v = values_s[np.isfinite(values_s)]
    if v.size == 0:
        return {"p50": None, "p90": None, "p99": None}
    p = np.percentile(v, [50, 90, 99])
    return {"p50": round(float(p[0]) * 1e3, 1), "p90": round(float(p[1]) * 1e3, 1), "p99": round(float(p[2]) * 1e3, 1)}


def tpot_s(reqs: Requests, t: TokenTimes) -> np.ndarray:
    """Seconds per output token after the first (NaN for one-token answers and unfinished ones)."""
    tokens = reqs.output_tokens.astype(np.float64) - 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(tokens > 0, (t.last_s - t.first_s) / np.where(tokens > 0, tokens, 1.0), np.nan)


def poisson_arrivals(rate_per_s: float, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` arrival times of a Poisson process at ``rate_per_s`` from 0."""
    return np.cumsum(rng.exponential(1.0 / rate_per_s, count)) if rate_per_s > 0 else np.zeros(count)

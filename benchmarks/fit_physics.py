"""Fit the default preset's physical parameters to measured TPOT and TTFT, and cross-validate them.

Usage: python benchmarks/fit_physics.py [MEASUREMENTS.csv ...] [--cv [--residuals] [--fold-parameters] [--starts K]] [--converge [--fold-jacobians N]] [--ttft-only] [--iterations N] [--fold-iterations N]

The parameters (:data:`PARAMETERS`) are the few the default preset shares across every model
and GPU: NVIDIA bandwidth efficiency (at most 0.90), per-step, per-layer and per-sequence
overhead and one-shot all-reduce latency (at least 2 us: an NVLink round trip and a launch);
decode, KV (at most the datasheet bandwidth) and prefill (at most 0.90 of the datasheet rate)
kernel efficiencies; the share of compute work that runs at the bf16 rate whatever the weights'
precision; the fixed cost of a KV page; the MoE grouped-GEMM small-group cost and the weight-only FP4
dequantisation factor and fixed time per layer; the all-reduces' share of the scale-up
bandwidth; how fast the share of prompts ahead falls with prefill's busy share; each engine's
share of a wave's prefill before a request's first token and its fixed latency per request; and
the share of each prompt vLLM 0.12 benchmark runs served from the prefix cache; the tokens
TensorRT-LLM 1.2.0rc6.post3's speculative DeepSeek runs accept per step; and the share of a
wave's prefill before a first token of each engine release in
``Physics.benchmark_release_shares`` (SGLang 0.5.1); the bandwidth efficiency of each AMD family
(:data:`AMD`); the cycles of drift of a benchmark harness that draws lengths from a range, the
decode steps TensorRT-LLM holds a request to balance attention data-parallel ranks
(:data:`BALANCING`) and the decode steps without prefill a request waits before its first token.
Nothing is per model or GPU id. ``--ttft-only`` moves only the parameters a benchmark's TTFT alone
depends on (:data:`TTFT_ONLY`: the engines' fixed latencies, the drift, the balancing limit and the
first-token steps) and holds the rest at the shipped values, so the TTFT side can be refitted on
top of a TPOT refit without moving the planner. (The fallback engine's share and latency are not
fitted: every row names its engine; they are the fitted engines' means. The planner's shared
``admission_latency_s`` is not fitted either.) A row whose measured TTFT is above twice the
longest its closed loop can hold a request (:func:`above_ttft_ceiling`) has its TTFT printed and
scored but not fitted. The loss is robust least squares
(Huber at 0.25) on the relative error of TPOT
(predicted/measured - 1, the error the MAPE targets count) plus half the weight on log TTFT,
over the rows the planner would run, less the rows whose measured TPOT is below their step's
bandwidth floor (:func:`below_bandwidth_floor`: printed, and scored but not fitted); the model is
the project's own (:func:`fleetplan.models.validation.predict`), so what is fitted is what plans
use.

The default files are ``silicon-train.csv`` and ``inferencemax-train.csv``, fitted together.

``--cv`` predicts every row from fits that never saw it, in four ways a user meets an unmeasured
configuration (:data:`CV_SCHEMES`): leaving out one configuration group (model, GPU, engine, TP,
precision, EP, attention-DP) at a time; one TP degree of a model x GPU x engine measured at
several (its every precision); one GPU; one engine. It prints TPOT MAPE and share within 1.5x and
TTFT share within 1.5x, dense and MoE apart, for each, and the worst of them as the figure of
record (a group split alone leaks: the configurations users ask about differ from the measured
ones mostly by TP degree, GPU or engine). A release's share that no remaining row measures falls
back to its engine's share, and an engine no remaining row measures to the fitted engines' mean,
as they would for a release or engine the fit never saw. Each fold starts from the full fit; by
default it takes damped Gauss-Newton steps on the full fit's Jacobian restricted to the fold's
rows (each step accepted only if it lowers the fold's loss), which keeps a CV run to a few minutes;
``--fold-iterations N`` instead refits each fold with N full iterations (about 15 s per
iteration and fold on one core); ``--fold-parameters`` prints the parameters each fold's fit moved
by more than 2% from the full fit. The fit stops where its damped steps fail, and the loss has
kinks, so a start a thousandth away ends elsewhere and moves the held-out figures by up to about
2 points (``benchmarks/RESULTS.md``, 2026-12-07, night): ``--starts K`` runs the fit and the folds
from the shipped values and K - 1 such starts and prints the median of each figure of record, the
figure to compare candidates by. ``--converge`` instead runs the fit to a minimum: Levenberg-Marquardt
restarted from a fresh Jacobian with its damping reset wherever a step gains no more than a
millionth of the loss (:data:`CONVERGE_TOLERANCE`), ended only when such a fresh start gains no
more (at most ``--iterations`` Jacobians); and each fold's fast path likewise, its steps on the
full fit's Jacobian taken until none gains, then restarted from up to ``--fold-jacobians`` fresh
Jacobians of the fold's own (:func:`converge`). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fleetplan.catalogs import load_catalog
from fleetplan.catalogs.loader import Catalog
from fleetplan.models.measurements import Measurement, parse_measurements
from fleetplan.models.physics import DEFAULT_PHYSICS, EnginePhysics, FamilyPhysics, release_matches
from fleetplan.models.presets import DEFAULT, Preset, normalize_engine
from fleetplan.models.roofline import model_kind
from fleetplan.models.validation import error_stats, predict, skip_reason, speculation

HERE = Path(__file__).resolve().parent
MEASUREMENTS = HERE.parent.parent / "shared" / "reference" / "measurements"
SILICON = MEASUREMENTS / "silicon-train.csv"
INFERENCEMAX = MEASUREMENTS / "inferencemax-train.csv"
# Damped Gauss-Newton steps per fold on the full fit's Jacobian (the fast path): the fold's loss
# stops falling after two or three
FOLD_STEPS = 3
NVIDIA = ("ampere", "hopper", "blackwell")
# The speculative runs' rule (engine, release, model id prefix, drafted tokens); its accepted
# tokens per step are fitted
SPECULATION = DEFAULT_PHYSICS.benchmark_speculation[0][:4]
ENGINES = ("atom", "sglang", "trtllm", "vllm")
# AMD families with their own fitted bandwidth efficiency (MI300X; MI325X and MI355X), the fixed
# costs per step and layer shared with NVIDIA's; a family no remaining row measures takes the
# mean efficiency of the GPUs the remaining rows measure (:func:`unmeasured_families`)
AMD = ("cdna3", "cdna4")
# Engines that hold a new request to balance attention data-parallel ranks (their limit in steps fitted)
BALANCING = tuple(e for e, _ in DEFAULT_PHYSICS.attention_dp_balance_steps) or ("trtllm",)
# Engine releases with their own share of a wave's prefill before a first token (fitted)
RELEASES = tuple((e, r) for e, r, _ in DEFAULT_PHYSICS.benchmark_release_shares)
# (name, lower bound, upper bound); engines' shares are appended
PARAMETERS: tuple[tuple[str, float, float], ...] = (
    ("bandwidth_efficiency", 0.3, 0.9), ("step_overhead_s", 0.0, 5e-3), ("layer_overhead_s", 0.0, 2e-4),
    ("collective_latency_s", 2e-6, 1e-4), ("kv_bandwidth_efficiency", 0.2, 1.0 / 0.9), ("compute_efficiency", 0.05, 1.0),
    ("prefill_compute_efficiency", 0.05, 0.9), ("moe_small_group_tokens", 0.0, 20.0),
    ("weight_only_fp4_dequant_factor", 1.0, 4.0), ("weight_only_fp4_layer_s", 0.0, 1e-4),
    ("kv_page_overhead", 0.0, 8.0),
    ("sequence_overhead_s", 0.0, 2e-4), ("busy_share_exponent", 0.0, 8.0),
    ("comm_bandwidth_efficiency", 0.1, 0.9), ("hit_rate_vllm_0.12", 0.0, 0.98),
    ("accepted_trtllm_1.2.0rc6.post3", 1.0, 1.0 + SPECULATION[3]),
) + tuple(
    (f"bandwidth_{fam}", 0.3, 0.9) for fam in AMD) + tuple((f"share_{e}", 0.0, 1.0) for e in ENGINES) + tuple((f"admission_{e}", 0.0, 0.5) for e in ENGINES) + tuple(
    (f"share_{e}_{r}", 0.0, 1.0) for e, r in RELEASES) + (("length_drift_cycles", 0.0, 50.0),) + tuple(
    (f"balance_steps_{e}", 0.0, 200.0) for e in BALANCING) + (("bf16_work_share", 0.0, 1.0), ("first_token_steps", 0.0, 20.0))
# The parameters only a benchmark's TTFT depends on (``--ttft-only`` fits these alone, the rest held
# at the shipped values): the engines' fixed latencies (the planner pays its own shared figure), the
# drift of a harness that draws lengths from a range, the attention-DP balancing limit and the
# decode steps without prefill before a first token
TTFT_ONLY = tuple(f"admission_{e}" for e in ENGINES) + ("length_drift_cycles",) + tuple(
    f"balance_steps_{e}" for e in BALANCING) + ("first_token_steps",)
TTFT_WEIGHT = 0.5
HUBER = 0.25


def current() -> np.ndarray:
    """The shipped values, in :data:`PARAMETERS` order."""
    fam = DEFAULT_PHYSICS.family("hopper")
    p = DEFAULT_PHYSICS
    values = [fam.bandwidth_efficiency, fam.step_overhead_s, fam.layer_overhead_s, fam.collective_latency_s,
              p.kv_bandwidth_efficiency, DEFAULT.compute_efficiency, DEFAULT.prefill_compute_efficiency,
              p.moe_small_group_tokens, p.weight_only_fp4_dequant_factor, p.weight_only_fp4_layer_s,
              p.kv_page_overhead,
              p.sequence_overhead_s, p.busy_share_exponent, p.comm_bandwidth_efficiency,
              p.benchmark_hit_rate("vllm", "0.12"),
              p.benchmark_speculative(SPECULATION[0], SPECULATION[1], SPECULATION[2])[1]]
    for fam in AMD:
        values += [p.family(fam).bandwidth_efficiency]
    values += [p.engine(e).prefill_before_first_token for e in ENGINES]
    values += [p.engine(e).admission_latency_s or p.admission_latency_s for e in ENGINES]
    values += [p.prefill_before_first_token(e, r) for e, r in RELEASES]
    values += [p.length_drift_cycles] + [p.balance_steps(e) for e in BALANCING]
    values += [p.bf16_work_share, p.first_token_steps]
    return np.array(values)


def preset_of(x: np.ndarray) -> Preset:
    """The default preset with parameter vector ``x``."""
    v = dict(zip((name for name, _, _ in PARAMETERS), (float(t) for t in x), strict=True))
    families = tuple(
        FamilyPhysics(f.family, v["bandwidth_efficiency"], v["step_overhead_s"], v["layer_overhead_s"],
                      v["collective_latency_s"], 0.0) if f.family in NVIDIA
        else FamilyPhysics(f.family, v[f"bandwidth_{f.family}"], v["step_overhead_s"], v["layer_overhead_s"],
                           f.collective_latency_s, f.hop_latency_s) if f.family in AMD else f
        for f in DEFAULT_PHYSICS.families
    )
    engines = tuple(dataclasses.replace(DEFAULT_PHYSICS.engine(e), prefill_before_first_token=v[f"share_{e}"],
                                        admission_latency_s=v[f"admission_{e}"]) for e in ENGINES)
    fallback = dataclasses.replace(DEFAULT_PHYSICS.engine_fallback,
                                   prefill_before_first_token=float(np.mean([v[f"share_{e}"] for e in ENGINES])),
                                   admission_latency_s=float(np.mean([v[f"admission_{e}"] for e in ENGINES])))
    physics = dataclasses.replace(
        DEFAULT_PHYSICS, families=families, engines=engines, engine_fallback=fallback,
        kv_bandwidth_efficiency=v["kv_bandwidth_efficiency"],
        moe_small_group_tokens=v["moe_small_group_tokens"],
        weight_only_fp4_dequant_factor=v["weight_only_fp4_dequant_factor"],
        weight_only_fp4_layer_s=v["weight_only_fp4_layer_s"], kv_page_overhead=v["kv_page_overhead"],
        sequence_overhead_s=v["sequence_overhead_s"], busy_share_exponent=v["busy_share_exponent"],
        comm_bandwidth_efficiency=v["comm_bandwidth_efficiency"],
        benchmark_prefix_cache=(("vllm", "0.12", v["hit_rate_vllm_0.12"]),),
        benchmark_speculation=(SPECULATION + (v["accepted_trtllm_1.2.0rc6.post3"],),),
        benchmark_release_shares=tuple((e, r, v[f"share_{e}_{r}"]) for e, r in RELEASES),
        length_drift_cycles=v["length_drift_cycles"], bf16_work_share=v["bf16_work_share"],
        attention_dp_balance_steps=tuple((e, v[f"balance_steps_{e}"]) for e in BALANCING),
        first_token_steps=v["first_token_steps"],
    )
    return dataclasses.replace(DEFAULT, physics=physics, compute_efficiency=v["compute_efficiency"],
                               prefill_compute_efficiency=v["prefill_compute_efficiency"])


def residuals(x: np.ndarray, rows: list[Measurement], catalog: Catalog,
              unfitted_ttft: frozenset[int] = frozenset()) -> np.ndarray:
    """Relative error predicted / measured - 1 of every row's TPOT (the error MAPE counts), then
    log(predicted / measured) TTFT (weighted) of rows reporting it, less those whose ``id`` is in
    ``unfitted_ttft`` (:func:`above_ttft_ceiling`)."""
    preset = preset_of(x)
    tpot, ttft = [], []
    for r in rows:
        p = predict(r, catalog, preset)
        tpot.append(p.predicted_tpot_ms / r.measured_tpot_ms - 1.0)
        if r.measured_ttft_ms and id(r) not in unfitted_ttft:
            ttft.append(TTFT_WEIGHT * np.log(p.predicted_ttft_ms / r.measured_ttft_ms))
    return np.array(tpot + ttft)


def free_mask(ttft_only: bool) -> np.ndarray:
    """Which parameters a fit moves: all, or with ``ttft_only`` those of :data:`TTFT_ONLY`."""
    return np.array([not ttft_only or name in TTFT_ONLY for name, _, _ in PARAMETERS])


def forward_jacobian(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, r: np.ndarray,
                     free: np.ndarray, relative_step: float = 1e-4) -> np.ndarray:
    """Forward differences of ``f`` at ``x`` (residuals ``r``) in the ``free`` parameters, each
    ``relative_step`` of its value (of 1e-3 at least); zero columns for the others."""
    scale = np.maximum(np.abs(x), 1e-3)
    jac = np.zeros((len(r), len(x)))
    for i in np.flatnonzero(free):
        step = np.zeros(len(x))
        step[i] = relative_step * scale[i]
        jac[:, i] = (f(x + step) - r) / step[i]
    return jac


def fit(rows: list[Measurement], catalog: Catalog, x0: np.ndarray, iterations: int,
        free: np.ndarray | None = None, unfitted_ttft: frozenset[int] = frozenset(),
        tolerance: float | None = None, label: str = "fit") -> np.ndarray:
    """Huber-weighted Levenberg-Marquardt within the bounds, numerical Jacobian, from ``x0``,
    moving the ``free`` parameters (default all), the TTFT of rows in ``unfitted_ttft`` left out.
    With ``tolerance``, run to convergence instead (:func:`converge`, at most ``iterations``
    Jacobians), a progress line per iteration under ``label``."""
    free = np.ones(len(x0), dtype=bool) if free is None else free
    f: Callable[[np.ndarray], np.ndarray] = lambda x: residuals(x, rows, catalog, unfitted_ttft)  # noqa: E731
    if tolerance is not None:
        fresh = lambda y, ry: forward_jacobian(f, y, ry, free)  # noqa: E731
        wide = lambda y, ry: forward_jacobian(f, y, ry, free, WIDE_STEP)  # noqa: E731
        return converge(f, x0, f(x0), fresh, fresh, tolerance, iterations, label=label, wide=wide)[0]
    x, r, lam = x0.copy(), f(x0), 1e-2
    for _ in range(iterations):
        x, r, lam, moved = damped_step(f, x, r, forward_jacobian(f, x, r, free), lam, 8)
        if not moved:
            break
    return x


# A converged fit (``--converge``) stops where no step, from a fresh Jacobian and reset damping,
# lowers the loss by more than this share of it
CONVERGE_TOLERANCE = 1e-6
# The relative step of the wide differences a converged fit tries where the fine ones' step fails:
# the loss has kinks (whole KV pages, prefill chunks, the running batch), and a difference of a
# ten-thousandth can sit on one side of a kink that a step of a hundredth crosses
WIDE_STEP = 1e-2


def converge(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, r: np.ndarray,
             after_step: Callable[[np.ndarray, np.ndarray], np.ndarray],
             restart: Callable[[np.ndarray, np.ndarray], np.ndarray], tolerance: float, jacobians: int,
             steps: int = 200, label: str | None = None,
             bounds: tuple[np.ndarray, np.ndarray] | None = None,
             wide: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
             ) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """Levenberg-Marquardt from ``x`` (residuals ``r``) run until it stops at a minimum, not where
    its damping trials fail: a step lowering the loss by no more than ``tolerance`` of it, or no
    step at all, restarts from a fresh Jacobian (``restart``) with the damping reset, and only a
    fresh Jacobian's step that gains no more than that ends it. ``after_step`` gives the Jacobian
    after an accepted step (a fresh one, or the one in hand for the folds' fast path). At most
    ``jacobians`` Jacobians (the first included) and ``steps`` steps. Returns the point, its residuals
    and the loss after each accepted step, which never rises. A progress line per step under
    ``label``. Where a fresh Jacobian's step gains nothing, ``wide`` (a Jacobian of wider
    differences, which cross the loss's kinks) is tried before the fit ends."""
    jac, lam, fresh, made = restart(x, r), 1e-2, 1, 1  # fresh: 0 stale, 1 fresh, 2 fresh and wide
    history = [huber_loss(r)]
    for n in range(steps):
        xn, rn, lam, moved = damped_step(f, x, r, jac, lam, 8, bounds)
        gain = 0.0
        if moved:
            loss = huber_loss(rn)
            gain = (history[-1] - loss) / max(history[-1], 1e-300)
            x, r = xn, rn
            history.append(loss)
        if label:
            print(f"  {label}: step {n + 1} loss {history[-1]:.6g} gain {gain:.2e}"
                  f"{['', ' (fresh Jacobian)', ' (wide differences)'][fresh]}", file=sys.stderr, flush=True)
        if gain > tolerance:
            fresh = 0
            if made < jacobians or after_step is not restart:
                jac = after_step(x, r)
                made += after_step is restart
            continue
        if made >= jacobians or fresh == 2 or (fresh == 1 and wide is None):
            break
        jac = restart(x, r) if fresh == 0 else wide(x, r)  # type: ignore[misc]
        lam, fresh, made = 1e-2, fresh + 1, made + 1
    return x, r, history


def damped_step(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, r: np.ndarray, jac: np.ndarray,
                lam: float, tries: int, bounds: tuple[np.ndarray, np.ndarray] | None = None,
                ) -> tuple[np.ndarray, np.ndarray, float, bool]:
    """One Huber-weighted Levenberg-Marquardt step from ``x`` (residuals ``r``, Jacobian ``jac``)
    within the bounds (default :data:`PARAMETERS`'): the damping grows 4x per try until the loss
    falls (then shrinks 3x). Returns the new point, its residuals and damping, and whether it moved."""
    lo, hi = bounds or (np.array([b for _, b, _ in PARAMETERS]), np.array([b for _, _, b in PARAMETERS]))
    w = np.where(np.abs(r) <= HUBER, 1.0, HUBER / np.maximum(np.abs(r), 1e-12))
    h, g = jac.T @ (jac * w[:, None]), jac.T @ (w * r)
    for _ in range(tries):
        cand = np.clip(x + np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-12), -g), lo, hi)
        rc = f(cand)
        if huber_loss(rc) < huber_loss(r):
            return cand, rc, lam / 3, True
        lam *= 4
    return x, r, lam, False


KINDS = ("all", "dense", "moe")


def figures(rows: list[Measurement], preds: list[tuple[float, float] | None], catalog: Catalog,
            kind: str) -> dict[str, float] | None:
    """TPOT MAPE, TPOT within 1.5x, TTFT within 1.5x and the row count of ``kind``'s rows that
    ``preds`` predicts (None entries are rows the scheme does not hold out), or None if none."""
    pick = [i for i, r in enumerate(rows) if preds[i] is not None
            and (kind == "all" or model_kind(catalog.models[r.model]) == kind)]
    if not pick:
        return None
    t = error_stats([rows[i].measured_tpot_ms for i in pick], [preds[i][0] for i in pick])  # type: ignore[index]
    m = [i for i in pick if rows[i].measured_ttft_ms]
    f = error_stats([rows[i].measured_ttft_ms or 0.0 for i in m], [preds[i][1] for i in m])  # type: ignore[index]
    return {"rows": float(t["rows"]), "tpot_mape": float(t["mape"]), "tpot_within": float(t["within_1.5x"]),
            "ttft_within": float(f.get("within_1.5x", 0.0))}


def report(label: str, rows: list[Measurement], preds: list[tuple[float, float] | None], catalog: Catalog) -> None:
    """TPOT MAPE and share within 1.5x, TTFT share within 1.5x, overall and dense / MoE."""
    for kind in KINDS:
        f = figures(rows, list(preds), catalog, kind)
        if f is not None:
            print(f"{label:<16} {kind:<6} rows {f['rows']:>4.0f}  TPOT MAPE {f['tpot_mape']:6.1%}  within 1.5x "
                  f"{f['tpot_within']:6.1%}  | TTFT within 1.5x {f['ttft_within']:6.1%}")


def below_bandwidth_floor(row: Measurement, catalog: Catalog) -> bool:
    """Whether ``row``'s measured TPOT is shorter than reading the bytes of its step (weights or
    touched experts, every sequence's KV cache; per accepted token where the run decodes
    speculatively) at the GPUs' datasheet bandwidth: no engine can
    do that, so the run did not hold the batch it names. Such rows are listed, not fitted."""
    est = predict(row, catalog, DEFAULT).estimate
    gpu = catalog.gpus[row.gpu]
    floor_ms = est.bytes_per_step / (row.tp * gpu.mem_bandwidth_bytes_per_s) * 1e3 / speculation(row, DEFAULT)[1]
    return row.measured_tpot_ms < floor_ms


# A closed-loop median TTFT measured above this multiple of its ceiling (:func:`above_ttft_ceiling`) is
# scored but not fitted: twice the ceiling is outside the 1.5x band of any TTFT the physics can give
# the row with its fitted rates, whatever share of the wave it puts ahead
TTFT_CEILING_FACTOR = 2.0


def ttft_ceiling_preset() -> Preset:
    """The shipped preset with every engine and release prefilling the whole wave of the other
    requests' prompts before a request's first token (share 1, not lowered by prefill's busy share)."""
    p = DEFAULT_PHYSICS
    whole = dataclasses.replace(
        p, engines=tuple(dataclasses.replace(e, prefill_before_first_token=1.0) for e in p.engines),
        engine_fallback=dataclasses.replace(p.engine_fallback, prefill_before_first_token=1.0),
        benchmark_release_shares=tuple((e, r, 1.0) for e, r, _ in p.benchmark_release_shares),
        busy_share_exponent=0.0)
    return dataclasses.replace(DEFAULT, physics=whole)


def above_ttft_ceiling(row: Measurement, catalog: Catalog, ceiling: Preset) -> bool:
    """Whether ``row``'s measured median TTFT is above :data:`TTFT_CEILING_FACTOR` times the longest a
    closed loop at its concurrency holds a request (``ceiling``, :func:`ttft_ceiling_preset`): its
    clients arriving together and the whole wave of their prompts prefilled ahead of it, in chunks
    with the decode steps between, after its engine's fixed latency, and behind the queue for a
    slot where the cache holds fewer sequences than the concurrency. The other clients are all the
    load there is, so no engine behind the benchmark holds a request longer: such a run waited
    somewhere the physics does not model (a client-side queue, a warm-up, a slow path), and its
    TTFT is listed and scored but not fitted, as :func:`below_bandwidth_floor` does for TPOT.
    Static batches and rows without a measured TTFT are never above it."""
    if not row.measured_ttft_ms or row.batching != "continuous":
        return False
    wave = dataclasses.replace(row, arrival_pattern="waves", length_range_ratio=None)
    return row.measured_ttft_ms > TTFT_CEILING_FACTOR * predict(wave, catalog, ceiling).predicted_ttft_ms


def unmeasured_releases(x: np.ndarray, rows: list[Measurement]) -> np.ndarray:
    """``x`` with the share of each release in :data:`RELEASES` that no row of ``rows`` measures set
    to its engine's share (a fit without such rows cannot know it)."""
    names = [name for name, _, _ in PARAMETERS]
    x = x.copy()
    for e, r in RELEASES:
        if not any(normalize_engine(m.engine) == e and release_matches(m.engine_version, r) for m in rows):
            x[names.index(f"share_{e}_{r}")] = x[names.index(f"share_{e}")]
    return x


def cv_group(row: Measurement) -> tuple[object, ...]:
    """A configuration group: what stays fixed across a batch sweep (model, GPU, engine, TP,
    precision, EP, attention-DP)."""
    return row.configuration + (row.ep, row.dp_attention)


def tp_fold(row: Measurement) -> tuple[object, ...]:
    """One TP degree of one model x GPU x engine (all its precisions)."""
    return (row.model, row.gpu, normalize_engine(row.engine) or "", row.tp)


# (name, the fold a row belongs to, whether a fold counts): a TP degree counts only where its model x
# GPU x engine was measured at another TP degree too (else it is the leave-one-group-out case)
CV_SCHEMES: tuple[tuple[str, Callable[[Measurement], tuple[object, ...]]], ...] = (
    ("group", cv_group),
    ("tp", tp_fold),
    ("gpu", lambda r: (r.gpu,)),
    ("engine", lambda r: (normalize_engine(r.engine) or "",)),
)


def folds(rows: list[Measurement], scheme: str) -> dict[tuple[object, ...], list[int]]:
    """The held-out folds of ``scheme`` over ``rows``: fold key -> row indices (the ``tp`` scheme
    keeps only model x GPU x engine measured at two TP degrees or more)."""
    key = dict(CV_SCHEMES)[scheme]
    out: dict[tuple[object, ...], list[int]] = {}
    for i, r in enumerate(rows):
        out.setdefault(key(r), []).append(i)
    if scheme == "tp":
        tps: dict[tuple[object, ...], set[int]] = {}
        for k in out:
            tps.setdefault(k[:3], set()).add(int(k[3]))  # type: ignore[call-overload]
        out = {k: v for k, v in out.items() if len(tps[k[:3]]) > 1}
    return dict(sorted(out.items(), key=lambda kv: repr(kv[0])))


def unmeasured_engines(x: np.ndarray, rows: list[Measurement]) -> np.ndarray:
    """``x`` with the share and latency of each engine of :data:`ENGINES` that no row of ``rows``
    measures set to the mean of the engines' that some row does (as an unknown engine gets)."""
    names = [name for name, _, _ in PARAMETERS]
    seen = {normalize_engine(r.engine) for r in rows}
    known = [e for e in ENGINES if e in seen]
    x = x.copy()
    for e in ENGINES:
        if e not in seen and known:
            for what in ("share", "admission"):
                x[names.index(f"{what}_{e}")] = float(np.mean([x[names.index(f"{what}_{k}")] for k in known]))
    return x


def unmeasured_families(x: np.ndarray, rows: list[Measurement], catalog: Catalog) -> np.ndarray:
    """``x`` with the bandwidth efficiency of each family of :data:`AMD` that no row of ``rows``
    measures set to the mean over the GPUs the rows do measure (each GPU once, whatever its rows)
    of their family's efficiency in ``x``: a fit without the family's rows cannot know it, and it
    predicts it as an average measured GPU, as the shipped physics predicts a user's new GPU
    family (``DEFAULT_PHYSICS.fallback``, the same mean over the shipped fit's GPUs). With no
    GPU measured at all, the shipped fallback's figure."""
    names = [name for name, _, _ in PARAMETERS]
    families = {catalog.gpus[r.gpu].family for r in rows}
    x = x.copy()
    measured = [family_bandwidth(x, catalog.gpus[g].family) for g in sorted({r.gpu for r in rows})]
    mean = float(np.mean(measured)) if measured else DEFAULT_PHYSICS.fallback.bandwidth_efficiency
    for fam in AMD:
        if fam not in families:
            x[names.index(f"bandwidth_{fam}")] = mean
    return x


def family_bandwidth(x: np.ndarray, family: str) -> float:
    """The bandwidth efficiency ``x`` gives GPU family ``family``: its own (:data:`AMD`), NVIDIA's
    shared one, or the shipped figure of a family the fit does not move."""
    names = [name for name, _, _ in PARAMETERS]
    if family in AMD:
        return float(x[names.index(f"bandwidth_{family}")])
    if family in NVIDIA:
        return float(x[names.index("bandwidth_efficiency")])
    return DEFAULT_PHYSICS.family(family).bandwidth_efficiency


def residual_rows(rows: list[Measurement], unfitted_ttft: frozenset[int] = frozenset()) -> np.ndarray:
    """The row index of every element of :func:`residuals`' vector (TPOT first, then TTFT)."""
    return np.array(list(range(len(rows))) + [i for i, r in enumerate(rows)
                                              if r.measured_ttft_ms and id(r) not in unfitted_ttft])


def jacobian(x: np.ndarray, rows: list[Measurement], catalog: Catalog,
             free: np.ndarray | None = None, unfitted_ttft: frozenset[int] = frozenset()) -> tuple[np.ndarray, np.ndarray]:
    """(residuals at ``x``, their forward-difference Jacobian in the ``free`` parameters), as
    :func:`fit` takes them."""
    r = residuals(x, rows, catalog, unfitted_ttft)
    return r, forward_jacobian(lambda y: residuals(y, rows, catalog, unfitted_ttft), x, r,
                               np.ones(len(x), dtype=bool) if free is None else free)


def huber_loss(res: np.ndarray) -> float:
    """The fit's robust loss of residuals ``res``."""
    a = np.abs(res)
    return float(np.sum(np.where(a <= HUBER, 0.5 * res**2, HUBER * (a - 0.5 * HUBER))))


def fold_fit(x: np.ndarray, r: np.ndarray, jac: np.ndarray, train: list[Measurement], mask: np.ndarray,
             catalog: Catalog, unfitted_ttft: frozenset[int] = frozenset(),
             tolerance: float | None = None, jacobians: int = 1, free: np.ndarray | None = None,
             label: str | None = None) -> np.ndarray:
    """The fast path: damped Gauss-Newton steps from the full fit ``x`` on its Jacobian ``jac``
    restricted to the training rows' residuals (``mask``), each kept only where it lowers the
    training rows' loss, recomputed at the step. Without ``tolerance``, :data:`FOLD_STEPS` steps;
    with it, steps until none gains more than ``tolerance`` of the loss, then up to ``jacobians``
    restarts from the fold's own fresh Jacobian at the point reached (:func:`converge`)."""
    f: Callable[[np.ndarray], np.ndarray] = lambda y: residuals(y, train, catalog, unfitted_ttft)  # noqa: E731
    j, res, lam = jac[mask], r[mask], 1e-2
    if tolerance is not None:
        free = np.ones(len(x), dtype=bool) if free is None else free
        held = [j, 0]  # the Jacobian in hand, the fold's own made so far

        def restart(y: np.ndarray, ry: np.ndarray) -> np.ndarray:
            if held[1] or y is not x:  # the first is the full fit's at x: the fold's own there
                held[0] = forward_jacobian(f, y, ry, free)
            held[1] += 1
            return held[0]

        keep = lambda y, ry: held[0]  # noqa: E731
        return converge(f, x, res, keep, restart, tolerance, jacobians + 1, label=label)[0]
    for _ in range(FOLD_STEPS):
        x, res, lam, moved = damped_step(f, x, res, j, lam, 4)
        if not moved:
            break
    return x


def moved_parameters(x: np.ndarray, xf: np.ndarray, share: float = 0.02) -> list[tuple[str, float, float]]:
    """(name, value in ``x``, value in ``xf``) of the parameters a fold's fit ``xf`` moved by more
    than ``share`` of their value in the full fit ``x`` (of 1e-9 where that is 0): what a fold
    without some rows could not pin, and so what its held-out predictions rest on."""
    return [(name, float(x[i]), float(xf[i])) for i, (name, _, _) in enumerate(PARAMETERS)
            if abs(xf[i] - x[i]) > share * max(abs(x[i]), 1e-9)]


def held_out(rows: list[Measurement], fitted_rows: list[Measurement], catalog: Catalog, x: np.ndarray,
             scheme: str, fold_iterations: int, full: tuple[np.ndarray, np.ndarray] | None,
             free: np.ndarray | None = None,
             unfitted_ttft: frozenset[int] = frozenset(),
             show_moved: bool = False, tolerance: float | None = None,
             fold_jacobians: int = 0) -> list[tuple[float, float] | None]:
    """(TPOT, TTFT) of every row ``scheme`` holds out, predicted by a fit on the other folds'
    ``fitted_rows`` (None for rows no fold of the scheme holds out). ``full`` is the full fit's
    (residuals, Jacobian) over ``fitted_rows`` for the fast path; ``fold_iterations`` > 0 refits
    the ``free`` parameters (default all). With ``tolerance`` each fold's fit runs to convergence
    (:func:`fold_fit`, :func:`converge`; ``fold_jacobians`` fresh Jacobians of its own on the fast
    path). ``show_moved`` prints the parameters each fold's fit moved (:func:`moved_parameters`)."""
    held: list[tuple[float, float] | None] = [None] * len(rows)
    owner = residual_rows(fitted_rows, unfitted_ttft)
    all_folds = folds(rows, scheme)
    for n, (key, members) in enumerate(all_folds.items(), 1):
        out = {id(rows[i]) for i in members}
        train = [r for r in fitted_rows if id(r) not in out]
        if fold_iterations > 0 or full is None:
            xf = fit(train, catalog, x, max(1, fold_iterations), free, unfitted_ttft, tolerance, f"fold {key}")
        else:
            keep = np.array([id(fitted_rows[k]) not in out for k in range(len(fitted_rows))])
            xf = fold_fit(x, full[0], full[1], train, keep[owner], catalog, unfitted_ttft, tolerance,
                          fold_jacobians, free)
        if show_moved:
            print(f"  {scheme} fold {key} moved: " + (" ".join(
                f"{name} {full_value:.4g} -> {value:.4g}" for name, full_value, value in moved_parameters(x, xf)) or "nothing"))
        preset = preset_of(unmeasured_families(unmeasured_engines(unmeasured_releases(xf, train), train), train, catalog))
        for i in members:
            p = predict(rows[i], catalog, preset)
            held[i] = (p.predicted_tpot_ms, p.predicted_ttft_ms)
        print(f"  cv {scheme}: fold {n}/{len(all_folds)} {key} ({len(members)} rows)", file=sys.stderr, flush=True)
    return held


def by_fold(scheme: str, rows: list[Measurement], preds: list[tuple[float, float] | None]) -> None:
    """TPOT MAPE and TTFT within 1.5x of each fold of ``scheme`` held out."""
    for key, members in folds(rows, scheme).items():
        t = error_stats([rows[i].measured_tpot_ms for i in members], [preds[i][0] for i in members])  # type: ignore[index]
        f = error_stats([rows[i].measured_ttft_ms or 0.0 for i in members if rows[i].measured_ttft_ms],
                        [preds[i][1] for i in members if rows[i].measured_ttft_ms])  # type: ignore[index]
        print(f"  {scheme} {key[0]:<12} rows {len(members):>4}  TPOT MAPE {t['mape']:6.1%}  "
              f"TTFT within 1.5x {f.get('within_1.5x', 0.0):6.1%}")


def residual_table(scheme: str, rows: list[Measurement], preds: list[tuple[float, float] | None]) -> None:
    """Held-out TPOT of ``scheme`` by model x GPU x engine x TP x EP x precision: rows, median
    measured / predicted and MAPE, the configurations a structural change should move; then, where
    rows report TTFT, their held-out TTFT: rows, median measured / predicted and share within 1.5x."""
    cells: dict[tuple[object, ...], list[int]] = {}
    for i, r in enumerate(rows):
        if preds[i] is not None:
            key = (r.model, r.gpu, normalize_engine(r.engine) or "", r.tp, r.ep, r.dp_attention, r.precision)
            cells.setdefault(key, []).append(i)
    for key, members in sorted(cells.items(), key=lambda kv: repr(kv[0])):
        t = error_stats([rows[i].measured_tpot_ms for i in members], [preds[i][0] for i in members])  # type: ignore[index]
        model, gpu, engine, tp, ep, dpa, precision = key
        timed = [i for i in members if rows[i].measured_ttft_ms]
        f = error_stats([rows[i].measured_ttft_ms or 0.0 for i in timed], [preds[i][1] for i in timed])  # type: ignore[index]
        ttft = (f"  | TTFT rows {len(timed):>3}  measured/predicted {f['median_ratio']:5.2f}  within 1.5x "
                f"{f['within_1.5x']:6.1%}") if timed else ""
        print(f"  {scheme:<6} {model:<16} {gpu:<9} {engine:<7} tp {tp} ep {ep} dpa {dpa} {precision:<5} "
              f"rows {len(members):>3}  measured/predicted {t['median_ratio']:5.2f}  TPOT MAPE {t['mape']:6.1%}{ttft}")


def figure_of_record(results: dict[str, list[tuple[float, float] | None]], rows: list[Measurement],
                     catalog: Catalog) -> dict[str, tuple[float, float, float]]:
    """The worst held-out figure over the schemes, per kind: the highest TPOT MAPE, the lowest
    TPOT and TTFT shares within 1.5x (each scheme that holds out rows of the kind); printed, and
    returned as kind -> (TPOT MAPE, TPOT within 1.5x, TTFT within 1.5x)."""
    worst: dict[str, tuple[float, float, float]] = {}
    for kind in KINDS:
        per = {s: figures(rows, preds, catalog, kind) for s, preds in results.items()}
        got = {s: f for s, f in per.items() if f is not None}
        if not got:
            continue
        mape = max(got, key=lambda s: got[s]["tpot_mape"])
        within = min(got, key=lambda s: got[s]["tpot_within"])
        ttft = min(got, key=lambda s: got[s]["ttft_within"])
        print(f"{'of record':<16} {kind:<6} TPOT MAPE {got[mape]['tpot_mape']:6.1%} ({mape})  within 1.5x "
              f"{got[within]['tpot_within']:6.1%} ({within})  | TTFT within 1.5x {got[ttft]['ttft_within']:6.1%} ({ttft})")
        worst[kind] = (got[mape]["tpot_mape"], got[within]["tpot_within"], got[ttft]["ttft_within"])
    return worst


def jittered(x: np.ndarray, seed: int, share: float = 1e-3) -> np.ndarray:
    """``x`` with every value multiplied by (1 + ``share`` x a standard normal draw of ``seed``),
    within the bounds; ``x`` itself for seed 0. A fit that stops where its damped steps fail, on a
    loss with kinks (whole pages, chunks, a running batch), ends elsewhere from such a start, and
    so do the held-out folds that start from it (``--starts``)."""
    if seed == 0:
        return x.copy()
    lo = np.array([b for _, b, _ in PARAMETERS])
    hi = np.array([b for _, _, b in PARAMETERS])
    return np.clip(x * (1.0 + share * np.random.default_rng(seed).standard_normal(len(x))), lo, hi)


def median_record(records: list[dict[str, tuple[float, float, float]]]) -> dict[str, tuple[float, ...]]:
    """Per kind, the median over runs of each worst-of figure (TPOT MAPE, TPOT and TTFT within
    1.5x), each figure's median taken on its own."""
    kinds = [k for k in KINDS if all(k in rec for rec in records)]
    return {k: tuple(float(np.median([rec[k][j] for rec in records])) for j in range(3)) for k in kinds}


def load(paths: list[Path], catalog: Catalog) -> list[Measurement]:
    """The rows of every file that the planner would run."""
    rows: list[Measurement] = []
    for path in paths:
        rows += [r for r in parse_measurements(path.read_text(encoding="utf-8"), path.name)
                 if skip_reason(r, catalog, DEFAULT) is None]
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("files", nargs="*", default=[str(SILICON), str(INFERENCEMAX)])
    ap.add_argument("--cv", action="store_true", help="also predict each row from fits that left it out, four ways")
    ap.add_argument("--iterations", type=int, default=25)
    ap.add_argument("--fold-iterations", type=int, default=0,
                    help="refit each fold with this many full iterations (0: the fast Gauss-Newton path)")
    ap.add_argument("--ttft-only", action="store_true",
                    help="fit only the parameters TTFT alone depends on (TTFT_ONLY), the rest held at the shipped values")
    ap.add_argument("--residuals", action="store_true",
                    help="with --cv, print each scheme's held-out TPOT and TTFT by model x GPU x engine x TP x EP x precision")
    ap.add_argument("--starts", type=int, default=1,
                    help="with --cv, run the fit and the folds from this many starts (the shipped values, then "
                         "each value jittered by a thousandth) and print the median of each figure of record")
    ap.add_argument("--converge", action="store_true",
                    help="run the fit (at most --iterations Jacobians) and, with --cv, each fold's fit until no step "
                         "lowers its loss by more than a millionth of it, from a fresh Jacobian")
    ap.add_argument("--fold-jacobians", type=int, default=1,
                    help="with --converge on the fast path, the fresh Jacobians of its own each fold may restart from")
    ap.add_argument("--fold-parameters", action="store_true",
                    help="with --cv, print the parameters each fold's fit moved by more than 2%% from the full fit")
    ap.add_argument("--schemes", default=",".join(name for name, _ in CV_SCHEMES),
                    help="the cross-validation schemes to run, comma-separated (group, tp, gpu, engine)")
    args = ap.parse_args(argv)
    catalog = load_catalog()
    rows = load([Path(f) for f in args.files], catalog)
    fitted_rows = [r for r in rows if not below_bandwidth_floor(r, catalog)]
    for r in rows:
        if r not in fitted_rows:
            print(f"not fitted (TPOT below the bandwidth floor): {r.model} {r.gpu} {r.engine} tp {r.tp} "
                  f"batch {r.batch} {r.input_tokens:g}/{r.output_tokens:g} tokens, {r.measured_tpot_ms} ms")
    ceiling = ttft_ceiling_preset()
    unfitted = frozenset(id(r) for r in fitted_rows if above_ttft_ceiling(r, catalog, ceiling))
    for r in fitted_rows:
        if id(r) in unfitted:
            print(f"TTFT not fitted (above {TTFT_CEILING_FACTOR:g}x the whole wave ahead): {r.model} {r.gpu} {r.engine} "
                  f"{r.engine_version or '-'} {r.precision} tp {r.tp} batch {r.batch} {r.input_tokens:g}/{r.output_tokens:g} "
                  f"tokens, {r.measured_ttft_ms} ms")
    print(f"fitting {len(PARAMETERS)} parameters to {len(fitted_rows)} rows", file=sys.stderr, flush=True)
    free = free_mask(args.ttft_only)
    records = []
    for start in range(max(1, args.starts) if args.cv else 1):
        if start:
            print(f"start {start}: every starting value jittered by a thousandth (seed {start})")
        x = fit(fitted_rows, catalog, jittered(current(), start), args.iterations, free, unfitted,
                CONVERGE_TOLERANCE if args.converge else None)
        for (name, _, _), value in zip(PARAMETERS, x, strict=True):
            print(f"{name:<32} {value:.4g}")
        if not start:
            shipped = [predict(r, catalog, DEFAULT) for r in rows]
            report("shipped", rows, [(p.predicted_tpot_ms, p.predicted_ttft_ms) for p in shipped], catalog)
        fitted = [predict(r, catalog, preset_of(x)) for r in rows]
        report("refitted", rows, [(p.predicted_tpot_ms, p.predicted_ttft_ms) for p in fitted], catalog)
        if args.cv:
            records.append(cross_validate(args, rows, fitted_rows, catalog, x, free, unfitted))
    if len(records) > 1:
        for kind, (mape, within, ttft) in median_record(records).items():
            print(f"{'median of ' + str(len(records)):<16} {kind:<6} TPOT MAPE {mape:6.1%}  within 1.5x {within:6.1%}  "
                  f"| TTFT within 1.5x {ttft:6.1%}")
    return 0


def cross_validate(args: argparse.Namespace, rows: list[Measurement], fitted_rows: list[Measurement],
                   catalog: Catalog, x: np.ndarray, free: np.ndarray,
                   unfitted: frozenset[int]) -> dict[str, tuple[float, float, float]]:
    """The held-out figures of ``args.schemes`` from the full fit ``x``, printed, and the figure of record."""
    full = None if args.fold_iterations > 0 else jacobian(x, fitted_rows, catalog, free, unfitted)
    results = {}
    for scheme in args.schemes.split(","):
        results[scheme] = held_out(rows, fitted_rows, catalog, x, scheme, args.fold_iterations, full, free,
                                   unfitted, args.fold_parameters, CONVERGE_TOLERANCE if args.converge else None,
                                   args.fold_jacobians)
        report(f"held out {scheme}", rows, results[scheme], catalog)
        if scheme in ("gpu", "engine"):
            by_fold(scheme, rows, results[scheme])
        if args.residuals:
            residual_table(scheme, rows, results[scheme])
    return figure_of_record(results, rows, catalog)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

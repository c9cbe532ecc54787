"""Fit the default preset's physical parameters to measured TPOT and TTFT, and cross-validate them.

Usage: python benchmarks/fit_physics.py [MEASUREMENTS.csv] [--cv] [--iterations N]

The parameters (:data:`PARAMETERS`) are the few the default preset shares across every model
and GPU: NVIDIA bandwidth efficiency (at most 0.90), per-step, per-layer and per-sequence
overhead and one-shot all-reduce latency (at least 2 us: an NVLink round trip and a launch);
decode, KV (at most the datasheet bandwidth) and prefill (at most 0.90 of the datasheet rate)
kernel efficiencies; the MoE grouped-GEMM small-group cost and the weight-only FP4
dequantisation factor and fixed time per layer; the all-reduces' share of the scale-up
bandwidth; how fast the share of prompts ahead falls with prefill's busy share; each engine's
share of a wave's prefill before a request's first token and its fixed latency per request; and
the share of each prompt vLLM 0.12 benchmark runs served from the prefix cache; the tokens
TensorRT-LLM 1.2.0rc6.post3's speculative DeepSeek runs accept per step; and the share of a
wave's prefill before a first token of each engine release in
``Physics.benchmark_release_shares`` (SGLang 0.5.1). Nothing is per
model or GPU id. (The shared ``admission_latency_s`` is not fitted: every row names its engine;
the physics gives the fallback engine the mean of the three.) The loss is robust least squares
(Huber at 0.25) on the relative error of TPOT
(predicted/measured - 1, the error the MAPE targets count) plus half the weight on log TTFT,
over the rows the planner would run, less the rows whose measured TPOT is below their step's
bandwidth floor (:func:`below_bandwidth_floor`: printed, and scored but not fitted); the model is
the project's own (:func:`fleetplan.models.validation.predict`), so what is fitted is what plans
use.

``--cv`` refits leaving out one configuration group (model, GPU, engine, TP, precision) at a time
(warm-started from the full fit) and prints the held-out error by dense / MoE model: the error a
user sees on a configuration no fit has seen. A release's share that no remaining row measures
falls back to its engine's share, as it would for a release the fit never saw. It takes a few
minutes.
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
SILICON = HERE.parent.parent / "shared" / "reference" / "measurements" / "silicon-train.csv"
NVIDIA = ("ampere", "hopper", "blackwell")
# The speculative runs' rule (engine, release, model id prefix, drafted tokens); its accepted
# tokens per step are fitted
SPECULATION = DEFAULT_PHYSICS.benchmark_speculation[0][:4]
ENGINES = ("sglang", "trtllm", "vllm")
# Engine releases with their own share of a wave's prefill before a first token (fitted)
RELEASES = tuple((e, r) for e, r, _ in DEFAULT_PHYSICS.benchmark_release_shares)
# (name, lower bound, upper bound); engines' shares are appended
PARAMETERS: tuple[tuple[str, float, float], ...] = (
    ("bandwidth_efficiency", 0.3, 0.9), ("step_overhead_s", 0.0, 5e-3), ("layer_overhead_s", 0.0, 2e-4),
    ("collective_latency_s", 2e-6, 1e-4), ("kv_bandwidth_efficiency", 0.2, 1.0 / 0.9), ("compute_efficiency", 0.05, 1.0),
    ("prefill_compute_efficiency", 0.05, 0.9), ("moe_small_group_tokens", 0.0, 20.0),
    ("weight_only_fp4_dequant_factor", 1.0, 4.0), ("weight_only_fp4_layer_s", 0.0, 1e-4),
    ("sequence_overhead_s", 0.0, 2e-4), ("busy_share_exponent", 0.0, 8.0),
    ("comm_bandwidth_efficiency", 0.1, 0.9), ("hit_rate_vllm_0.12", 0.0, 0.98),
    ("accepted_trtllm_1.2.0rc6.post3", 1.0, 1.0 + SPECULATION[3]),
) + tuple((f"share_{e}", 0.0, 1.0) for e in ENGINES) + tuple((f"admission_{e}", 0.0, 0.5) for e in ENGINES) + tuple(
    (f"share_{e}_{r}", 0.0, 1.0) for e, r in RELEASES)
TTFT_WEIGHT = 0.5
HUBER = 0.25


def current() -> np.ndarray:
    """The shipped values, in :data:`PARAMETERS` order."""
    fam = DEFAULT_PHYSICS.family("hopper")
    p = DEFAULT_PHYSICS
    values = [fam.bandwidth_efficiency, fam.step_overhead_s, fam.layer_overhead_s, fam.collective_latency_s,
              p.kv_bandwidth_efficiency, DEFAULT.compute_efficiency, DEFAULT.prefill_compute_efficiency,
              p.moe_small_group_tokens, p.weight_only_fp4_dequant_factor, p.weight_only_fp4_layer_s,
              p.sequence_overhead_s, p.busy_share_exponent, p.comm_bandwidth_efficiency,
              p.benchmark_hit_rate("vllm", "0.12"),
              p.benchmark_speculative(SPECULATION[0], SPECULATION[1], SPECULATION[2])[1]]
    values += [p.engine(e).prefill_before_first_token for e in ENGINES]
    values += [p.engine(e).admission_latency_s or p.admission_latency_s for e in ENGINES]
    values += [p.prefill_before_first_token(e, r) for e, r in RELEASES]
    return np.array(values)


def preset_of(x: np.ndarray) -> Preset:
    """The default preset with parameter vector ``x``."""
    v = dict(zip((name for name, _, _ in PARAMETERS), (float(t) for t in x), strict=True))
    families = tuple(
        FamilyPhysics(f.family, v["bandwidth_efficiency"], v["step_overhead_s"], v["layer_overhead_s"],
                      v["collective_latency_s"], 0.0) if f.family in NVIDIA else f
        for f in DEFAULT_PHYSICS.families
    )
    engines = tuple(EnginePhysics(e, v[f"share_{e}"], DEFAULT_PHYSICS.engine(e).chunk_tokens, v[f"admission_{e}"])
                    for e in ENGINES)
    physics = dataclasses.replace(
        DEFAULT_PHYSICS, families=families, engines=engines, kv_bandwidth_efficiency=v["kv_bandwidth_efficiency"],
        moe_small_group_tokens=v["moe_small_group_tokens"],
        weight_only_fp4_dequant_factor=v["weight_only_fp4_dequant_factor"],
        weight_only_fp4_layer_s=v["weight_only_fp4_layer_s"],
        sequence_overhead_s=v["sequence_overhead_s"], busy_share_exponent=v["busy_share_exponent"],
        comm_bandwidth_efficiency=v["comm_bandwidth_efficiency"],
        benchmark_prefix_cache=(("vllm", "0.12", v["hit_rate_vllm_0.12"]),),
        benchmark_speculation=(SPECULATION + (v["accepted_trtllm_1.2.0rc6.post3"],),),
        benchmark_release_shares=tuple((e, r, v[f"share_{e}_{r}"]) for e, r in RELEASES),
    )
    return dataclasses.replace(DEFAULT, physics=physics, compute_efficiency=v["compute_efficiency"],
                               prefill_compute_efficiency=v["prefill_compute_efficiency"])


def residuals(x: np.ndarray, rows: list[Measurement], catalog: Catalog) -> np.ndarray:
    """Relative error predicted / measured - 1 of every row's TPOT (the error MAPE counts), then
    log(predicted / measured) TTFT (weighted) of rows reporting it."""
    preset = preset_of(x)
    tpot, ttft = [], []
    for r in rows:
        p = predict(r, catalog, preset)
        tpot.append(p.predicted_tpot_ms / r.measured_tpot_ms - 1.0)
        if r.measured_ttft_ms:
            ttft.append(TTFT_WEIGHT * np.log(p.predicted_ttft_ms / r.measured_ttft_ms))
    return np.array(tpot + ttft)


def fit(rows: list[Measurement], catalog: Catalog, x0: np.ndarray, iterations: int) -> np.ndarray:
    """Huber-weighted Levenberg-Marquardt within the bounds, numerical Jacobian, from ``x0``."""
    lo = np.array([b for _, b, _ in PARAMETERS])
    hi = np.array([b for _, _, b in PARAMETERS])
    scale = np.maximum(np.abs(x0), 1e-3)
    f: Callable[[np.ndarray], np.ndarray] = lambda x: residuals(x, rows, catalog)  # noqa: E731
    x, r, lam = x0.copy(), f(x0), 1e-2

    def loss(res: np.ndarray) -> float:
        a = np.abs(res)
        return float(np.sum(np.where(a <= HUBER, 0.5 * res**2, HUBER * (a - 0.5 * HUBER))))

    for _ in range(iterations):
        w = np.where(np.abs(r) <= HUBER, 1.0, HUBER / np.maximum(np.abs(r), 1e-12))
        jac = np.stack([(f(x + e) - r) / e[i] for i, e in enumerate(np.diag(1e-4 * scale))], axis=1)
        h, g = jac.T @ (jac * w[:, None]), jac.T @ (w * r)
        for _ in range(8):
            cand = np.clip(x + np.linalg.solve(h + lam * np.diag(np.diag(h) + 1e-12), -g), lo, hi)
            rc = f(cand)
            if loss(rc) < loss(r):
                x, r, lam = cand, rc, lam / 3
                break
            lam *= 4
        else:
            break
    return x


def report(label: str, rows: list[Measurement], preds: list[tuple[float, float]], catalog: Catalog) -> None:
    """TPOT MAPE and share within 1.5x, TTFT share within 1.5x, overall and dense / MoE."""
    for kind in ("all", "dense", "moe"):
        pick = [i for i, r in enumerate(rows) if kind == "all" or model_kind(catalog.models[r.model]) == kind]
        t = error_stats([rows[i].measured_tpot_ms for i in pick], [preds[i][0] for i in pick])
        m = [i for i in pick if rows[i].measured_ttft_ms]
        f = error_stats([rows[i].measured_ttft_ms or 0.0 for i in m], [preds[i][1] for i in m])
        print(f"{label:<14} {kind:<6} rows {t['rows']:>4}  TPOT MAPE {t['mape']:6.1%}  within 1.5x "
              f"{t['within_1.5x']:6.1%}  | TTFT within 1.5x {f.get('within_1.5x', 0.0):6.1%}  MAPE {f.get('mape', 0.0):6.1%}")


def below_bandwidth_floor(row: Measurement, catalog: Catalog) -> bool:
    """Whether ``row``'s measured TPOT is shorter than reading the bytes of its step (weights or
    touched experts, every sequence's KV cache; per accepted token where the run decodes
    speculatively) at the GPUs' datasheet bandwidth: no engine can
    do that, so the run did not hold the batch it names. Such rows are listed, not fitted."""
    est = predict(row, catalog, DEFAULT).estimate
    gpu = catalog.gpus[row.gpu]
    floor_ms = est.bytes_per_step / (row.tp * gpu.mem_bandwidth_bytes_per_s) * 1e3 / speculation(row, DEFAULT)[1]
    return row.measured_tpot_ms < floor_ms


def unmeasured_releases(x: np.ndarray, rows: list[Measurement]) -> np.ndarray:
    """``x`` with the share of each release in :data:`RELEASES` that no row of ``rows`` measures set
    to its engine's share (a fit without such rows cannot know it)."""
    names = [name for name, _, _ in PARAMETERS]
    x = x.copy()
    for e, r in RELEASES:
        if not any(normalize_engine(m.engine) == e and release_matches(m.engine_version, r) for m in rows):
            x[names.index(f"share_{e}_{r}")] = x[names.index(f"share_{e}")]
    return x


def held_out(rows: list[Measurement], fitted_rows: list[Measurement], catalog: Catalog, x: np.ndarray,
             iterations: int) -> list[tuple[float, float]]:
    """(TPOT, TTFT) of every row predicted by a fit on the other configuration groups' ``fitted_rows``."""
    held: list[tuple[float, float]] = [(0.0, 0.0)] * len(rows)
    for g in sorted({r.configuration for r in rows}, key=repr):
        train = [r for r in fitted_rows if r.configuration != g]
        preset = preset_of(unmeasured_releases(fit(train, catalog, x, max(3, iterations // 5)), train))
        for i, r in enumerate(rows):
            if r.configuration == g:
                p = predict(r, catalog, preset)
                held[i] = (p.predicted_tpot_ms, p.predicted_ttft_ms)
    return held


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("file", nargs="?", default=str(SILICON))
    ap.add_argument("--cv", action="store_true", help="also leave each configuration group out in turn")
    ap.add_argument("--iterations", type=int, default=25)
    args = ap.parse_args(argv)
    catalog = load_catalog()
    path = Path(args.file)
    rows = [r for r in parse_measurements(path.read_text(encoding="utf-8"), path.name)
            if skip_reason(r, catalog, DEFAULT) is None]
    fitted_rows = [r for r in rows if not below_bandwidth_floor(r, catalog)]
    for r in rows:
        if r not in fitted_rows:
            print(f"not fitted (TPOT below the bandwidth floor): {r.model} {r.gpu} {r.engine} tp {r.tp} "
                  f"batch {r.batch} {r.input_tokens:g}/{r.output_tokens:g} tokens, {r.measured_tpot_ms} ms")
    x = fit(fitted_rows, catalog, current(), args.iterations)
    for (name, _, _), value in zip(PARAMETERS, x, strict=True):
        print(f"{name:<32} {value:.4g}")
    shipped = [predict(r, catalog, DEFAULT) for r in rows]
    report("shipped", rows, [(p.predicted_tpot_ms, p.predicted_ttft_ms) for p in shipped], catalog)
    fitted = [predict(r, catalog, preset_of(x)) for r in rows]
    report("refitted", rows, [(p.predicted_tpot_ms, p.predicted_ttft_ms) for p in fitted], catalog)
    if args.cv:
        held = held_out(rows, fitted_rows, catalog, x, args.iterations)
        report("held out", rows, held, catalog)
        keep = [i for i, r in enumerate(rows) if r in fitted_rows]
        report("held, floor ok", [rows[i] for i in keep], [held[i] for i in keep], catalog)
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

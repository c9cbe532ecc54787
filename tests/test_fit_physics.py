"""benchmarks/fit_physics.py's cross-validation rules: what a fold that never saw a GPU family or
an engine predicts it with."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from fleetplan.catalogs import load_catalog
from fleetplan.models.measurements import Measurement, parse_measurements
from fleetplan.models.physics import DEFAULT_PHYSICS
from fleetplan.models.presets import DEFAULT
from fleetplan.models.ttft import prefill_service_s
from fleetplan.models.validation import predict

ROOT = Path(__file__).resolve().parent.parent
HEADER = "model,gpu,precision,tp,batch,input_tokens,output_tokens,engine,measured_tpot_ms\n"


@pytest.fixture(scope="module")
def fp():
    spec = importlib.util.spec_from_file_location("fit_physics", ROOT / "benchmarks" / "fit_physics.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fit_physics"] = module
    spec.loader.exec_module(module)
    return module


def rows_on(*gpus: str):
    text = HEADER + "".join(f"deepseek-r1,{g},fp8,8,16,1024,1024,sglang,20\n" for g in gpus)
    return parse_measurements(text, "rows.csv")


def test_a_family_no_row_measures_gets_the_measured_gpus_mean(fp):
    names = [n for n, _, _ in fp.PARAMETERS]
    x = fp.current()
    assert x[names.index("bandwidth_cdna3")] == pytest.approx(0.586)
    assert x[names.index("bandwidth_cdna4")] == pytest.approx(0.90)
    assert x[names.index("bandwidth_efficiency")] == pytest.approx(0.90)
    catalog = load_catalog([])
    # MI300X and H200 measured, MI355X not: CDNA3 keeps its figure, CDNA4 takes the mean of the
    # two measured GPUs' (0.586 + 0.90) / 2, not CDNA3's alone
    y = fp.unmeasured_families(x, rows_on("mi300x", "h200-sxm", "h200-sxm", "h200-sxm"), catalog)
    assert y[names.index("bandwidth_cdna3")] == pytest.approx(0.586)
    assert y[names.index("bandwidth_cdna4")] == pytest.approx(0.743)
    # each GPU counts once however many rows it has, two NVIDIA GPUs and MI300X: (2 x 0.90 + 0.586) / 3
    w = fp.unmeasured_families(x, rows_on("mi300x", "b200", "h200-sxm", "h200-sxm"), catalog)
    assert w[names.index("bandwidth_cdna4")] == pytest.approx(0.7953, abs=1e-4)
    # neither AMD family measured: both take NVIDIA's; every other parameter unchanged, the input untouched
    z = fp.unmeasured_families(x, rows_on("h200-sxm"), catalog)
    assert z[names.index("bandwidth_cdna3")] == z[names.index("bandwidth_cdna4")] == pytest.approx(0.90)
    others = [i for i, n in enumerate(names) if not n.startswith("bandwidth_cdna")]
    assert (z[others] == x[others]).all() and x[names.index("bandwidth_cdna3")] == pytest.approx(0.586)
    # no rows at all: the shipped fallback, itself the mean over the five measured GPUs (4 x 0.90 + 0.586) / 5
    e = fp.unmeasured_families(x, [], catalog)
    assert e[names.index("bandwidth_cdna4")] == DEFAULT_PHYSICS.fallback.bandwidth_efficiency
    assert DEFAULT_PHYSICS.fallback.bandwidth_efficiency == pytest.approx((4 * 0.90 + 0.586) / 5, abs=5e-4)


def test_residual_table_lists_each_held_out_configuration(fp, capsys):
    """--residuals: one line per model x GPU x engine x TP x EP x attention-DP x precision held out,
    with its rows, median measured / predicted and MAPE; rows no fold holds out are left out."""
    text = HEADER + "".join(f"gpt-oss-120b,h200-sxm,fp4,{tp},16,1024,1024,vllm,{ms}\n"
                            for tp, ms in ((2, 10.0), (2, 12.0), (4, 8.0)))
    rows = parse_measurements(text, "rows.csv")
    # predicted 8 and 15 ms (ratios 1.25 and 0.8: median 1.0; MAPE (20% + 25%) / 2), the TP 4 row not held out
    fp.residual_table("tp", rows, [(8.0, 1.0), (15.0, 1.0), None])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    assert "gpt-oss-120b" in lines[0] and "tp 2 ep 1 dpa 1 fp4" in lines[0] and "rows   2" in lines[0]
    assert "measured/predicted  1.00" in lines[0] and "TPOT MAPE  22.5%" in lines[0]
    assert "TTFT" not in lines[0]  # no row reports a TTFT


def test_residual_table_adds_held_out_ttft(fp, capsys):
    """--residuals: where rows report TTFT, the held-out TTFT of each configuration too: its rows,
    median measured / predicted (the geometric middle of an even count) and share within 1.5x."""
    text = (HEADER.rstrip("\n") + ",measured_ttft_ms\n"
            + "".join(f"gpt-oss-120b,h200-sxm,fp4,2,16,1024,1024,vllm,10.0,{ms}\n" for ms in ("300", "100", "")))
    rows = parse_measurements(text, "rows.csv")
    # TTFT predicted 100 ms for both timed rows: ratios 3.0 and 1.0, median sqrt(3) = 1.73, one of two within 1.5x
    fp.residual_table("tp", rows, [(10.0, 100.0), (10.0, 100.0), (10.0, 100.0)])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "rows   3" in lines[0]
    assert "TTFT rows   2  measured/predicted  1.73  within 1.5x  50.0%" in lines[0]


def test_moved_parameters_are_those_a_fold_moved_past_two_percent(fp):
    """--fold-parameters: a fold's parameters that moved by more than 2% of their full-fit value
    (a zero full-fit value: any move past 1e-9), with both values, in PARAMETERS order."""
    names = [n for n, _, _ in fp.PARAMETERS]
    x = fp.current()
    i, j, k = names.index("compute_efficiency"), names.index("kv_page_overhead"), names.index("step_overhead_s")
    xf = x.copy()
    xf[i] = x[i] * 1.03  # 3%: moved
    xf[j] = x[j] * 1.01  # 1%: not
    assert fp.moved_parameters(x, xf) == [("compute_efficiency", x[i], x[i] * 1.03)]
    assert x[k] == 0.0  # fitted to 0 per step: any move counts
    xf[k] = 1e-6
    assert [name for name, _, _ in fp.moved_parameters(x, xf)] == ["step_overhead_s", "compute_efficiency"]
    assert fp.moved_parameters(x, x) == []
    # a wider share leaves the 3% move out
    assert [name for name, _, _ in fp.moved_parameters(x, xf, share=0.05)] == ["step_overhead_s"]


def test_jittered_starts_are_a_thousandth_away_and_repeatable(fp):
    """--starts: start 0 is the shipped values; start k moves each value by a seeded thousandth-sized
    relative draw, the same draw every run, within the bounds (a value at 0 stays there)."""
    x = fp.current()
    assert (fp.jittered(x, 0) == x).all()
    a, b = fp.jittered(x, 3), fp.jittered(x, 3)
    assert (a == b).all() and not (a == fp.jittered(x, 4)).all()
    nonzero = x != 0
    rel = np.abs(a[nonzero] / x[nonzero] - 1.0)
    assert rel.max() < 5e-3 and rel.mean() > 2e-4  # draws of a standard normal times 1e-3
    lo = np.array([v for _, v, _ in fp.PARAMETERS])
    hi = np.array([v for _, _, v in fp.PARAMETERS])
    assert (a >= lo).all() and (a <= hi).all()
    assert (a[~nonzero] == 0).all()


def test_median_record_takes_each_figure_on_its_own(fp):
    """The median of three runs' worst-of figures, figure by figure (not the run with the median MAPE)."""
    runs = [{"dense": (0.132, 0.971, 0.575), "moe": (0.177, 0.948, 0.550)},
            {"dense": (0.139, 0.975, 0.583), "moe": (0.176, 0.952, 0.545)},
            {"dense": (0.120, 0.977, 0.567), "moe": (0.177, 0.944, 0.548)}]
    med = fp.median_record(runs)
    assert set(med) == {"dense", "moe"}
    assert med["dense"] == pytest.approx((0.132, 0.975, 0.575))
    assert med["moe"] == pytest.approx((0.177, 0.948, 0.548))
    # a kind missing from one run is left out
    assert set(fp.median_record(runs + [{"dense": (0.1, 0.9, 0.5)}])) == {"dense"}


def test_ttft_ceiling_is_the_whole_wave_ahead(fp):
    """A closed loop of 16 clients holds a request at most for the whole wave of 16 prompts, its
    chunks' decode steps and the steps without prefill, after the engine's latency: a TTFT
    measured above twice that is scored but not fitted; the row's TPOT still is."""
    catalog = load_catalog([])
    head = HEADER.strip() + ",measured_ttft_ms,source_id,batching\n"
    row = parse_measurements(head + "llama-3.1-8b,h100-sxm,fp8,1,16,1000,100,vllm,20,300,,\n", "r.csv")[0]
    ceiling = fp.ttft_ceiling_preset()
    p = predict(row, catalog, ceiling)
    llm, gpu = catalog.models["llama-3.1-8b"], catalog.gpus["h100-sxm"]
    prompt_s = prefill_service_s(llm, gpu, DEFAULT, precision="fp8", tp=1, flops=p.prefill_flops_per_request,
                                 engine="vllm")
    # 16 prompts prefilled (share 1 of the 15 others and its own); ceil(16 x 1,000 / 8,192) = 2 chunk
    # steps and the 2.21 steps without prefill; vLLM's 20.7 ms
    hand_ms = (0.0207 + 16 * prompt_s) * 1e3 + (2 + 2.21) * p.decode_step_time_ms
    assert p.predicted_ttft_ms == pytest.approx(hand_ms, rel=1e-9)
    assert predict(row, catalog, DEFAULT).predicted_ttft_ms < 0.5 * hand_ms  # the shipped share is 0.107

    def measured(ms: float, source: str = "", batching: str = "") -> Measurement:
        return parse_measurements(head + f"llama-3.1-8b,h100-sxm,fp8,1,16,1000,100,vllm,20,{ms},{source},{batching}\n",
                                  "r.csv")[0]

    assert fp.above_ttft_ceiling(measured(2.01 * hand_ms), catalog, ceiling)
    assert not fp.above_ttft_ceiling(measured(1.99 * hand_ms), catalog, ceiling)
    # a harness whose clients drift apart is judged as if they arrived together: the same ceiling
    assert fp.above_ttft_ceiling(measured(2.01 * hand_ms, "inferencemax_h100_vllm_x"), catalog, ceiling)
    assert not fp.above_ttft_ceiling(measured(1.99 * hand_ms, "inferencemax_h100_vllm_x"), catalog, ceiling)
    # a static batch, or a row without a TTFT, has no such ceiling
    assert not fp.above_ttft_ceiling(measured(100 * hand_ms, "", "static"), catalog, ceiling)
    assert not fp.above_ttft_ceiling(rows_on("h200-sxm")[0], catalog, ceiling)
    # the fit drops only that row's TTFT residual
    x = fp.current()
    high = measured(3 * hand_ms)
    assert len(fp.residuals(x, [high], catalog)) == 2
    kept = fp.residuals(x, [high], catalog, frozenset({id(high)}))
    assert len(kept) == 1 and kept[0] == fp.residuals(x, [high], catalog)[0]
    assert list(fp.residual_rows([high, row], frozenset({id(high)}))) == [0, 1, 1]


def synthetic(fp, seed: int = 7):
    """A least-squares problem in PARAMETERS' space whose minimum is known: the shipped values, at
    loss 0.5 x 40 x 0.1^2 = 0.2 (a constant residual of 0.1 on 40 rows), with a curved, coupled
    residual elsewhere; and its fresh forward-difference Jacobian."""
    x_star = fp.current()
    scale = np.maximum(np.abs(x_star), 1e-3)
    a = np.random.default_rng(seed).standard_normal((60, len(x_star))) / 8.0

    def f(x):
        u = (x - x_star) / scale
        return np.concatenate([a @ u + 0.3 * (a @ u) ** 2, 0.3 * u + 0.2 * u**2, np.full(40, 0.1)])

    free = np.ones(len(x_star), dtype=bool)
    return x_star, f, lambda y, ry: fp.forward_jacobian(f, y, ry, free)


def test_converged_fit_finds_a_known_minimum_from_jittered_starts(fp):
    """--converge: Levenberg-Marquardt run until a fresh Jacobian's step gains nothing ends at the
    minimum (the shipped values here) from starts 20% away, every start to the same point, the loss
    falling at each step; a fit stopped after one step is still away from it."""
    x_star, f, fresh = synthetic(fp)
    nonzero = x_star != 0
    ends = []
    for seed in (1, 2, 3):
        x0 = fp.jittered(x_star, seed, share=0.2)
        assert np.abs(x0[nonzero] / x_star[nonzero] - 1).max() > 0.1
        x, r, history = fp.converge(f, x0, f(x0), fresh, fresh, 1e-9, 60)
        assert np.abs(x[nonzero] / x_star[nonzero] - 1).max() < 1e-4
        assert fp.huber_loss(r) == pytest.approx(0.2, rel=1e-6)
        assert all(b <= a for a, b in zip(history, history[1:], strict=False)) and len(history) > 3
        ends.append(x)
        short = fp.converge(f, x0, f(x0), fresh, fresh, 1e-9, 1, steps=1)[0]
        assert np.abs(short[nonzero] / x_star[nonzero] - 1).max() > 1e-3
    assert np.abs(ends[0] - ends[1]).max() < 1e-4 * np.abs(x_star).max()


def test_converge_on_a_stale_jacobian_restarts_fresh_within_its_cap(fp):
    """The folds' fast path: steps on the Jacobian in hand until one gains nothing, then a fresh
    Jacobian, at most the cap; the loss never rises and, with fresh Jacobians allowed, ends at the
    minimum, where the stale Jacobian alone stops short of it."""
    x_star, f, fresh = synthetic(fp, seed=11)
    x0 = fp.jittered(x_star, 5, share=0.1)
    made = []

    def counted(y, ry):
        made.append(1)
        return fresh(y, ry)

    held = fresh(x0, f(x0))
    keep = lambda y, ry: held  # noqa: E731
    x, r, history = fp.converge(f, x0, f(x0), keep, counted, 1e-9, 8)
    assert len(made) <= 8
    assert all(b <= a for a, b in zip(history, history[1:], strict=False))
    nonzero = x_star != 0
    assert np.abs(x[nonzero] / x_star[nonzero] - 1).max() < 3e-6
    stale = fp.converge(f, x0, f(x0), keep, lambda y, ry: held, 1e-9, 1)
    assert fp.huber_loss(stale[1]) > fp.huber_loss(r)
    assert np.abs(stale[0][nonzero] / x_star[nonzero] - 1).max() > 3e-6
    # one Jacobian allowed: only the first is ever made
    made.clear()
    fp.converge(f, x0, f(x0), keep, counted, 1e-9, 1)
    assert len(made) == 1


def test_wide_differences_cross_the_kinks_fine_ones_sit_between(fp):
    """A loss made of stairs (a staircase of steps 0.005 wide in each scaled parameter, like whole
    pages or chunks): differences of a ten-thousandth see flat treads and the fit stops where it
    starts; with the wide differences tried where a fresh Jacobian fails it walks down to within a
    tread or two of the minimum, the loss never rising."""
    x_star = fp.current()
    scale = np.maximum(np.abs(x_star), 1e-3)

    def f(x):
        u = np.floor((x - x_star) / scale / 0.005) * 0.005
        return np.concatenate([0.3 * u, np.full(10, 0.1)])

    free = np.ones(len(x_star), dtype=bool)
    fine = lambda y, ry: fp.forward_jacobian(f, y, ry, free)  # noqa: E731
    wide = lambda y, ry: fp.forward_jacobian(f, y, ry, free, fp.WIDE_STEP)  # noqa: E731
    x0 = fp.jittered(x_star, 2, share=0.1)
    u0 = np.abs(f(x0)[: len(x_star)]).max() / 0.3
    assert u0 > 0.1
    stuck = fp.converge(f, x0, f(x0), fine, fine, 1e-9, 60)
    assert (stuck[0] == x0).all()
    x, r, history = fp.converge(f, x0, f(x0), fine, fine, 1e-9, 60, wide=wide)
    assert np.abs(r[: len(x_star)]).max() / 0.3 <= 0.0101
    assert fp.huber_loss(r) < 1e-3 * fp.huber_loss(f(x0)) + 0.05 + 1e-9  # 10 x 0.5 x 0.1^2 = 0.05 at the minimum
    assert all(b <= a for a, b in zip(history, history[1:], strict=False))

"""Hierarchical calibration: offsets at the levels all, kind, engine, family, engine x family and
setup, each shrunk by cross-validation; a known engine offset recovered, pure noise refused, the
held-out half never made worse, the profile's composition and its two formats."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import yaml

from fleetplan.models import calibration as cal
from fleetplan.models import hierarchy as H
from fleetplan.models.measurements import Measurement, parse_measurements
from fleetplan.models.presets import DEFAULT, CalibrationFactors
from fleetplan.models.profile import profile_document, read_profile
from fleetplan.models.validation import error_stats, predict

HEADER = "model,gpu,precision,tp,batch,input_tokens,output_tokens,engine,measured_tpot_ms,measured_ttft_ms"
SETUPS = (("llama-3.1-8b", 1), ("llama-3.1-70b", 2), ("llama-3.1-70b", 4), ("qwen3-32b", 2))
GPUS = ("h100-sxm", "h200-sxm", "b200")


def _row(text: str) -> Measurement:
    (row,) = parse_measurements(HEADER + "\n" + text + "\n", "m.csv")
    return row


MOE_SETUPS = (("qwen3-30b-a3b", 1), ("gpt-oss-120b", 2), ("mixtral-8x7b", 2), ("qwen3-30b-a3b", 2))


def synthetic(catalog, tpot: dict[str, float], ttft: dict[str, float], noise: float = 0.0,
              seed: int = 0, setups: tuple[tuple[str, int], ...] = SETUPS,
              per_model: bool = False) -> list[Measurement]:
    """The default preset's own predictions for 24 configuration groups (4 models x 3 GPUs x
    vllm and trtllm, 4 batches each) with each engine's step ``tpot[engine]`` times longer (TTFT
    moving with it), then its TTFT times ``ttft[engine]``, and every group off by its own
    log-normal factor of spread ``noise`` (``per_model``: each model x GPU x engine, at every TP
    degree)."""
    rng = np.random.default_rng(seed)
    rows = []
    drawn: dict[tuple[str, str, str], float] = {}
    for model, tp in setups:
        for gpu in GPUS:
            for engine in ("vllm", "trtllm"):
                e = math.exp(rng.normal(0.0, noise)) if noise else 1.0
                if per_model:
                    e = drawn.setdefault((model, gpu, engine), e)
                x = tpot.get(engine, 1.0)
                truth = dataclasses.replace(DEFAULT, factors=(CalibrationFactors(
                    bandwidth_scale=1 / x, compute_scale=1 / x, overhead_scale=x, comm_scale=x),))
                for batch in (1, 8, 32, 128):
                    cells = f"{model},{gpu},fp8,{tp},{batch},1000,1000,{engine}"
                    p = predict(_row(cells + ",1,1"), catalog, truth)
                    t, f = p.predicted_tpot_ms * e, p.predicted_ttft_ms * ttft.get(engine, 1.0) * e
                    rows.append(_row(f"{cells},{t:.6f},{f:.6f}"))
    return rows


def _calibrated(c: cal.Calibration) -> object:
    return dataclasses.replace(DEFAULT, factors=cal.factors_of(cal.build_profile(c, DEFAULT)))


def test_a_known_engine_offset_is_recovered_where_it_is_systematic(catalog):
    # TensorRT-LLM's step 1.3x longer and its TTFT then halved; vLLM exactly as modelled
    rows = synthetic(catalog, {"trtllm": 1.3}, {"trtllm": 0.5})
    c = cal.calibration_of(rows, catalog, DEFAULT)
    assert c.tpot.kept and c.tpot.better and c.ttft.kept
    levels = dict(zip(H.LEVELS, c.tpot.shrink, strict=True))
    # the engine level carries it: 12 TensorRT-LLM groups of log 1.3 each, shrunk by the k chosen
    k = levels["engine"]
    assert k == 0.25 and levels["all"] is None and levels["kind"] is None
    engine_cells = c.table.cells.keys["engine"]
    offsets = dict(zip(engine_cells, c.tpot.offsets[H.LEVELS.index("engine")], strict=True))
    assert offsets[("trtllm",)] == pytest.approx(12 * math.log(1.3) / (12 + k), rel=1e-6)  # CSV's 6 decimals
    assert offsets[("vllm",)] == pytest.approx(0.0, abs=1e-6)
    preset = _calibrated(c)
    # measured engine on a measured GPU: the whole offset; on a family never measured (MI300X):
    # the engine's level alone, 1.3^(12 / 12.25); vLLM and the planner (no engine): no change
    assert preset.factors_for("h100-sxm", "hopper", "trtllm", "dense").overhead_scale == pytest.approx(1.3, rel=2e-3)
    assert preset.factors_for("mi300x", "cdna3", "trtllm", "dense").overhead_scale == pytest.approx(
        1.3 ** (12 / 12.25), rel=1e-5)
    for gpu, family, engine in (("h100-sxm", "hopper", "vllm"), ("b200", "blackwell", None), ("mi300x", "cdna3", None)):
        f = preset.factors_for(gpu, family, engine, "dense")
        assert (f.overhead_scale, f.ttft_scale) == (1.0, 1.0)
    # TTFT: the calibrated step makes TTFT longer too, and the TTFT factor halves it
    for r in rows[::7]:
        got = predict(r, catalog, preset)
        assert got.predicted_tpot_ms == pytest.approx(r.measured_tpot_ms, rel=2e-3)
        assert got.predicted_ttft_ms == pytest.approx(r.measured_ttft_ms, rel=5e-3)


def test_pure_noise_is_refused(catalog):
    # every group off by its own log-normal factor (spread 0.1), nothing shared: nothing to learn
    for seed in range(4):
        rows = synthetic(catalog, {}, {}, noise=0.1, seed=seed)
        c = cal.calibration_of(rows, catalog, DEFAULT)
        assert cal.refused(c) and not c.tpot.kept and not c.ttft.kept
        assert c.tpot.shrink == (None,) * len(H.LEVELS)
        assert cal.calibrated_unless_worse(DEFAULT, rows, catalog) is DEFAULT


def test_each_model_kind_is_calibrated_only_where_it_improves(catalog):
    # dense models: TensorRT-LLM's step 1.3x longer (spread 0.02 per group); MoE models: no
    # offset, each group off by its own factor (spread 0.15). The pooled engine offset would
    # carry 1.3x to MoE groups it does not fit: TPOT is kept for dense models only
    dense = synthetic(catalog, {"trtllm": 1.3}, {}, noise=0.02, seed=5)
    moe = synthetic(catalog, {}, {}, noise=0.15, seed=6, setups=MOE_SETUPS)
    c = cal.calibration_of(dense + moe, catalog, DEFAULT)
    assert c.tpot.kept and c.tpot.kinds == ("dense",)
    profile = cal.build_profile(c, DEFAULT)
    assert profile.tpot.kinds == ["dense"]
    preset = _calibrated(c)
    got = preset.factors_for("h200-sxm", "hopper", "trtllm", "dense", "llama-3.1-70b").overhead_scale
    # most of the 1.3x: the engine level pools the MoE groups (no offset) with the dense ones
    assert 1.15 < got < 1.31
    for model in ("gpt-oss-120b", "mixtral-8x7b", "deepseek-v3"):  # MoE: measured or not, no change
        assert preset.factors_for("h200-sxm", "hopper", "trtllm", "moe", model).overhead_scale == 1.0
    # a profile written before ``kinds`` (null) applies its offsets to every kind: MoE on
    # TensorRT-LLM gets the all, kind and engine levels' product
    old = profile.model_copy(update={"tpot": profile.tpot.model_copy(update={"kinds": None})})
    logs = cal._log_offsets(old.tpot.levels)
    want = math.exp(logs["all"].get((), 0.0) + logs["kind"].get(("moe",), 0.0) + logs["engine"][("trtllm",)])
    entries = {(f.gpu, f.engine, f.kind, f.model): f for f in cal.factors_of(old)}
    assert want != 1.0 and entries[(None, "trtllm", "moe", None)].overhead_scale == pytest.approx(want, rel=1e-5)


def test_a_model_on_a_gpu_with_an_engine_is_learned_from_its_other_tp_degrees(catalog):
    # every model x GPU x engine off by its own factor (spread 0.3), the same at TP 1, 2 and 4;
    # nothing shared by an engine, GPU or kind. Calibrated on TP 1 and 4, TP 2 predicted
    setups = (("llama-3.1-8b", 1), ("llama-3.1-8b", 2), ("llama-3.1-8b", 4),
              ("qwen3-32b", 1), ("qwen3-32b", 2), ("qwen3-32b", 4))
    rows = synthetic(catalog, {}, {}, noise=0.3, seed=2, setups=setups, per_model=True)
    train, test = [r for r in rows if r.tp != 2], [r for r in rows if r.tp == 2]
    c = cal.calibration_of(train, catalog, DEFAULT)
    # with every level allowed, chance keeps a GPU family offset (from 12 random units) that makes
    # unseen models worse; the model level alone is then tried, and kept
    assert c.tpot.kept and c.tpot.shrink[H.LEVELS.index("model")] is not None
    assert c.tpot.shrink[:H.LEVELS.index("model")] == (None,) * (len(H.LEVELS) - 1)  # nothing pooled
    preset = cal.calibrated_unless_worse(DEFAULT, train, catalog)
    # each of the 12 cells learned from its 2 groups, shrunk by k: the error left is k / (2 + k)
    # of the cell's (MAPE of log-normal 0.3 factors, about 25%)
    k = c.tpot.shrink[H.LEVELS.index("model")]
    before, after = _mape(test, DEFAULT, catalog), _mape(test, preset, catalog)
    assert before > 0.15 and after < before * (k / (2 + k)) * 1.3 + 0.005
    # a model x GPU x engine not measured gets no change: nothing pooled was systematic
    f = preset.factors_for("h100-sxm", "hopper", "vllm", "dense", "llama-3.1-70b")
    assert (f.overhead_scale, f.bandwidth_scale) == (1.0, 1.0)


def test_factors_for_prefers_the_model_entry_then_the_most_specific_gpu_and_engine():
    preset = dataclasses.replace(DEFAULT, factors=(
        CalibrationFactors(overhead_scale=1.1),
        CalibrationFactors(gpu="h100-sxm", engine="vllm", kind="dense", overhead_scale=1.2),
        CalibrationFactors(gpu="hopper", engine="vllm", model="llama-3.1-8b", overhead_scale=1.3),
    ))
    # the model's entry wins over the GPU id's, even matched by family only
    assert preset.factors_for("h100-sxm", "hopper", "vllm", "dense", "llama-3.1-8b").overhead_scale == 1.3
    # another model, or no model named (the layout's communication): the GPU id and engine entry
    assert preset.factors_for("h100-sxm", "hopper", "vllm", "dense", "qwen3-32b").overhead_scale == 1.2
    assert preset.factors_for("h100-sxm", "hopper", "vllm", "dense").overhead_scale == 1.2
    # the model on another engine: only the entry for anything matches
    assert preset.factors_for("h100-sxm", "hopper", "sglang", "dense", "llama-3.1-8b").overhead_scale == 1.1


def _mape(rows, preset, catalog) -> float:
    return float(error_stats([r.measured_tpot_ms for r in rows],
                             [predict(r, catalog, preset).predicted_tpot_ms for r in rows])["mape"])


@pytest.mark.parametrize("noise", [0.0, 0.05])
def test_the_other_half_improves_with_a_systematic_offset_and_is_never_worse(catalog, noise):
    rows = synthetic(catalog, {"trtllm": 1.4}, {"trtllm": 0.5}, noise=noise, seed=3)
    groups = sorted({r.configuration for r in rows}, key=repr)
    mine = set(groups[::2])
    train = [r for r in rows if r.configuration in mine]
    test = [r for r in rows if r.configuration not in mine]
    preset = cal.calibrated_unless_worse(DEFAULT, train, catalog)
    assert preset is not DEFAULT
    trt = [r for r in test if r.engine == "trtllm"]
    vllm = [r for r in test if r.engine == "vllm"]
    # TensorRT-LLM groups never calibrated get its offset; vLLM's stay as they were within 1%
    # (the all level's mean of both engines, taken back by the engine level shrunk by k: a cell
    # of one group, vLLM on Blackwell here, keeps its parent's value) and the noise of the 6 vLLM
    # groups the engine level saw (spread 0.05 / sqrt 6 = 0.02 on their mean)
    assert _mape(trt, DEFAULT, catalog) == pytest.approx(1 - 1 / 1.4, abs=noise * 1.2 + 1e-3)
    assert _mape(trt, preset, catalog) < 0.25 * _mape(trt, DEFAULT, catalog) + noise
    assert _mape(vllm, preset, catalog) <= _mape(vllm, DEFAULT, catalog) + 0.01 + noise / 2
    assert _mape(test, preset, catalog) < _mape(test, DEFAULT, catalog)


def test_the_noise_halves_are_refused_or_not_made_worse(catalog):
    rows = synthetic(catalog, {}, {}, noise=0.1, seed=11)
    groups = sorted({r.configuration for r in rows}, key=repr)
    for mine in (set(groups[::2]), set(groups[1::2])):
        train = [r for r in rows if r.configuration in mine]
        test = [r for r in rows if r.configuration not in mine]
        preset = cal.calibrated_unless_worse(DEFAULT, train, catalog)
        assert preset is DEFAULT or _mape(test, preset, catalog) <= _mape(test, DEFAULT, catalog) + 0.005


def test_nested_cross_validation_chooses_levels_again_in_every_fold(catalog):
    rows = synthetic(catalog, {"trtllm": 1.3}, {}, noise=0.02, seed=1)
    c = cal.calibration_of(rows, catalog, DEFAULT)
    # 24 folds, one per configuration group (4 models x 3 GPUs x 2 engines)
    assert c.folds == 24 and c.method.startswith("leave-one-group-out")
    # the held-out multiplier of a group equals a calibration fitted without it, by hand
    t = c.table
    held = H.folds(np.ones(t.cells.groups, dtype=bool))[5]
    assert held.sum() == 1
    g = int(np.flatnonzero(held)[0])
    train = ~held
    shrink, _ = H.select(t.tpot_values, train, t.cells, cal.tpot_loss(t), clusters=t.clusters)
    offsets = H.fit(t.tpot_values, train, t.cells, shrink)
    assert c.tpot.held_out[g] == pytest.approx(H.log_multipliers(offsets, t.cells)[g], rel=1e-12)
    # what the group's rows are predicted at, as calibrate reports them
    pred = cal.row_predictions(c, "tpot")["held_out"]
    rows_g = np.flatnonzero(t.row_group == g)
    base = np.array([cal._base_s(t.comp[i]) for i in rows_g])
    assert pred[rows_g] == pytest.approx(base * math.exp(c.tpot.held_out[g]), rel=1e-12)


def _keys(engines: str, models: str | None = None) -> list[dict[str, tuple[str, ...]]]:
    """Cell keys of groups on engines ``engines`` (one letter each), family x, dense; each its own
    setup, and its own model unless ``models`` names one per group."""
    return [{"all": (), "kind": ("dense",), "engine": (e,), "family": ("x",), "engine_family": (e, "x"),
             "setup": (str(i), "x", e, "dense"), "model": ((models or "0123456789")[i], "g", "x", e, "dense")}
            for i, e in enumerate(engines)]


def test_fit_shrinks_each_level_toward_its_parent_by_hand():
    # 4 groups: engines a, a, b, b; family x for all; values 0.5, 0.3, -0.2, -0.3
    cells = H.cells_of(_keys("aabb"))
    values = np.array([0.5, 0.3, -0.2, -0.3])
    train = np.ones(4, dtype=bool)
    off = H.fit(values, train, cells, (1.0, None, 2.0, None, None, None, None))
    # the all level's mean 0.075 is 0.39 (the values' spread) / sqrt 4 = 0.19 standard errors...
    # less than 2 of them: not systematic, no offset
    assert off[0][0] == 0.0
    # engine a: mean 0.4, standard error 0.1414 / sqrt 2 = 0.1; b: mean -0.25, 0.05; both
    # systematic, each the sum over its 2 groups plus 2 groups' worth of no change
    assert off[2] == pytest.approx([0.8 / (2 + 2.0), -0.5 / (2 + 2.0)])
    # a group held out of the fit gets its cells' offsets from the others; a cell fewer than two
    # training groups are in gets 0, its parent's value: engine b with group 3 held out
    train[3] = False
    off = H.fit(values, train, cells, (None, None, 0.5, None, None, None, None))
    assert H.MIN_CELL_GROUPS == 2
    assert off[2][1] == 0.0 and off[2][0] == pytest.approx(0.8 / 2.5)


def test_a_pooled_cell_applies_only_where_its_offset_is_systematic():
    # engine b's groups disagree: -0.3 and 0.2, mean -0.05 with standard error 0.25: no offset;
    # engine a's agree (0.5, 0.3: mean 0.4, standard error 0.1): offset 0.8 / (2 + 1)
    cells = H.cells_of(_keys("aabb"))
    off = H.fit(np.array([0.5, 0.3, -0.3, 0.2]), np.ones(4, dtype=bool), cells, (None, None, 1.0) + (None,) * 4)
    assert off[2] == pytest.approx([0.8 / 3, 0.0])
    # the model level (one model on one GPU with one engine) is not pooled: its cell of two
    # disagreeing groups still gets their shrunk mean, (-0.3 + 0.2) / (2 + 1)
    cells = H.cells_of(_keys("aabb", models="ppqq"))
    off = H.fit(np.array([0.5, 0.3, -0.3, 0.2]), np.ones(4, dtype=bool), cells, (None,) * 6 + (1.0,))
    assert off[6] == pytest.approx([0.8 / 3, -0.1 / 3])


def test_the_model_level_is_learned_by_single_groups_and_never_worse():
    # 3 models on one engine, each measured in 4 groups (TP degrees): model p 0.4 above the
    # physics, q 0.3 below, r on it; noise 0.02. Cluster folds (a model held out whole) cannot
    # judge the model level; single groups can, and keep it
    noise = np.array([0.02, -0.01, 0.0, -0.02, 0.01, 0.02, -0.02, 0.0, 0.01, -0.01, 0.02, -0.02])
    truth = np.repeat([0.4, -0.3, 0.0], 4)
    values = truth + noise
    keys = _keys("a" * 12, models="ppppqqqqrrrr")
    for i, k in enumerate(keys):
        k["setup"] = ("g", "x", "a", "dense")
    cells = H.cells_of(keys)
    clusters = np.repeat([0, 1, 2], 4)

    def loss(logm, held):
        return np.sum(np.where(held, np.abs(logm - values[None, :]), 0.0), axis=1)

    shrink, report = H.select(values, np.ones(12, dtype=bool), cells, loss, clusters=clusters)
    assert shrink[:6] == (None,) * 6 and shrink[6] is not None
    # held out one group at a time, the model level's loss is below that without it
    assert report[6].loss_with < report[6].loss_without
    off = H.fit(values, np.ones(12, dtype=bool), cells, shrink)
    assert np.exp(H.log_multipliers(off, cells))[[0, 4, 8]] == pytest.approx(
        np.exp([0.4, -0.3, 0.0]), abs=0.05 + 0.4 * shrink[6] / (4 + shrink[6]))
    # the same groups with the models' offsets scrambled within each model (no model shares one):
    # no level is kept, as holding out single groups finds every one worse
    scrambled = np.array([0.4, -0.3, 0.0, 0.1, -0.3, 0.4, 0.1, 0.0, 0.0, 0.1, -0.3, 0.4])

    def loss2(logm, held):
        return np.sum(np.where(held, np.abs(logm - scrambled[None, :]), 0.0), axis=1)

    shrink, _ = H.select(scrambled, np.ones(12, dtype=bool), cells, loss2, clusters=clusters)
    assert shrink == (None,) * 7


def test_one_standard_error_rule_keeps_a_level_only_beyond_the_noise_of_its_gain():
    keys = _keys("abababab")
    for i, k in enumerate(keys):
        k["setup"] = (str(i % 4), "x", k["engine"][0], "dense")
    cells = H.cells_of(keys)
    noise = np.array([0.3, -0.2, -0.25, 0.15, 0.1, -0.3, 0.2, 0.05])

    def loss_of(values):
        return lambda logm, held: np.sum(np.where(held, np.abs(logm - values[None, :]), 0.0), axis=1)

    # noise alone: no level's gain across the 8 folds stands out of its spread, none is kept
    shrink, report = H.select(noise, np.ones(8, dtype=bool), cells, loss_of(noise))
    assert shrink == (None,) * 7 and all(r.loss_with is None for r in report)
    # engine a one unit above b: the engine level is kept (the all level, their mean, is not)
    shifted = noise + np.array([1.0, 0.0] * 4)
    shrink, _ = H.select(shifted, np.ones(8, dtype=bool), cells, loss_of(shifted))
    assert shrink[H.LEVELS.index("engine")] is not None


def test_profile_round_trip_and_both_formats(tmp_path, catalog):
    c = cal.calibration_of(synthetic(catalog, {"trtllm": 1.3}, {"trtllm": 0.5}), catalog, DEFAULT)
    profile = cal.build_profile(c, DEFAULT, "m.csv")
    doc = yaml.safe_load(yaml.safe_dump(profile_document(profile)))
    assert read_profile(doc, "p.yaml") == profile and doc["fleetplan_calibration"] == 2
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert cal.apply_profile(DEFAULT, path).factors == cal.factors_of(profile)
    # each entry is the product of its cells' multipliers over the levels, by hand for one
    scales = {lv.level: {(o.gpu, o.family, o.engine, o.kind): o.scale for o in lv.offsets} for lv in profile.tpot.levels}
    want = 1.0
    for level, key in (("engine", (None, None, "trtllm", None)), ("engine_family", (None, "blackwell", "trtllm", None)),
                       ("setup", ("b200", "blackwell", "trtllm", "dense"))):
        want *= scales[level].get(key, 1.0)
    got = cal.apply_profile(DEFAULT, path).factors_for("b200", "blackwell", "trtllm", "dense")
    assert got.overhead_scale == pytest.approx(want, rel=1e-5)
    old = ("fleetplan_calibration: 1\npreset: default\nfactors:\n  - {gpu: hopper, engine: vllm, bandwidth_scale: 0.5, "
           "compute_scale: 0.5, overhead_scale: 2.0, comm_scale: 2.0}\n")
    path.write_text(old)
    f = cal.apply_profile(DEFAULT, path).factors_for("h100-sxm", "hopper", "vllm", "dense")
    assert (f.overhead_scale, f.ttft_scale) == (2.0, 1.0)


def test_ttft_is_affine_in_the_step_scale(catalog):
    # what calibration assumes of any physics: a uniform step scale s moves TTFT as fixed + s x work
    rows = synthetic(catalog, {}, {})[::5]
    for r in rows:
        c = cal.components(r, catalog, DEFAULT)
        scaled = dataclasses.replace(DEFAULT, factors=(CalibrationFactors(
            bandwidth_scale=1 / 1.7, compute_scale=1 / 1.7, overhead_scale=1.7, comm_scale=1.7),))
        p = predict(r, catalog, scaled)
        assert p.predicted_ttft_ms / 1e3 == pytest.approx(c.ttft_fixed + 1.7 * c.ttft_scaled, rel=1e-6)
        assert p.predicted_tpot_ms / 1e3 == pytest.approx(1.7 * cal._base_s(c), rel=1e-6)

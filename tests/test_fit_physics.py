"""benchmarks/fit_physics.py's cross-validation rules: what a fold that never saw a GPU family or
an engine predicts it with."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from fleetplan.catalogs import load_catalog
from fleetplan.models.measurements import parse_measurements
from fleetplan.models.physics import DEFAULT_PHYSICS

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

"""Breakeven's choice of the cheapest strategy and its crossovers, on hand-made points (no solver)."""

from __future__ import annotations

import io
import math

import pytest
from rich.console import Console

from fleetplan.optimizer.decisions.breakeven import ALL_API, BLEND, SELF_HOST, BreakevenPoint, BreakevenResult
from fleetplan.rendering.tables import breakeven_line, print_breakeven


@pytest.mark.parametrize(("point", "cheapest"), [
    (BreakevenPoint(1.0, 100.0, 150.0, 120.0), ALL_API),
    (BreakevenPoint(1.0, 100.0, 90.0, 80.0), BLEND),
    (BreakevenPoint(1.0, 100.0, 70.0, 80.0), SELF_HOST),
    (BreakevenPoint(1.0, 100.0, None, None), ALL_API),  # no fleet fits: all-API is all there is
    (BreakevenPoint(1.0, 100.0, 50.0, None), SELF_HOST),
    # equal to the cent, as the JSON shows them: the earlier strategy of STRATEGIES is named
    (BreakevenPoint(1.0, 100.004, 100.001, 100.003), ALL_API),
    (BreakevenPoint(1.0, 200.0, 100.001, 100.004), BLEND),
    # a cent apart: the cheaper one
    (BreakevenPoint(1.0, 200.0, 100.0, 100.01), SELF_HOST),
])
def test_cheapest_strategy(point, cheapest):
    assert point.cheapest == cheapest


def test_point_as_json_row_rounds_to_cents():
    p = BreakevenPoint(0.5, 1234.5678, None, 999.994, proven_optimal=False)
    assert p.as_dict() == {"scale": 0.5, "all_api_usd": 1234.57, "self_host_usd": None, "blend_usd": 999.99,
                           "proven_optimal": False}
    assert p.costs_usd() == {ALL_API: 1234.57, BLEND: 999.99, SELF_HOST: None}


def test_crossovers_interpolate_in_log_scale():
    # self-hosting is $100 dearer than all-API at 0.1x and $100 cheaper at 1x: the crossing is
    # halfway in log scale, sqrt(0.1 x 1); the blend is cheaper from the first scale on
    points = (BreakevenPoint(0.1, 1000.0, 1100.0, 900.0), BreakevenPoint(1.0, 10_000.0, 9_900.0, 8_000.0),
              BreakevenPoint(10.0, 100_000.0, 50_000.0, 45_000.0))
    r = BreakevenResult(points, ())
    assert r.self_host_beats_api_at_scale == round(math.sqrt(0.1), 4) == 0.3162
    assert r.blend_beats_api_at_scale == 0.1
    d = r.as_dict()
    assert list(d) == ["scales", "points", "stopped", "crossovers"]
    assert d["scales"] == [0.1, 1.0, 10.0] and d["crossovers"] == {
        "self_host_beats_api_at_scale": 0.3162, "blend_beats_api_at_scale": 0.1}


def test_no_crossover_when_the_api_stays_cheaper():
    r = BreakevenResult((BreakevenPoint(1.0, 10.0, 20.0, None), BreakevenPoint(2.0, 20.0, 30.0, None)), ("x",))
    assert r.self_host_beats_api_at_scale is None and r.blend_beats_api_at_scale is None
    assert r.as_dict()["stopped"] == ["x"]


def test_progress_line_and_table_name_the_cheapest():
    p = BreakevenPoint(2.0, 1_429_745.004, None, 552_194.2, proven_optimal=False)
    assert breakeven_line(p) == ("scale 2: all API $1,429,745, self-host -, blend $552,194 "
                                 "(not proven optimal: time limit)")
    buf = io.StringIO()
    print_breakeven(BreakevenResult((p,), ()), "s.yaml", None, Console(file=buf, width=120, color_system=None))
    text = buf.getvalue()
    row = next(line for line in text.splitlines() if "1,429,745" in line)
    assert [cell.strip() for cell in row.split("│")[1:-1]] == ["2", "1,429,745", "-", "552,194", "blend"]
    assert "the blend beats all-API from 2.0x" in text and "self-hosting alone beats all-API from no scale tried" in text

"""``fleetplan report``: one self-contained HTML page whose figures are the plan's.

Plans are computed here (never a stored cost): the page must show the plan's total, its GPUs,
every product and every binding limit; it must load nothing; the same plan gives the same bytes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fleetplan.main import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MAX_BYTES = 5 * 1024 * 1024


def plan_file(capsys, tmp_path: Path, example: str) -> tuple[Path, dict]:
    """The plan JSON of ``example`` written by ``fleetplan plan --json --out``, and its dict."""
    out = tmp_path / f"{example}.json"
    assert main(["plan", str(EXAMPLES / f"{example}.yaml"), "--json", "--out", str(out)]) == 0
    capsys.readouterr()
    return out, json.loads(out.read_text(encoding="utf-8"))


def report(capsys, src: Path, out: Path) -> tuple[int, str, str]:
    code = main(["report", str(src), "--out", str(out)])
    o, e = capsys.readouterr()
    return code, o, e


def assert_self_contained(text: str) -> None:
    """No script, no link element, no src at all, only in-page (#...) hrefs and urls; ≤ 5 MB."""
    assert len(text.encode("utf-8")) <= MAX_BYTES
    assert "<script" not in text and "<link" not in text and "@import" not in text
    assert all(u.startswith("#") for u in re.findall(r"url\(([^)]*)\)", text))  # only in-page clip paths
    assert not re.findall(r'\bsrc\s*=', text)
    hrefs = re.findall(r'href\s*=\s*"([^"]*)"', text)
    assert hrefs and all(h.startswith("#") for h in hrefs)  # the charts' own <use> references


def test_a_plan_file_report_shows_the_plans_figures(capsys, tmp_path):
    src, d = plan_file(capsys, tmp_path, "peak-sized-30pct")
    out = tmp_path / "r.html"
    code, o, _ = report(capsys, src, out)
    assert code == 0 and f"${d['monthly_cost_usd']:,.2f}" in o
    text = out.read_text(encoding="utf-8")
    assert_self_contained(text)
    assert f'data-usd="{d["monthly_cost_usd"]:.2f}"' in text
    assert f'<b id="total-gpus">{d["totals"]["all_gpus"]:,}</b>' in text
    for p in d["products"]:
        assert f"<td>{p['name']}</td>" in text and f"${p['monthly_cost_usd']:,.0f}" in text
    assert text.count("<svg") >= 2  # cost per product and the hourly fleet (24 hours)
    assert "Not computed: the report was made from a plan file" in text
    again = tmp_path / "again.html"
    assert report(capsys, src, again)[0] == 0
    assert again.read_bytes() == out.read_bytes()


def test_binding_limits_and_gpu_usage_appear_with_their_values(capsys, tmp_path):
    src, d = plan_file(capsys, tmp_path, "portfolio-3")
    out = tmp_path / "p3.html"
    assert report(capsys, src, out)[0] == 0
    text = out.read_text(encoding="utf-8")
    assert d["binding_limits"]
    for b in d["binding_limits"]:
        assert f"<td>{b['limit']}</td>" in text and f"${b['relaxed_monthly_cost_usd']:,.0f}" in text
    for gpu, u in d["gpu_usage"].items():
        assert f"<td>{gpu}</td><td class=n>{u['gpus']}</td>" in text


def test_a_scenario_report_carries_a_tornado_whose_demand_bar_rises(capsys, tmp_path):
    out = tmp_path / "s.html"
    code, o, _ = report(capsys, EXAMPLES / "seed-chat-70b.yaml", out)
    assert code == 0
    text = out.read_text(encoding="utf-8")
    assert_self_contained(text)
    row = re.search(r"<td>demand \(peak_qps\)</td><td class=n>\$([\d,]+)</td><td class=n>\$([\d,]+)</td>", text)
    assert row is not None
    low, high = (int(x.replace(",", "")) for x in row.groups())
    total = float(re.search(r'data-usd="([\d.]+)"', text).group(1))
    assert low < total < high  # 20% less demand costs less, 20% more costs more (162 GPUs at peak)


@pytest.mark.parametrize("argv, words", [
    (["--out", "r.txt"], "--out: file must end in .html or .htm"),
    (["--out", "missing-dir/r.html"], "--out"),
])
def test_bad_outputs_exit_2_with_one_line(capsys, tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    code = main(["report", str(EXAMPLES / "seed-chat-70b.yaml"), *argv])
    _, err = capsys.readouterr()
    assert code == 2 and words in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


def test_a_json_that_is_not_a_plan_is_refused_naming_the_file(capsys, tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"products": []}', encoding="utf-8")
    code = main(["report", str(bad), "--out", str(tmp_path / "r.html")])
    _, err = capsys.readouterr()
    assert code == 2 and f"{bad}: not a plan file (missing status" in err and err.count("\n") == 1
    assert not (tmp_path / "r.html").exists()


def test_charts_drawn_ahead_are_the_pages_own(capsys, tmp_path):
    from fleetplan.rendering.html import figures, page

    _, d = plan_file(capsys, tmp_path, "portfolio-3")
    rows = [{"input": "demand (peak_qps)", "low_factor": 0.8, "high_factor": 1.2,
             "low_monthly_cost_usd": d["monthly_cost_usd"] * 0.8, "low_proven": True, "low_error": None,
             "high_monthly_cost_usd": d["monthly_cost_usd"] * 1.3, "high_proven": True, "high_error": None}]
    drawn = figures({**d, "binding_limits": []}, rows)  # drawn before the limits are valued
    assert drawn.usage and drawn.cost and drawn.tornado  # a one-hour plan: no hourly fleet chart
    assert page(d, rows, "t", drawn) == page(d, rows, "t")

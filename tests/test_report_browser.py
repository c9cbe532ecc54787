"""The HTML report as a person sees it: opened in headless Chromium (Debian's ``chromium``,
which ``.ci/run`` installs), with no console error and no request beyond the file itself, and
the total read off the page equal to the plan's. The screenshot is kept: set
``FLEETPLAN_SCREENSHOT=docs/assets/report.png`` to write it where the documentation shows it."""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

import pytest

from fleetplan.main import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from browser import find_chromium, visit  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
CHROMIUM = find_chromium()


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium, chromium-browser or google-chrome on PATH (nor $CHROMIUM): "
                                             "install Debian's chromium package (apt-get install -y chromium)")
def test_the_report_in_chromium_shows_the_plans_total_and_loads_nothing(capsys, tmp_path):
    plan = tmp_path / "plan.json"
    assert main(["plan", str(EXAMPLES / "chat-diurnal-blend.yaml"), "--json", "--out", str(plan)]) == 0
    d = json.loads(plan.read_text(encoding="utf-8"))
    page = tmp_path / "report.html"
    assert main(["report", str(plan), "--out", str(page)]) == 0
    capsys.readouterr()
    seen = visit(CHROMIUM, page, {
        "usd": "document.getElementById('total-cost').dataset.usd",
        "shown": "document.getElementById('total-cost').textContent",
        "gpus": "document.getElementById('total-gpus').textContent",
        "charts": "document.querySelectorAll('svg').length",
        "width": "document.documentElement.scrollWidth <= window.innerWidth",
    })
    assert seen.errors == []
    assert seen.requests == [page.resolve().as_uri()]
    assert float(seen.values["usd"]) == d["monthly_cost_usd"]
    assert seen.values["shown"] == f"${d['monthly_cost_usd']:,.0f}"
    assert seen.values["gpus"] == f"{d['totals']['all_gpus']:,}"
    assert seen.values["charts"] >= 2 and seen.values["width"] is True  # no sideways scrolling on a laptop
    png = seen.screenshot_png
    width, height = struct.unpack(">II", png[16:24])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and width == 1280 and height > 600
    (tmp_path / "report.png").write_bytes(png)
    target = os.environ.get("FLEETPLAN_SCREENSHOT")
    if target:  # the documentation's copy, in 64 colours to keep it small
        from PIL import Image

        Image.open(tmp_path / "report.png").convert("RGB").quantize(64).save(target, optimize=True)

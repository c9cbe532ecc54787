"""Every shipped example runs every command: its plan (as ``plan --json`` writes it) is read back
by ``report`` (from the plan file and from the scenario, tornado included), by ``simulate``
(where the plan has a product it models) and by ``deploy`` for each engine with Kubernetes
manifests and SkyPilot services, each exiting 0 with the plan's own figures: the report's cost
and products, the simulated replicas, the deployed replica counts.

A one-hour example's stored reference (``tests/data/plans``, equal to its plan by
``test_reference_plans.py``) is its plan file; an example of several hours is planned once per
session (its reference keeps only a digest of the hours)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetplan.main import main
from fleetplan.optimizer.explanation.results import plan_to_dict

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
PLANS = ROOT / "tests" / "data" / "plans"
# Requests each simulated product replays: enough to exercise every path of the replay, few
# enough that all examples simulate in seconds (the replay's accuracy is test_simulate's).
SIMULATED_REQUESTS = 300
ENGINES = ("vllm", "sglang", "trtllm")


@pytest.fixture
def plan_file(tmp_path, example_plan):
    """``plan_file(example)``: the path of the example's plan JSON, and its document."""
    def make(example: Path) -> tuple[Path, dict[str, Any]]:
        d = json.loads((PLANS / f"{example.stem}.json").read_text(encoding="utf-8"))
        if any("hourly_sha256" in p for p in d["products"]):
            d = json.loads(json.dumps(plan_to_dict(example_plan(example.name))))
        path = tmp_path / f"{example.stem}.json"
        path.write_text(json.dumps(d, indent=1), encoding="utf-8")
        return path, d
    return make


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def check_page(page: Path, d: dict[str, Any], tornado: bool, replayed: bool = False) -> None:
    """The page shows the plan's cost and every product; a scenario's page prices each tornado
    input on at least one side. ``replayed``: the page planned the scenario again with its trace
    replayed, whose rounds only raise the planned demand, so its cost is at least the plan's."""
    text = page.read_text(encoding="utf-8")
    if replayed:
        usd = float(re.search(r'id="total-cost" data-usd="([0-9.]+)"', text).group(1))
        assert usd >= d["monthly_cost_usd"] - 0.01
    else:
        assert f'data-usd="{d["monthly_cost_usd"]:.2f}"' in text
        assert f'<b id="total-gpus">{d["totals"]["all_gpus"]:,}</b>' in text
    for p in d["products"]:
        assert f"<td>{html.escape(p['name'])}</td>" in text
    assert not re.search(r"\$-?nan|\bnan%|>nan<", text, re.IGNORECASE)
    section = text[text.index("Sensitivities"):]
    rows = re.findall(r"<tr><td>(.*?)</tr>", section)
    assert len(rows) == (4 if tornado else 0)
    assert all(re.search(r"\$[\d,]+", r) for r in rows), rows


def simulated_replicas(p: dict[str, Any], hour: int) -> int:
    """The decode replicas a product runs in plan hour ``hour`` (a mix: its configurations' at the peak)."""
    if p.get("configurations"):
        return sum(c.get("peak_hour_replicas", c["replicas"]) for c in p["configurations"])
    if p.get("hourly"):
        row = p["hourly"][hour]
        return row["reserved_replicas"] + row["on_demand_replicas"] + row["spot_replicas"]
    return p["replicas"]


def check_simulation(capsys, src: Path, d: dict[str, Any]) -> None:
    code, out, err = run(capsys, "simulate", str(src), "--requests", str(SIMULATED_REQUESTS), "--json")
    modelled = [p for p in d["products"] if p["gpu"] and p["replicas"] and not p.get("pooled_in")]
    if not modelled:  # every product pooled or on the API: said in one line
        assert code == 2 and err.startswith("fleetplan: error: plan: no product to simulate") and err.count("\n") == 1
        return
    assert code == 0, err
    result = json.loads(out)
    assert [r["name"] for r in result["products"]] == [p["name"] for p in modelled]
    assert result["skipped"] == [p["name"] for p in d["products"] if p not in modelled]
    for p, r in zip(modelled, result["products"]):
        assert r["replicas"] == simulated_replicas(p, r["hour"]) > 0
        assert r["requests"] == SIMULATED_REQUESTS and r["ttft_ms"]["p50"] is not None


def expected_sets(d: dict[str, Any]) -> list[int]:
    """The replicas of every replica set the plan runs, sorted: per product, or pooled group once,
    its decode replicas (a mix's per configuration) and its prefill pool's."""
    pools = {k["name"]: k for k in d.get("pools") or []}
    out: list[int] = []
    seen: set[str] = set()
    for p in d["products"]:
        unit = p.get("pooled_in") or p["name"]
        if unit in seen or not p["gpu"]:
            continue
        seen.add(unit)
        pool = pools.get(unit)
        if p.get("configurations"):
            out += [c["replicas"] for c in p["configurations"] if c["replicas"]]
        elif (pool or p)["replicas"]:
            out.append((pool or p)["replicas"])
        prefill = pool["prefill_replicas"] if pool else p["prefill"]["replicas"]
        if p["prefill"]["gpu"] and prefill:
            out.append(prefill)
    return sorted(out)


def check_deploy(capsys, tmp_path: Path, src: Path, d: dict[str, Any]) -> None:
    sets = expected_sets(d)
    for engine in ENGINES:
        for target in ("--k8s", "--skypilot"):
            out = tmp_path / f"{engine}{target}"
            out.mkdir()
            code, _, err = run(capsys, "deploy", str(src), "--engine", engine, target, "--out", str(out))
            assert code == 0, err
            files = sorted(out.iterdir())
            assert (out / "launch.sh").is_file()
            docs = [doc for f in files if f.suffix == ".yaml" for doc in yaml.safe_load_all(f.read_text("utf-8"))]
            if target == "--k8s":
                replicas = sorted(doc["spec"]["replicas"] for doc in docs)
            else:
                replicas = sorted(doc["service"]["replicas"] for doc in docs)
            assert replicas == sets, (engine, target)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_command_runs_on_the_example(capsys, tmp_path, plan_file, example):
    src, d = plan_file(example)
    page = tmp_path / "from-plan.html"
    code, _, err = run(capsys, "report", str(src), "--out", str(page))
    assert code == 0, err
    check_page(page, d, tornado=False)
    page = tmp_path / "from-scenario.html"
    code, _, err = run(capsys, "report", str(example), "--out", str(page))
    assert code == 0, err
    check_page(page, d, tornado=True, replayed=any(p.get("trace") for p in yaml.safe_load(example.read_text("utf-8"))["products"]))
    check_simulation(capsys, src, d)
    check_deploy(capsys, tmp_path, src, d)

"""Accounting: every replica, GPU and dollar counted once, in the plan JSON, the table and the
batch summary; explanations quote the price paid; shares and candidate counts read right."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from fleetplan.commands.batch import Outcome, summary_rows
from fleetplan.rendering.tables import print_plan, whole_dollars
from fleetplan.main import main
from fleetplan.optimizer.mip.solution import Plan
from fleetplan.optimizer.explanation.results import plan_to_dict, split_cents
from fleetplan.optimizer.common.text import pct

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

SHIPPED = sorted(p.name for p in EXAMPLES.glob("*.yaml"))
def planned(example_plan: Any, name: str) -> tuple[Plan, dict[str, Any]]:
    """An example's plan (made once per session, see conftest) and its JSON."""
    plan = example_plan(name)
    return plan, plan_to_dict(plan)


def table_text(d: dict[str, Any]) -> str:
    con = Console(width=240, record=True, highlight=False, file=io.StringIO())
    print_plan(d, con)
    return con.export_text()


def table_total(text: str) -> tuple[int, int]:
    """(GPUs, $/month) of the table's ``total`` line."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 2 and cells[1] == "total":
            numbers = [c for c in cells[2:] if c]
            return int(numbers[0].replace(",", "")), int(numbers[1].replace(",", ""))
    raise AssertionError("no total line in the table")


def table_costs(text: str) -> list[int]:
    """The $/month cells of every line of the plan table except the total lines."""
    out = []
    header = None
    for line in text.splitlines():
        if header is None and "$/month" in line:
            header = [c.strip() for c in line.split("┃")].index("$/month")
            continue
        cells = [c.strip() for c in line.split("│")]
        if header is not None and len(cells) > header and cells[header] and "total" not in cells[1]:
            out.append(int(cells[header].replace(",", "")))
        if cells[1:2] == ["total"]:
            break
    return out


def recomputed(plan: Plan) -> dict[str, float]:
    """Replicas, GPUs and cost summed from each planned product's integer decisions and prices."""
    replicas = gpus = prefill_gpus = 0
    cost = 0.0
    for pp in plan.products:
        hw, hm = pp.hour_weight, pp.hours_per_month
        decode = [(f.part, f.reserved, f.on_demand, f.spot) for f in pp.fleets]  # each configuration of a mix
        for part, res, od, sp in (*decode, (pp.pool, pp.pool_reserved, pp.pool_on_demand, pp.pool_spot)):
            if part is None:
                continue
            peak = max(res + od[h] + sp[h] for h in range(len(od)))
            if part is not pp.pool:
                replicas += peak
                gpus += peak * part.gpus_per_replica
            else:
                prefill_gpus += peak * part.gpus_per_replica
            cost += res * part.gpus_per_replica * part.price.tier("reserved") * hm
            cost += sum(od) * part.gpus_per_replica * part.price.tier("on_demand") * hw
            cost += sum(sp) * part.gpus_per_replica * part.price.tier("spot") * hw
        cost += pp.api_cost_usd + pp.fixed_cost_usd + pp.stranded_usd
    return {"replicas": replicas, "gpus": gpus, "prefill_gpus": prefill_gpus, "cost": cost}


def own(p: dict[str, Any], key: str) -> int:
    """A product row's own replicas or GPUs: its configuration's, or every configuration's of a mix."""
    return sum(c[key] for c in p["configurations"]) if "configurations" in p else p[key]


@pytest.mark.parametrize("name", SHIPPED)
def test_totals_are_the_sum_of_counted_parts(example_plan, name):
    plan, d = planned(example_plan, name)
    want = recomputed(plan)
    n = len(d["products"]) + len(d["pools"])
    totals = d["totals"]
    # plan JSON: totals against primitives, and against the rows listed (products with their
    # own replicas, pools once)
    assert totals["replicas"] == want["replicas"] and totals["gpus"] == want["gpus"]
    assert totals["prefill_gpus"] == want["prefill_gpus"]
    assert totals["all_gpus"] == want["gpus"] + want["prefill_gpus"]
    assert d["monthly_cost_usd"] == pytest.approx(want["cost"], abs=0.01 * n)
    assert totals["monthly_cost_usd"] == d["monthly_cost_usd"]
    rows = d["products"]
    assert sum(own(p, "gpus") for p in rows) + sum(p["gpus"] for p in d["pools"]) == totals["gpus"]
    assert sum(own(p, "replicas") for p in rows) + sum(p["replicas"] for p in d["pools"]) == totals["replicas"]
    assert sum(p["prefill"]["gpus"] or 0 for p in rows) + sum(p.get("prefill_gpus") or 0 for p in d["pools"]) \
        == totals["prefill_gpus"]
    cents = round(d["monthly_cost_usd"] * 100)
    assert sum(round(p["monthly_cost_usd"] * 100) for p in rows) == cents
    assert sum(round(v * 100) for v in d["monthly_cost_breakdown_usd"].values()) == cents
    for p in rows:
        assert sum(round(v * 100) for v in p["monthly_cost_breakdown_usd"].values()) == round(p["monthly_cost_usd"] * 100)
    for pool in d["pools"]:
        members = [p for p in rows if p.get("pooled_in") == pool["name"]]
        assert all(p["gpus"] == 0 and p["shared_gpus"] == pool["gpus"] for p in members)
        assert sum(round(p["monthly_cost_usd"] * 100) for p in members) == round(pool["monthly_cost_usd"] * 100)
    if d["hours"] == 1:  # one hour: the GPUs per type are the same GPUs
        assert sum(u["gpus"] for u in d["gpu_usage"].values()) == totals["all_gpus"]
    else:  # each type's busiest hour is at most the sum of the products' busiest hours
        assert sum(u["gpus"] for u in d["gpu_usage"].values()) <= totals["all_gpus"]
    # table: the total line, and every $/month cell adding up to it
    text = table_text(d)
    assert table_total(text) == (totals["all_gpus"], round(d["monthly_cost_usd"]))
    assert sum(table_costs(text)) == round(d["monthly_cost_usd"])
    # summary: the scenario row holds the totals and the product rows add up to it
    summary = summary_rows([Outcome(str(EXAMPLES / name), d, None)])
    head, parts = summary[0], summary[1:]
    assert (head["replicas"], head["gpus"], head["prefill_gpus"]) == \
        (totals["replicas"], totals["gpus"], totals["prefill_gpus"])
    assert head["monthly_cost_usd"] == d["monthly_cost_usd"]
    assert sum(r["gpus"] for r in parts) == totals["gpus"]
    assert sum(r["replicas"] for r in parts) == totals["replicas"]
    assert sum(r["prefill_gpus"] or 0 for r in parts) == totals["prefill_gpus"]
    assert sum(round((r["monthly_cost_usd"] or 0) * 100) for r in parts) == cents


@pytest.mark.parametrize("name", SHIPPED)
def test_candidate_counts_narrow_down(example_plan, name):
    plan, d = planned(example_plan, name)
    for product, c in d["candidates"].items():
        assert c["generated"] >= c["feasible"] >= c["after_pruning"], product
        assert c["pool_generated"] >= c["pool_feasible"] >= c["pool_after_pruning"], product


def test_pooled_gpus_counted_once_everywhere(capsys, tmp_path):
    """pooling-2chat: 8 shared h200 tp2 replicas; table, summary.csv and gpu_usage all say 16."""
    out = tmp_path / "out"
    code = main(["plan", str(EXAMPLES / "pooling-2chat.yaml"), str(EXAMPLES / "seed-chat-70b.yaml"),
                 "--out", str(out)])
    capsys.readouterr()
    assert code == 0
    import json

    d = json.loads((out / "pooling-2chat.json").read_text(encoding="utf-8"))
    assert d["totals"]["all_gpus"] == 16 and d["totals"]["replicas"] == 8
    assert sum(u["gpus"] for u in d["gpu_usage"].values()) == 16
    (pool,) = d["pools"]
    assert (pool["replicas"], pool["gpus"]) == (8, 16)
    assert [(p["name"], p["gpus"], p["shared_gpus"]) for p in d["products"]] == [
        ("consumer-chat", 0, 16), ("internal-assistant", 0, 16)]
    assert sum(p["monthly_cost_usd"] for p in d["products"]) == pytest.approx(pool["monthly_cost_usd"], abs=1e-9)
    with (out / "summary.csv").open(encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["scenario"] == "pooling-2chat"]
    assert [(r["product"], r["gpus"], r["pooled_in"]) for r in rows] == [
        ("", "16", ""), ("pool:consumer-chat+internal-assistant", "16", ""),
        ("consumer-chat", "0", "pool:consumer-chat+internal-assistant"),
        ("internal-assistant", "0", "pool:consumer-chat+internal-assistant"),
    ]
    assert sum(float(r["monthly_cost_usd"] or 0) for r in rows[1:]) == pytest.approx(float(rows[0]["monthly_cost_usd"]))
    code = main(["plan", str(EXAMPLES / "pooling-2chat.yaml")])
    text = capsys.readouterr().out
    assert code == 0
    assert table_total(text) == (16, round(d["monthly_cost_usd"]))
    assert "share 8 replicas (16 GPUs)" in text
    assert text.count("a replica costs") == 1  # the shared replicas are explained once


def test_why_quotes_the_reserved_price_paid(example_plan):
    plan, d = planned(example_plan, "peak-sized-30pct.yaml")
    (p,) = d["products"]
    assert "$3,650/month reserved at $2.50/GPU-hour" in p["why"]
    assert "3.9" not in p["why"]  # not the on-demand reference price
    assert p["prices_paid"] == {"reserved": {"usd_per_gpu_hour": 2.5,
                                             "source": "scenario options.reserved_gpu_hour_usd"}}
    assert "decode price paid (h100-sxm): reserved $2.50/GPU-hour" in table_text(d)
    # 2.50 $/GPU-hour x 2 GPUs x 730 h = 3,650 $/month per replica; 81 replicas
    assert d["monthly_cost_usd"] == pytest.approx(81 * 3650)


def test_why_lists_each_tier_used(example_plan):
    plan, d = planned(example_plan, "chat-diurnal-blend.yaml")
    (p,) = d["products"]
    for tier, paid in p["prices_paid"].items():
        assert f"at ${paid['usd_per_gpu_hour']:.2f}/GPU-hour" in p["why"], tier
    assert len(p["prices_paid"]) > 1


def test_small_paid_share_is_not_zero_percent(example_plan):
    plan, d = planned(example_plan, "chat-diurnal-blend.yaml")
    (p,) = d["products"]
    assert p["monthly_cost_breakdown_usd"]["api"] > 0 and 0 < p["api_fraction"] < 0.005
    shown = pct(p["api_fraction"])
    assert shown not in ("0%", "0.0%")
    text = table_text(d)
    assert f"api ({shown} of tokens)" in text and "(0% of tokens)" not in text
    assert f"takes {shown} of output tokens" in p["why"]


def test_pct_never_rounds_a_share_away():
    assert [pct(x) for x in (0.0, 1e-9, 0.0009, 0.001, 0.0036, 0.5, 0.9994, 1.0, None)] == [
        "0%", "<0.1%", "<0.1%", "0.1%", "0.4%", "50.0%", ">99.9%", "100%", "-"]


def test_rounded_parts_add_up():
    assert split_cents(100, [1, 1, 1]) == [34, 33, 33]
    assert split_cents(5010720, [45, 12]) == [3955832, 1054888]
    assert whole_dollars([0.6, 0.6, 0.6], 1.8) == [1, 1, 0]
    assert sum(whole_dollars([10.4, 20.4, 30.4], 61.2)) == 61


def test_unpriced_gpu_is_listed_in_the_table(capsys, tmp_path):
    gpus = (Path(__file__).resolve().parent.parent / "catalogs" / "data" / "gpus.yaml").read_text(encoding="utf-8")
    block = re.search(r"  - id: h100-sxm\n(?:    .*\n)+", gpus).group(0)
    (tmp_path / "extra.yaml").write_text("gpus:\n" + block.replace("id: h100-sxm", "id: h100-unpriced"), encoding="utf-8")
    scenario = (EXAMPLES / "seed-chat-70b.yaml").read_text(encoding="utf-8")
    scenario = scenario.replace("gpus: [h100-sxm]", "gpus: [h100-sxm, h100-unpriced]")
    assert "h100-unpriced" in scenario
    (tmp_path / "s.yaml").write_text(scenario, encoding="utf-8")
    code = main(["plan", str(tmp_path / "s.yaml"), "--catalog", str(tmp_path / "extra.yaml")])
    text = capsys.readouterr().out
    assert code == 0
    assert "no price for h100-unpriced: left out of the plan" in " ".join(text.split())

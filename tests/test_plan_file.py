"""A plan file read back by ``simulate``, ``report`` and ``deploy`` is checked field by field:
a hand-edited value (wrong type, out of range, NaN, unknown id, missing key, more GPUs than a
plan may run) is one line naming the file and the field, exit code 2, and nothing written."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import pytest

from fleetplan.main import main
from fleetplan.optimizer.explanation.plan_file import MAX_PLAN_GPUS, PlanFileError, read_plan, validate_plan

PLANS = Path(__file__).resolve().parent / "data" / "plans"


def stored(name: str) -> dict[str, Any]:
    """A shipped example's reference plan (a one-hour plan's is the plan file itself)."""
    return json.loads((PLANS / f"{name}.json").read_text(encoding="utf-8"))


def edited(name: str, edit: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    d = copy.deepcopy(stored(name))
    edit(d)
    return d


def chat(d: dict[str, Any]) -> dict[str, Any]:
    return d["products"][0]


SEED = "seed-chat-70b"
POOL = "seed-chat-70b-pool"
MIX = "mix-conversational"
POOLED = "pooling-2chat"

# (reference plan, edit, the whole message after "plan.json: ")
CASES: list[tuple[str, Callable[[dict[str, Any]], Any], str]] = [
    (SEED, lambda d: chat(d).update(replicas="five"), "products[chat].replicas: Input should be a valid integer (got 'five')"),
    (SEED, lambda d: chat(d).update(replicas=5.0), "products[chat].replicas: Input should be a valid integer (got 5.0)"),
    (SEED, lambda d: chat(d).update(replicas=-5),
     "products[chat].replicas: must be a whole number from 0 to 1e+06 replicas (a replica has at least one GPU and a "
     "plan at most a million) (got -5)"),
    (SEED, lambda d: chat(d).update(tp=0),
     "products[chat].tp: must be a whole number from 1 to 1024 GPUs (a tensor-parallel group beyond 1,024 GPUs spans "
     "no scale-up domain) (got 0)"),
    (SEED, lambda d: chat(d).update(batch=True), "products[chat].batch: Input should be a valid integer (got True)"),
    (SEED, lambda d: chat(d).update(step_time_ms=float("nan")),
     "products[chat].step_time_ms: Input should be a finite number (got nan)"),
    (SEED, lambda d: d.update(monthly_cost_usd=float("inf")), "monthly_cost_usd: Input should be a finite number (got inf)"),
    (SEED, lambda d: chat(d).update(model="llama-3.1-70x"),
     "products[chat].model: unknown model id 'llama-3.1-70x' (nearest valid choice: llama-3.1-70b); give the catalog "
     "the plan was made with (--catalog)"),
    (SEED, lambda d: chat(d).update(gpu="h100-sx"),
     "products[chat].gpu: unknown GPU id 'h100-sx' (nearest valid choice: h100-sxm); give the catalog the plan was "
     "made with (--catalog)"),
    (SEED, lambda d: chat(d).pop("context_tokens"),
     "products[chat] lacks context_tokens: plan the scenario again with this version of fleetplan (fleetplan plan "
     "SCENARIO.yaml --json --out PLAN.json)"),
    (SEED, lambda d: chat(d)["prefill"].pop("gpu"),
     "products[chat].prefill lacks gpu: plan the scenario again with this version of fleetplan (fleetplan plan "
     "SCENARIO.yaml --json --out PLAN.json)"),
    (SEED, lambda d: d.update(hours="<script>"), "hours: Input should be a valid integer (got '<script>')"),
    (SEED, lambda d: chat(d).update(name=7), "products[0].name: Input should be a valid string (got 7)"),
    (SEED, lambda d: chat(d).update(precision="fp6"), "products[chat].precision: Input should be 'bf16', 'fp8' or 'fp4' (got 'fp6')"),
    (SEED, lambda d: d.update(preset="defualt"), "preset: unknown preset (nearest valid choice: default) (got 'defualt')"),
    (SEED, lambda d: chat(d).update(replicas=10**12),
     "products[chat].replicas: must be a whole number from 0 to 1e+06 replicas (a replica has at least one GPU and a "
     "plan at most a million) (got 1000000000000)"),
    (SEED, lambda d: chat(d).update(max_ttft_ms={"p95": 300}),
     "products[chat].max_ttft_ms: percentile targets are p50, p90, p99 (got {'p95': 300})"),
    (SEED, lambda d: d["products"].append(copy.deepcopy(chat(d))), "products: the name 'chat' appears twice"),
    (SEED, lambda d: d.update(verification={"method": "replay", "hours": [12], "rounds": "two", "meets_targets": True,
                                            "ttft_ms": None, "tpot_ms": None, "missed_requests": 0}),
     "verification.rounds: Input should be a valid integer (got 'two')"),
    (SEED, lambda d: d.update(verification={"method": "replay", "hours": [12], "rounds": 1, "meets_targets": True,
                                            "ttft_ms": {"p50": "<script>", "p90": 1.0, "p99": 2.0},
                                            "tpot_ms": None, "missed_requests": 0}),
     "verification.ttft_ms.p50: Input should be a valid number (got '<script>')"),
    (POOL, lambda d: chat(d)["prefill"].update(tp=None), "products[chat].prefill: a prefill pool on h100-sxm needs tp"),
    (POOL, lambda d: chat(d)["prefill"].update(replicas=-1),
     "products[chat].prefill.replicas: must be a whole number from 0 to 1e+06 replicas (a replica has at least one "
     "GPU and a plan at most a million) (got -1)"),
    (MIX, lambda d: chat(d)["configurations"][0].update(tp=0),
     "products[chat].configurations[0].tp: must be a whole number from 1 to 1024 GPUs (a tensor-parallel group beyond "
     "1,024 GPUs spans no scale-up domain) (got 0)"),
    (MIX, lambda d: chat(d)["requests"][0]["configurations"][0].update(key="zzz"),
     "products[chat]: requests[0] names configuration 'zzz', which the product's configurations do not list"),
    (POOLED, lambda d: d["pools"][0].update(replicas="8"),
     "pools[pool:consumer-chat+internal-assistant].replicas: Input should be a valid integer (got '8')"),
    (POOLED, lambda d: chat(d).update(pooled_in="pool:x"),
     "products[consumer-chat].pooled_in: no pool 'pool:x' in pools (valid choices: pool:consumer-chat+internal-assistant)"),
    (SEED, lambda d: d["gpu_usage"].update({"x100": d["gpu_usage"]["h100-sxm"]}),
     "gpu_usage.x100: unknown GPU id 'x100' (nearest valid choice: h100-sxm); give the catalog the plan was made with "
     "(--catalog)"),
]


@pytest.mark.parametrize(("name", "edit", "message"), CASES, ids=lambda x: x if isinstance(x, str) else "")
def test_a_hand_edited_value_is_named(catalog, name, edit, message):
    with pytest.raises(PlanFileError) as err:
        validate_plan(edited(name, edit), "plan.json", catalog)
    from fleetplan.commands.io import error_text

    assert error_text(err.value) == f"plan.json: {message}"  # as a command shows it
    library = f"plan.json: {message}".replace("(--catalog)", "(catalog)").replace(
        "fleetplan plan SCENARIO.yaml --json --out PLAN.json", "fleetplan.plan(scenario).to_json()")
    assert str(err.value) == library  # as the library says it


@pytest.mark.parametrize("name", sorted(p.stem for p in PLANS.glob("*.json")))
def test_every_stored_plan_is_valid_and_given_back_unchanged(catalog, name):
    d = stored(name)
    assert validate_plan(d, "plan.json", catalog) is d and d == stored(name)


def _one_layout_gpu(d: dict[str, Any], replicas: int) -> None:
    chat(d).update(tp=1, pp=1, ep=1, dp_attention=1, replicas=replicas, gpus=replicas)


def test_a_plan_runs_at_most_a_million_gpus(catalog):
    assert validate_plan(edited(SEED, lambda d: _one_layout_gpu(d, MAX_PLAN_GPUS)), "p", catalog)
    with pytest.raises(PlanFileError, match="products\\[chat\\].replicas: must be a whole number from 0 to 1e\\+06"):
        validate_plan(edited(SEED, lambda d: _one_layout_gpu(d, MAX_PLAN_GPUS + 1)), "p", catalog)

    def two_halves(d: dict[str, Any]) -> None:
        _one_layout_gpu(d, MAX_PLAN_GPUS // 2 + 1)
        d["products"].append({**copy.deepcopy(chat(d)), "name": "chat-2"})

    with pytest.raises(PlanFileError) as err:
        validate_plan(edited(SEED, two_halves), "p", catalog)
    assert str(err.value) == ("p: its replica sets run 1,000,002 GPUs; a plan file may run at most 1,000,000 (a million "
                              "GPUs is several times the largest cluster built)")
    # a replica of tp2 x pp2 counts four GPUs
    assert validate_plan(edited(SEED, lambda d: chat(d).update(tp=2, pp=2, replicas=250_000)), "p", catalog)
    with pytest.raises(PlanFileError, match="^p: its replica sets run 1,000,004 GPUs"):
        validate_plan(edited(SEED, lambda d: chat(d).update(tp=2, pp=2, replicas=250_001)), "p", catalog)


def test_a_scenario_or_another_json_is_not_a_plan(catalog, tmp_path):
    with pytest.raises(PlanFileError, match="a scenario, not a plan; plan it first"):
        read_plan(tmp_path / "chat.yaml", catalog)
    other = tmp_path / "summary.json"
    other.write_text(json.dumps([{"scenario": "x"}]), encoding="utf-8")
    with pytest.raises(PlanFileError, match="summary.json: not a plan file \\(missing status, preset, hours, tiers, "
                                            "monthly_cost_usd, monthly_cost_breakdown_usd, totals, products, gpu_usage\\); "
                                            "write one with"):
        read_plan(other, catalog)
    with pytest.raises(PlanFileError, match="^p: not a plan file \\(missing gpu_usage\\)"):
        validate_plan(edited(SEED, lambda d: d.pop("gpu_usage")), "p", catalog)


BAD = {
    "replicas -5": (SEED, lambda d: chat(d).update(replicas=-5), "products[chat].replicas: must be a whole number"),
    "tp 0": (SEED, lambda d: chat(d).update(tp=0), "products[chat].tp: must be a whole number from 1"),
    "NaN cost": (SEED, lambda d: chat(d).update(monthly_cost_usd=float("nan")),
                 "products[chat].monthly_cost_usd: Input should be a finite number"),
    "NaN step": (POOL, lambda d: chat(d).update(step_time_ms=float("nan")),
                 "products[chat].step_time_ms: Input should be a finite number"),
}


@pytest.mark.parametrize("case", sorted(BAD))
@pytest.mark.parametrize("command", ["deploy", "report", "simulate"])
def test_every_command_refuses_a_bad_plan_in_one_line_and_writes_nothing(capsys, tmp_path, command, case):
    name, edit, message = BAD[case]
    src = tmp_path / "plan.json"
    src.write_text(json.dumps(edited(name, edit)), encoding="utf-8")  # NaN is written as JSON's NaN
    out = tmp_path / "out"
    out.mkdir()
    args = {"deploy": ["deploy", str(src), "--engine", "vllm", "--k8s", "--out", str(out)],
            "report": ["report", str(src), "--out", str(out / "r.html")],
            "simulate": ["simulate", str(src), "--requests", "100"]}[command]
    assert main(args) == 2
    o, e = capsys.readouterr()
    assert o == ""
    assert e.startswith(f"fleetplan: error: {src}: {message}") and e.count("\n") == 1
    assert list(out.iterdir()) == []


def test_simulate_refuses_more_replicas_than_it_models(capsys, tmp_path):
    from fleetplan.optimizer.simulation.simulate_plan import MAX_SIMULATED_REPLICAS

    src = tmp_path / "plan.json"
    src.write_text(json.dumps(edited(SEED, lambda d: _one_layout_gpu(d, MAX_SIMULATED_REPLICAS + 1))), encoding="utf-8")
    assert main(["simulate", str(src), "--requests", "100"]) == 2
    assert capsys.readouterr().err == ("fleetplan: error: plan: products[chat] runs 10,001 replicas in hour 0; "
                                       "simulate models each replica and takes at most 10,000\n")

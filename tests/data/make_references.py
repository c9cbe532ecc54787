"""Write the references the tests compare with: the plan of every shipped example
(``tests/data/plans/<example>.json``) and the rows of every constraint family of a small
problem (``tests/data/families.json``).

Run ``python tests/data/make_references.py`` after any change that is meant to change a plan
or the MIP; ``tests/test_reference_plans.py`` and ``tests/test_formulation.py`` compare with
these files, so each such change shows in review as a change of them. A product's ``hourly``
list is replaced by ``hourly_sha256`` (the digest of its JSON) to keep the files readable: a
change in any hour still changes the file. The table-width tests render the plans too.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fleetplan.catalogs import load_catalog
from fleetplan.models.presets import get_preset
from fleetplan.optimizer.mip.formulation import build_model
from fleetplan.optimizer.mip.linear import to_linear_problem
from fleetplan.optimizer.problem_data.problem import build_problem
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.explanation.results import plan_to_dict
from fleetplan.optimizer.traffic.scenario import load_scenario, parse_scenario

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent.parent / "examples"
PLANS = HERE / "plans"
FAMILIES = HERE / "families.json"

# One hour, three products on one GPU type: one with a capped API (a floor too) that may prefill
# colocated or on a pool, one on a pool, a request mix of two buckets with a capped API; three tiers with a spot cap, availability in total and
# for spot, 8-GPU instances, a site holding the reserved and on-demand GPUs: every constraint family has rows.
SMALL = {
    "preset": "default",
    "products": [
        {"name": "chat", "model": "llama-3.1-8b", "precision": "fp8", "peak_qps": 20, "input_tokens": 1000,
         "output_tokens": 300, "min_tokens_per_s_per_user": 20,
         "api": {"model": "llama-3.1-8b", "max_fraction": 0.5, "min_fraction": 0.05}},
        {"name": "rag", "model": "llama-3.1-8b", "precision": "fp8", "peak_qps": 5, "input_tokens": 4000,
         "output_tokens": 200, "min_tokens_per_s_per_user": 20, "prefill": "pool"},
        {"name": "mix", "model": "llama-3.1-8b", "precision": "fp8", "peak_qps": 10, "min_tokens_per_s_per_user": 20,
         "requests": [{"input_tokens": 500, "output_tokens": 200, "share": 0.7},
                      {"input_tokens": 6000, "output_tokens": 400, "share": 0.3}],
         "api": {"model": "llama-3.1-8b", "max_fraction": 0.5}},
    ],
    "options": {"gpus": ["h100-sxm"], "tp": [1], "batch": [32, 64], "tiers": ["reserved", "on_demand", "spot"],
                "spot_max_share": 0.2},
    "limits": {"gpu_availability": {"h100-sxm": {"total": 64, "spot": 8}}, "instance_gpus": 8},
    "sites": [{"name": "dc", "limit_mw": 0.2, "tiers": ["reserved", "on_demand"]}],
}


def reference(path: Path, plan: Any = None) -> dict[str, Any]:
    """The plan of one example, as the CLI makes it (with runner-ups), with hourly lists digested
    (``plan``: that plan, when already made)."""
    if plan is None:
        scenario, folder = load_scenario(path)
        catalog = load_catalog([folder / c for c in scenario.catalogs])
        plan = make_plan(scenario, catalog, folder=folder)
    d = plan_to_dict(plan)
    for p in d["products"]:
        hourly = p.pop("hourly", None)
        if hourly is not None:
            text = json.dumps(hourly, sort_keys=True, separators=(",", ":"))
            p["hourly_sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return d


def text(d: dict[str, Any]) -> str:
    """The stored form: indented, so a review shows each changed value on its own line."""
    return json.dumps(d, indent=1, ensure_ascii=False) + "\n"


def _sig(x: float) -> float:
    return float(f"{x:.9g}")


def family_rows() -> dict[str, list[list[Any]]]:
    """The exported rows of the :data:`SMALL` problem per constraint family: each row's name,
    bounds and coefficients by column name (9 significant digits)."""
    prob, _, _ = build_problem(parse_scenario(SMALL, "small"), load_catalog(), get_preset(SMALL["preset"]))
    lp = to_linear_problem(build_model(prob))
    out: dict[str, list[list[Any]]] = {}
    for i, family in enumerate(lp.row_families):
        coefs = {lp.col_names[j]: _sig(v) for j, v in zip(lp.row_index[i], lp.row_value[i])}
        bounds = [None if abs(b) == float("inf") else _sig(b) for b in (lp.row_lower[i], lp.row_upper[i])]
        out.setdefault(family, []).append([lp.row_names[i], *bounds, dict(sorted(coefs.items()))])
    return out


def main() -> None:
    """Plan every example and rewrite its reference file (removing files of deleted examples);
    rewrite the constraint families' rows."""
    FAMILIES.write_text(json.dumps(family_rows(), indent=1) + "\n", encoding="utf-8")
    PLANS.mkdir(exist_ok=True)
    names = set()
    for path in sorted(EXAMPLES.glob("*.yaml")):
        names.add(f"{path.stem}.json")
        (PLANS / f"{path.stem}.json").write_text(text(reference(path)), encoding="utf-8")
    for old in PLANS.glob("*.json"):
        if old.name not in names:
            old.unlink()


if __name__ == "__main__":
    main()

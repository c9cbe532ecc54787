"""Write the reference plan of every shipped example to ``tests/data/plans/<example>.json``.

Run ``python tests/data/make_example_plans.py`` after any change that is meant to change a
plan; ``tests/test_reference_plans.py`` compares every example's plan with its file, so each
change in a plan shows in review as a change of these files. A product's ``hourly`` list is
replaced by ``hourly_sha256`` (the digest of its JSON) to keep the files readable: a change
in any hour still changes the file. The table-width tests render these files too.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fleetplan.catalogs import load_catalog
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.results import plan_to_dict
from fleetplan.optimizer.scenario import load_scenario

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent.parent / "examples"
PLANS = HERE / "plans"


def reference(path: Path) -> dict[str, Any]:
    """The plan of one example, as the CLI makes it (with runner-ups), with hourly lists digested."""
    scenario, folder = load_scenario(path)
    catalog = load_catalog([folder / c for c in scenario.catalogs])
    d = plan_to_dict(make_plan(scenario, catalog, folder=folder))
    for p in d["products"]:
        hourly = p.pop("hourly", None)
        if hourly is not None:
            text = json.dumps(hourly, sort_keys=True, separators=(",", ":"))
            p["hourly_sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return d


def text(d: dict[str, Any]) -> str:
    """The stored form: indented, so a review shows each changed value on its own line."""
    return json.dumps(d, indent=1, ensure_ascii=False) + "\n"


def main() -> None:
    """Plan every example and rewrite its reference file; remove files of deleted examples."""
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

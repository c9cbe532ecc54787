"""Write ``example_plans.json``: the plan JSON of every shipped example, for the table-width tests.

Run ``python tests/data/make_example_plans.py`` after a change to the plan's JSON or to an
example. Each product's ``hourly`` list is left out (no table prints it).
"""

from __future__ import annotations

import json
from pathlib import Path

from fleetplan.catalogs import load_catalog
from fleetplan.optimizer.plan import make_plan
from fleetplan.optimizer.results import plan_to_dict
from fleetplan.optimizer.scenario import load_scenario

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent.parent / "examples"


def main() -> None:
    """Plan every example (with runner-ups, as the CLI does) and write the trimmed JSON."""
    plans = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        scenario, folder = load_scenario(path)
        catalog = load_catalog([folder / c for c in scenario.catalogs])
        d = plan_to_dict(make_plan(scenario, catalog, folder=folder))
        for p in d["products"]:
            p.pop("hourly", None)
        plans[path.name] = d
    (HERE / "example_plans.json").write_text(json.dumps(plans, separators=(",", ":"), ensure_ascii=False) + "\n",
                                             encoding="utf-8")


if __name__ == "__main__":
    main()

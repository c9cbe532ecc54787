"""Every shipped example's plan equals its stored reference (``tests/data/plans``).

Equal means the same structure exactly (keys, list lengths, types, every string, whole number and
flag: the configurations, replica counts and statuses) and every other number within
:data:`COST_TOLERANCE_USD` or :data:`REL_TOLERANCE` of its reference, so that the last digits of
a float a different CPU or library build rounds otherwise do not fail the test, while any plan
that moves does. A change that moves a plan fails here until the references are rewritten with
``python tests/data/make_references.py``; the rewritten files then show the change in review.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(DATA))
import make_references  # noqa: E402

EXAMPLES = sorted(make_references.EXAMPLES.glob("*.yaml"))


# Numbers equal within half a cent (costs are reported in cents) or a billionth of their size.
COST_TOLERANCE_USD = 0.005
REL_TOLERANCE = 1e-9


def _close(old: Any, new: Any) -> bool:
    """Two JSON values equal, a float (not a whole number) within the tolerances."""
    if isinstance(old, float) and isinstance(new, float):
        return abs(old - new) <= max(COST_TOLERANCE_USD, REL_TOLERANCE * max(abs(old), abs(new)))
    return bool(old == new) and type(old) is type(new)


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """Paths where two JSON values differ (in structure, or beyond the tolerances), with both values."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            if key not in old or key not in new:
                out.append(f"{path}.{key}: {old.get(key, '<absent>')!r} -> {new.get(key, '<absent>')!r}")
            else:
                out += differences(old[key], new[key], f"{path}.{key}")
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if _close(old, new) else [f"{path}: {old!r} -> {new!r}"]


def test_every_example_has_a_reference():
    stored = sorted(p.stem for p in make_references.PLANS.glob("*.json"))
    assert stored == sorted(p.stem for p in EXAMPLES)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_plan_equals_reference(path, example_plan):
    stored = json.loads((make_references.PLANS / f"{path.stem}.json").read_text(encoding="utf-8"))
    text = make_references.text(make_references.reference(path, example_plan(path.name)))
    planned = json.loads(text)
    cut = [s for s in planned.get("stopped_by_time_limit", []) if s not in stored.get("stopped_by_time_limit", [])]
    if cut:  # a machine too busy to finish within the example's own time limit planned something else
        pytest.skip(f"{path.stem}: stopped by the time limit here ({', '.join(cut)}), the reference was not")
    diff = differences(stored, planned)
    assert not diff, f"{len(diff)} values changed, first: " + "; ".join(diff[:8])


def test_the_comparison_catches_a_moved_plan_and_forgives_float_noise():
    plan = {"status": "optimal", "monthly_cost_usd": 296110.25, "products": [{"gpu": "h100-sxm", "replicas": 81,
                                                                                "mip_gap": 0.0}]}
    noisy = json.loads(json.dumps(plan))
    noisy["monthly_cost_usd"] += 1e-9
    assert differences(plan, noisy) == []
    for path, value in ((("monthly_cost_usd",), 296110.27), (("products", 0, "replicas"), 82),
                        (("products", 0, "gpu"), "h200-sxm"), (("products", 0, "replicas"), 81.0)):
        moved = json.loads(json.dumps(plan))
        target = moved
        for k in path[:-1]:
            target = target[k]
        target[path[-1]] = value
        assert len(differences(plan, moved)) == 1, path
    assert differences(plan, {**plan, "extra": 1}) == [".extra: '<absent>' -> 1"]
    assert differences(plan, {**plan, "products": []}) != []

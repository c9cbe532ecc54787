"""Every shipped example's plan equals its stored reference (``tests/data/plans``).

A change that moves a plan fails here until the references are rewritten with
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


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """Paths where two JSON values differ, with both values."""
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
    return [] if old == new and type(old) is type(new) else [f"{path}: {old!r} -> {new!r}"]


def test_every_example_has_a_reference():
    stored = sorted(p.stem for p in make_references.PLANS.glob("*.json"))
    assert stored == sorted(p.stem for p in EXAMPLES)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_plan_equals_reference(path, example_plan):
    stored = json.loads((make_references.PLANS / f"{path.stem}.json").read_text(encoding="utf-8"))
    text = make_references.text(make_references.reference(path, example_plan(path.name)))
    diff = differences(stored, json.loads(text))
    assert not diff, f"{len(diff)} values changed, first: " + "; ".join(diff[:8])
    assert text == make_references.text(stored)

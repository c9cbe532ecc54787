"""What-if edits of a scenario: a field named by a dotted path set to a new value.

A path names a field as the scenario file writes it: ``products.chat.peak_qps`` (a product by
its name, or ``*`` for every product), ``options.gpu_hour_usd.h100-sxm``, ``limits.monthly_budget_usd``,
``preset``. The edited document is validated again as a scenario, so a value out of range fails
with the same message as in a file.

Owns paths and edits only; it plans nothing (see :mod:`.sweep` and :mod:`.sensitivity`)."""

from __future__ import annotations

import re

from pathlib import Path
from typing import Any

from fleetplan.catalogs.loader import InputError, nearest
from fleetplan.optimizer.traffic.scenario import Limits, Options, Product, Scenario, ScenarioError, parse_scenario

# The sections a path may start with, and the fields each holds.
SECTIONS: dict[str, tuple[str, ...]] = {
    "products": tuple(Product.model_fields),
    "options": tuple(Options.model_fields),
    "limits": tuple(Limits.model_fields),
    "preset": (),
}


class PathError(InputError):
    """A field path (a sweep's ``axes``, an edit) that names no field of the scenario."""


def _marked(where: str) -> tuple[str, ...]:
    """The parameters ``where`` marks as ```name``` (see :class:`~fleetplan.catalogs.files.InputError`)."""
    return tuple(re.findall(r"`(\w+)`", where))


def check_path(scenario: Scenario, path: str, flag: str = "`axes`") -> tuple[str, ...]:
    """``path`` split into its parts, after checking that each names something in ``scenario``:
    the section, the product (or ``*``) and the field; a map's key (a GPU id) is left to the
    scenario's own validation. Raises :class:`PathError` naming the nearest valid choice."""
    parts = tuple(path.split("."))
    head, marks = parts[0], _marked(flag)
    if head not in SECTIONS:
        raise PathError(f"{flag} {path}: unknown section {head!r}{nearest(head, SECTIONS)}", parameters=marks)
    if head == "preset":
        if len(parts) != 1:
            raise PathError(f"{flag} {path}: preset has no fields (use preset=seed,default)", parameters=marks)
        return parts
    rest = parts[1:]
    if head == "products":
        names = [p.name for p in scenario.products]
        if not rest or (rest[0] != "*" and rest[0] not in names):
            got = rest[0] if rest else ""
            raise PathError(f"{flag} {path}: unknown product {got!r}{nearest(got, [*names, '*'])}", parameters=marks)
        rest = rest[1:]
    if not rest or rest[0] not in SECTIONS[head]:
        got = rest[0] if rest else ""
        raise PathError(f"{flag} {path}: unknown field {got!r} of {head}{nearest(got, SECTIONS[head])}", parameters=marks)
    if len(rest) > 2:
        raise PathError(f"{flag} {path}: too many parts (a field, or a field and one key such as a GPU id)", parameters=marks)
    return parts


def _put(doc: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    """Set ``doc[k0][k1]... = value``, creating maps on the way."""
    for k in keys[:-1]:
        doc = doc.setdefault(k, {})
    doc[keys[-1]] = value


def apply_edits(scenario: Scenario, edits: dict[str, Any], where: str = "`axes`", folder: Path | None = None
                ) -> Scenario:
    """``scenario`` with every ``path: value`` of ``edits`` applied (paths checked by
    :func:`check_path`), validated again; an invalid value raises the scenario's one-line error.
    ``folder`` is the scenario's own (where its traces and histograms are read; the current one
    by default)."""
    doc = scenario.model_dump(mode="json", exclude_unset=True)
    for path, value in edits.items():
        parts = check_path(scenario, path, where)
        if parts[0] == "preset":
            doc["preset"] = value
        elif parts[0] == "products":
            for p in doc["products"]:
                if parts[1] in ("*", p["name"]):
                    _put(p, parts[2:], value)
        else:
            _put(doc, parts, value)
    try:
        return parse_scenario(doc, where, folder)
    except ScenarioError as exc:  # "axes.products[chat].peak_qps: ..." reads "axes: products[chat]..."
        raise PathError(str(exc).replace(f"{where}.", f"{where}: ", 1), parameters=_marked(where)) from None

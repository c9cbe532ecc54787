"""Demand over time: hourly profiles (a day or a week) read from CSV.

A profile has a header ``hour,multiplier`` (multiples of the product's ``peak_qps``) or
``hour,qps`` (absolute), then 24 or 168 rows with hours 0..N-1 in order. A product without a
profile runs at its peak all month. A product with a ``trace`` takes its profile from the trace
(:mod:`fleetplan.optimizer.traffic.trace`; a trace of at most an hour is a product at its peak). In one scenario every product is put on the same horizon:
one hour (no profiles), a day (24) or a week (168; a daily profile repeats seven times).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from fleetplan.catalogs import fields as F
from fleetplan.catalogs.fields import echo
from fleetplan.catalogs.loader import InputError, read_text
from fleetplan.optimizer.traffic.scenario import Product
from fleetplan.optimizer.traffic.trace import trace_fields

VALID_LENGTHS = (24, 168)
VALUE_RANGES: dict[str, F.Range] = {"multiplier": F.PROFILE_MULTIPLIER, "qps": F.QPS}


def read_demand_profile(path: Path, where: str) -> tuple[str, list[float]]:
    """(kind, values) from a profile CSV; ``kind`` is ``multiplier`` or ``qps``."""
    text = read_text(path, "demand profile", InputError, f"{where}: ")
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if not rows:
        raise InputError(f"{path}: empty demand profile")
    header = [c.strip() for c in rows[0]]
    if header not in (["hour", "multiplier"], ["hour", "qps"]):
        raise InputError(f"{path}: line 1: header must be 'hour,multiplier' or 'hour,qps' (got {','.join(header)!r})")
    values: list[float] = []
    valid = VALUE_RANGES[header[1]]
    for line_no, row in enumerate(rows[1:], start=2):
        if len(row) != 2:
            raise InputError(f"{path}: line {line_no}: expected 2 columns, got {len(row)}")
        try:
            hour = int(row[0])
        except ValueError:
            raise InputError(f"{path}: line {line_no}: hour must be a whole number (got {echo(row[0].strip())})") from None
        if hour != len(values):
            raise InputError(f"{path}: line {line_no}: hour {hour} out of order (expected {len(values)})")
        try:
            values.append(valid.check(row[1].strip(), header[1]))
        except ValueError as exc:
            raise InputError(f"{path}: line {line_no}: {exc}") from None
    if len(values) not in VALID_LENGTHS:
        raise InputError(f"{path}: {len(values)} hourly rows; a profile has 24 (a day) or 168 (a week)")
    return header[1], values


def horizon(lengths: list[int]) -> int:
    """Hours of the common planning horizon for profiles of these lengths (1 if none)."""
    if not lengths:
        return 1
    return 168 if 168 in lengths else 24


def hourly_qps(products: list[Product], folder: Path) -> dict[str, list[float]]:
    """Queries per second of every product in each hour of the common horizon (:func:`horizon`);
    each product's profile file is read once."""
    profiles = {p.name: read_demand_profile(folder / p.demand_profile, f"products[{p.name}].demand_profile")
                for p in products if p.demand_profile is not None}
    profiles.update({p.name: ("multiplier", profile) for p in products if p.trace is not None
                     and len(profile := trace_fields(p, folder)["profile"]) > 1})
    hours = horizon([len(values) for _, values in profiles.values()])
    return {p.name: _qps(p, profiles.get(p.name), hours) for p in products}


def profile_qps(product: Product, kind: str, values: list[float]) -> list[float]:
    """``product``'s queries per second in each hour of one profile (``kind`` ``multiplier`` or
    ``qps``, as :func:`read_demand_profile` returns), its busiest hour checked as a scenario's is."""
    return _qps(product, (kind, values), len(values))


def _qps(product: Product, profile: tuple[str, list[float]] | None, hours: int) -> list[float]:
    """``product``'s queries per second in each of ``hours`` from its profile (peak all along without one)."""
    if profile is None:
        return [product.peak_qps] * hours
    kind, values = profile
    qps = [v * product.peak_qps for v in values] if kind == "multiplier" else values
    top = max(qps)
    if not F.QPS.contains(top):
        raise InputError(f"products[{product.name}].demand_profile: peak_qps x multiplier reaches {top:g} queries per "
                         f"second; the busiest hour must be {F.QPS.describe()} ({F.QPS.reason})")
    return qps * (hours // len(qps))

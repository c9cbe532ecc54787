"""Request-size histograms read from CSV: the ``requests:`` of a product given as a file.

A histogram has a header naming ``input_tokens``, ``output_tokens`` and either ``share`` (the
bucket's share of requests) or ``count`` (requests in the bucket, turned into shares), in any
order, then one row per bucket. Owns reading and checking such a file; it plans nothing."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from fleetplan.optimizer.common.defaults import MAX_REQUEST_BUCKETS, SHARE_TOLERANCE
from fleetplan.catalogs.fields import echo
from fleetplan.catalogs.loader import InputError, read_text


SIZE_COLUMNS = ("input_tokens", "output_tokens")
WEIGHT_COLUMNS = ("share", "count")


def _header(path: Path, row: list[str]) -> tuple[dict[str, int], str]:
    """Column index of each size column and the weight column's name."""
    names = [c.strip() for c in row]
    weight = [w for w in WEIGHT_COLUMNS if w in names]
    missing = [c for c in SIZE_COLUMNS if c not in names]
    if missing or len(weight) != 1:
        raise InputError(f"{path}: line 1: header must name input_tokens, output_tokens and one of share or count "
                         f"(got {','.join(names)!r})")
    return {c: names.index(c) for c in (*SIZE_COLUMNS, weight[0])}, weight[0]


def _number(path: Path, line: int, column: str, text: str, whole: bool) -> float:
    """One cell as a positive number (a whole one for token counts)."""
    try:
        x = float(text)
    except ValueError:
        raise InputError(f"{path}: line {line}: {column} must be a number (got {echo(text.strip())})") from None
    if not x > 0 or (whole and x != int(x)):
        kind = "a whole number of tokens, at least 1" if whole else "above 0"
        raise InputError(f"{path}: line {line}: {column} must be {kind} (got {echo(text.strip())})")
    return x


def read_histogram(path: Path, where: str) -> list[dict[str, Any]]:
    """Buckets ``{input_tokens, output_tokens, share}`` from a histogram CSV (``count`` columns
    become shares of the total); the product's own validation then checks the shares' sum."""
    text = read_text(path, "request histogram", InputError, f"{where}: ")
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if len(rows) < 2:
        raise InputError(f"{path}: a request histogram needs a header and at least one bucket ({where})")
    if len(rows) - 1 > MAX_REQUEST_BUCKETS:
        raise InputError(f"{path}: {len(rows) - 1:,} buckets; a request mix may have at most {MAX_REQUEST_BUCKETS} "
                         f"(each bucket is planned on its own): merge neighbouring sizes ({where})")
    cols, weight = _header(path, rows[0])
    buckets: list[dict[str, Any]] = []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(rows[0]):
            raise InputError(f"{path}: line {line}: expected {len(rows[0])} columns, got {len(row)}")
        cell = {c: _number(path, line, c, row[i], c in SIZE_COLUMNS) for c, i in cols.items()}
        buckets.append({"input_tokens": int(cell["input_tokens"]), "output_tokens": int(cell["output_tokens"]),
                        "share": cell[weight]})
    if weight == "count":
        total = sum(b["share"] for b in buckets)
        buckets = [{**b, "share": b["share"] / total} for b in buckets]
    return buckets

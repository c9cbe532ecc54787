"""Every schema problem of a catalog entry in one short line: owns wording only, no reading or validating.

A user catalog entry with several problems is reported whole (missing fields listed
together, then unknown fields, then wrong values), so it can be corrected in one go. Echoed
values and the whole line are capped, so a huge or repeated value cannot flood the terminal.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from fleetplan.catalogs.fields import echo
from fleetplan.catalogs.files import MAX_MESSAGE_CHARS  # longest error line, in characters

def entry_problems(err: ValidationError, where: str, schema: Any = None) -> str:
    """``where: missing a, b; unknown field c (nearest valid choice: d); e: must be ... (got x)``:
    every problem pydantic found in one entry, on one line. A single problem reads
    ``where.field: message``, as every other input error does."""
    from fleetplan.catalogs.loader import _model_at, nearest

    missing: list[str] = []
    unknown: list[tuple[str, str]] = []  # (field, message)
    wrong: list[tuple[str, str]] = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "missing":
            missing.append(loc)
        elif e["type"] == "extra_forbidden":
            model = _model_at(schema, tuple(e["loc"][:-1])) if schema is not None else None
            hint = nearest(str(e["loc"][-1]), model.model_fields) if model is not None else ""
            unknown.append((loc, f"unknown field{hint}"))
        else:
            msg = e["msg"].removeprefix("Value error, ")
            got = e.get("input")
            got_txt = "" if isinstance(got, dict) or "(got " in msg else f" (got {echo(got)})"
            wrong.append((loc, f"{msg}{got_txt}"))
    if len(missing) + len(unknown) + len(wrong) == 1:
        loc, msg = (missing[0], "Field required") if missing else (unknown or wrong)[0]
        return f"{where}.{loc}: {msg}" if loc else f"{where}: {msg}"
    parts = ([f"missing {', '.join(missing)}"] if missing else [])
    parts += [f"{msg.replace('unknown field', f'unknown field {loc}', 1)}" for loc, msg in unknown]
    parts += [f"{loc}: {msg}" if loc else msg for loc, msg in wrong]
    return f"{where}: {'; '.join(parts)}"


def join_problems(problems: list[str]) -> str:
    """The problems of several entries on one line, capped at ``MAX_MESSAGE_CHARS``."""
    text = ""
    for i, p in enumerate(problems):
        candidate = p if not text else f"{text} | {p}"
        if len(candidate) > MAX_MESSAGE_CHARS and text:
            return f"{text} | and {len(problems) - i} more entries with problems"
        text = candidate
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS] + "..."
    return text

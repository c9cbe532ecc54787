"""One escaping rule per output kind: shell, terminal, HTML, CSV, chart text, Kubernetes names
and file names.

Names and values in a plan come from people and files fleetplan does not control (a catalog's
``hf_repo``, a product name, a ``config.json`` read by ``add-model``, a hand-edited plan file),
and they end up in files other programs run or render. Every writer passes such text through
the rule of its output kind here and never formats it into that output itself; text this code
builds from its own constants is marked as such (:class:`ShellExpansion`, :class:`Markup`).

Owns these rules only: it decides nothing about a plan, prints nothing and imports nothing of
the planner.
"""

from __future__ import annotations

import hashlib
import html
import os
import re
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "CSV_FORMULA_STARTS", "DNS_LABEL_MAX_CHARS", "Markup", "ShellExpansion", "chart_text", "confined", "csv_cell",
    "dns_label", "for_terminal", "hash_suffix", "html_text", "label_value", "printable", "render", "rich_text", "shell_comment",
    "shell_join", "shell_word", "terminal", "unique_names",
]

# ---------------------------------------------------------------- printable text
# Characters that move the cursor, end a line or start an escape sequence when written to a
# terminal or a shell comment: C0 and C1 controls and DEL (unicode category Cc), the line and
# paragraph separators, and the bidirectional overrides that reorder what a line shows.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(m: re.Match[str]) -> str:
    """One unprintable character as Python writes it in a string literal (``\\n``, ``\\x1b``, ``\\u202e``)."""
    c = m.group(0)
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def printable(text: Any) -> str:
    """``text`` with every control character shown escaped (``\\n``, ``\\x1b``), so it stays on
    one line and cannot send an escape sequence: what a terminal or a comment may show of user text."""
    return _UNPRINTABLE.sub(_escape_char, str(text))


# ---------------------------------------------------------------- terminal
def terminal(text: Any) -> str:
    """A line for ``print`` to a terminal: control characters escaped (:func:`printable`)."""
    return printable(text)


def rich_text(text: Any) -> str:
    """User text for a rich console: control characters escaped and ``[`` not read as markup."""
    from rich.markup import escape

    return escape(printable(text))


def for_terminal(data: Any) -> Any:
    """``data`` (a plan or any JSON-like value) with every string, keys included, made
    :func:`rich_text`: names from the user's files print as written (a product called
    ``chat[/b]`` is not a closing tag) and none sends control characters."""
    if isinstance(data, str):
        return rich_text(data)
    if isinstance(data, dict):
        return {for_terminal(k): for_terminal(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(for_terminal(v) for v in data)
    return data


# ---------------------------------------------------------------- shell
class ShellExpansion(str):
    """A shell word this code builds from its own constants for the shell to expand where it
    runs (``$NODE_RANK``, ``$((NODE_RANK * 4))``): written inside double quotes. Only variable
    references, arithmetic and address punctuation are accepted, so no user text can be one."""

    _ALLOWED = re.compile(r"[A-Za-z0-9_$(){}*+:. -]*")

    def __new__(cls, text: str) -> ShellExpansion:
        if not cls._ALLOWED.fullmatch(text):
            raise ValueError(f"not a shell expansion built from constants: {text!r}")
        return super().__new__(cls, text)


def shell_word(word: Any) -> str:
    """One word of a command: a :class:`ShellExpansion` double-quoted (the shell expands it),
    anything else single-quoted with :func:`shlex.quote` (the shell passes it as written)."""
    if isinstance(word, ShellExpansion):
        return f'"{word}"'
    return shlex.quote(str(word))


def shell_join(words: Iterable[Any]) -> str:
    """``words`` as one command line (:func:`shell_word` each)."""
    return " ".join(shell_word(w) for w in words)


def shell_comment(text: Any) -> str:
    """A comment line of a shell script: ``# `` and ``text`` with control characters escaped, so a
    line break in a name cannot end the comment and start a command."""
    return "# " + printable(text)


# ---------------------------------------------------------------- HTML
class Markup(str):
    """HTML this code wrote from its own templates and escaped values: inserted as it is."""


def html_text(value: Any) -> str:
    """``value`` (any type: a number read from a plan file may be a string) as HTML text, quotes
    included, so it is safe in an element and in a quoted attribute; :class:`Markup` is kept."""
    return value if isinstance(value, Markup) else html.escape(str(value), quote=True)


def render(template: str, *values: Any, **named: Any) -> Markup:
    """``template`` (this code's HTML, ``str.format`` fields) with every value escaped by
    :func:`html_text` unless it is :class:`Markup`: the one way the report puts a value in its page."""
    return Markup(template.format(*(html_text(v) for v in values),
                                  **{k: html_text(v) for k, v in named.items()}))


# ---------------------------------------------------------------- CSV
# Cell starts a spreadsheet reads as a formula (OWASP, CSV injection): such a text cell gets a
# leading apostrophe, which spreadsheets show as text and do not display.
CSV_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A CSV cell: None empty; a text cell that a spreadsheet would read as a formula prefixed
    with ``'``. Numbers (a negative one included) are written as numbers, unchanged."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(CSV_FORMULA_STARTS):
        return "'" + value
    return value


# ---------------------------------------------------------------- charts
def chart_text(text: Any) -> str:
    """A label matplotlib draws as written: control characters escaped and every ``$`` escaped,
    so a name such as ``premium $\\foo$ tier`` is not parsed as mathtext (which fails on it)."""
    return printable(text).replace("$", r"\$")


# ---------------------------------------------------------------- names
# An RFC 1123 label (Kubernetes object names, pod host names, label values) is at most 63 characters.
DNS_LABEL_MAX_CHARS = 63
# Hex digits of the SHA-256 of the original name appended to a name that had to change: the
# changed name stays tied to its original and two originals that map to the same text differ.
HASH_CHARS = 8
# Put before a derived name that would not start with a letter (fleetplan's initials).
NAME_PREFIX = "fp"


def hash_suffix(text: str, salt: str = "") -> str:
    """``HASH_CHARS`` hex digits of the SHA-256 of ``text`` (and ``salt``): stable across runs."""
    return hashlib.sha256((text + salt).encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]


def _derived(text: str, kept: str, trim: str, salt: str = "") -> str:
    """``kept`` (what survives of ``text``) when nothing changed, else ``kept`` cut to leave room
    for ``-`` and :func:`hash_suffix` of ``text`` (``trim``: characters that may not end it)."""
    if kept == text and len(kept) <= DNS_LABEL_MAX_CHARS and kept and not salt:
        return kept
    head = kept[:DNS_LABEL_MAX_CHARS - HASH_CHARS - 1].rstrip(trim)
    suffix = hash_suffix(text, salt)
    return f"{head}-{suffix}" if head else suffix


def dns_label(text: Any, salt: str = "") -> str:
    """A valid DNS label for ``text`` (RFC 1035, so also RFC 1123): lower-case letters, digits and
    ``-``, starting with a letter (``fp-`` is put before one that does not: a LeaderWorkerSet's
    Service needs it) and ending with a letter or digit, at most 63 characters; a name that had
    to change (or a ``salt`` given to tell apart a clash) ends in ``-`` and a hash of the
    original. Used for Kubernetes object names and label values and the file names derived from
    user names (it holds no separator, no dot and no control character)."""
    text = str(text)
    kept = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if not kept[:1].isalpha():
        kept = f"{NAME_PREFIX}-{kept}".rstrip("-")
    return _derived(text, kept, "-", salt)


def label_value(text: Any, salt: str = "") -> str:
    """A valid Kubernetes label value for ``text``: letters, digits, ``-``, ``_`` and ``.``,
    starting and ending with a letter or digit, at most 63 characters (a hash when changed)."""
    text = str(text)
    kept = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", re.sub(r"[^A-Za-z0-9_.-]+", "-", text))
    return _derived(text, kept, "-_.", salt)


def unique_names(originals: Iterable[str], derive: Callable[..., str]) -> list[str]:
    """The derived name of each of ``originals``, in order, every one different (two equal
    originals included): a name already taken is derived again with a salt (``derive(text, salt=...)``)."""
    out: list[str] = []
    for text in originals:
        name, n = derive(text), 0
        while name in out:
            n += 1
            name = derive(text, salt=f"#{n}")
        out.append(name)
    return out


def confined(directory: Path, name: str) -> Path | None:
    """``directory / name`` with links resolved when it is a file directly in ``directory``
    (also resolved), else None: ``name`` has a separator or ``..``, or a link there points out."""
    if not name or name in (".", "..") or "/" in name or (os.altsep and os.altsep in name) or "\0" in name:
        return None
    home = Path(os.path.realpath(directory))
    target = Path(os.path.realpath(directory / name))
    return target if target.parent == home else None

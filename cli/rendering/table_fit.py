"""Terminal width and tables that fit it: owns fitting a table to the width only, never what a table says.

A table is printed at its natural width when that fits. When it does not, columns give way
in a stated order: a column either stacks beneath another (the two share one column, one
value above the other, and the header names both), or is left out when what it says is
printed elsewhere too. When nothing is left to give way, the
table is printed as a list, one row per paragraph of ``header value`` pairs. Cells are
never wrapped inside a table and never cut short with an ellipsis.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

# Width when COLUMNS is unusable and the terminal cannot be asked.
FALLBACK_COLUMNS = 80
# Width for output that goes to a pipe or a file without COLUMNS: wide enough for the plan
# table of every shipped example, narrow enough to read in a pager or an editor.
PIPE_COLUMNS = 100
# Below this, nothing useful fits on a line; a smaller COLUMNS is raised to it.
MIN_COLUMNS = 40


def _columns_env() -> int | None:
    """COLUMNS as a positive whole number, or None when unset, empty, not a number or not positive."""
    text = os.environ.get("COLUMNS", "").strip()
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value > 0 else None


def terminal_width(stream: Any = None) -> int:
    """The width to lay output out in, in character cells.

    COLUMNS wins when it is a positive whole number. Otherwise a terminal is asked for its
    width (80 when it cannot say) and a pipe or file gets ``PIPE_COLUMNS``. The result is at
    least ``MIN_COLUMNS``.
    """
    env = _columns_env()
    if env is not None:
        return max(MIN_COLUMNS, env)
    stream = sys.stdout if stream is None else stream
    try:
        is_tty = bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        is_tty = False
    if not is_tty:
        return PIPE_COLUMNS
    try:
        cols = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        cols = shutil.get_terminal_size((FALLBACK_COLUMNS, 24)).columns
    return max(MIN_COLUMNS, cols if cols > 0 else FALLBACK_COLUMNS)


@dataclass(frozen=True)
class Col:
    """One column of a fitted table.

    ``give_way`` orders the columns that make room when the table is too wide (1 first; 0
    never). A column with ``under`` stacks beneath that column when it gives way; one without
    is left out (only for what is also printed elsewhere, such as errors on stderr). In the list
    layout the ``lead`` columns (else the first) begin each row's paragraph.
    """

    header: str
    justify: Literal["left", "right"] = "right"
    give_way: int = 0
    under: str | None = None
    short: str | None = None
    lead: bool = False

    @property
    def label(self) -> str:
        """The header on one line (list layout)."""
        return " ".join(self.header.split())

    @property
    def stacked_label(self) -> str:
        """The header on one line when stacked with others: ``short`` if given."""
        return self.short or self.label


Row = Sequence[str] | None  # None: a section break between groups of rows


def _stack(cells: list[str]) -> str:
    """Cells shown one above the other; a row whose stacked cells are all empty keeps one line."""
    if not any(cells[1:]):
        return cells[0]
    return "\n".join(cells)


def _build(title: str | None, cols: Sequence[Col], rows: Sequence[Row], groups: list[list[int]],
           title_justify: str) -> Any:
    """The rich table with each group of column indices shown as one (stacked) column."""
    from rich.table import Table

    table = Table(title=title, title_justify=title_justify)  # type: ignore[arg-type]
    depth = max(len(g) for g in groups)
    for group in groups:
        head = cols[group[0]]
        if depth == 1:
            header = head.header
        else:  # one label per stacked line, top-aligned like the cells (rich bottom-aligns headers)
            labels = [cols[i].stacked_label for i in group]
            header = "\n".join(labels + [" "] * (depth - len(labels)))
        table.add_column(header, justify=head.justify, overflow="fold", vertical="top")
    for row in rows:
        if row is None:
            if table.row_count:
                table.add_section()
            continue
        table.add_row(*(_stack([row[i] for i in group]) for group in groups))
    return table


def _natural_width(console: Any, table: Any) -> int:
    """The width ``table`` takes when no cell is wrapped."""
    return int(console.measure(table, options=console.options.update_width(1_000_000)).maximum)


def fit_table(console: Any, title: str | None, cols: Sequence[Col], rows: Sequence[Row],
              title_justify: str = "center") -> Any:
    """A renderable of ``rows`` under ``cols`` that fits ``console.width`` without wrapping a cell.

    Columns give way in ``give_way`` order (stacking beneath their ``under`` column while it
    is shown); when the most stacked table is still too wide the rows are printed as a list.
    """
    names = [c.header for c in cols]
    groups: list[list[int]] = [[i] for i in range(len(cols))]
    order = sorted((i for i, c in enumerate(cols) if c.give_way), key=lambda i: cols[i].give_way)
    table = _build(title, cols, rows, groups, title_justify)
    for i in order:
        if _natural_width(console, table) <= console.width:
            return table
        if not any(g[0] == i for g in groups):
            continue  # already stacked, with the column it sat beneath
        target = cols[i].under
        home = next((g for g in groups if target is not None and names[g[0]] == target), None)
        if home is None and target is not None:
            continue  # its column is gone: nothing to stack beneath
        moving = next(g for g in groups if g[0] == i)  # with whatever is stacked beneath it
        groups = [g for g in groups if g[0] != i]
        if home is not None:
            home.extend(moving)
        table = _build(title, cols, rows, groups, title_justify)
    if _natural_width(console, table) <= console.width:
        return table
    return as_list(title, cols, rows)


def as_list(title: str | None, cols: Sequence[Col], rows: Sequence[Row]) -> Any:
    """The rows as paragraphs: the first non-empty cells lead, the rest follow as ``header value``."""
    from rich.console import Group
    from rich.text import Text

    leads = [i for i, c in enumerate(cols) if c.lead] or [0]
    lines: list[Any] = []
    if title:
        lines.append(Text.from_markup(f"[bold]{title}[/bold]"))
    for row in rows:
        if row is None:
            continue
        lead = [i for i in leads if row[i].strip()]
        rest = [f"{cols[i].label} {row[i].strip()}" for i in range(len(cols))
                if i not in lead and Text.from_markup(row[i]).plain.strip() not in ("", "-")]
        head = " · ".join(row[i].strip() for i in lead)
        text = Text.from_markup(("  " if not row[0].strip() else "") + head + (": " if head and rest else ""))
        text.append_text(Text.from_markup(", ".join(rest)))
        lines.append(text)
    return Group(*lines)

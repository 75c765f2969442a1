"""The tables `strace -c` (and `-C`, `-w`, `-U columns`) print, found anywhere in a text.

Columns are mapped by their header names, so the classic layout
(`% time  seconds  usecs/call  calls  errors syscall`) and `-U` orders such as
`syscall calls errors seconds ...` both work. A blank `errors` cell means 0; the `total` row is
dropped. Whitespace may be mangled (tables copied from blog posts): cells are split on blanks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from statstorm.errors import UsageError
from statstorm.results.trace.vocabulary import CountRow

FIX = "record it with strace -f -tt -T -y -o FILE or give an strace -c table"

# Header words strace uses (`-U` names in parentheses): % time (time-percent), seconds
# (total-time), usecs/call (avg-time), shortest (min-time), longest (max-time), calls,
# errors, syscall (name).
_KNOWN = frozenset({"%time", "seconds", "usecs/call", "calls", "errors", "syscall",
                    "shortest", "longest", "min", "max", "avg", "total", "time"})
_NAME = re.compile(r"[A-Za-z_?][\w?]*")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SEPARATOR = re.compile(r"\s*-{3,}[\s-]*")


@dataclass(frozen=True)
class SummaryTable:
    """A table's column names in order, e.g. ("%time", "seconds", ..., "syscall")."""

    columns: tuple[str, ...]


def table_header(line: str) -> tuple[str, ...] | None:
    """The column names if `line` is an `strace -c` header, else None."""
    s = line.strip().lower().replace("% time", "%time").replace("syscall name", "syscall")
    words = tuple(s.split())
    if "calls" not in words or "syscall" not in words or not set(words) <= _KNOWN:
        return None
    return words


def summary_row(table: SummaryTable, line: str) -> CountRow | None:
    """One data row (the `total` row included) of `table`, or None if `line` is not one."""
    tokens = line.split()
    if len(tokens) < 2:
        return None
    first_name = table.columns[0] == "syscall"
    name = tokens[0] if first_name else tokens[-1]
    numbers = tokens[1:] if first_name else tokens[:-1]
    if not _NAME.fullmatch(name) or not all(_NUMBER.fullmatch(t) for t in numbers):
        return None
    columns = [c for c in table.columns if c != "syscall"]
    if len(numbers) == len(columns) - 1 and "errors" in columns:
        numbers.insert(columns.index("errors"), "0")  # strace leaves 0 errors blank
    if len(numbers) != len(columns):
        if name != "total":  # old strace leaves usecs/call blank on the total row
            return None
        return CountRow(name, 0, 0, 0.0)
    cells = dict(zip(columns, numbers))
    try:
        return CountRow(name, int(cells.get("calls", "0")), int(cells.get("errors", "0")),
                        float(cells.get("seconds", "0")))
    except ValueError:
        return None


def parse_summaries(text: str, *, keep_total: bool = False) -> list[list[CountRow]]:
    """Every `strace -c` table in `text`, in order (surrounding prose is ignored)."""
    tables: list[list[CountRow]] = []
    table: SummaryTable | None = None
    rows: list[CountRow] = []
    for line in text.splitlines():
        if table is not None:
            if _SEPARATOR.fullmatch(line):
                continue
            row = summary_row(table, line)
            if row is not None:
                if keep_total or row.syscall != "total":
                    rows.append(row)
                continue
            tables.append(rows)
            table, rows = None, []
        cols = table_header(line)
        if cols is not None:
            table, rows = SummaryTable(cols), []
    if table is not None:
        tables.append(rows)
    return tables


def parse_summary(text: str) -> list[CountRow]:
    """The first `strace -c` table in `text`; a one-line UsageError if there is none."""
    tables = parse_summaries(text)
    if not tables:
        raise UsageError(f"no strace -c table found (no `% time  seconds  usecs/call  calls  "
                         f"errors syscall` header); {FIX}")
    return tables[0]

"""The tables `strace -c` (and `-C`, `-w`, `-U columns`) print, found anywhere in a text.

Columns are mapped by their header names, so the classic layout
(`% time  seconds  usecs/call  calls  errors syscall`) and `-U` orders such as
`syscall calls errors seconds ...` both work. strace right-aligns each number under the end of
its header word, so a blank cell is known by position (a blank `errors` cell means 0). When
whitespace was mangled (tables copied from blog posts) cells are split on blanks and checked
against each other. Tables people paste are often excerpts (rows cut with `(...)`, no `total`
row): `CountTable.complete` says whether a row the table lacks means 0 calls or unknown.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

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
_COUNT = re.compile(r"\d{1,18}")
_CELL = re.compile(r"\S+")
_SEPARATOR = re.compile(r"\s*-{3,}[\s-]*")
# what people put where they left rows out of a pasted table
_CUT = re.compile(r"\s*(?:\(\.{3,}\)|\[\.{3,}\]|\.{3,}|\(?…\)?|\[…\])\s*")


@dataclass(frozen=True)
class SummaryTable:
    """A table's column names in order, e.g. ("%time", "seconds", ..., "syscall"), and where
    each header word ends: strace right-aligns every number to the end of its header word."""

    columns: tuple[str, ...]
    ends: tuple[int, ...] = ()


@dataclass
class CountTable:
    """One `strace -c` table as found: its rows (the `total` row apart) and what is missing.

    `unreadable` names the rows that are there but whose cells could not be read (a `calls`
    cell left out): those syscalls are unknown. `cut` says a `(...)` line stands in for rows.
    Only a `complete` table tells about the syscalls it does not list (they were not called);
    in an excerpt a missing row is unknown, not 0."""

    rows: list[CountRow] = field(default_factory=list)
    total: CountRow | None = None
    unreadable: list[str] = field(default_factory=list)
    cut: bool = False
    lines: int = 1

    @property
    def complete(self) -> bool:
        return (self.total is not None and not self.cut and not self.unreadable
                and sum(r.calls for r in self.rows) == self.total.calls)


def table_header(line: str) -> SummaryTable | None:
    """The table's columns if `line` is an `strace -c` header, else None."""
    s = line.lower().replace("% time", " %time").replace("syscall name", "syscall     ")
    cells = list(_CELL.finditer(s))
    words = tuple(m.group() for m in cells)
    if "calls" not in words or "syscall" not in words or not set(words) <= _KNOWN:
        return None
    return SummaryTable(words, tuple(m.end() for m in cells))


def read_row(table: SummaryTable, line: str) -> tuple[str, CountRow | None] | None:
    """A data row of `table` (the `total` row included) as (syscall, row); the row is None
    when the line is one but its cells cannot be read. None if `line` is no row at all."""
    cells = [(m.group(), m.end()) for m in _CELL.finditer(line)]
    if len(cells) < 2:
        return None
    first_name = table.columns[0] == "syscall"
    (name, _), numbers = (cells[0], cells[1:]) if first_name else (cells[-1], cells[:-1])
    if not _NAME.fullmatch(name) or not all(_NUMBER.fullmatch(t) for t, _ in numbers):
        return None
    columns = [(c, e) for c, e in zip(table.columns, table.ends) if c != "syscall"]
    names = [c for c, _ in columns]
    by_end = {e: c for c, e in columns}
    ends = [e for _, e in numbers]
    aligned = all(e in by_end for e in ends) and len(set(ends)) == len(ends)
    texts = [t for t, _ in numbers]
    if aligned:  # as strace prints it: a blank cell is a column without a number
        return name, _row(name, {by_end[e]: t for t, e in numbers}, True)
    if len(numbers) == len(names):
        return name, _row(name, dict(zip(names, texts)), False)
    if len(numbers) != len(names) - 1:
        return name, None
    # One cell is blank: errors (0 errors), or on old strace's total row usecs/call. The
    # cells must agree with each other, or the row is unreadable (a `calls` cell left out).
    for blank in ("errors", "usecs/call") if name == "total" else ("errors",):
        if blank in names:
            row = _row(name, dict(zip([c for c in names if c != blank], texts)), False)
            if row is not None:
                return name, row
    return name, None


def _row(name: str, values: dict[str, str], aligned: bool) -> CountRow | None:
    calls, errors = values.get("calls"), values.get("errors", "0")
    if calls is None or not _COUNT.fullmatch(calls) or not _COUNT.fullmatch(errors):
        return None
    seconds = float(values.get("seconds", "0"))
    if not math.isfinite(seconds):
        return None
    row = CountRow(name, int(calls), int(errors), seconds)
    usecs = values.get("usecs/call")
    if not aligned and usecs is not None and "seconds" in values:
        # Whitespace was mangled: the cells were placed by count, so check them against each
        # other (strace prints usecs/call as seconds / calls).
        expected = seconds * 1e6 / row.calls if row.calls else 0.0
        if abs(expected - float(usecs)) > 1 + 0.02 * expected:
            return None
    return row


def summary_row(table: SummaryTable, line: str) -> CountRow | None:
    """One readable data row (the `total` row included) of `table`, or None."""
    got = read_row(table, line)
    return got[1] if got is not None else None


def parse_tables(text: str) -> list[CountTable]:
    """Every `strace -c` table in `text`, in order (surrounding prose is ignored)."""
    tables: list[CountTable] = []
    header: SummaryTable | None = None
    cur = CountTable()
    for line in text.splitlines():
        if header is not None:
            got = read_row(header, line)
            if _SEPARATOR.fullmatch(line) or _CUT.fullmatch(line) or got is not None:
                cur.lines += 1
                cur.cut = cur.cut or bool(_CUT.fullmatch(line))
                if got is None:
                    continue
                name, row = got
                if name == "total":
                    cur.total = row
                    tables.append(cur)
                    header = None
                elif row is None:
                    cur.unreadable.append(name)
                else:
                    cur.rows.append(row)
                continue
            tables.append(cur)
            header = None
        header = table_header(line)
        if header is not None:
            cur = CountTable()
    if header is not None:
        tables.append(cur)
    return tables


def parse_summaries(text: str, *, keep_total: bool = False) -> list[list[CountRow]]:
    """The rows of every `strace -c` table in `text` (with its total row if `keep_total`)."""
    return [t.rows + ([t.total] if keep_total and t.total else []) for t in parse_tables(text)]


def parse_summary(text: str) -> list[CountRow]:
    """The first `strace -c` table in `text`; a one-line UsageError if there is none."""
    tables = parse_summaries(text)
    if not tables:
        raise UsageError(f"no strace -c table found (no `% time  seconds  usecs/call  calls  "
                         f"errors syscall` header); {FIX}")
    return tables[0]

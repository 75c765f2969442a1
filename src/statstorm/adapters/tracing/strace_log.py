"""Import existing strace output: a syscall log, or the table `strace -c` prints, read from a
file into an in-memory Trace. The log itself is parsed by adapters.strace_parser, the tables
by adapters.strace_summary.
"""

from __future__ import annotations

import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from statstorm.adapters.tracing.strace_parser import parse_log
from statstorm.adapters.tracing.strace_summary import FIX, parse_tables
from statstorm.adapters.tracing.strace_syntax import CALL, PREFIX
from statstorm.errors import UsageError
from statstorm.results.common import read_bounded
from statstorm.results.trace.vocabulary import Trace, TracerBackend, new_header

__all__ = ["MAX_BYTES", "detect", "import_data", "import_file", "read_input"]

# The largest input read (the whole file is held in memory while it is parsed).
MAX_BYTES = 1 << 30
_GIVE = "give an strace log or an strace -c table"


def read_input(path: Path, *, limit: int | None = None, what: str = _GIVE) -> bytes:
    """An strace log's bytes, bounded (results.common.read_bounded)."""
    return read_bounded(path, MAX_BYTES if limit is None else limit, what)


def _read(path: Path) -> bytes:
    data = read_input(path)
    if not data.strip():
        raise UsageError(f"{path}: empty file, not strace output; {FIX}")
    return data


def _kind(data: bytes) -> Literal["log", "summary"]:
    """A log if syscall lines are at least half of the lines outside `-c` tables."""
    text = data.decode("utf-8", "replace")
    table_lines = sum(t.lines for t in parse_tables(text))
    nonempty = syscalls = 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        nonempty += 1
        m = PREFIX.match(line)
        if m and (CALL.match(line, m.end()) or line.startswith(b"<...", m.end())):
            syscalls += 1
    if table_lines and syscalls * 2 <= nonempty - table_lines:
        return "summary"
    return "log"


def detect(path: Path) -> Literal["log", "summary"]:
    """Whether a file is an strace log or holds `strace -c` tables."""
    return _kind(_read(path))


def import_file(path: Path, *, requests: int | None = None, table: int = 0) -> Trace:
    """Read an strace log or `-c` table file into an in-memory Trace (`mount` stays -1)."""
    return import_data(_read(path), source=str(path), requests=requests, table=table)


def import_data(data: bytes, *, source: str, requests: int | None = None,
                table: int = 0) -> Trace:
    """An strace log or `-c` table given as bytes; `source` names it in errors and the header.
    A `-c` table's header says whether the table is complete (`import.complete`): in an
    excerpt the syscalls it does not list are unknown, not 0."""
    if not data.strip():
        raise UsageError(f"{source}: empty, not strace output; {FIX}")
    kind = _kind(data)
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    source_kind = TracerBackend.STRACE_LOG if kind == "log" else TracerBackend.STRACE_C
    header = new_header(source_kind.value, created=created,
                        host=socket.gethostname(), targets={"import": source}, settings={},
                        mounts=[])
    if requests is not None:
        header["requests_hint"] = requests
    if kind == "summary":
        tables = parse_tables(data.decode("utf-8", "replace"))
        if not tables:
            raise UsageError(f"{source}: no strace -c table found; {FIX}")
        if not 0 <= table < len(tables):
            raise UsageError(f"{source}: has {len(tables)} strace -c table(s); choose a table "
                             f"from 0 to {len(tables) - 1}")
        chosen = tables[table]
        if not chosen.rows:
            raise UsageError(f"{source}: strace -c table {table} has no readable row; {FIX}")
        header["import"] = {"flags": ["-c"], "table": table, "tables": len(tables),
                            "complete": chosen.complete, "unreadable": sorted(chosen.unreadable)}
        return Trace(header=header, counts=chosen.rows,
                     trailer={"events": 0, "stopped": "end"})
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    parsed = parse_log(lines, source=source)
    header["import"] = {"flags": sorted(parsed.flags_seen), "table": None,
                        "tables": parsed.summary_tables, "lines": parsed.lines,
                        "skipped": parsed.skipped, "skipped_bad": parsed.skipped_bad,
                        "unmatched_unfinished": parsed.unmatched_unfinished}
    duration = max((s.ts_ns + s.lat_ns for s in parsed.syscalls), default=0)
    return Trace(header=header, syscalls=parsed.syscalls, requests=parsed.requests,
                 trailer={"events": len(parsed.syscalls), "stopped": "end",
                          "duration_ns": duration})

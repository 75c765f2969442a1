"""Import existing strace output: a syscall log, or the table `strace -c` prints, read from a
file into an in-memory Trace. The log itself is parsed by adapters.strace_parser, the tables
by adapters.strace_summary.
"""

from __future__ import annotations

import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from statstorm.adapters.strace_parser import parse_log
from statstorm.adapters.strace_summary import FIX, parse_summaries
from statstorm.adapters.strace_syntax import CALL, PREFIX
from statstorm.errors import UsageError
from statstorm.results.trace.vocabulary import Trace, new_header

__all__ = ["detect", "import_file"]


def _read(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; give an strace log or an strace -c table") \
            from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory; give an strace log or an strace -c table") \
            from None
    except PermissionError:
        raise UsageError(f"{path}: permission denied; make it readable or run as its owner") \
            from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror}); give a readable file") \
            from None
    if not data.strip():
        raise UsageError(f"{path}: empty file, not strace output; {FIX}")
    return data


def _kind(data: bytes) -> Literal["log", "summary"]:
    """A log if syscall lines are at least half of the lines outside `-c` tables."""
    text = data.decode("utf-8", "replace")
    table_lines = sum(len(t) + 2 for t in parse_summaries(text, keep_total=True))
    nonempty = syscalls = 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        nonempty += 1
        m = PREFIX.match(line)
        if m and (CALL.match(line, m.end()) or line.startswith(b"<...", m.end())):
            syscalls += 1
    if table_lines and syscalls * 2 < nonempty - table_lines:
        return "summary"
    return "log"


def detect(path: Path) -> Literal["log", "summary"]:
    """Whether a file is an strace log or holds `strace -c` tables."""
    return _kind(_read(path))


def import_file(path: Path, *, requests: int | None = None, table: int = 0) -> Trace:
    """Read an strace log or `-c` table file into an in-memory Trace (`mount` stays -1)."""
    data = _read(path)
    kind = _kind(data)
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    header = new_header("strace-log" if kind == "log" else "strace-c", created=created,
                        host=socket.gethostname(), targets={"import": str(path)}, settings={},
                        mounts=[])
    if requests is not None:
        header["requests_hint"] = requests
    if kind == "summary":
        tables = parse_summaries(data.decode("utf-8", "replace"))
        if not tables:
            raise UsageError(f"{path}: no strace -c table found; {FIX}")
        if not 0 <= table < len(tables):
            raise UsageError(f"{path}: has {len(tables)} strace -c table(s); choose a table "
                             f"from 0 to {len(tables) - 1}")
        header["import"] = {"flags": ["-c"], "table": table, "tables": len(tables)}
        return Trace(header=header, counts=tables[table],
                     trailer={"events": 0, "stopped": "end"})
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    parsed = parse_log(lines, source=str(path))
    header["import"] = {"flags": sorted(parsed.flags_seen), "table": None,
                        "tables": parsed.summary_tables, "lines": parsed.lines,
                        "skipped": parsed.skipped, "skipped_bad": parsed.skipped_bad,
                        "unmatched_unfinished": parsed.unmatched_unfinished}
    duration = max((s.ts_ns + s.lat_ns for s in parsed.syscalls), default=0)
    return Trace(header=header, syscalls=parsed.syscalls, requests=parsed.requests,
                 trailer={"events": len(parsed.syscalls), "stopped": "end",
                          "duration_ns": duration})

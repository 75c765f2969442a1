"""A trace as its raw records: what the what-if model reads, without an object per record.

`read_trace` builds a `Syscall` or an `Operation` for every record, which costs more than
anything the model then does with a big trace. `read_records` keeps each record as the list
the trace file holds (path ids and all, see `results.trace`), grouped by kind; `of_trace`
gives the same form for a trace already in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statstorm.errors import UsageError
from statstorm.results.common import collector_paused
from statstorm.results.jsontypes import JsonObject
from statstorm.results.trace.header import Framed
from statstorm.results.trace.jsonl import iter_batches
from statstorm.results.trace.vocabulary import INTERNED_ARGS, Trace

# Field positions in the raw records (the trace file's arrays, tag first).
S_TS, S_PID, S_REQ, S_OP, S_CALL, S_SYSCALL, S_PATH, S_RET, S_LAT, S_MOUNT, S_KIND = range(1, 12)
O_ID, O_REQ, O_PID, O_START, O_END, O_KIND, O_PARENT, O_ARGS = range(1, 9)
R_ID, R_PID, R_START, R_END, R_SCRIPT, R_URI = range(1, 7)


@dataclass
class TraceRecords(Framed):
    """A trace's records by kind, each as its file array. Path-valued fields (a syscall's
    path, an operation's INTERNED_ARGS and "candidates") are ids into `paths`, where -1 and
    any unknown id stand for ""."""

    header: dict[str, Any]
    paths: dict[int, str] = field(default_factory=dict)
    syscalls: list[list[Any]] = field(default_factory=list)
    operations: dict[int, list[Any]] = field(default_factory=dict)
    requests: dict[int, list[Any]] = field(default_factory=dict)
    trailer: dict[str, Any] = field(default_factory=dict)
    request_counts: bool = False  # "k" records (kept only as this flag)
    count_rows: bool = False  # "c" records (likewise)
    sealed: bool = field(default=False, compare=False)  # ended by its seal (results.trace.seal)

    def path(self, v: Any) -> str:
        """A path-valued argument as `read_trace` gives it (ids resolved)."""
        if isinstance(v, int):
            return self.paths.get(v, "")
        return str(v)


def read_records(path: Path, sidecar: bool = True) -> TraceRecords:
    """A trace file's records (from its record sidecar when that matches and `sidecar`)."""
    with collector_paused():
        return _read_records(path, sidecar)


def _read_records(path: Path, sidecar: bool) -> TraceRecords:
    batches = iter_batches(path, sidecar)
    t = TraceRecords(header=next(batches)[0])
    syscalls = t.syscalls
    operations = t.operations
    requests = t.requests
    paths = t.paths
    rec: Any = None
    try:
        append = syscalls.append
        for batch in batches:
            for rec in batch:
                tag = rec[0]
                if tag == "s":
                    if len(rec) != 12:
                        raise ValueError
                    append(rec)
                elif tag == "o":
                    if len(rec) != 9 or type(rec[8]) is not dict:
                        raise ValueError
                    operations[rec[1]] = rec
                elif tag == "p":
                    paths[rec[1]] = rec[2]
                elif tag == "r":
                    if not 4 <= len(rec) <= 7:
                        raise ValueError
                    requests[rec[1]] = rec + [-1, "", ""][len(rec) - 4:]
                elif tag == "e":
                    t.trailer = rec[1]
                elif tag == "k":
                    t.request_counts = True
                elif tag == "c":
                    t.count_rows = True
                elif tag == "z":
                    t.sealed = True
    except (ValueError, TypeError, IndexError, KeyError):
        raise UsageError(f"{path}: malformed trace record {str(rec)[:80]}") from None
    paths[-1] = ""
    return t


def of_trace(trace: Trace) -> TraceRecords:
    """The raw form of a trace in memory (paths interned as `TraceWriter` would)."""
    ids: dict[str, int] = {}

    def pid(p: str) -> int:
        if not p:
            return -1
        i = ids.get(p)
        if i is None:
            i = ids[p] = len(ids)
        return i

    t = TraceRecords(header=trace.header, trailer=dict(trace.trailer),
                     request_counts=bool(trace.request_counts), count_rows=bool(trace.counts))
    t.syscalls = [["s", s.ts_ns, s.pid, s.req, s.op, s.call, s.syscall, pid(s.path), s.ret,
                   s.lat_ns, s.mount, s.kind] for s in trace.syscalls]
    for o in trace.operations.values():
        args: JsonObject = {}
        for k, v in o.args.items():
            if k in INTERNED_ARGS and isinstance(v, str):
                args[k] = pid(v)
            elif k == "candidates" and isinstance(v, list):
                args[k] = [pid(str(c)) for c in v]
            else:
                args[k] = v
        t.operations[o.id] = ["o", o.id, o.req, o.pid, o.start_ns, o.end_ns, o.kind, o.parent,
                              args]
    t.requests = {k: ["r", r.id, r.pid, r.start_ns, r.end_ns, r.script, r.uri]
                  for k, r in trace.requests.items()}
    t.paths = {i: p for p, i in ids.items()}
    t.paths[-1] = ""
    return t

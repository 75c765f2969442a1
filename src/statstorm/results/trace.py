"""The trace file: a streamable, versioned record of PHP's file-metadata syscalls.

Format `statstorm-trace` version 1 (documented in docs/trace.md): JSON Lines, optionally gzip
compressed (detected by its magic bytes, chosen by a `.gz` suffix when writing).

- Line 1 is a header object: {"format": "statstorm-trace", "version": 1, "source", "created",
  "host", "targets", "settings", "mounts": [[mount_point, fstype], ...]}.
- Every other line is a JSON array whose first element names the record:
  - ["p", id, path]                     a path, interned once before its first use
  - ["r", id, pid, start_ns, end_ns, script, uri]  a request, written once it has ended
    (after its syscalls); script/uri may be ""
  - ["o", id, req, pid, start_ns, end_ns, kind, parent, args]  a logical PHP operation;
    path-valued args (INTERNED_ARGS, and the list "candidates") hold path ids
  - ["s", ts_ns, pid, req, op, call, syscall, path_id, ret, lat_ns, mount, kind]  one syscall;
    `kind` is the PHP operation it belongs to (one of OP_KINDS)
  - ["k", req, pid, {call: [calls, failed, latency_ns]}]  a request's counts, counted in the
    kernel (`statstorm trace --counts`: no "s" records then); req -1: calls outside requests
  - ["c", syscall, calls, errors, seconds]  aggregated counts (an imported `strace -c` table)
  - ["e", trailer]                      the end: events, dropped, stop reason, duration_ns
- Times are nanoseconds since the trace started. `ret` is the syscall's return value;
  negative values are -errno. `req`, `op`, `mount` and `path_id` are -1 when unknown.

Paths are bytes on Linux; they are stored as str decoded with `surrogateescape`, which JSON
writes as `\\udcXX` escapes, so non-UTF-8 names survive a round trip.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterator, Protocol

from statstorm.errors import UsageError
from statstorm.results import trace_records
from statstorm.results.common import collector_paused

FORMAT = "statstorm-trace"
VERSION = 1

# The call types a summary counts; `total` is their sum. chdir is recorded but not counted.
CALLS = ("lstat", "stat", "fstat", "access", "open", "readlink", "getcwd")
SUMMARY_KEYS = CALLS + ("total", "failed")
EXTRA_CALLS = ("chdir",)

# Syscall name → call type, for the names whose type does not depend on flags.
SYSCALL_CALL = {
    "stat": "stat", "stat64": "stat", "oldstat": "stat",
    "lstat": "lstat", "lstat64": "lstat", "oldlstat": "lstat",
    "fstat": "fstat", "fstat64": "fstat", "oldfstat": "fstat",
    "access": "access", "faccessat": "access", "faccessat2": "access",
    "open": "open", "openat": "open", "openat2": "open", "creat": "open",
    "readlink": "readlink", "readlinkat": "readlink",
    "getcwd": "getcwd", "chdir": "chdir", "fchdir": "chdir",
}
# Flag-dependent names: newfstatat/fstatat64/statx → lstat, stat or fstat by their flags.
FLAGGED_STAT = ("newfstatat", "fstatat64", "fstatat", "statx")
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000

# Operation arguments holding paths: stored as path ids (lists of ids for "candidates").
INTERNED_ARGS = ("name", "path", "cwd", "include_path", "filename")

OP_KINDS = ("startup", "main_script", "include", "include_resolve", "file_probe", "opcache_revalidate",
            "user_ini", "realpath", "stat_cache_clear", "other")


def call_type(syscall: str, flags: int = 0, path: str | None = None) -> str | None:
    """The call type (`lstat`, `stat`, ...) of a syscall, or None if it is not traced."""
    if syscall in FLAGGED_STAT:
        if flags & AT_EMPTY_PATH and not path:
            return "fstat"
        if flags & AT_SYMLINK_NOFOLLOW:
            return "lstat"
        return "stat"
    return SYSCALL_CALL.get(syscall)


def decode_path(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


@dataclass
class Syscall:
    ts_ns: int
    pid: int
    call: str
    syscall: str
    path: str
    ret: int
    lat_ns: int = 0
    req: int = -1
    op: int = -1
    mount: int = -1
    kind: str = "other"

    @property
    def failed(self) -> bool:
        return self.ret < 0


@dataclass
class Request:
    id: int
    pid: int
    start_ns: int
    end_ns: int = -1
    script: str = ""
    uri: str = ""


@dataclass
class Operation:
    id: int
    req: int
    pid: int
    start_ns: int
    end_ns: int
    kind: str
    parent: int = -1
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class RequestCounts:
    """One request's calls as counted in the kernel: {call: (calls, failed, latency_ns)}."""

    req: int
    pid: int
    calls: dict[str, tuple[int, int, int]]


@dataclass
class CountRow:
    syscall: str
    calls: int
    errors: int
    seconds: float


@dataclass
class Trace:
    """A whole trace in memory (for show/diff/import; the tracer itself streams)."""

    header: dict[str, Any]
    syscalls: list[Syscall] = field(default_factory=list)
    requests: dict[int, Request] = field(default_factory=dict)
    operations: dict[int, Operation] = field(default_factory=dict)
    counts: list[CountRow] = field(default_factory=list)
    request_counts: list[RequestCounts] = field(default_factory=list)
    trailer: dict[str, Any] = field(default_factory=dict)

    @property
    def mounts(self) -> list[tuple[str, str]]:
        return [(m[0], m[1]) for m in self.header.get("mounts", [])]

    def feed(self, sink: RecordSink) -> None:
        """Hand every record to `sink` (a TraceWriter, a SummaryBuilder), in file order."""
        for s in self.syscalls:
            sink.syscall(s)
        for r in self.requests.values():
            sink.request(r)
        for o in self.operations.values():
            sink.operation(o)
        for c in self.counts:
            sink.count(c)
        for rc in self.request_counts:
            sink.request_counts(rc)


class RecordSink(Protocol):
    def syscall(self, s: Syscall) -> None: ...
    def request(self, r: Request) -> None: ...
    def operation(self, o: Operation) -> None: ...
    def count(self, c: CountRow) -> None: ...
    def request_counts(self, rc: RequestCounts) -> None: ...


def new_header(source: str, *, created: str, host: str, targets: dict[str, Any],
               settings: dict[str, Any], mounts: list[tuple[str, str]],
               detail: str = "events") -> dict[str, Any]:
    """`detail`: "events" (every syscall recorded) or "counts" (per-request counts only)."""
    return {"format": FORMAT, "version": VERSION, "source": source, "created": created,
            "host": host, "detail": detail, "targets": targets, "settings": settings,
            "mounts": [list(m) for m in mounts]}


class TraceWriter:
    """Streams a trace to a temp file beside `path`; `close()` renames it into place.

    Use as a context manager: on an exception the trailer is still written (with the
    exception's name as the stop reason) so whatever was captured stays readable.
    With `records` (the default) the same records also go to the record sidecar
    (`trace_records`), which readers load instead of decoding the JSON lines. `after_close`
    is called with the trace's path once it is in place (not after an error): the tracer
    builds the what-if input cache there (`model.inputcache.build`).
    """

    def __init__(self, path: Path, header: dict[str, Any], records: bool = True,
                 after_close: Callable[[Path], object] | None = None) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, self._tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        raw: IO[bytes] = os.fdopen(fd, "wb")
        self._raw = raw
        stream: IO[bytes] = raw
        if path.name.endswith(".gz"):
            stream = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6)  # type: ignore[assignment]
        self._gz = stream if stream is not raw else None
        self._fh = io.TextIOWrapper(stream, encoding="utf-8", errors="surrogateescape",
                                    newline="\n")
        self._paths: dict[str, int] = {}
        self.events = 0
        self._closed = False
        self._after_close = after_close
        # json.dumps(obj, separators=(",", ":"), ensure_ascii=True), without making an
        # encoder for every line
        self._encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode
        self._line(header)
        self._rec: trace_records.RecordsWriter | None = None
        if records:
            fd, rec_tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".records",
                                           dir=path.parent)
            os.close(fd)
            self._rec = trace_records.RecordsWriter(rec_tmp, header)

    def _record(self, rec: list[Any], plain: bool = True) -> None:
        """A record line, also kept for the sidecar (see RecordsWriter.add for `plain`)."""
        self._fh.write(self._encode(rec) + "\n")
        if self._rec is not None:
            self._rec.add(rec, plain)

    def _line(self, obj: Any) -> None:
        self._fh.write(self._encode(obj) + "\n")

    def path_id(self, path: str) -> int:
        if not path:
            return -1
        pid = self._paths.get(path)
        if pid is None:
            pid = len(self._paths)
            self._paths[path] = pid
            self._record(["p", pid, path])
        return pid

    def request(self, r: Request) -> None:
        self._record(["r", r.id, r.pid, r.start_ns, r.end_ns, r.script, r.uri])

    def operation(self, o: Operation) -> None:
        args: dict[str, Any] = {}
        plain = True  # only values JSON gives back as they were (see RecordsWriter.add)
        for k, v in o.args.items():
            if k in INTERNED_ARGS and isinstance(v, str):
                args[k] = self.path_id(v) if v else -1
            elif k == "candidates" and isinstance(v, list):
                args[k] = [self.path_id(str(c)) for c in v]
            else:
                args[k] = v
                if type(v) not in trace_records.PLAIN:
                    plain = False
        self._record(["o", o.id, o.req, o.pid, o.start_ns, o.end_ns, o.kind, o.parent, args],
                     plain and type(o.kind) is str)

    def syscall(self, s: Syscall) -> None:
        rec = ["s", s.ts_ns, s.pid, s.req, s.op, s.call, s.syscall, self.path_id(s.path),
               s.ret, s.lat_ns, s.mount, s.kind]
        self._fh.write(self._encode(rec) + "\n")
        if self._rec is not None:  # self._rec.add(rec), inlined: the commonest record
            buf = self._rec.buf
            buf.append(rec)
            if len(buf) >= trace_records.CHUNK:
                self._rec.flush()
        self.events += 1

    def count(self, c: CountRow) -> None:
        self._record(["c", c.syscall, c.calls, c.errors, c.seconds], False)

    def request_counts(self, rc: RequestCounts) -> None:
        self._record(["k", rc.req, rc.pid, {k: list(v) for k, v in rc.calls.items()}], False)
        self.events += sum(v[0] for v in rc.calls.values())

    def close(self, trailer: dict[str, Any], after: bool = True) -> None:
        """Write the trailer and put the trace in place; then, if `after`, the after_close
        hook."""
        if self._closed:
            return
        self._closed = True
        try:
            self._record(["e", {"events": self.events, **trailer}], False)
            self._fh.flush()
            self._fh.close()  # closes the gzip stream, which does not close `raw`
            self._raw.close()
            os.chmod(self._tmp, 0o644)
            if self._rec is not None:
                self._rec.finish(self._tmp, self.path)
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        if after and self._after_close is not None:
            self._after_close(self.path)

    def abort(self) -> None:
        self._closed = True
        if self._rec is not None:
            self._rec.drop()
        try:
            self._raw.close()
        except OSError:
            pass
        try:
            os.unlink(self._tmp)
        except FileNotFoundError:
            pass

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close({"stopped": "end"})
        elif issubclass(exc_type, (KeyboardInterrupt, Exception)):
            self.close({"stopped": exc_type.__name__}, after=False)
        else:
            self.abort()


def write_trace(path: Path, trace: Trace) -> None:
    """Write a whole in-memory trace (an import) as a trace file."""
    with TraceWriter(path, trace.header) as w:
        trace.feed(w)


def _open_text(path: Path) -> IO[str]:
    try:
        raw = open(path, "rb")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such trace file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory; give a trace file written by "
                         "`statstorm trace -o`") from None
    magic = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    stream: IO[bytes] = raw
    if magic == b"\x1f\x8b":
        stream = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
    return io.TextIOWrapper(stream, encoding="utf-8", errors="surrogateescape")


BATCH_BYTES = 1 << 22  # lines decoded per json.loads call: ~4 MB of text


def _damaged(path: Path, lineno: int) -> UsageError:
    return UsageError(f"{path}:{lineno}: not a statstorm trace line; the file is damaged or not "
                      "a trace (import strace output with `statstorm trace import`)")


def _check_header(path: Path, rec: Any) -> None:
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        raise UsageError(f"{path}: not a statstorm trace (import strace output "
                         "with `statstorm trace import`)")
    if rec.get("version") != VERSION:
        raise UsageError(f"{path}: trace format version {rec.get('version')} "
                         f"is not supported (this statstorm reads {VERSION})")


def _check_record(path: Path, lineno: int, rec: Any) -> None:
    if not isinstance(rec, list) or not rec or not isinstance(rec[0], str):
        raise UsageError(f"{path}:{lineno}: malformed trace record")


def _decode_lines(path: Path, first: int, lines: list[str]) -> list[Any]:
    """One batch of record lines (the first is line number `first`) as records.

    Decoding a batch as one JSON array costs about half of one json.loads per line, which
    dominates reading a big trace. A batch that does not decode (a damaged line, a blank
    line) is decoded again line by line, so the error names the line as before."""
    try:
        recs = json.loads("[" + ",".join(lines) + "]")
    except json.JSONDecodeError:
        recs = None
    if recs is not None and len(recs) == len(lines):
        for rec in recs:
            if type(rec) is not list or not rec or type(rec[0]) is not str:
                break
        else:
            return list(recs)
    out = []
    for i, line in enumerate(lines, first):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            raise _damaged(path, i) from None
        _check_record(path, i, rec)
        out.append(rec)
    return out


def iter_batches(path: Path, sidecar: bool = True) -> Iterator[list[Any]]:
    """The header (alone in the first batch), then every record of a trace file in batches;
    one-line errors when malformed. The same records, in order, as `iter_records`. They
    come from the record sidecar (`trace_records`) when it matches the trace and `sidecar`
    is set, else from the JSON lines."""
    loaded = trace_records.load(path) if sidecar else None
    if loaded is not None:
        header, batches = loaded
        _check_header(path, header)
        yield [header]
        yield from batches
        return
    fh = _open_text(path)
    with fh:
        lineno = 0
        try:
            line = fh.readline()
            while line and not line.strip():
                lineno += 1
                line = fh.readline()
            if not line:
                raise UsageError(f"{path}: empty file, not a statstorm trace")
            lineno += 1
            try:
                header = json.loads(line)
            except json.JSONDecodeError:
                raise _damaged(path, lineno) from None
            if lineno == 1:
                _check_header(path, header)
            else:
                _check_record(path, lineno, header)
            yield [header]
            while True:
                lines = fh.readlines(BATCH_BYTES)
                if not lines:
                    break
                recs = _decode_lines(path, lineno + 1, lines)
                lineno += len(lines)
                yield recs
        except (OSError, EOFError, UnicodeDecodeError) as exc:
            raise UsageError(f"{path}:{lineno}: truncated or unreadable trace ({exc}); "
                             "record it again") from None


def iter_records(path: Path) -> Iterator[Any]:
    """Yield the header, then every record, of a trace file; one-line errors when malformed."""
    for batch in iter_batches(path):
        yield from batch


def read_trace(path: Path) -> Trace:
    """Load a whole trace file.

    The collector is paused meanwhile: a trace is millions of small records, none cyclic,
    and collections triggered by their allocation would cost more than the decoding."""
    with collector_paused():
        return _read_trace(path)


def _resolve_args(args: dict[str, Any], paths: dict[int, str]) -> None:
    """An operation's path-valued arguments from their ids back to paths (in place)."""
    for k, v in args.items():
        if k in _INTERNED and isinstance(v, int):
            args[k] = paths.get(v, "")
        elif k == "candidates" and isinstance(v, list):
            args[k] = [paths.get(c, "") for c in v]


_INTERNED = frozenset(INTERNED_ARGS)


def _read_trace(path: Path) -> Trace:
    batches = iter_batches(path)
    header = next(batches)[0]
    t = Trace(header=header)
    paths: dict[int, str] = {}
    syscalls = t.syscalls
    operations = t.operations
    rec: Any = None
    try:
        for batch in batches:
            for rec in batch:
                tag = rec[0]
                if tag == "s":
                    _, ts, pid, req, op, call, sysname, pth, ret, lat, mnt, kind = rec
                    syscalls.append(Syscall(ts, pid, call, sysname, paths.get(pth, ""), ret,
                                            lat, req, op, mnt, kind))
                elif tag == "o":
                    _, oid, req, pid, start, end, kind, parent, args = rec
                    if args:
                        _resolve_args(args, paths)
                    operations[oid] = Operation(oid, req, pid, start, end, kind, parent, args)
                elif tag == "p":
                    paths[rec[1]] = rec[2]
                elif tag == "r":
                    t.requests[rec[1]] = Request(*rec[1:7])
                elif tag == "k":
                    t.request_counts.append(RequestCounts(int(rec[1]), int(rec[2]), {
                        str(k): (int(v[0]), int(v[1]), int(v[2])) for k, v in rec[3].items()}))
                elif tag == "c":
                    t.counts.append(CountRow(rec[1], int(rec[2]), int(rec[3]), float(rec[4])))
                elif tag == "e":
                    t.trailer = rec[1]
    except (ValueError, TypeError, IndexError, AttributeError):
        raise UsageError(f"{path}: malformed trace record {str(rec)[:80]}") from None
    return t

"""The trace file itself: JSON Lines, optionally gzip compressed (see the package's docstring
and docs/trace.md). `TraceWriter` streams one (and its record sidecar, `results.trace.sidecar`);
`iter_batches`, `iter_records` and `read_trace` read one back, with one-line errors when it is
malformed.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any, Iterator

from statstorm.errors import UsageError
from statstorm.results.common import collector_paused
from statstorm.results.trace.sidecar import CHUNK, PLAIN, RecordsWriter
from statstorm.results.trace.sidecar import load as load_sidecar
from statstorm.results.trace.vocabulary import (FORMAT, INTERNED_ARGS, VERSION, CountRow,
                                                Operation, Request, RequestCounts, Syscall,
                                                Trace)


class TraceWriter:
    """Streams a trace to a temp file beside `path`; `close()` renames it into place.

    Use as a context manager: on an exception the trailer is still written (with the
    exception's name as the stop reason) so whatever was captured stays readable.
    With `records` (the default) the same records also go to the record sidecar
    (`results.trace.sidecar`), which readers load instead of decoding the JSON lines.
    """

    def __init__(self, path: Path, header: dict[str, Any], records: bool = True) -> None:
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
        # json.dumps(obj, separators=(",", ":"), ensure_ascii=True), without making an
        # encoder for every line
        self._encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode
        self._line(header)
        self._rec: RecordsWriter | None = None
        if records:
            fd, rec_tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".records",
                                           dir=path.parent)
            os.close(fd)
            self._rec = RecordsWriter(rec_tmp, header)

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
                if type(v) not in PLAIN:
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
            if len(buf) >= CHUNK:
                self._rec.flush()
        self.events += 1

    def count(self, c: CountRow) -> None:
        self._record(["c", c.syscall, c.calls, c.errors, c.seconds], False)

    def request_counts(self, rc: RequestCounts) -> None:
        self._record(["k", rc.req, rc.pid, {k: list(v) for k, v in rc.calls.items()}], False)
        self.events += sum(v[0] for v in rc.calls.values())

    def close(self, trailer: dict[str, Any]) -> None:
        """Write the trailer and put the trace in place."""
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
            self.close({"stopped": exc_type.__name__})
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
    come from the record sidecar (`results.trace.sidecar`) when it matches the trace and
    `sidecar` is set, else from the JSON lines."""
    loaded = load_sidecar(path) if sidecar else None
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

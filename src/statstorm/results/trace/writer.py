"""Writing a trace file: `TraceWriter` streams the JSON lines (and the record sidecar,
`results.trace.sidecar`) to temp files beside the target and publishes them only on a clean
close, sealed (`results.trace.seal`); any exception, signal or failed write removes the temp
files and leaves the previous trace as it was."""

from __future__ import annotations

import errno
import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import IO, Any

from statstorm import faults
from statstorm.errors import OutputError, StatstormError, UsageError
from statstorm.results import common
from statstorm.results.jsontypes import JsonObject
from statstorm.results.common import signals_deferred
import statstorm.results.trace.seal as seal
from statstorm.results.trace.sidecar import CHUNK, PLAIN, RecordsWriter
from statstorm.results.trace.vocabulary import (INTERNED_ARGS, CountRow, Operation, Request,
                                                RequestCounts, Syscall, Trace)

LINES_PER_WRITE = 4096


class _Hashed:
    """The file under the trace (under gzip, if any): hashes every byte as stored, which is
    how the sidecar names the trace it repeats."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.sha = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()


class TraceWriter:
    """Streams a trace to a temp file beside `path`; `close()` seals it and renames it (then
    its sidecar) into place.

    Use as a context manager: only a clean exit publishes; on an exception (Ctrl-C, SIGTERM,
    a full disk) the temp files are removed and whatever was at `path` stays. A failed write
    raises a one-line error (`OutputError`; `UsageError` for a directory it may not write in).
    With `records` (the default) the same records also go to the record sidecar
    (`results.trace.sidecar`), which readers load instead of decoding the JSON lines.

    STATSTORM_TEST_FAULT=after-events:N[:SIGNAL] (`statstorm.faults.hook`) sends the
    process that signal once the N-th syscall is written: the tests' interruption point.
    """

    def __init__(self, path: Path, header: JsonObject, records: bool = True) -> None:
        self.path = path
        self.events = 0
        self._paths: dict[str, int] = {}
        self._lines: list[str] = []
        self._body = hashlib.sha256()
        self._nlines = 0
        self._closed = self._aborted = False
        self._raw: IO[bytes] | None = None
        self._tmp: str | None = None
        self._rec: RecordsWriter | None = None
        fault = faults.hook("after-events")
        self._fault_at, self._fault_sig = fault if fault is not None else (-1, 0)
        # json.dumps(obj, separators=(",", ":"), ensure_ascii=True), without making an
        # encoder for every line
        self._encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True).encode
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._raw, self._tmp = common.temp_beside(path)
            self._file = _Hashed(self._raw)
            self._gz = (gzip.GzipFile(fileobj=self._file, mode="wb", compresslevel=6)
                        if path.name.endswith(".gz") else None)
            header = {**header, "seal": seal.ALGORITHM}
            self._line(header)
            if records:
                self._rec = RecordsWriter(path, header)
        except OSError as exc:
            raise self._failed(exc) from None

    def _failed(self, exc: OSError) -> StatstormError:
        """Abort, and the one-line error for a failed write."""
        self.abort()
        what = exc.strerror or str(exc)
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT,
                         errno.ENOTDIR, errno.EISDIR):
            return UsageError(f"{self.path}: cannot write there ({what}); choose another -o")
        return OutputError(f"{self.path}: the trace could not be written ({what}); nothing was "
                           "written and any previous file is intact; free some space or "
                           "choose another -o")

    def _write(self) -> None:
        """The lines gathered, hashed and written (to gzip, then the file)."""
        data = seal.encode(self._lines)
        self._body.update(data)
        self._nlines += len(self._lines)
        self._lines.clear()
        try:
            (self._gz or self._file).write(data)
        except OSError as exc:
            raise self._failed(exc) from None

    def _line(self, obj: Any) -> None:
        self._lines.append(self._encode(obj) + "\n")
        if len(self._lines) >= LINES_PER_WRITE:
            self._write()

    def _record(self, rec: list[Any], plain: bool = True) -> None:
        """A record line, also kept for the sidecar (see RecordsWriter.add for `plain`)."""
        self._line(rec)
        if self._rec is not None:
            try:
                self._rec.add(rec, plain)
            except OSError as exc:
                raise self._failed(exc) from None

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
        args: JsonObject = {}
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
        lines = self._lines
        lines.append(self._encode(rec) + "\n")
        if len(lines) >= LINES_PER_WRITE:
            self._write()
        if self._rec is not None:  # self._rec.add(rec), inlined: the commonest record
            buf = self._rec.buf
            buf.append(rec)
            if len(buf) >= CHUNK:
                try:
                    self._rec.flush()
                except OSError as exc:
                    raise self._failed(exc) from None
        self.events += 1
        if self.events == self._fault_at:
            os.kill(os.getpid(), self._fault_sig)

    def count(self, c: CountRow) -> None:
        self._record(["c", c.syscall, c.calls, c.errors, c.seconds], False)

    def request_counts(self, rc: RequestCounts) -> None:
        self._record(["k", rc.req, rc.pid, {k: list(v) for k, v in rc.calls.items()}], False)
        self.events += sum(v[0] for v in rc.calls.values())

    def close(self, trailer: dict[str, Any]) -> None:
        """Write the trailer and the seal, and put the trace (then its sidecar) in place.
        Signals wait meanwhile; any failure leaves the previous trace and no temp file."""
        if self._closed:
            if self._aborted:
                raise OutputError(f"{self.path}: the trace was abandoned after an error; "
                                  "nothing was written")
            return
        with signals_deferred():
            try:
                self._record(["e", {"events": self.events, **trailer}], False)
                self._write()
                end = seal.record(self._nlines, self._body.hexdigest())
                if self._rec is not None:
                    self._rec.add(end)
                data = seal.encode([self._encode(end) + "\n"])
                assert self._raw is not None and self._tmp is not None
                if self._gz is not None:
                    self._gz.write(data)
                    self._gz.close()  # writes gzip's trailer; does not close the file
                else:
                    self._file.write(data)
                self._raw.flush()
                os.fsync(self._raw.fileno())
                self._raw.close()
                os.chmod(self._tmp, 0o644)
                if self._rec is not None:
                    self._rec.seal(self._file.sha.hexdigest())
                os.replace(self._tmp, self.path)
                self._closed = True
            except OSError as exc:
                raise self._failed(exc) from None
            except BaseException:
                self.abort()
                raise
            if self._rec is not None:
                self._rec.publish()

    def abort(self) -> None:
        """Remove the temp files (nothing is published); a no-op once published."""
        if self._closed and not self._aborted:
            return
        self._closed = self._aborted = True
        with signals_deferred():
            if self._rec is not None:
                self._rec.drop()
            if self._raw is not None:
                try:
                    self._raw.close()
                except OSError:
                    pass
            if self._tmp is not None:
                try:
                    os.unlink(self._tmp)
                except OSError:
                    pass

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close({"stopped": "end"})
        else:
            self.abort()


def write_trace(path: Path, trace: Trace) -> None:
    """Write a whole in-memory trace (an import) as a trace file."""
    with TraceWriter(path, trace.header) as w:
        trace.feed(w)

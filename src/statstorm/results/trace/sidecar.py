"""The trace's record sidecar: the same records as the JSON lines, in a form quick to load.

Decoding JSON is most of the cost of reading a big trace. `TraceWriter` therefore also writes
every record it writes as a JSON line to `TRACE.records` (format `statstorm-trace-records`,
documented in docs/trace.md), in `marshal` chunks as the trace streams; readers
(`results.trace.jsonl.iter_batches`) use it instead of the JSON lines while it matches the
trace.

The JSON-lines file stays the trace: the sidecar only ever repeats it. It is used only when
its last chunk names the SHA-256 of the trace file it was built from (the file's bytes, as
stored) and that is the trace's now, and of its own bytes before that chunk, and these match;
and only if the current user owns it (or root does and no one else can write it). Otherwise
(missing, damaged, of another format version, written for other content) the JSON lines are
read, and a sidecar that did not match is rebuilt from them once they proved whole
(`Rebuild`). Deleting it is always safe.

Format version 2: chunks, each an 8-byte little-endian length and one `marshal` dump. The
first is {"format", "version", "header"}; then lists of records exactly as the JSON lines
decode (lists, header excluded, the seal included); the last is {"end": True, "records": n,
"trace_sha256", "sha256"} (`sha256`: of every byte before this chunk). Each record's values
are those JSON gives back (a record holding anything else, a tuple say, goes through JSON
first), so both readers give equal records.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import struct
from pathlib import Path
from typing import IO, Any

from statstorm.results import common
from statstorm.results.jsontypes import JsonObject
from statstorm.results.common import collector_paused, trusted

FORMAT = "statstorm-trace-records"
VERSION = 2
SUFFIX = ".records"
CHUNK = 1 << 15  # records per marshal dump
_LEN = struct.Struct("<Q")
# Values JSON gives back as they were (same type, same value).
PLAIN = frozenset((str, int, float, bool, type(None)))


def records_path(trace: Path) -> Path:
    return trace.with_name(trace.name + SUFFIX)


def file_sha256(path: Path | str) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            sha.update(block)
    return sha.hexdigest()


class RecordsWriter:
    """Writes the sidecar beside a trace being written, to a temp name: `seal` ends it once
    the trace's bytes are known, `publish` renames it into place after the trace.

    A value that cannot be dumped drops the sidecar (the trace is complete without it); a
    failed write (a full disk) is the writer's error: it raises, and the caller aborts."""

    def __init__(self, final: Path, header: JsonObject) -> None:
        self._final = final
        self._sha = hashlib.sha256()
        # the records of the next chunk: a writer may append a plain record (see `add`)
        # itself, then call `flush` once there are CHUNK of them
        self.buf: list[Any] = []
        self.records = 0
        self._fh: IO[bytes] | None
        self._fh, self._tmp = common.temp_beside(final, SUFFIX)
        self._sealed = False
        try:
            self._chunk({"format": FORMAT, "version": VERSION,
                         "header": json.loads(json.dumps(header))})
        except (ValueError, TypeError):
            self.drop()
        except BaseException:
            self.drop()
            raise

    def _chunk(self, obj: Any) -> None:
        assert self._fh is not None
        data = marshal.dumps(obj)
        head = _LEN.pack(len(data))
        self._sha.update(head)
        self._sha.update(data)
        self._fh.write(head)
        self._fh.write(data)

    def add(self, rec: list[Any], plain: bool = True) -> None:
        """One record as written to the JSON lines. `plain`: the record is the writer's own
        list, holding only PLAIN values, or containers of them it made itself; otherwise it
        goes through JSON (which also copies it: a caller may change its own lists later)."""
        if self._fh is None:
            return
        if not plain:
            rec = json.loads(json.dumps(rec))
        self.buf.append(rec)
        if len(self.buf) >= CHUNK:
            self.flush()

    def flush(self) -> None:
        """Dump the records gathered as one chunk."""
        if self._fh is not None:
            try:
                self._chunk(self.buf)
                self.records += len(self.buf)
            except (ValueError, TypeError):
                self.drop()
        self.buf.clear()

    def seal(self, trace_sha256: str) -> None:
        """The last chunk, naming the trace's bytes; the file made durable."""
        if self._fh is not None and self.buf:
            self.flush()
        if self._fh is None:
            return
        own = self._sha.hexdigest()
        self._chunk({"end": True, "records": self.records, "trace_sha256": trace_sha256,
                     "sha256": own})
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._fh = None
        os.chmod(self._tmp, 0o644)
        self._sealed = True

    def publish(self) -> None:
        """After the trace is in place: the sidecar beside it (or, when it was dropped, no
        sidecar: an older trace's must not stay). A failure here leaves a trace without a
        sidecar, which is whole."""
        target = records_path(self._final)
        try:
            if self._sealed:
                os.replace(self._tmp, target)
                self._sealed = False
                return
            os.unlink(target)
        except OSError:
            self.drop()
            try:
                os.unlink(target)
            except OSError:
                pass

    def drop(self) -> None:
        self._sealed = False
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass
            self._fh = None
        try:
            os.unlink(self._tmp)
        except OSError:
            pass


class Rebuild:
    """A sidecar written again by a reader from the JSON lines it decodes (when the one beside
    the trace did not match); published only once the trace proved whole. Best effort: a
    directory the reader cannot write in, a full disk, means no sidecar."""

    def __init__(self, trace: Path, header: JsonObject) -> None:
        self._trace = trace
        self._w: RecordsWriter | None = None
        try:
            self._w = RecordsWriter(trace, header)
        except OSError:
            pass

    def add(self, batch: list[Any]) -> None:
        """A batch as decoded, dumped at once: its reader may change the records next."""
        if self._w is None:
            return
        try:
            self._w.buf.extend(batch)
            self._w.flush()
        except OSError:
            self.drop()

    def publish(self) -> None:
        if self._w is None:
            return
        try:
            self._w.seal(file_sha256(self._trace))
            self._w.publish()
        except OSError:
            self.drop()
        self._w = None

    def drop(self) -> None:
        if self._w is not None:
            self._w.drop()
            self._w = None


def stale(trace: Path) -> bool:
    """A sidecar is beside the trace, ours, but was not used: it is to be rebuilt."""
    try:
        return os.stat(records_path(trace)).st_uid == os.getuid()
    except OSError:
        return False


def load(trace: Path) -> tuple[JsonObject, list[list[Any]]] | None:
    """The trace's header and record batches from its sidecar, or None (no sidecar, or one
    that does not match the trace, is damaged or not ours)."""
    with collector_paused():
        return _load(trace)


def _load(trace: Path) -> tuple[JsonObject, list[list[Any]]] | None:
    try:
        with open(records_path(trace), "rb") as fh:
            if not trusted(os.fstat(fh.fileno())):
                return None
            data = fh.read()
    except OSError:
        return None
    # The chunks' bounds first, then the last chunk alone: the SHA-256s are checked before
    # anything else is decoded (a damaged length inside a dump can make marshal allocate a
    # huge list before it finds the data short).
    bounds = []  # each chunk's (start of its length, start of its dump, end)
    pos = 0
    end = len(data)
    try:
        while pos < end:
            (n,) = _LEN.unpack_from(data, pos)
            if pos + 8 + n > end:
                return None
            bounds.append((pos, pos + 8, pos + 8 + n))
            pos += 8 + n
    except struct.error:
        return None
    if len(bounds) < 2:
        return None
    last_at, start, stop = bounds[-1]
    try:
        last = marshal.loads(data[start:stop])
    except (EOFError, ValueError, TypeError):
        return None
    match last:
        case {"end": True, "records": records, "sha256": sha, "trace_sha256": trace_sha} if (
                type(last) is dict):
            pass
        case _:
            return None
    if sha != hashlib.sha256(memoryview(data)[:last_at]).hexdigest():
        return None
    try:
        if trace_sha != file_sha256(trace):
            return None
    except OSError:
        return None
    try:
        chunks = [marshal.loads(data[start:stop]) for _, start, stop in bounds[:-1]]
    except (EOFError, ValueError, TypeError):
        return None
    first = chunks[0]
    match first:
        case {"format": fmt, "version": version, "header": dict(header)} if (
                type(first) is dict and type(header) is dict
                and fmt == FORMAT and version == VERSION):
            pass
        case _:
            return None
    batches = chunks[1:]
    if records != sum(len(b) if type(b) is list else -1 << 40 for b in batches):
        return None
    return header, batches

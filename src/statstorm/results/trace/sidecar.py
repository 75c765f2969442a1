"""The trace's record sidecar: the same records as the JSON lines, in a form quick to load.

Decoding JSON is most of the cost of reading a big trace. `TraceWriter` therefore also writes
every record it writes as a JSON line to `TRACE.records` (format `statstorm-trace-records`,
documented in docs/trace.md), in `marshal` chunks as the trace streams; readers
(`results.trace.jsonl.iter_batches`) use it instead of the JSON lines while it still matches the trace.

The JSON-lines file stays the trace: the sidecar only ever repeats it, and it is ignored
(the JSON lines are decoded) when it is missing, damaged, of another format version, not
owned by the current user (or by root and writable by no one else), or written for another
file (its trailer names the trace's size, modification time and inode). Deleting it is
always safe.

Layout: chunks, each an 8-byte little-endian length and one `marshal` dump. The first chunk is
{"format", "version", "header"}; then lists of records exactly as the JSON lines decode
(lists, header excluded); the last is {"end": True, "records": n, "source": [size,
mtime_ns, inode]}. Each record's values are those JSON gives back (a record holding
anything else, a tuple say, goes through JSON first), so both readers give equal records.
"""

from __future__ import annotations

import json
import marshal
import os
import struct
from pathlib import Path
from typing import IO, Any

from statstorm.results.common import collector_paused, trusted

FORMAT = "statstorm-trace-records"
VERSION = 1
SUFFIX = ".records"
CHUNK = 1 << 15  # records per marshal dump
_LEN = struct.Struct("<Q")
# Values JSON gives back as they were (same type, same value).
PLAIN = frozenset((str, int, float, bool, type(None)))


def records_path(trace: Path) -> Path:
    return trace.with_name(trace.name + SUFFIX)


def source_key(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


class RecordsWriter:
    """Writes the sidecar beside a trace being written (to a temp name; `finish` renames it).

    Any failure (an unmarshallable value, a full disk) drops the sidecar silently: the
    trace itself is complete without it."""

    def __init__(self, tmp: str, header: dict[str, Any]) -> None:
        self._tmp = tmp
        self._fh: IO[bytes] | None = None
        # the records of the next chunk: a writer may append a plain record (see `add`)
        # itself, then call `flush` once there are CHUNK of them
        self.buf: list[Any] = []
        self.records = 0
        try:
            self._fh = open(tmp, "wb")
            self._chunk({"format": FORMAT, "version": VERSION,
                         "header": json.loads(json.dumps(header))})
        except (OSError, ValueError, TypeError):
            self.drop()

    def _chunk(self, obj: Any) -> None:
        assert self._fh is not None
        data = marshal.dumps(obj)
        self._fh.write(_LEN.pack(len(data)))
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
            except (OSError, ValueError, TypeError):
                self.drop()
        self.buf.clear()

    def finish(self, trace_tmp: str, final: Path) -> None:
        """After the trace's last line is written to `trace_tmp` (to become `final`)."""
        if self._fh is not None and self.buf:
            self.flush()
        if self._fh is None:  # dropped: an older trace's sidecar must not stay beside it
            try:
                os.unlink(records_path(final))
            except OSError:
                pass
            return
        try:
            self._chunk({"end": True, "records": self.records,
                         "source": source_key(os.stat(trace_tmp))})
            self._fh.close()
            self._fh = None
            os.chmod(self._tmp, 0o644)
            os.replace(self._tmp, records_path(final))
        except (OSError, ValueError, TypeError):
            self.drop()

    def drop(self) -> None:
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


def load(trace: Path) -> tuple[dict[str, Any], list[list[Any]]] | None:
    """The trace's header and record batches from its sidecar, or None (no sidecar, or one
    that does not match the trace, is damaged or not ours)."""
    with collector_paused():
        return _load(trace)


def _load(trace: Path) -> tuple[dict[str, Any], list[list[Any]]] | None:
    try:
        st = os.stat(trace)
        with open(records_path(trace), "rb") as fh:
            if not trusted(os.fstat(fh.fileno())):
                return None
            data = fh.read()
    except OSError:
        return None
    try:
        chunks = []
        pos = 0
        end = len(data)
        while pos < end:
            (n,) = _LEN.unpack_from(data, pos)
            pos += 8
            if pos + n > end:
                return None
            chunks.append(marshal.loads(data[pos:pos + n]))
            pos += n
    except (EOFError, ValueError, TypeError, struct.error):
        return None
    if len(chunks) < 2:
        return None
    first, last = chunks[0], chunks[-1]
    if (type(first) is not dict or first.get("format") != FORMAT
            or first.get("version") != VERSION or type(first.get("header")) is not dict):
        return None
    if type(last) is not dict or last.get("end") is not True:
        return None
    batches = chunks[1:-1]
    if last.get("source") != source_key(st) or last.get("records") != sum(
            len(b) if type(b) is list else -1 << 40 for b in batches):
        return None
    return first["header"], batches

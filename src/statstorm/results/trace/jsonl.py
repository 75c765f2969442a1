"""The trace file itself: JSON Lines, optionally gzip compressed (see the package's docstring
and docs/trace.md). `TraceWriter` (`results.trace.writer`) streams one, sealed, with its record
sidecar (`results.trace.sidecar`); `iter_batches`, `iter_records` and `read_trace` read one
back, checking its seal (`results.trace.seal`), with one-line errors when it is malformed,
truncated or damaged.
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from pathlib import Path
from typing import IO, Any, Iterator

from statstorm.errors import UsageError
from statstorm.results.common import collector_paused
import statstorm.results.trace.seal as seal
from statstorm.results.trace.sidecar import Rebuild, stale
from statstorm.results.trace.sidecar import load as load_sidecar
from statstorm.results.trace.vocabulary import (FORMAT, INTERNED_ARGS, VERSION, CountRow,
                                                Operation, Request, RequestCounts, Syscall,
                                                Trace)
from statstorm.results.trace.writer import TraceWriter, write_trace

__all__ = ["BATCH_BYTES", "TraceWriter", "iter_batches", "iter_records", "read_trace",
           "write_trace"]


def _open_text(path: Path) -> IO[str]:
    try:
        raw = open(path, "rb")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such trace file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory; give a trace file written by "
                         "`statstorm trace -o`") from None
    except PermissionError:
        raise UsageError(f"{path}: permission denied; run as its owner (or root), or make "
                         "it readable (chmod o+r)") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        magic = raw.peek(2)[:2]
    except OSError as exc:
        raw.close()
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    stream: IO[bytes] = raw
    if magic == b"\x1f\x8b":
        stream = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
    # lines end at "\n" only, untranslated: the seal's digest covers the bytes as written
    return io.TextIOWrapper(stream, encoding="utf-8", errors="surrogateescape", newline="\n")


BATCH_BYTES = 1 << 22  # lines decoded per json.loads call: ~4 MB of text


def _damaged(path: Path, lineno: int) -> UsageError:
    return UsageError(f"{path}:{lineno}: not a statstorm trace line; the file is damaged or not "
                      "a trace (import strace output with `statstorm trace import`)")


def _check_header(path: Path, rec: Any) -> None:
    match rec:
        case {"format": fmt, **rest} if isinstance(rec, dict) and fmt == FORMAT:
            match rest:
                case {"version": version} if version == VERSION:
                    return
                case {"version": version}:
                    pass
                case _:
                    version = None
            raise UsageError(f"{path}: trace format version {version} "
                             f"is not supported (this statstorm reads {VERSION})")
    raise UsageError(f"{path}: not a statstorm trace (import strace output "
                     "with `statstorm trace import`)")


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
    `sidecar` is set, else from the JSON lines, whose seal is checked once they are read
    (`results.trace.seal`): a truncated or damaged trace raises `DamagedInput` before the
    last batch is over. A sidecar that did not match is rebuilt from the JSON lines."""
    loaded = load_sidecar(path) if sidecar else None
    if loaded is not None:
        header, batches = loaded
        _check_header(path, header)
        yield [header]
        yield from batches
        return
    rebuild: Rebuild | None = None
    try:
        for batch in _json_batches(path):
            if rebuild is None and sidecar and stale(path):
                rebuild = Rebuild(path, batch[0])
            elif rebuild is not None:
                rebuild.add(batch)
            yield batch
        if rebuild is not None:
            rebuild.publish()
    finally:
        if rebuild is not None:
            rebuild.drop()


def _json_batches(path: Path) -> Iterator[list[Any]]:
    fh = _open_text(path)
    check = seal.Check()
    with fh:
        lineno = 0
        try:
            line = fh.readline()
            while line and not line.strip():
                lineno += 1
                check.take([line])
                line = fh.readline()
            if not line:
                raise UsageError(f"{path}: empty file, not a statstorm trace")
            lineno += 1
            check.take([line])
            try:
                header = json.loads(line)
            except json.JSONDecodeError:
                if not line.endswith("\n"):
                    raise seal.truncated(path, "its only line is cut short") from None
                raise _damaged(path, lineno) from None
            if lineno == 1:
                _check_header(path, header)
            else:
                _check_record(path, lineno, header)
            yield [header]
            last: Any = header
            cut = False
            pending: list[Any] | None = None  # one batch behind: the last waits for the end
            while True:
                lines = fh.readlines(BATCH_BYTES)
                if not lines:
                    break
                check.take(lines)
                if not lines[-1].endswith("\n"):  # the file's last line: whole, or cut?
                    try:
                        json.loads(lines[-1])
                    except json.JSONDecodeError:
                        cut = True
                        lines.pop()
                recs = _decode_lines(path, lineno + 1, lines)
                lineno += len(lines)
                if recs:
                    last = recs[-1]
                if pending is not None:
                    yield pending
                pending = recs
            seal.check_end(path, header, last, check, cut, lambda: _open_text(path))
            if pending is not None:
                yield pending
        except EOFError:
            raise seal.truncated(path, "its compressed stream ends early") from None
        except (OSError, zlib.error, UnicodeDecodeError) as exc:
            raise seal.damaged(path, f"unreadable at line {lineno}: {exc}") from None


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
                elif tag == "z":
                    t.sealed = True
    except (ValueError, TypeError, IndexError, AttributeError, KeyError):
        raise UsageError(f"{path}: malformed trace record {str(rec)[:80]}") from None
    return t

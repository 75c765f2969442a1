"""Helpers shared by result files: files written atomically (temp files beside the target,
signals held back while publishing, output directories checked first), schema-versioned JSON,
loading millions of small records without the garbage collector. Every publishing writer
passes the tests' `write` fault point (statstorm.faults)."""

from __future__ import annotations

import errno
import gc
import json
import os
import signal
import stat
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from statstorm import faults
from statstorm.errors import UsageError
from statstorm.results.jsontypes import JsonObject


def write_atomic(path: Path, data: str | bytes, like: os.stat_result | None = None,
                 new_mode: int | None = None, durable: bool = True) -> None:
    """Write `data` to `path` through a temp file in the same directory + rename: never a
    partial file (and, when `durable`, fsync'ed before the rename). The file gets the mode and
    owner of `like` (the file it replaces), else `new_mode` (else the temp file's 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    faults.write(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        mode = like.st_mode & 0o7777 if like is not None else new_mode
        if mode is not None:
            os.chmod(tmp, mode)
        if like is not None:
            set_owner(Path(tmp), like.st_uid, like.st_gid)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def set_owner(path: Path, uid: int, gid: int) -> None:
    """Give `path` this owner when it has another and we may (root). A file system with no
    owners of its own to set (afsd.fuse answers chown with ENOSYS: AFS keeps its own) keeps
    the one it gives."""
    if os.geteuid() != 0:
        return
    st = path.stat()  # chown follows a symlink: the owner of what it points to
    if (st.st_uid, st.st_gid) == (uid, gid):
        return
    try:
        os.chown(path, uid, gid)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            raise


def write_json_atomic(path: Path, data: Any) -> None:
    """Write `data` as JSON to `path` atomically (see write_atomic)."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def known_fields(cls: type, data: JsonObject, **missing: Any) -> dict[str, Any]:
    """The entries of a result's JSON object that name a field of dataclass `cls` (the
    constructor's keyword arguments in a from_json; keys the class derives, such as a
    total, and keys of newer writers are left out), over `missing`: the values of fields
    an older or hand-made file may lack."""
    names = {f.name for f in fields(cls)}
    return {**missing, **{k: v for k, v in data.items() if k in names}}


def trusted(st: os.stat_result) -> bool:
    """Whether a sidecar of `marshal` data (the record sidecar, the what-if input cache) may
    be loaded: the current user's own, or root's (a trace recorded with sudo) when no one
    else can write it. Loading marshal data runs no code, but a crafted file can crash."""
    return st.st_uid == os.getuid() or (st.st_uid == 0 and not st.st_mode & 0o022)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector: loading millions of small records, none cyclic,
    would otherwise trigger collections that cost more than the loading itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# The largest JSON input read (results, profiles, lab states, manifests): far above any
# statstorm writes, far below what would exhaust memory.
MAX_JSON_BYTES = 256 << 20


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; anything else (missing, a
    directory, a FIFO or device, too big, unreadable) is a one-line UsageError naming the
    fix (`what`: what to give instead). A FIFO is refused without waiting for a writer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; {what}") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory; {what}") from None
    except PermissionError:
        raise UsageError(f"{path}: permission denied; make it readable or run as its owner") \
            from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot open it ({exc.strerror}); {what}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{path}: is a directory; {what}")
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{path}: not a regular file (a pipe, socket or device); save the "
                             f"output to a file first and give that file")
        if st.st_size > limit:
            raise UsageError(f"{path}: {st.st_size:,} bytes, more than the {limit:,} statstorm "
                             "reads; give a shorter excerpt (e.g. `head -n 1000000`)")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror}); give a readable file") \
            from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise UsageError(f"{path}: more than the {limit:,} bytes statstorm reads (it grew while "
                         "read); give a shorter excerpt")
    return data


def read_json(path: Path, kind: str) -> Any:
    """A JSON input of at most MAX_JSON_BYTES; one-line UsageError otherwise."""
    data = read_bounded(path, MAX_JSON_BYTES, f"give a {kind} file")
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a valid {kind} file ({exc}); re-create it") from None
    except RecursionError:
        raise UsageError(f"{path}: not a valid {kind} file (nested too deep); re-create it") \
            from None


def check_output_dir(path: Path, flag: str = "-o") -> None:
    """Refuse an output path whose directory is missing or not writable, or that is a
    directory, before any work is done (validate first)."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UsageError(f"{path} is a directory; give a file name to {flag}")
    if not parent.is_dir():
        raise UsageError(f"{path}: directory {parent} does not exist; create it or choose "
                         f"another {flag}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{path}: directory {parent} is not writable; choose another {flag}")


def temp_beside(path: Path, suffix: str = "") -> tuple[BinaryIO, str]:
    """A new temp file in `path`'s directory (`.NAME.XXXXXXXX[suffix]`), open for writing;
    every writer of trace files makes its temp files here (tests inject faults through it)."""
    faults.write(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    return os.fdopen(fd, "wb"), tmp


@contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held back meanwhile (in the main thread, where Python runs signal
    handlers), then handled as they would have been: a publish or a clean-up runs whole."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    sigs = (signal.SIGINT, signal.SIGTERM)
    old = {s: signal.signal(s, lambda n, f: got.append(n)) for s in sigs}
    try:
        yield
    finally:
        # both handlers put back with both signals blocked: one arriving between the two
        # would otherwise run its own handler with the other still ours
        signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
        try:
            for s, h in old.items():
                signal.signal(s, h)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
        for n in got[:1]:
            h = old[signal.Signals(n)]
            if callable(h):
                h(n, None)
            elif h == signal.SIG_DFL:
                os.kill(os.getpid(), n)

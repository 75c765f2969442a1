"""Helpers shared by result files: files written atomically, schema-versioned JSON, and
loading millions of small records without the garbage collector."""

from __future__ import annotations

import gc
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from statstorm.errors import UsageError


def write_atomic(path: Path, data: str | bytes, like: os.stat_result | None = None,
                 new_mode: int | None = None, durable: bool = True) -> None:
    """Write `data` to `path` through a temp file in the same directory + rename: never a
    partial file (and, when `durable`, fsync'ed before the rename). The file gets the mode and
    owner of `like` (the file it replaces), else `new_mode` (else the temp file's 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
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
        if like is not None and os.geteuid() == 0:
            os.chown(tmp, like.st_uid, like.st_gid)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """Write `data` as JSON to `path` atomically (see write_atomic)."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


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


def read_json(path: Path, kind: str) -> Any:
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such {kind} file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not a valid {kind} file ({exc}); re-create it") from None

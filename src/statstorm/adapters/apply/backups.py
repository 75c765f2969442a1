"""apply's backup sets: `<state root>/apply/<stamp>-<pool>/`, a copy of every file before
it changes and a manifest (the target, the files, the storage steps, the status) that
`apply --rollback` restores from; and the reading and writing of the configuration files
apply edits.

Every write is all-or-nothing: a temp file in the same directory, fsync'ed, renamed over the
target (and the directory fsync'ed); on any failure the previous file is intact and the temp
file gone. A backup set that cannot be completed is removed whole. Configuration texts are the
files' bytes decoded as UTF-8 with `surrogateescape`, line ends untouched, so every byte an
edit does not mean to change is written back as it was."""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.results.apply import SCHEMA, FileEdit, StorageStep
from statstorm.results.common import MAX_JSON_BYTES, read_bounded, write_atomic

MANIFEST = "manifest.json"
IN_EFFECT = ("applied", "verified", "applying", "rollback-failed")


def decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def read_text(path: Path) -> str | None:
    """A configuration file's text (its bytes as they are: see the module's note); None when
    it does not exist."""
    try:
        return decode(path.read_bytes())
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def _sync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file(path: Path, data: str | bytes, like: os.stat_result | None = None,
               new_mode: int | None = None) -> None:
    """Replace `path` with `data` all at once (a `str` as read by read_text); the mode and
    owner of `like`, else `new_mode`."""
    write_atomic(path, encode(data) if isinstance(data, str) else data, like, new_mode)
    _sync_dir(path.parent)


def _write_manifest(d: Path, data: dict[str, Any]) -> None:
    write_file(d / MANIFEST, json.dumps(data, indent=2) + "\n")


def root(env: Env) -> Path:
    return env.state_root / "apply"


def save(env: Env, name: str, target: dict[str, Any], edits: list[FileEdit],
         steps: list[StorageStep] | None = None) -> Path:
    """Copy every file about to change into a new backup set; refuse if one changed since the
    plan was made (someone else is editing it). The set appears whole or not at all."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    d = root(env) / f"{stamp}-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}"
    d.mkdir(parents=True)
    try:
        entries: list[dict[str, Any]] = []
        for i, e in enumerate(edits):
            entry: dict[str, Any] = {"path": str(e.path), "existed": e.before is not None}
            try:
                data = e.path.read_bytes()
                st = e.path.stat()
            except FileNotFoundError:
                data, st = None, None
            if (None if data is None else decode(data)) != e.before:
                raise UsageError(f"{e.path} changed while apply was planning: run it again")
            if data is not None and st is not None:
                copy = d / f"{i}-{e.path.name}"
                write_file(copy, data, new_mode=0o600)
                entry.update(copy=copy.name, mode=st.st_mode & 0o7777, uid=st.st_uid,
                             gid=st.st_gid)
            entries.append(entry)
        _write_manifest(d, {
            "schema": SCHEMA, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "target": target, "files": entries,
            "storage": [st.to_json() for st in steps or []], "status": "applying"})
    except BaseException as exc:
        shutil.rmtree(d, ignore_errors=True)
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write the backup set in {root(env)} "
                             f"({exc.strerror or exc}): free space or fix its permissions; "
                             "nothing was changed") from None
        raise
    return d


def save_steps(d: Path, steps: list[StorageStep]) -> None:
    data = manifest(d)
    data["storage"] = [st.to_json() for st in steps]
    _write_manifest(d, data)


def _bad(d: Path, why: str) -> UsageError:
    return UsageError(f"{d / MANIFEST} is not a usable apply backup manifest ({why}): put its "
                      f"files back by hand from the copies in {d}, then move {d} out of "
                      f"{d.parent}")


def _load(d: Path) -> dict[str, Any]:
    """The manifest as JSON with its schema, status and target checked (not its files)."""
    try:
        data = json.loads(read_bounded(d / MANIFEST, MAX_JSON_BYTES, "see below"))
    except UsageError as exc:
        raise _bad(d, str(exc).split(": ", 1)[-1].split(";")[0]) from None
    except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8
        raise _bad(d, f"not JSON: {str(exc).splitlines()[0][:80]}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise _bad(d, f"not a {SCHEMA} manifest")
    if not isinstance(data.get("status"), str) or not isinstance(data.get("target"), dict):
        raise _bad(d, "no status or target")
    if not all(isinstance(data["target"].get(k), (str, type(None))) for k in ("lab", "pool", "url")):
        raise _bad(d, "the target's lab, pool and url must be text")
    return data


def _check_files(d: Path, data: dict[str, Any]) -> None:
    files, storage = data.get("files"), data.get("storage", [])
    if not isinstance(files, list) or not isinstance(storage, list):
        raise _bad(d, "files and storage must be lists")
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) \
                or not os.path.isabs(entry["path"]) or not isinstance(entry.get("existed"), bool):
            raise _bad(d, f"a file entry without an absolute path and existed: {entry!r:.60}")
        if not entry["existed"]:
            continue
        copy = entry.get("copy")
        if not isinstance(copy, str) or not copy or "/" in copy or copy in (".", ".."):
            raise _bad(d, f"no copy named for {entry['path']}")
        if not all(isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool)
                   for k in ("mode", "uid", "gid")):
            raise _bad(d, f"no mode, uid and gid for {entry['path']}")
        if not (d / copy).is_file():
            raise _bad(d, f"the copy {copy} of {entry['path']} is missing")
    for step in storage:
        try:
            StorageStep.from_json(step)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise _bad(d, f"a storage step that cannot be read: {step!r:.60}") from None


def manifest(d: Path) -> dict[str, Any]:
    """A backup set's manifest, checked whole (UsageError naming the fix otherwise)."""
    data = _load(d)
    _check_files(d, data)
    return data


def mark(d: Path, status: str, reason: str = "") -> None:
    data = manifest(d)
    data["status"] = status
    if reason:
        data["reason"] = reason
    _write_manifest(d, data)


def copy_text(d: Path, entry: dict[str, Any]) -> str | None:
    """The text a manifest entry's file had before apply (None: it did not exist)."""
    return read_text(d / entry["copy"]) if entry["existed"] else None


def restore(d: Path) -> list[Path]:
    """Put back every file of a backup set (remove the ones apply created). The manifest and
    every copy are read before the first file is written."""
    entries = manifest(d)["files"]
    try:
        copies = [(d / e["copy"]).read_bytes() if e["existed"] else None for e in entries]
    except OSError as exc:
        raise _bad(d, f"a copy cannot be read: {exc.strerror or exc}") from None
    out: list[Path] = []
    for entry, data in zip(entries, copies):
        path = Path(entry["path"])
        try:
            if data is not None:
                write_file(path, data, new_mode=int(entry["mode"]))
                if os.geteuid() == 0:
                    os.chown(path, int(entry["uid"]), int(entry["gid"]))
            else:
                path.unlink(missing_ok=True)
        except OSError as exc:
            raise ComponentError(f"cannot put back {path} ({exc.strerror or exc}); "
                                 f"{len(out)} file(s) before it are back: fix that and run "
                                 "`statstorm apply --rollback` again") from None
        out.append(path)
    return out


def sets(env: Env) -> list[Path]:
    top = root(env)
    return sorted(p for p in top.iterdir() if (p / MANIFEST).is_file()) if top.is_dir() else []


def newest(env: Env, lab: str | None = None, pool: str | None = None,
           ) -> tuple[Path, dict[str, Any]] | None:
    """The newest backup set that may be in effect (applied or verified; also applying, an
    apply that stopped before it could roll back, and rollback-failed: putting the same files
    back again is harmless), for the lab or pool when one is named, with its manifest checked
    whole. A set whose status or target cannot be read stops the search (it may be the one
    in effect): UsageError naming the fix."""
    for d in reversed(sets(env)):
        data = _load(d)
        t = data["target"]
        if data["status"] not in IN_EFFECT:
            continue
        if (lab and t.get("lab") != lab) or (pool and t.get("pool") != pool):
            continue
        _check_files(d, data)
        return d, data
    return None

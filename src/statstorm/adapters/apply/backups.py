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
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.results.apply import (BackupFile, BackupTarget, FileEdit, Manifest, ManifestError,
                                     StorageStep)
from statstorm.results.common import MAX_JSON_BYTES, read_bounded, set_owner, write_atomic

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
    owner of `like`, else `new_mode`. A symlink (Debian's sites-enabled/NAME →
    ../sites-available/NAME) is kept: the file it points to is the one replaced."""
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    write_atomic(path, encode(data) if isinstance(data, str) else data, like, new_mode)
    _sync_dir(path.parent)


def _write_manifest(d: Path, m: Manifest) -> None:
    write_file(d / MANIFEST, json.dumps(m.to_json(), indent=2) + "\n")


def root(env: Env) -> Path:
    return env.state_root / "apply"


def save(env: Env, name: str, target: dict[str, Any], edits: list[FileEdit],
         steps: list[StorageStep] | None = None) -> Path:
    """Copy every file about to change into a new backup set; refuse if one changed since the
    plan was made (someone else is editing it). The set appears whole or not at all.
    `target` is the apply target as JSON (pool_config.Target.to_json)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    d = root(env) / f"{stamp}-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}"
    d.mkdir(parents=True)
    try:
        entries: list[BackupFile] = []
        for i, e in enumerate(edits):
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
                entries.append(BackupFile(str(e.path), True, copy.name, st.st_mode & 0o7777,
                                          st.st_uid, st.st_gid))
            else:
                entries.append(BackupFile(str(e.path), False))
        _write_manifest(d, Manifest(
            BackupTarget.from_json(target),
            "applying", tuple(entries), tuple(steps or ()),
            created=datetime.now(timezone.utc).isoformat(timespec="seconds")))
    except BaseException as exc:
        shutil.rmtree(d, ignore_errors=True)
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write the backup set in {root(env)} "
                             f"({exc.strerror or exc}): free space or fix its permissions; "
                             "nothing was changed") from None
        raise
    return d


def save_steps(d: Path, steps: list[StorageStep]) -> None:
    _write_manifest(d, replace(manifest(d), storage=tuple(steps)))


def _bad(d: Path, why: str) -> UsageError:
    return UsageError(f"{d / MANIFEST} is not a usable apply backup manifest ({why}): put its "
                      f"files back by hand from the copies in {d}, then move {d} out of "
                      f"{d.parent}")


def _read(d: Path) -> object:
    """The manifest's JSON."""
    try:
        return json.loads(read_bounded(d / MANIFEST, MAX_JSON_BYTES, "see below"))
    except UsageError as exc:
        raise _bad(d, str(exc).split(": ", 1)[-1].split(";")[0]) from None
    except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8
        raise _bad(d, f"not JSON: {str(exc).splitlines()[0][:80]}") from None


def _whole(d: Path, data: object) -> Manifest:
    """The manifest checked whole, its copies there (UsageError naming the fix otherwise)."""
    try:
        m = Manifest.from_json(data)
    except ManifestError as exc:
        raise _bad(d, str(exc)) from None
    for f in m.files:
        if f.existed and not (d / f.copy).is_file():
            raise _bad(d, f"the copy {f.copy} of {f.path} is missing")
    return m


def manifest(d: Path) -> Manifest:
    """A backup set's manifest, checked whole (UsageError naming the fix otherwise)."""
    return _whole(d, _read(d))


def mark(d: Path, status: str, reason: str = "") -> None:
    m = manifest(d)
    _write_manifest(d, replace(m, status=status, reason=reason or m.reason))


def copy_text(d: Path, entry: BackupFile) -> str | None:
    """The text a manifest entry's file had before apply (None: it did not exist)."""
    return read_text(d / entry.copy) if entry.existed else None


def restore(d: Path) -> list[Path]:
    """Put back every file of a backup set (remove the ones apply created). The manifest and
    every copy are read before the first file is written."""
    entries = manifest(d).files
    try:
        copies = [(d / e.copy).read_bytes() if e.existed else None for e in entries]
    except OSError as exc:
        raise _bad(d, f"a copy cannot be read: {exc.strerror or exc}") from None
    out: list[Path] = []
    for entry, data in zip(entries, copies):
        path = Path(entry.path)
        try:
            if data is not None:
                write_file(path, data, new_mode=entry.mode)
                set_owner(path, entry.uid, entry.gid)
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
           ) -> tuple[Path, Manifest] | None:
    """The newest backup set that may be in effect (applied or verified; also applying, an
    apply that stopped before it could roll back, and rollback-failed: putting the same files
    back again is harmless), for the lab or pool when one is named, with its manifest checked
    whole. A set whose status or target cannot be read stops the search (it may be the one
    in effect): UsageError naming the fix."""
    for d in reversed(sets(env)):
        data = _read(d)
        try:
            head = Manifest.head(data)
        except ManifestError as exc:
            raise _bad(d, str(exc)) from None
        t = head.target
        if head.status not in IN_EFFECT:
            continue
        if (lab and t.lab != lab) or (pool and t.pool != pool):
            continue
        return d, _whole(d, data)
    return None


LAB_REMOVED = "lab-removed"  # a lab's set once the lab is gone: nothing left to roll back


def retire_lab(env: Env, lab: str) -> int:
    """Mark the lab's sets still in effect `lab-removed` (its files went with it, so a later
    `apply --rollback` must not pick them); how many. Unreadable sets are left as they are."""
    n = 0
    for d in sets(env):
        try:
            head = Manifest.head(_read(d))
        except (ManifestError, UsageError):
            continue
        if head.target.lab == lab and head.status in IN_EFFECT:
            mark(d, LAB_REMOVED, f"lab {lab} removed")
            n += 1
    return n


def last_change(env: Env, *, lab: str = "", pool: str = "") -> tuple[Path, Manifest] | None:
    """The newest backup set in effect for a lab, or for a pool (a site of the system Apache,
    "apache:NAME:PORT", also by the set of its whole PHP, "apache"): the last change apply made
    to it (UsageError as `newest`, OSError when the sets cannot be listed)."""
    if lab:
        return newest(env, lab=lab)
    found = [s for name in dict.fromkeys((pool, pool.split(":", 1)[0]))
             if (s := newest(env, pool=name)) is not None]
    return max(found, key=lambda s: s[0].name) if found else None

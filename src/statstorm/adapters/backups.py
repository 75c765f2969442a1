"""apply's backup sets: `<state root>/apply/<stamp>-<pool>/`, a copy of every file before
it changes and a manifest (the target, the files, the storage steps, the status) that
`apply --rollback` restores from."""

from __future__ import annotations

import os
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.results.apply import SCHEMA, FileEdit, StorageStep
from statstorm.results.common import read_json, write_atomic, write_json_atomic


def read_text(path: Path) -> str | None:
    """A configuration file's text; None when it does not exist."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def root(env: Env) -> Path:
    return env.state_root / "apply"


def save(env: Env, name: str, target: dict[str, Any], edits: list[FileEdit],
         steps: list[StorageStep] | None = None) -> Path:
    """Copy every file about to change into a new backup set; refuse if one changed since the
    plan was made (someone else is editing it)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    d = root(env) / f"{stamp}-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}"
    d.mkdir(parents=True)
    entries: list[dict[str, Any]] = []
    for i, e in enumerate(edits):
        if read_text(e.path) != e.before:
            shutil.rmtree(d, ignore_errors=True)
            raise UsageError(f"{e.path} changed while apply was planning: run it again")
        entry: dict[str, Any] = {"path": str(e.path), "existed": e.before is not None}
        if e.before is not None:
            copy = d / f"{i}-{e.path.name}"
            shutil.copy2(e.path, copy)
            st = e.path.stat()
            entry.update(copy=copy.name, mode=st.st_mode & 0o7777, uid=st.st_uid, gid=st.st_gid)
        entries.append(entry)
    write_json_atomic(d / "manifest.json", {
        "schema": SCHEMA, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "target": target, "files": entries,
        "storage": [st.to_json() for st in steps or []], "status": "applying"})
    return d


def save_steps(d: Path, steps: list[StorageStep]) -> None:
    data = manifest(d)
    data["storage"] = [st.to_json() for st in steps]
    write_json_atomic(d / "manifest.json", data)


def manifest(d: Path) -> dict[str, Any]:
    data = read_json(d / "manifest.json", "apply backup manifest")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UsageError(f"{d}/manifest.json: not a statstorm apply backup set")
    return data


def mark(d: Path, status: str, reason: str = "") -> None:
    data = manifest(d)
    data["status"] = status
    if reason:
        data["reason"] = reason
    write_json_atomic(d / "manifest.json", data)


def restore(d: Path) -> list[Path]:
    """Put back every file of a backup set (remove the ones apply created)."""
    out = []
    for entry in manifest(d)["files"]:
        path = Path(entry["path"])
        if entry["existed"]:
            write_atomic(path, (d / entry["copy"]).read_bytes(), new_mode=int(entry["mode"]))
            if os.geteuid() == 0:
                os.chown(path, int(entry["uid"]), int(entry["gid"]))
        else:
            path.unlink(missing_ok=True)
        out.append(path)
    return out


def sets(env: Env) -> list[Path]:
    top = root(env)
    return sorted(p for p in top.iterdir() if (p / "manifest.json").is_file()) if top.is_dir() else []

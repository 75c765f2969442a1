"""What apply changes, as written to its backup sets and its JSON: its mode, file edits, live
storage steps (GlusterFS volume options, FUSE mount options) and the manifest of a backup set.
--verify's figures are in results.apply_verify."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from statstorm.results.apply_verify import Measurement, Prediction, Verify
from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject, JsonValue

SCHEMA = "statstorm.apply/1"


class ApplyMode(StrEnum):
    """What an apply run did."""

    DRY_RUN = "dry-run"  # showed the changes, wrote nothing
    NOTHING = "nothing"  # nothing to change in the files and storage statstorm manages
    APPLIED = "applied"
    ROLLED_BACK = "rolled-back"  # by --verify, or by --rollback

# The kinds of storage step (the same names as the model's change kinds).
VOLUME = "volume"
MOUNT = "mount"
MIRROR = "mirror"  # a local copy of the code (adapters/apply/mirror.py)


@dataclass
class FileEdit:
    path: Path
    before: str | None  # None: the file does not exist yet
    after: str
    labels: tuple[str, str] = ("current", "recommended")

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            (self.before or "").splitlines(keepends=True), self.after.splitlines(keepends=True),
            f"{self.path} ({self.labels[0]})", f"{self.path} ({self.labels[1]})"))


@dataclass
class StorageStep:
    """A live storage change: options of a GlusterFS volume (VOLUME), of a FUSE mount
    (MOUNT: a client with the new options stacked on the mount point), or a local mirror of
    the code (MIRROR: `before` names the network tree as `source`, `after` the copy's
    `files` and `bytes`)."""

    kind: str  # VOLUME | MOUNT | MIRROR
    where: str  # the volume, the mount point, or the mirror's directory
    before: dict[str, str]
    after: dict[str, str]
    client_argv: list[str] = field(default_factory=list)  # MOUNT: the client serving it before
    client_pid: int = 0  # MOUNT: the client apply started
    done: bool = False

    def text(self) -> str:
        if self.kind == MIRROR:
            size = int(self.after.get("bytes") or 0)
            return (f"mirror {self.before.get('source', '?')} → {self.where}: a local copy "
                    f"of {self.after.get('files', '?')} files, {size / 1048576:.1f} MiB")
        what = f"gluster volume {self.where}" if self.kind == VOLUME else f"mount {self.where}"
        return what + ": " + ", ".join(f"{k} {self.before.get(k) or '(unset)'} → {v}"
                                       for k, v in self.after.items())

    def to_json(self) -> JsonObject:
        return {"kind": self.kind, "where": self.where, "before": dict(self.before),
                "after": dict(self.after), "client_argv": list(self.client_argv),
                "client_pid": self.client_pid, "done": self.done}

    @classmethod
    def from_json(cls, data: JsonValue) -> "StorageStep":
        d = jr.obj(data, "storage step")
        if "kind" not in d or "where" not in d:
            raise ValueError("a storage step needs its kind and where")
        return cls(jr.str_(d, "kind"), jr.str_(d, "where"), jr.str_map(d, "before"),
                   jr.str_map(d, "after"), list(jr.strs(d, "client_argv")),
                   jr.int_(d, "client_pid"), jr.bool_(d, "done"))


def compare(before: JsonValue, after: JsonValue,
            predicted: JsonValue | None = None) -> JsonObject:
    """--verify's result as JSON, from measurements and whatif's prediction as JSON (see
    results.apply_verify.Verify)."""
    return Verify(Measurement.from_json(before), Measurement.from_json(after),
                  Prediction.from_json(predicted) if predicted is not None else None).to_json()


# -- backup sets -------------------------------------------------------------------------------
class ManifestError(ValueError):
    """A backup manifest that cannot be read (the message says what is wrong with it)."""


def _opt_text(d: JsonObject, key: str) -> str | None:
    """A target's text field (None: absent or null)."""
    v = d.get(key)
    if v is not None and not isinstance(v, str):
        raise ManifestError("the target's lab, pool and url must be text")
    return v


@dataclass(frozen=True)
class BackupTarget:
    """The target a backup set was made for: what --rollback reads of it (the lab, the pool,
    the page), and the object as apply wrote it, written back unchanged."""

    lab: str | None
    pool: str | None
    url: str | None
    written: JsonObject = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: object) -> BackupTarget:
        if not isinstance(d, dict):
            raise ManifestError("no status or target")
        return cls(_opt_text(d, "lab"), _opt_text(d, "pool"), _opt_text(d, "url"), dict(d))

    def to_json(self) -> JsonObject:
        return dict(self.written)


@dataclass(frozen=True)
class BackupFile:
    """One file of a backup set: where it lives and, when it existed, its copy in the set
    and its mode and owner."""

    path: str
    existed: bool
    copy: str = ""
    mode: int = 0
    uid: int = 0
    gid: int = 0

    def to_json(self) -> JsonObject:
        out: JsonObject = {"path": self.path, "existed": self.existed}
        if self.copy:
            out.update(copy=self.copy, mode=self.mode, uid=self.uid, gid=self.gid)
        return out

    @classmethod
    def from_json(cls, e: object) -> BackupFile:
        match e:
            case {"path": str(path), "existed": bool(existed)} if os.path.isabs(path):
                pass
            case _:
                raise ManifestError(
                    f"a file entry without an absolute path and existed: {e!r:.60}")
        if not existed:
            return cls(path, False)
        match e:
            case {"copy": str(copy)} if copy and "/" not in copy and copy not in (".", ".."):
                pass
            case _:
                raise ManifestError(f"no copy named for {path}")
        match e:
            case {"mode": int(mode), "uid": int(uid), "gid": int(gid)} if not any(
                    isinstance(x, bool) for x in (mode, uid, gid)):
                return cls(path, True, copy, mode, uid, gid)
        raise ManifestError(f"no mode, uid and gid for {path}")


@dataclass(frozen=True)
class Manifest:
    """A backup set's manifest (manifest.json): the target, the files, the storage steps and
    the status (applying, applied, verified, rolled-back, rollback-failed)."""

    target: BackupTarget
    status: str
    files: tuple[BackupFile, ...] = ()
    storage: tuple[StorageStep, ...] = ()
    created: str = ""
    reason: str = ""
    schema: str = SCHEMA

    def to_json(self) -> JsonObject:
        out: JsonObject = {"schema": self.schema, "created": self.created,
                     "target": self.target.to_json(), "files": [f.to_json() for f in self.files],
                     "storage": [st.to_json() for st in self.storage], "status": self.status}
        if self.reason:
            out["reason"] = self.reason
        return out

    @classmethod
    def head(cls, d: object) -> Manifest:
        """The schema, status and target only (ManifestError otherwise); files and steps are
        read by from_json."""
        if not isinstance(d, dict) or jr.opt_str(d, "schema") != SCHEMA:
            raise ManifestError(f"not a {SCHEMA} manifest")
        match d:
            case {"status": str(status), "target": target}:
                pass
            case _:
                raise ManifestError("no status or target")
        return cls(BackupTarget.from_json(target), status,
                   created=jr.str_(d, "created"), reason=jr.str_(d, "reason"))

    @classmethod
    def from_json(cls, d: object) -> Manifest:
        """The whole manifest, every part checked (ManifestError naming the first fault)."""
        head = cls.head(d)
        assert isinstance(d, dict)
        match d:
            case {"files": list(files), "storage": list(storage)}:
                pass
            case {"files": list(files)} if "storage" not in d:
                storage = []
            case _:
                raise ManifestError("files and storage must be lists")
        entries = tuple(BackupFile.from_json(e) for e in files)
        steps = []
        for step in storage:
            try:
                steps.append(StorageStep.from_json(step))
            except (KeyError, TypeError, ValueError, AttributeError):
                raise ManifestError(f"a storage step that cannot be read: {step!r:.60}") from None
        return cls(head.target, head.status, entries, tuple(steps), head.created, head.reason)

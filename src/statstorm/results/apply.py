"""What apply changes, as written to its backup sets and its JSON: file edits and live
storage steps (GlusterFS volume options, FUSE mount options)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "statstorm.apply/1"
# The kinds of storage step (the same names as the model's change kinds).
VOLUME = "volume"
MOUNT = "mount"


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
    """A live storage change: options of a GlusterFS volume (VOLUME) or of a FUSE mount
    (MOUNT: a client with the new options stacked on the mount point)."""

    kind: str  # VOLUME | MOUNT
    where: str  # the volume, or the mount point
    before: dict[str, str]
    after: dict[str, str]
    client_argv: list[str] = field(default_factory=list)  # MOUNT: the client serving it before
    client_pid: int = 0  # MOUNT: the client apply started
    done: bool = False

    def text(self) -> str:
        what = f"gluster volume {self.where}" if self.kind == VOLUME else f"mount {self.where}"
        return what + ": " + ", ".join(f"{k} {self.before.get(k) or '(unset)'} → {v}"
                                       for k, v in self.after.items())

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "where": self.where, "before": self.before,
                "after": self.after, "client_argv": self.client_argv,
                "client_pid": self.client_pid, "done": self.done}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "StorageStep":
        return cls(str(d["kind"]), str(d["where"]), dict(d["before"]), dict(d["after"]),
                   list(d.get("client_argv") or []), int(d.get("client_pid") or 0),
                   bool(d.get("done")))

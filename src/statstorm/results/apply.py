"""What apply changes, as written to its backup sets and its JSON: file edits and live
storage steps (GlusterFS volume options, FUSE mount options)."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "statstorm.apply/1"
# --verify: a change is "worse" beyond these margins (a short run's noise stays inside them).
WORSE_SYSCALLS = 0.02  # metadata calls per request up by more than 2 %
WORSE_RPS = 0.10  # throughput down by more than 10 %
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


def compare(before: dict[str, Any], after: dict[str, Any],
            predicted: dict[str, Any] | None = None) -> dict[str, Any]:
    """--verify's result: the change from `before` to `after`, why it is worse (empty: it is
    not), and whatif's prediction beside the measurement (`predicted`, when made)."""
    def rel(key: str) -> float | None:
        b, a = before.get(key), after.get(key)
        return None if not b or a is None else round((a - b) / b, 4)

    why = []
    sc = rel("syscalls_per_request")
    if sc is not None and sc > WORSE_SYSCALLS:
        why.append(f"metadata calls per request rose {sc:+.1%}")
    rps = rel("rps")
    if rps is not None and rps < -WORSE_RPS:
        why.append(f"throughput fell {rps:+.1%}")
    if after.get("errors", 0) > before.get("errors", 0):
        why.append(f"{after['errors']} failed requests (before: {before.get('errors', 0)})")
    out = {"before": before, "after": after,
           "change": {"rps": rps, "p50_ms": rel("p50_ms"), "p99_ms": rel("p99_ms"),
                      "syscalls_per_request": sc,
                      "round_trips_per_request": rel("round_trips_per_request")},
           "worse": "; ".join(why)}
    if predicted is not None:
        out["predicted"] = {**predicted, "measured": {
            "calls_per_request": after.get("syscalls_per_request"),
            "round_trips_per_request": after.get("round_trips_per_request")},
            "error": {k: _err(predicted["proposed"].get(k), after.get(m)) for k, m in (
                ("calls_per_request", "syscalls_per_request"),
                ("round_trips_per_request", "round_trips_per_request"))}}
    return out


def _err(predicted: float | None, measured: float | None) -> float | None:
    """(predicted − measured) / measured; None when either is missing or measured is 0."""
    if predicted is None or measured is None or not measured:
        return None
    return round((predicted - measured) / measured, 4)

"""NFS round trips from `/proc/self/mountstats`: RPCs sent per operation, per mount.

The kernel writes one block per mount:

    device SERVER:/export mounted on /mnt/code with fstype nfs4 statvers=1.1
    \topts:\trw,vers=4.2,...
    ...
    \tper-op statistics
    \t     GETATTR: 100 100 0 13200 11200 7 50 60 0

Mount points (and devices) escape blanks and backslashes as octal (`\\040` is a space).
Non-NFS mounts get a bare `device` line. Each per-op line is the operation's name, right
aligned in twelve columns, then: operations, transmissions, major timeouts, bytes sent,
bytes received, queue ms, round-trip ms, execute ms and (statvers 1.1) errors.

What counts as a round trip (`round_trips`): the first number of each per-op line, the RPC
requests of that operation the client issued and got answered, summed over all operations.
Work the client caches absorbed (attribute cache, lookup cache, close-to-open skipped) sends
nothing and is not counted. Retransmissions (transmissions minus operations) are not extra
round trips of the application and are left out. Background RPCs that fall in the window
(NFSv4 lease RENEW/SEQUENCE, NULL pings) are real round trips and are counted.

A mount point listed twice (mounts stacked on one directory) keeps the last block, the mount
on top, which is the one paths under it reach.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from statstorm.errors import ComponentError, UsageError
from statstorm.model.storage_kinds import kind_of
from statstorm.results.storage_kind import StorageKind

MOUNTSTATS = Path("/proc/self/mountstats")

_DEVICE = re.compile(r"^device (\S+) mounted on (\S+) with fstype (\S+)(?: statvers=(\S+))?\s*$")
_OP = re.compile(r"^\s+([A-Za-z0-9_]+):\s+([0-9]{1,20}(?:\s+[0-9]{1,20})*)$")  # 64-bit counters
_OCTAL = re.compile(r"\\([0-7]{3})")
FIX = "give the unedited contents of /proc/self/mountstats"


def unescape(field: str) -> str:
    """Undo the kernel's octal escapes (`\\040` → space, `\\134` → backslash)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse(text: str) -> dict[str, dict[str, int]]:
    """mountstats text → {mount point: {operation: operations sent}} for the NFS mounts.

    Every operation the kernel lists is kept, zeros included. An NFS mount without a
    per-op section maps to {}. Raises UsageError on text that is not mountstats.
    """
    if not text.strip():
        raise UsageError(f"empty mountstats text: {FIX}")
    out: dict[str, dict[str, int]] = {}
    ops: dict[str, int] | None = None
    in_ops = False
    seen_device = False
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.startswith("device "):
            m = _DEVICE.match(raw)
            if not m:
                raise UsageError(f"line {number}: malformed device line {raw[:60]!r}: {FIX}")
            seen_device = True
            in_ops = False
            if kind_of(m.group(3)) is StorageKind.NFS:
                ops = {}
                out[unescape(m.group(2))] = ops
            else:
                ops = None
            continue
        if not raw.strip():
            continue
        if not seen_device:
            raise UsageError(f"line {number}: text before the first `device` line: {FIX}")
        if ops is None:
            continue
        if raw.strip() == "per-op statistics":
            in_ops = True
            continue
        if not in_ops:
            continue
        m = _OP.match(raw.rstrip())
        if not m:
            raise UsageError(f"line {number}: malformed per-op line {raw.strip()[:60]!r}: {FIX}")
        values = m.group(2).split()
        if len(values) < 8:
            raise UsageError(f"line {number}: {m.group(1)} has {len(values)} counters, "
                             f"expected 8 or 9: {FIX}")
        ops[m.group(1)] = int(values[0])
    if not seen_device:
        raise UsageError(f"no `device` line: not mountstats text: {FIX}")
    return out


def snapshot(mount_point: str | Path, *, source: Path = MOUNTSTATS) -> dict[str, int]:
    """Operations sent so far on the NFS mount at `mount_point`, read from the live kernel."""
    try:
        text = source.read_text(errors="replace")
    except OSError as exc:
        raise ComponentError(f"cannot read {source}: {exc.strerror}: is /proc mounted?") from None
    mounts = parse(text)
    key = str(mount_point).rstrip("/") or "/"
    if key not in mounts:
        raise UsageError(f"no NFS mount at {key}: check it with `findmnt {key}` "
                         "(mountstats lists only NFS mounts of this mount namespace)")
    return mounts[key]


def delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """Operations sent between two snapshots of one mount; unchanged operations are left
    out. A counter that went down (the mount was remounted) raises ComponentError."""
    out: dict[str, int] = {}
    for op in sorted(set(before) | set(after)):
        diff = after.get(op, 0) - before.get(op, 0)
        if diff < 0:
            raise ComponentError(f"NFS {op} count went down between the snapshots (the mount "
                                 "was remounted): take both snapshots on one mount")
        if diff:
            out[op] = diff
    return out


def round_trips(calls: Mapping[str, int]) -> int:
    """Network round trips in a `delta`: the sum of operations sent (module docstring)."""
    return sum(calls.values())

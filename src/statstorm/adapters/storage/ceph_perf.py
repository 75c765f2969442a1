"""CephFS round trips from a client's admin socket: `ceph --admin-daemon <asok> perf dump`.

A ceph-fuse (or libcephfs) client keeps counters of its own, read over its admin socket as
JSON. Two sections count what went over the network:

    "client":   {"reply": {"avgcount": N, "sum": S, "avgtime": T}, ...}
    "objecter": {"op": N, "op_r": R, "op_w": W, ...}

`client.reply.avgcount` is the metadata requests the client sent to an MDS and got a reply
to (lookup, getattr, open, readdir, create…); what the client answered from its own cache
while it held the capabilities sends nothing and is not counted. `objecter.op` is the
operations the client sent to OSDs (file data read and written, `op_r` and `op_w` of them).
A round trip (`round_trips`) is one of either. Capability messages the MDS and the client
exchange on their own (revokes, releases) are not requests and are not counted.

The admin socket of a live client is found from its PID: the listening Unix socket of that
process whose path ends in `.asok` (`/proc/<pid>/fd` and `/proc/net/unix`), so it is found
wherever the client's config put it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from statstorm.adapters.host import unix_sockets
from statstorm.adapters.storage import mounts
from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.model.storage_kinds import STORAGE
from statstorm.results.storage_kind import StorageKind

CEPH = "/usr/bin/ceph"  # ceph-common's tool
FIX = "give the JSON `ceph --admin-daemon <client asok> perf dump` prints"
MDS, OSD, OSD_READ, OSD_WRITE = "mds_requests", "osd_ops", "osd_reads", "osd_writes"
_COUNTED = (MDS, OSD)  # the parts of a round trip; reads and writes are inside OSD


def parse(text: str) -> dict[str, int]:
    """perf dump JSON → {mds_requests, osd_ops, osd_reads, osd_writes}. Raises UsageError
    on text that is not a client's perf dump."""
    try:
        dump = json.loads(text)
    except ValueError:
        raise UsageError(f"not JSON: {FIX}") from None
    if not isinstance(dump, dict):
        raise UsageError(f"not a perf dump (no sections): {FIX}")
    client, objecter = dump.get("client"), dump.get("objecter")
    if not isinstance(client, dict) or not isinstance(objecter, dict):
        raise UsageError("no `client` and `objecter` sections: this is not a CephFS client's "
                         f"admin socket (an MDS's or an OSD's?); {FIX}")
    reply = client.get("reply")
    if not isinstance(reply, dict) or "avgcount" not in reply:
        raise UsageError(f"no client.reply.avgcount: {FIX}")
    try:
        return {MDS: int(reply["avgcount"]), OSD: int(objecter.get("op", 0)),
                OSD_READ: int(objecter.get("op_r", 0)), OSD_WRITE: int(objecter.get("op_w", 0))}
    except (TypeError, ValueError):
        raise UsageError(f"a counter that is not a number: {FIX}") from None


def snapshot(env: Env, asok: Path) -> dict[str, int]:
    """The client's counters now."""
    res = env.run([CEPH, "--admin-daemon", str(asok), "perf", "dump"], check=False,
                  what=f"ceph --admin-daemon {asok} perf dump", timeout=30)
    if res.returncode != 0:
        raise ComponentError(f"could not read {asok}: {res.first_error_line()} (is its "
                             "ceph-fuse still running?)")
    try:
        return parse(res.stdout)
    except UsageError as exc:
        raise ComponentError(f"{asok}: {exc}") from None


def delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """The counters' growth; a counter that went down (the client restarted) counts from 0."""
    return {k: (after[k] - before.get(k, 0)) if after[k] >= before.get(k, 0) else after[k]
            for k in after}


def total(calls: Mapping[str, int]) -> int:
    """Round trips: MDS requests plus OSD operations."""
    return sum(calls.get(k, 0) for k in _COUNTED)


def asok_of(pid: int) -> Path | None:
    """The admin socket of a Ceph client process, or None."""
    found = [p for p in unix_sockets.held(pid) if p.endswith(".asok")]
    return Path(found[0]) if found else None


def asok_for_mount(mount_point: str) -> Path | None:
    """The admin socket of the ceph-fuse client serving `mount_point`, or None (no such
    client, or it has no admin socket). A round-trip window on it: `snapshot`, `delta` and
    `total` in a `round_trips.Window`."""
    client = mounts.fuse_client(mount_point, STORAGE[StorageKind.CEPHFS].client)
    return asok_of(client[0]) if client else None


__all__ = ["MDS", "OSD", "OSD_READ", "OSD_WRITE", "asok_of", "delta", "parse", "snapshot",
           "total", "asok_for_mount"]

"""Network round trips per request: which counter measures the storage under a path, and
the difference it shows over a window (a trace, a load run).

Which counter a kind of storage has is its entry in model/storage_kinds.py. A GlusterFS FUSE
mount whose volume this machine manages: the volume's profile (gluster_profile.py here;
profiling is started and stays on, a cheap volume option a later window needs too). An NFS
mount: the client's counters in /proc/self/mountstats (nfs_mountstats.py here; every
process's traffic on the mount counts). A ceph-fuse mount: the client's admin-socket counters
(ceph_perf.py here). Anything else: none (local disks make no round trips;
other network file systems have no counter statstorm reads yet).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, Mapping

from statstorm.adapters.storage import (afs_client, afs_stats, ceph_perf, gluster_profile,
                                        mounts, nfs_mountstats)
from statstorm.env import Env
from statstorm.errors import StatstormError
from statstorm.model.storage_kinds import STORAGE, RoundTrips


class Window:
    """A snapshot of a storage's counters at `open()`, the difference at `close(requests)`.
    Never raises: a counter that cannot be read gives None and a note."""

    def __init__(self, label: dict[str, str], snapshot: Callable[[], Any],
                 diff: Callable[[Any, Any], Mapping[str, int]], breakdown: str,
                 total: Callable[[Mapping[str, int]], int]) -> None:
        self.label, self.snapshot, self.diff = label, snapshot, diff
        self.breakdown, self.total = breakdown, total
        self.before: Any = None
        self.round_trips: int | None = None  # after `close`, when measured
        self.note = ""

    def open(self) -> None:
        try:
            self.before = self.snapshot()
        except StatstormError as exc:
            self.note = f"round trips not measured: {exc}"

    def close(self, requests: int) -> dict[str, object] | None:
        if self.before is None:
            return None
        try:
            calls = self.diff(self.before, self.snapshot())
        except StatstormError as exc:
            self.note = f"round trips not measured: {exc}"
            return None
        n = self.round_trips = self.total(calls)
        return {**self.label, "round_trips": n,
                "per_request": round(n / requests, 2) if requests else None,
                self.breakdown: dict(sorted(calls.items(), key=lambda kv: -kv[1]))}


def gluster(env: Env, volume: str) -> Window:
    """The FOPs the volume's bricks served (its profile, started if it is off)."""
    def snapshot() -> gluster_profile.ProfileSnapshot:
        gluster_profile.start(env, volume)
        return gluster_profile.info(env, volume)
    return Window({"volume": volume}, snapshot, gluster_profile.delta, "by_fop",
                  gluster_profile.round_trips)


def ceph(env: Env, mount_point: str) -> Window | None:
    """The requests ceph-fuse sent to the MDS and the operations to the OSDs (its admin
    socket's counters); None when the client has no socket."""
    asok = ceph_perf.asok_for_mount(mount_point)
    if asok is None:
        return None
    return Window({"mount": mount_point, "admin_socket": str(asok)},
                  lambda: ceph_perf.snapshot(env, asok), ceph_perf.delta, "by_kind",
                  ceph_perf.total)


def nfs(mount_point: str, *, source: Path = nfs_mountstats.MOUNTSTATS) -> Window:
    """The operations the NFS client sent on the mount."""
    return Window({"mount": mount_point},
                  lambda: nfs_mountstats.snapshot(mount_point, source=source),
                  nfs_mountstats.delta, "by_op", nfs_mountstats.round_trips)


def afs(env: Env, mount_point: str) -> Window | None:
    """The RPCs the OpenAFS file server of the mount's cell served (its xstat counts)."""
    servers = afs_client.servers_of(mount_point)
    if not servers:
        return None
    return Window({"server": servers[0]}, lambda: afs_stats.snapshot(env, servers[0]),
                  afs_stats.delta, "by_rpc", afs_stats.round_trips)


def window_for(env: Env, path: str) -> Window | None:
    """The round-trip counter of the storage holding `path`, or None."""
    if not path:
        return None
    try:
        info = mounts.detect(path)
    except OSError:
        return None
    source = STORAGE[info.storage].round_trips
    if source is RoundTrips.GLUSTER_PROFILE and shutil.which("gluster"):
        name = info.cache_options.get("volume", "")
        return gluster(env, name) if name else None
    if source is RoundTrips.NFS_MOUNTSTATS:
        return nfs(info.mount_point)
    if source is RoundTrips.CEPH_ADMIN_SOCKET:
        return ceph(env, info.mount_point)
    if source is RoundTrips.AFS_XSTAT:
        return afs(env, info.mount_point)
    return None

"""Network round trips per request: which counter measures the storage under a path.

A GlusterFS FUSE mount whose volume this machine manages: the volume's profile
(adapters/gluster_profile.py). An NFS mount: the client's counters in /proc/self/mountstats
(adapters/nfs_mountstats.py). Anything else: none (local disks make no round trips; other
network file systems have no counter statstorm reads yet).
"""

from __future__ import annotations

import shutil
from typing import Protocol

from statstorm.adapters import gluster_profile, mounts, nfs_mountstats
from statstorm.env import Env


class Window(Protocol):
    note: str

    def open(self) -> None: ...
    def close(self, requests: int) -> dict[str, object] | None: ...


def window_for(env: Env, path: str, volume: str = "") -> Window | None:
    """The round-trip counter of the storage holding `path` (`volume`: a GlusterFS volume
    already known, e.g. a lab's), or None."""
    if volume:
        return gluster_profile.Window(env, volume)
    if not path:
        return None
    try:
        info = mounts.detect(path)
    except OSError:
        return None
    if info.kind == "glusterfs-fuse" and shutil.which("gluster"):
        name = dict(info.cache_options).get("volume", "")
        return gluster_profile.Window(env, name) if name else None
    if info.kind == "nfs":
        return nfs_mountstats.Window(info.mount_point)
    return None

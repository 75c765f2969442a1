"""Which mount a path lives on, and the options that decide its metadata caching.

Parsers take text (a `/proc/self/mounts` line, a FUSE client's command line) so they are
tested on golden fixtures; `detect()` reads the live system. What each option means to PHP
(how long a deploy can be seen stale) is `model/mount_options.py`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from statstorm.adapters.host import procs
from statstorm.adapters.storage import afs_options, ceph_admin
from statstorm.adapters.storage.nfs_mountstats import unescape
from statstorm.model import ceph_fuse, storage_kinds
from statstorm.model.mount_options import (
    GLUSTER_CONTENT_KEYS, GLUSTER_FUSE_DEFAULTS, GLUSTER_FUSE_KEYS, CacheView, OptionMeaning,
    gluster_cache_volume_options, gluster_client_options, gluster_volume_name,
    nfs_cache_options, split_options, sshfs_cache_options)
from statstorm.model.storage_kinds import CEPHFS_CACHE_KEYS, STORAGE
from statstorm.results.storage_kind import StorageKind


@dataclass(frozen=True)
class MountEntry:
    source: str
    mount_point: str
    fstype: str
    options: str


def parse_mounts(text: str) -> list[MountEntry]:
    """Lines of /proc/self/mounts (or /etc/mtab) → entries, in order."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and not line.startswith("#"):
            out.append(MountEntry(unescape(parts[0]), unescape(parts[1]), parts[2], parts[3]))
    return out


def current() -> list[MountEntry]:
    """This machine's mounts now (`/proc/self/mounts`); [] when it cannot be read."""
    try:
        return parse_mounts(Path("/proc/self/mounts").read_text())
    except OSError:
        return []


def find_mount(entries: list[MountEntry], path: str) -> MountEntry | None:
    """The entry whose mount point is the longest prefix of absolute `path` (last one wins)."""
    best: MountEntry | None = None
    for e in entries:
        mp = e.mount_point.rstrip("/") or "/"
        if path == mp or path.startswith(mp + "/") or mp == "/":
            if best is None or len(mp) >= len(best.mount_point.rstrip("/") or "/"):
                best = e
    return best


@dataclass(frozen=True)
class MountInfo:
    """What fsbench reports about the mount of one PATH."""

    path: str
    mount_point: str
    source: str
    fstype: str
    kind: str  # its storage's mount label (model/storage_kinds.py): local, nfs, glusterfs-fuse…
    options: dict[str, str]
    cache_options: dict[str, str]  # the effective options that decide metadata caching
    volume_options: dict[str, str] = field(default_factory=dict)
    client_pid: int = 0
    notes: tuple[str, ...] = ()
    meanings: tuple[OptionMeaning, ...] = ()

    @property
    def storage(self) -> StorageKind:
        return storage_kinds.kind_of(self.fstype)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def kind_of(fstype: str) -> str:
    """The mount label of a file-system type (`model/storage_kinds.py` classifies it)."""
    return storage_kinds.mount_label(fstype)


# ---------------------------------------------------------------- assembling


def describe(path: str, entry: MountEntry, *, client_argv: list[str] | None = None,
             client_pid: int = 0, volume_options: dict[str, str] | None = None,
             notes: tuple[str, ...] = ()) -> MountInfo:
    """Put a mount entry (plus a FUSE client's argv and volume options) into a MountInfo."""
    opts = split_options(entry.options)
    kind = storage_kinds.kind_of(entry.fstype)
    cache: dict[str, str] = {}
    vol: dict[str, str] = {}
    extra = list(notes)
    if kind is StorageKind.NFS:
        cache = nfs_cache_options(opts)
    elif kind is StorageKind.GLUSTERFS:
        cache = dict(GLUSTER_FUSE_DEFAULTS)
        if client_argv is None:
            extra.append("GlusterFS FUSE client process not found: timeouts shown are the "
                         "client defaults")
        else:
            copts = gluster_client_options(client_argv)
            cache.update({k: copts[k] for k in GLUSTER_FUSE_KEYS + GLUSTER_CONTENT_KEYS
                          if k in copts})
            cache["volume"] = gluster_volume_name(copts, entry.source)
        vol = gluster_cache_volume_options(volume_options or {})
    elif kind is StorageKind.OPENAFS and client_argv is not None:  # afsd.fuse's sizes
        cache = afs_options.cache_options(client_argv)
    elif kind is StorageKind.CEPHFS and client_argv is not None:  # ceph-fuse's settings:
        cache = (ceph_admin.cache_options(client_pid, client_argv) if client_pid  # running
                 else ceph_fuse.cache_options(client_argv, CEPHFS_CACHE_KEYS))
    elif kind is StorageKind.SSHFS:
        if client_argv is None:
            extra.append("sshfs process not found: cache options shown are the defaults")
        cache = sshfs_cache_options(client_argv or [])
    meanings = storage_kinds.option_meanings(kind, CacheView(entry.fstype, opts, cache, vol))
    return MountInfo(path=path, mount_point=entry.mount_point, source=entry.source,
                     fstype=entry.fstype, kind=STORAGE[kind].label, options=opts,
                     cache_options=cache, volume_options=vol, client_pid=client_pid,
                     notes=tuple(extra), meanings=tuple(meanings))


def fuse_clients(mount_point: str, program: str) -> list[tuple[int, list[str]]]:
    """PID and argv of each FUSE client process whose last argument is `mount_point`, the
    newest first (when clients are stacked on one mount point, the newest is on top)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        argv = procs.cmdline(int(entry.name))
        if argv and argv[-1].rstrip("/") == mount_point.rstrip("/") \
                and program in os.path.basename(argv[0]):
            found.append((int(entry.name), argv))
        elif argv and program == STORAGE[StorageKind.SSHFS].client \
                and program in os.path.basename(argv[0]) and mount_point in argv:
            found.append((int(entry.name), argv))
    return sorted(found, key=lambda f: procs.start_ticks(f[0]), reverse=True)


def fuse_client(mount_point: str, program: str) -> tuple[int, list[str]] | None:
    """The FUSE client serving `mount_point` now (the top one when several are stacked)."""
    found = fuse_clients(mount_point, program)
    return found[0] if found else None


def detect(path: str, *, volume_reader: Callable[[str], dict[str, str]] | None = None,
           mounts_text: str | None = None) -> MountInfo:
    """Detect the live mount of `path`; `volume_reader(volume)` reads GlusterFS volume options."""
    real = os.path.realpath(path)
    entries = current() if mounts_text is None else parse_mounts(mounts_text)
    entry = find_mount(entries, real)
    if entry is None:
        entry = MountEntry("?", "/", "unknown", "")
    kind = storage_kinds.kind_of(entry.fstype)
    argv: list[str] | None = None
    pid = 0
    notes: list[str] = []
    vol_opts: dict[str, str] | None = None
    if STORAGE[kind].client:
        found = fuse_client(entry.mount_point, STORAGE[kind].client)
        if found:
            pid, argv = found
    if kind is StorageKind.GLUSTERFS:
        volume = gluster_volume_name(gluster_client_options(argv or []), entry.source)
        if volume_reader is not None and volume and shutil.which("gluster"):
            try:
                vol_opts = volume_reader(volume)
            except Exception as exc:  # the volume may live on another server
                notes.append(f"volume {volume} options not readable here ({exc})")
        else:
            notes.append(f"volume {volume or '?'} options not read (gluster CLI not available)")
    return describe(real, entry, client_argv=argv, client_pid=pid, volume_options=vol_opts,
                    notes=tuple(notes))

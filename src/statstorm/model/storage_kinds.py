"""The one table of storage kinds: for each kind, the `/proc/mounts` types that name it,
whether it is network storage, the options that decide its metadata caching and what they
mean to PHP (`model/mount_options.py`), how the forecast models its kernel caches
(`model/network_forecast.py`), where its round trips are read, how its options are changed
live and kept, and whether a lab can be built on it. Pure.

`kind_of(fstype)` is the only classifier of a file-system type: the mount detection, check's
facts and rules, the trace's network mounts, whatif's and the demo's forecasts all ask it.
A new storage kind is one entry here (and a member of `results.storage_kind.StorageKind`)
plus its adapter in `adapters/storage/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Callable, Iterable

from statstorm.model.mount_options import (
    GLUSTER_FUSE_KEYS, GLUSTER_VOLUME_CACHE_KEYS, NFS_CACHE_KEYS, SSHFS_CACHE_KEYS, CacheView,
    OptionMeaning, gluster_meanings, local_meanings, nfs_meanings, sshfs_meanings)
from statstorm.results.storage_kind import StorageKind


class CacheModel(StrEnum):
    """The kernel caches that decide which metadata calls reach the storage, as
    `model/network_forecast.py` models them (its `MountCaches.kind`)."""

    FUSE = "fuse"  # attribute, entry and negative timeouts
    NFS = "nfs"  # acregmin…acdirmax doubling, lookupcache, close-to-open


class RoundTrips(StrEnum):
    """Where the round trips a window of PHP made to the storage are read
    (`adapters/storage/round_trips.py`)."""

    GLUSTER_PROFILE = "gluster volume profile"  # adapters/storage/gluster_profile.py
    NFS_MOUNTSTATS = "/proc/self/mountstats"  # adapters/storage/nfs_mountstats.py
    CEPH_ADMIN_SOCKET = "ceph-fuse admin socket"  # adapters/storage/ceph_perf.py
    AFS_XSTAT = "xstat_fs_test"  # the file server's RPC counts: adapters/storage/afs_stats.py
    NONE = ""  # local (none made) or no counter read yet


class LiveChange(StrEnum):
    """How `statstorm apply` changes a mount's cache options (`adapters/apply/storage_steps.py`)."""

    STACKED_CLIENT = "stacked client"  # a second FUSE client with the new options on top
    REMOUNT = "remount"  # only when mounted anew: apply says how, the admin does it
    BY_HAND = "by hand"  # apply does not know how


@dataclass(frozen=True)
class Storage:
    """One kind of storage, as every part of statstorm sees it."""

    kind: StorageKind
    title: str  # as a person writes it
    fstypes: tuple[str, ...]  # the `/proc/mounts` types naming it; the first is `mount -t`'s
    network: bool  # a metadata call may leave the machine
    mount_label: str = ""  # how fsbench's and check's mount records name it ('' = kind)
    client: str = ""  # the FUSE client program serving a mount ('' = the kernel's client)
    cache_keys: tuple[str, ...] = ()  # the options that decide its metadata caching
    # what its cache options mean to PHP (model/mount_options.py); None: not modelled
    meanings: Callable[[CacheView], list[OptionMeaning]] | None = None
    cache_model: CacheModel | None = None  # None: no model of its own
    round_trips: RoundTrips = RoundTrips.NONE
    live_change: LiveChange = LiveChange.BY_HAND
    set_live: str = ""  # how its cache options are changed on a live mount
    persist: str = ""  # where that change is kept across a remount or a reboot
    fstab_type: str = ""  # the fstab type of its mounts when not `/proc/mounts`' own
    lab: bool = False  # a lab can be built on it (adapters/labs/lab_build.py)

    @property
    def label(self) -> str:
        return self.mount_label or str(self.kind)


# ---------------------------------------------------------------- CephFS
# What the CephFS entry reads (ceph-fuse's settings: its `--client_…=` arguments or ceph.conf;
# the kernel client's: mount options). Sources: ceph's src/client/fuse_ll.cc (every FUSE
# reply carries 0 s entry and attribute timeouts), src/common/options (client_cache_size
# 16384), the kernel's fs/ceph/super.c (dcache on by default). docs/lab-ceph-notes.md.
CEPHFS_CACHE_KEYS = ("client_cache_size", "client_cache_mid", "client_caps_release_delay",
                     "fuse_use_invalidate_cb", "dcache", "nodcache", "caps_max")
CEPH_FUSE_CACHE_SIZE = 16384  # client_cache_size's default: inodes ceph-fuse keeps
# ceph-fuse's settings that add work to every FUSE request (model/ceph_fuse.py), as statstorm
# writes them (Ceph reads `-` and `_` alike)
CEPH_FUSE_PER_CALL_KEYS = ("fuse-set-user-groups", "debug-client")


def cephfs_meanings(fstype: str, opts: dict[str, str]) -> list[OptionMeaning]:
    """What a CephFS mount's caching means to PHP: the client answers a stat or a lookup
    itself while the MDS lets it hold the inode's (or the directory's) capabilities, and
    goes to the MDS otherwise; no timeout is involved, so a deploy is seen at once."""
    if fstype == "ceph":  # the kernel client
        dcache = "nodcache" not in opts
        out = [OptionMeaning("caps", "from the MDS", "the kernel answers stat and lookup from "
                             "its caches while it holds the inode's capabilities; another "
                             "client's change revokes them, so a deploy is seen at once")]
        out.append(OptionMeaning(
            "dcache", "on" if dcache else "off",
            "a missing file in a directory whose Fs capability the client holds and whose "
            "listing it has in full is answered ENOENT without the MDS (PHP's include_path "
            "and autoloader probes)" if dcache else
            "every lookup of a missing file is an MDS round trip (nodcache)"))
        if "caps_max" in opts:
            out.append(OptionMeaning("caps_max", opts["caps_max"], "the client keeps at most "
                                     "this many capabilities; files beyond it go to the MDS"))
        return out
    size = opts.get("client_cache_size", str(CEPH_FUSE_CACHE_SIZE))
    return [
        OptionMeaning("entry/attr timeout", "0 s", "ceph-fuse replies to FUSE with 0 s "
                      "timeouts: every PHP stat and path lookup crosses into ceph-fuse (a "
                      "context switch, no network) and is answered from its cache while it "
                      "holds the inode's capabilities; a deploy is seen at once"),
        OptionMeaning("client_cache_size", size, f"ceph-fuse keeps at most {size} inodes "
                      "(files and directories): a code tree with more loses whole directory "
                      "listings, and PHP's probes of missing names there go to the MDS; a "
                      "request's walk that needs more asks the MDS for all it lost"),
    ]


NOT_MODELLED = "metadata caching of this file system is not modelled; measure it"

# OpenAFS: afsd's flags that size its caches (the flag without its dash), as a mount's cache
# options name them; model/afs_cache.py computes the ones afsd autotunes.
AFS_CACHE_KEYS = ("stat", "dcache", "volumes", "blocks", "files", "chunksize")
AFS_AUTOTUNED = "autotuned"  # the key listing the options afsd computed itself
AFS_MEMCACHE = "memcache"
AFS_CLIENT = "client"  # afsd.fuse, or the kernel module's afsd
# afsd.fuse's FUSE timeouts (libfuse's high-level options; model/afs_fuse.py), as mount options
AFS_FUSE_TIMEOUT_KEYS = ("attr-timeout", "entry-timeout", "negative-timeout")


def afs_meanings(view: CacheView) -> list[OptionMeaning]:
    """What an AFS client's cache options mean to PHP."""
    c = view.cache
    if not c:
        return [OptionMeaning("afsd", "?", "the cache manager's options were not read: its stat "
                              "cache decides whether a warm stat costs a round trip")]
    auto = set(c.get(AFS_AUTOTUNED, "").split(","))

    def how(key: str) -> str:
        return f"{c.get(key, '?')}" + (" (autotuned)" if key in auto else "")
    out = [OptionMeaning("-stat", how("stat"), "status entries (one per file or directory): "
                         "while they hold every file PHP touches, a warm stat, realpath or "
                         "OPcache check costs no RPC (the file server's callback keeps the "
                         "status valid until the file changes; a deploy is seen at once); a "
                         "tree larger than this is fetched again, file by file, every request"),
           OptionMeaning("-dcache", how("dcache"), "chunk entries in memory: which file chunks "
                         "the disk cache holds; PHP's reads of uncached code and data miss "
                         "beyond this (OPcache keeps the code itself)"),
           OptionMeaning("-volumes", how("volumes"), "volume location entries: one per volume "
                         "the tree crosses; more volumes than this re-ask the VL server"),
           OptionMeaning("-blocks", how("blocks"), "KiB of cache "
                         + ("in memory" if AFS_MEMCACHE in c else "on disk")
                         + ": the file contents the client keeps"),
           OptionMeaning("-files", how("files"), "cache files (chunks on disk)")]
    return out


TABLE: tuple[Storage, ...] = (
    Storage(StorageKind.LOCAL, "local disk",
            ("ext4", "ext2", "ext3", "xfs", "btrfs", "tmpfs", "zfs", "f2fs", "overlay"),
            network=False, meanings=lambda v: local_meanings(v.fstype, v.options),
            set_live="nothing to change: the kernel's dentry and inode caches are coherent",
            lab=True),
    Storage(StorageKind.GLUSTERFS, "GlusterFS", ("glusterfs", "fuse.glusterfs"), network=True,
            mount_label="glusterfs-fuse", client="glusterfs",
            cache_keys=GLUSTER_FUSE_KEYS + GLUSTER_VOLUME_CACHE_KEYS,
            meanings=lambda v: gluster_meanings(v.cache, v.typed),
            cache_model=CacheModel.FUSE, round_trips=RoundTrips.GLUSTER_PROFILE,
            live_change=LiveChange.STACKED_CLIENT,
            set_live="`gluster volume set` for the volume's options; the FUSE client's "
                     "timeouts by a second client stacked on the mount point",
            persist="the volume keeps its options; the client's in /etc/fstab's mount options",
            fstab_type="glusterfs",  # /proc/mounts: fuse.glusterfs; mount.glusterfs is called
            lab=True),
    Storage(StorageKind.NFS, "NFS", ("nfs", "nfs4"), network=True, cache_keys=NFS_CACHE_KEYS,
            meanings=lambda v: nfs_meanings(v.cache), cache_model=CacheModel.NFS,
            round_trips=RoundTrips.NFS_MOUNTSTATS, live_change=LiveChange.REMOUNT,
            set_live="an NFS mount takes attribute and lookup cache options only when it is "
                     "mounted anew: put them in /etc/fstab and remount it while the site is "
                     "quiet",
            persist="/etc/fstab's mount options"),
    # Capabilities from the MDS, not timeouts, decide what both clients answer alone
    # (cephfs_meanings below). A lab's cluster: adapters/storage/ceph.py
    Storage(StorageKind.CEPHFS, "CephFS", ("ceph", "fuse.ceph-fuse", "fuse.ceph"),
            network=True, client="ceph-fuse",
            cache_keys=CEPHFS_CACHE_KEYS + CEPH_FUSE_PER_CALL_KEYS,
            meanings=lambda v: cephfs_meanings(v.fstype, {**v.options, **v.cache}),
            set_live="ceph-fuse: `ceph daemon <its admin socket> config set client_cache_size "
                     "N` (fuse_set_user_groups and debug_client likewise; a lab's ceph-fuse is "
                     "restarted with them); the kernel client's dcache/caps_max only when "
                     "mounted anew",
            persist="ceph.conf's [client] section (ceph-fuse); /etc/fstab's mount options "
                    "(the kernel client)",
            round_trips=RoundTrips.CEPH_ADMIN_SOCKET, lab=True),
    # the kernel's client (or kAFS): type afs. afsd.fuse's mounts are plain `fuse` (source
    # `AFS`) unless started with `-o subtype=afs`, as a lab's are (adapters/storage/openafs.py):
    # `fuse.afs`. Its caches: model/afs_cache.py; its round trips: the file server's xstat.
    Storage(StorageKind.OPENAFS, "OpenAFS", ("afs", "openafs", "fuse.afs"), network=True,
            client="afsd.fuse", cache_keys=AFS_CACHE_KEYS + AFS_FUSE_TIMEOUT_KEYS,
            meanings=lambda v: afs_meanings(v) if v.cache else [
                OptionMeaning(v.fstype, "?", NOT_MODELLED)],
            round_trips=RoundTrips.AFS_XSTAT,
            set_live="the cache manager takes its cache sizes only when it starts: restart "
                     "the client with the new afsd options while the site is quiet (a lab: "
                     "afsd.fuse unmounted and started again)",
            persist="afsd's OPTIONS in /etc/openafs/afs.conf.client (Debian: "
                    "/etc/openafs/afs.conf), then `systemctl restart openafs-client`",
            lab=True),
    Storage(StorageKind.SSHFS, "sshfs", ("fuse.sshfs",), network=True, client="sshfs",
            cache_keys=SSHFS_CACHE_KEYS, meanings=lambda v: sshfs_meanings(v.typed),
            cache_model=CacheModel.FUSE, persist="/etc/fstab's mount options"),
    Storage(StorageKind.SMB, "SMB/CIFS", ("cifs", "smb3"), network=True,
            persist="/etc/fstab's mount options"),
    Storage(StorageKind.NINEP, "9p", ("9p",), network=True),
    Storage(StorageKind.FUSE, "a FUSE file system", (), network=True,
            cache_model=CacheModel.FUSE),
    Storage(StorageKind.OTHER, "other", (), network=False),
)

STORAGE: dict[StorageKind, Storage] = {s.kind: s for s in TABLE}
# Other names `lab up --storage` takes for a kind: AFS users say afs.
LAB_ALIASES: dict[str, StorageKind] = {"afs": StorageKind.OPENAFS}
_BY_FSTYPE: dict[str, StorageKind] = {t: s.kind for s in TABLE for t in s.fstypes}
FUSE_PREFIX = "fuse"  # `fuse`, `fuseblk`, `fuse.<client>`: a FUSE file system


def kind_of(fstype: str) -> StorageKind:
    """The one classifier: the kind of storage a `/proc/mounts` file-system type names. A FUSE
    type not in the table is FUSE (network: its client may go anywhere); anything else OTHER."""
    kind = _BY_FSTYPE.get(fstype)
    if kind is not None:
        return kind
    return StorageKind.FUSE if fstype.startswith(FUSE_PREFIX) else StorageKind.OTHER


def storage_of(fstype: str) -> Storage:
    return STORAGE[kind_of(fstype)]


def is_network_fstype(fstype: str) -> bool:
    """A metadata call on a mount of this type may leave the machine."""
    return storage_of(fstype).network


def mount_label(fstype: str) -> str:
    """How fsbench's and check's mount records name a mount of this type."""
    return storage_of(fstype).label


def network_labels() -> tuple[str, ...]:
    """The mount labels of the network kinds."""
    return tuple(s.label for s in TABLE if s.network)


def cache_model_of(fstype: str) -> CacheModel | None:
    """The forecast's model of a mount's kernel caches: None for storage that is not network;
    a network kind without a model of its own is forecast with FUSE's timeouts."""
    s = storage_of(fstype)
    if not s.network:
        return None
    if s.cache_model is not None:
        return s.cache_model
    return CacheModel.FUSE


def option_meanings(kind: StorageKind, view: CacheView) -> list[OptionMeaning]:
    """What a mount's cache options mean to PHP."""
    meanings = STORAGE[kind].meanings
    if meanings is None:
        return [OptionMeaning(view.fstype, "?", NOT_MODELLED)]
    return meanings(view)


def mount_type(kind: StorageKind) -> str:
    """The type `mount -t` takes for this kind."""
    return STORAGE[kind].fstypes[0]


def fstab_type(fstype: str) -> str:
    """The type an /etc/fstab line gives a mount `/proc/mounts` shows with this type."""
    return storage_of(fstype).fstab_type or fstype


def network_mount_indexes(mounts: Iterable[tuple[str, str]]) -> set[int]:
    """The indexes, in a trace's mount table (mount point, fs type), of network storage."""
    return {i for i, (_, fstype) in enumerate(mounts) if is_network_fstype(str(fstype))}


def lab_storages() -> tuple[StorageKind, ...]:
    """The kinds a lab can be built on, in the table's order."""
    return tuple(s.kind for s in TABLE if s.lab)


__all__ = ["AFS_AUTOTUNED", "AFS_CACHE_KEYS", "AFS_CLIENT", "AFS_FUSE_TIMEOUT_KEYS", "AFS_MEMCACHE",
           "CEPH_FUSE_PER_CALL_KEYS", "CacheModel",
           "LAB_ALIASES", "LiveChange", "RoundTrips", "STORAGE", "Storage", "StorageKind",
           "afs_meanings",
           "TABLE", "cache_model_of", "fstab_type", "is_network_fstype", "kind_of", "lab_storages",
           "mount_label", "mount_type", "network_labels", "network_mount_indexes",
           "option_meanings", "storage_of"]

"""The kinds of storage statstorm tells apart, as its results name them.

A `StorageKind` is a plain string in JSON (`StrEnum`): a lab's and a matrix cell's `storage`
("local", "glusterfs", "openafs"). A mount record (fsbench, check) names its kind by the
table's label, the same string except "glusterfs-fuse" for GlusterFS. What each kind is — the `/proc/mounts`
types that name it, whether it is network storage, its cache options, where its round trips
are read, how its options are changed — is the table in `model/storage_kinds.py`; this module
is only the names, so that every layer may use them.
"""

from __future__ import annotations

from enum import StrEnum


class StorageKind(StrEnum):
    LOCAL = "local"  # a local disk or memory file system (ext4, xfs, tmpfs, overlay, …)
    GLUSTERFS = "glusterfs"  # a GlusterFS volume through its FUSE client
    NFS = "nfs"
    CEPHFS = "cephfs"  # the kernel client or ceph-fuse
    OPENAFS = "openafs"  # OpenAFS (or the kernel's kAFS): type afs; a lab's cell via afsd.fuse
    SSHFS = "sshfs"
    SMB = "smb"  # cifs / smb3
    NINEP = "9p"  # Plan 9 shares (virtio-9p, WSL)
    FUSE = "fuse"  # another FUSE file system
    OTHER = "other"  # anything else (proc, sysfs, an unknown type)


__all__ = ["StorageKind"]

"""The one table of storage kinds (model/storage_kinds.py): every `/proc/mounts` type it names
classifies to its kind, unknown types fall where they did, every classifier agrees with it
(a CephFS mount is network storage for the mount detection, check and both forecasts), and no
module outside it decides a storage kind from a file-system type. Pure, fast."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from statstorm.adapters.storage import mounts
from statstorm.model import checkfacts, finding, matrix_grid, network_forecast, storage_kinds
from statstorm.model.checkfacts import MountFact
from statstorm.model.storage_kinds import (STORAGE, TABLE, CacheModel, LiveChange, RoundTrips,
                                           kind_of)
from statstorm.results.storage_kind import StorageKind

SRC = Path(__file__).resolve().parent.parent / "src" / "statstorm"
TABLE_MODULE = SRC / "model" / "storage_kinds.py"


def test_one_entry_per_kind() -> None:
    assert [s.kind for s in TABLE] == list(StorageKind)
    assert set(STORAGE) == set(StorageKind)
    every = [t for s in TABLE for t in s.fstypes]
    assert len(every) == len(set(every)), "a file-system type names two kinds"


@pytest.mark.parametrize("entry", TABLE, ids=lambda s: str(s.kind))
def test_every_fstype_classifies_to_its_kind(entry: storage_kinds.Storage) -> None:
    for fstype in entry.fstypes:
        assert kind_of(fstype) is entry.kind
        assert storage_kinds.is_network_fstype(fstype) is entry.network
        assert checkfacts.is_network_fstype(fstype) is entry.network
        assert (network_forecast.kind_of(fstype) is not None) is entry.network
        assert mounts.kind_of(fstype) == entry.label


def test_unknown_types() -> None:
    for fstype in ("fuse.rclone", "fuse.s3fs", "fuseblk", "fuse"):
        assert kind_of(fstype) is StorageKind.FUSE
        assert mounts.kind_of(fstype) == "fuse" and checkfacts.is_network_fstype(fstype)
        assert network_forecast.kind_of(fstype) is CacheModel.FUSE
    for fstype in ("proc", "sysfs", "vfat", "unknown", "", "nfsd"):
        assert kind_of(fstype) is StorageKind.OTHER
        assert mounts.kind_of(fstype) == "other" and not checkfacts.is_network_fstype(fstype)
        assert network_forecast.kind_of(fstype) is None


def test_the_json_names_stay() -> None:
    """The labels fsbench's and check's mount records wrote before the table, and the
    storage names of labs and matrix cells."""
    before = {"nfs": "nfs", "nfs4": "nfs", "fuse.glusterfs": "glusterfs-fuse",
              "glusterfs": "glusterfs-fuse", "fuse.sshfs": "sshfs", "fuse.rclone": "fuse",
              "ext4": "local", "xfs": "local", "tmpfs": "local", "overlay": "local",
              "proc": "other"}
    assert {t: mounts.kind_of(t) for t in before} == before
    assert matrix_grid.STORAGES == ("local", "glusterfs", "cephfs", "openafs")
    assert str(StorageKind.GLUSTERFS) == "glusterfs" and f"{StorageKind.LOCAL}" == "local"
    assert set(finding.NETWORK_KINDS) >= {"nfs", "glusterfs-fuse", "sshfs", "fuse"}
    assert "local" not in finding.NETWORK_KINDS and "other" not in finding.NETWORK_KINDS


def test_cache_models_and_counters() -> None:
    assert network_forecast.kind_of("nfs4") is CacheModel.NFS
    for fstype in ("fuse.glusterfs", "glusterfs", "fuse.sshfs", "fuse.ceph-fuse"):
        assert network_forecast.kind_of(fstype) is CacheModel.FUSE
    assert network_forecast.caches_of("nfs", None) == network_forecast.NFS_DEFAULT
    assert STORAGE[StorageKind.GLUSTERFS].round_trips is RoundTrips.GLUSTER_PROFILE
    assert STORAGE[StorageKind.NFS].round_trips is RoundTrips.NFS_MOUNTSTATS
    assert STORAGE[StorageKind.CEPHFS].round_trips is RoundTrips.CEPH_ADMIN_SOCKET
    assert all(s.round_trips is RoundTrips.NONE for s in TABLE
               if s.kind not in (StorageKind.GLUSTERFS, StorageKind.NFS, StorageKind.CEPHFS,
                                 StorageKind.OPENAFS))
    assert STORAGE[StorageKind.GLUSTERFS].live_change is LiveChange.STACKED_CLIENT
    assert STORAGE[StorageKind.NFS].live_change is LiveChange.REMOUNT
    assert "/etc/fstab" in STORAGE[StorageKind.NFS].set_live
    assert storage_kinds.mount_type(StorageKind.GLUSTERFS) == "glusterfs"
    assert STORAGE[StorageKind.GLUSTERFS].client == "glusterfs"
    assert storage_kinds.lab_storages() == (StorageKind.LOCAL, StorageKind.GLUSTERFS,
                                            StorageKind.CEPHFS, StorageKind.OPENAFS)


# -- the disagreement the table settles: CephFS (and OpenAFS, SMB, 9p) are network storage
@pytest.mark.parametrize("fstype,kind", [("ceph", StorageKind.CEPHFS),
                                         ("fuse.ceph-fuse", StorageKind.CEPHFS),
                                         ("afs", StorageKind.OPENAFS), ("cifs", StorageKind.SMB)])
def test_network_everywhere(fstype: str, kind: StorageKind) -> None:
    entry = mounts.MountEntry("mon1:6789:/", "/srv", fstype, "rw,relatime")
    info = mounts.describe("/srv/app", entry)
    assert info.storage is kind and info.kind == str(kind)
    if kind is not StorageKind.CEPHFS:  # CephFS's meanings: model/storage_kinds.py
        assert info.meanings[0].meaning == storage_kinds.NOT_MODELLED  # measured, not modelled
    # check: the code on it is code on the network; its trace's calls are network calls
    code = MountFact(role="docroot", path="/srv/app", mount_point="/srv", fstype=fstype,
                     kind=info.kind)
    assert code.kind in finding.NETWORK_KINDS
    assert checkfacts.is_network_fstype(fstype)
    # whatif's mount layer and the demo's forecast count its calls (FUSE's caches assumed)
    assert network_forecast.kind_of(fstype) is CacheModel.FUSE
    assert network_forecast.caches_of(fstype, None) == network_forecast.MountCaches()


# -- one classifier ------------------------------------------------------------------------------
FSTYPE_ONLY = {t for s in TABLE for t in s.fstypes} - {str(k) for k in StorageKind} \
    - {s.label for s in TABLE}
PREFIXES = ("fuse", "nfs", "gluster", "ceph", "cifs", "smb", "afs", "9p")
# Files that name kinds by their strings today, waiting for StorageKind (their owners' part).
NAMES = {str(k) for k in StorageKind} | {s.label for s in TABLE}
OWNED = ["adapters/storage", "adapters/apply/storage_steps.py", "model/mount_options.py",
         "model/network_forecast.py", "model/round_trip_forecast.py", "model/matrix_grid.py",
         "model/finding.py", "model/checkfacts.py"]


def _strings(tree: ast.AST) -> list[ast.Constant]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if p != TABLE_MODULE)


def test_no_module_outside_the_table_names_a_file_system_type() -> None:
    bad = []
    for p in _sources():
        tree = ast.parse(p.read_text())
        bad += [f"{p.relative_to(SRC)}:{n.lineno} {n.value!r}" for n in _strings(tree)
                if n.value in FSTYPE_ONLY]
        for call in ast.walk(tree):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                    and call.func.attr == "startswith":
                bad += [f"{p.relative_to(SRC)}:{n.lineno} startswith({n.value!r})"
                        for a in call.args for n in _strings(a) if n.value.startswith(PREFIXES)]
    assert not bad, "storage kind decided outside model/storage_kinds.py: " + ", ".join(bad)


def test_the_storage_modules_name_kinds_by_the_enum() -> None:
    files = [f for o in OWNED for f in ((SRC / o).rglob("*.py") if (SRC / o).is_dir()
                                         else [SRC / o])]
    bad = []
    for p in files:
        for n in _strings(ast.parse(p.read_text())):
            if n.value in NAMES - {"local", "other", "fuse"}:
                bad.append(f"{p.relative_to(SRC)}:{n.lineno} {n.value!r}")
    assert not bad, ", ".join(bad)

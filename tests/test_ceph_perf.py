"""CephFS round trips from ceph-fuse's admin socket: golden files of a real `perf dump`
(tests/fixtures/ceph: taken from a CephFS lab's ceph-fuse, Ceph 16.2.15, around three
requests of the synthetic app with `client_cache_size` at 50), the window arithmetic, bad
input, finding a process's admin socket, and what the CephFS entry says a mount's caching
means to PHP."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from statstorm.adapters.storage import ceph_perf
from statstorm.errors import UsageError
from statstorm.model.mount_options import CacheView
from statstorm.model.storage_kinds import (
    CEPH_FUSE_CACHE_SIZE, STORAGE, StorageKind, kind_of, lab_storages, option_meanings)

FIXTURES = Path(__file__).parent / "fixtures" / "ceph"
DUMPS = sorted(FIXTURES.glob("perf-dump-fuse-*[!d].json"))


@pytest.mark.parametrize("dump", DUMPS, ids=lambda p: p.stem)
def test_perf_dump_golden(dump: Path) -> None:
    expected = json.loads(dump.with_suffix(".expected.json").read_text())
    assert ceph_perf.parse(dump.read_text()) == expected


def test_golden_files_are_there() -> None:
    assert [p.name for p in DUMPS] == ["perf-dump-fuse-after.json",
                                       "perf-dump-fuse-before.json"]


def test_window_counts_mds_requests_and_osd_ops() -> None:
    before = ceph_perf.parse((FIXTURES / "perf-dump-fuse-before.json").read_text())
    after = ceph_perf.parse((FIXTURES / "perf-dump-fuse-after.json").read_text())
    calls = ceph_perf.delta(before, after)
    # Three requests with the client's cache below the app's walk: the MDS answered the
    # lookups again; the file data stayed in the page cache (no OSD read).
    assert calls[ceph_perf.MDS] == 226 and calls[ceph_perf.OSD] == 0
    assert ceph_perf.total(calls) == 226
    assert ceph_perf.total({"mds_requests": 3, "osd_ops": 2, "osd_reads": 2}) == 5


def test_delta_after_a_client_restart_counts_from_zero() -> None:
    assert ceph_perf.delta({"mds_requests": 100, "osd_ops": 5},
                           {"mds_requests": 7, "osd_ops": 9}) == {"mds_requests": 7,
                                                                  "osd_ops": 4}


@pytest.mark.parametrize(("text", "message"), [
    ("", "not JSON"),
    ("[1, 2]", "no sections"),
    ((FIXTURES / "perf-dump-mds.json").read_text(), "not a CephFS client's admin socket"),
    ('{"client": {"lat": {}}, "objecter": {}}', "no client.reply.avgcount"),
    ('{"client": {"reply": {"avgcount": "x"}}, "objecter": {}}', "not a number"),
])
def test_bad_dump_is_one_line_error(text: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        ceph_perf.parse(text)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert "perf dump" in str(err.value)


def test_admin_socket_is_found_from_the_pid(tmp_path: Path) -> None:
    path = tmp_path / "client.admin.asok"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        sock.listen()
        assert ceph_perf.asok_of(os.getpid()) == path
    assert ceph_perf.asok_of(2 ** 22 + 1) is None  # no such process


def test_no_ceph_fuse_on_a_mount_gives_no_socket(tmp_path: Path) -> None:
    assert ceph_perf.asok_for_mount(str(tmp_path)) is None


def test_cephfs_entry() -> None:
    entry = STORAGE[StorageKind.CEPHFS]
    assert StorageKind.CEPHFS in lab_storages() and entry.client == "ceph-fuse"
    assert kind_of("fuse.ceph-fuse") is StorageKind.CEPHFS and kind_of("ceph") is StorageKind.CEPHFS
    assert "client_cache_size" in entry.cache_keys


def test_ceph_fuse_meanings_say_timeouts_are_zero_and_name_the_cache_size() -> None:
    meanings = option_meanings(StorageKind.CEPHFS, CacheView("fuse.ceph-fuse", {}, {}, {}))
    assert [m.option for m in meanings] == ["entry/attr timeout", "client_cache_size"]
    assert meanings[0].value == "0 s" and "capabilities" in meanings[0].meaning
    assert meanings[1].value == str(CEPH_FUSE_CACHE_SIZE)
    small = option_meanings(StorageKind.CEPHFS, CacheView(
        "fuse.ceph-fuse", {}, {"client_cache_size": "50"}, {}))
    assert small[1].value == "50" and "at most 50 inodes" in small[1].meaning


def test_kernel_client_meanings_follow_dcache() -> None:
    on = option_meanings(StorageKind.CEPHFS, CacheView("ceph", {"name": "admin"}, {}, {}))
    off = option_meanings(StorageKind.CEPHFS, CacheView("ceph", {"nodcache": ""}, {}, {}))
    assert [m.option for m in on] == ["caps", "dcache"]
    assert on[1].value == "on" and "without the MDS" in on[1].meaning
    assert off[1].value == "off" and "MDS round trip" in off[1].meaning


def test_cluster_config_keeps_every_path_in_the_lab(tmp_path: Path) -> None:
    """The config the daemons run on: no cephx, one copy, loopback, and every path it names
    under the cluster's own directory (nothing in /var/lib/ceph, /var/log/ceph, /run/ceph)."""
    from statstorm.adapters.storage import ceph

    cluster = ceph.Cluster(tmp_path / ceph.CLUSTER_DIR)
    ceph.write_config(cluster)
    conf = cluster.conf.read_text()
    values = dict(line.split(" = ", 1) for line in conf.splitlines() if " = " in line)
    for key in ("auth_cluster_required", "auth_service_required", "auth_client_required"):
        assert values[key] == "none"
    assert values["osd_pool_default_size"] == "1" and values["public_addr"] == "127.0.0.1"
    paths = [v for v in values.values() if v.startswith("/")]
    assert len(paths) >= 10 and all(p.startswith(str(cluster.root) + "/") for p in paths)
    assert not any(d in conf for d in ("/var/lib/ceph", "/var/log/ceph", "/run/ceph", "/etc/ceph"))
    argv = ceph.fuse_argv(cluster, {"client_cache_size": "65536"})
    assert argv[-1] == str(cluster.mount_point) and "--client_cache_size=65536" in argv
    assert argv[argv.index("-c") + 1] == str(cluster.conf)

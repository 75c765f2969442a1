"""The CephFS check rule (model/rules_ceph.py) on facts: ceph-fuse's inode cache against the
code tree's files and directories. The measurement behind it: tests/test_lab_ceph.py."""

from __future__ import annotations

from statstorm.model import rules_ceph
from statstorm.model.checkfacts import Facts, MountFact


def facts(entries: int, fstype: str = "fuse.ceph-fuse", **cache: str) -> Facts:
    mount = MountFact("docroot", "/srv/app/public", "/srv/app", fstype, "cephfs",
                      cache_options=dict(cache))
    return Facts(pool="www", settings={}, tree_entries=entries, mounts=(mount,))


def test_tree_within_the_default_cache_says_nothing() -> None:
    assert rules_ceph.cephfs_client_cache_size(facts(16384)) == []


def test_tree_beyond_the_default_cache_asks_for_room() -> None:
    [f] = rules_ceph.cephfs_client_cache_size(facts(20000))
    assert "16,384 inodes" in f.title and "20,000" in f.title
    assert "Ceph's default" in f.evidence[0]
    assert f.change[1] == ("ceph daemon <ceph-fuse admin socket> config set "
                            "client_cache_size 25600")
    assert f.predicted_gain is None and "measure" in f.gain_note


def test_a_cache_size_read_from_the_client_is_used() -> None:
    assert rules_ceph.cephfs_client_cache_size(facts(20000, client_cache_size="65536")) == []
    [f] = rules_ceph.cephfs_client_cache_size(facts(700, client_cache_size="50"))
    assert "50 inodes" in f.title and "client_cache_size = 1024" in f.change[0]


def test_the_kernel_client_has_no_such_limit() -> None:
    assert rules_ceph.cephfs_client_cache_size(facts(50000, fstype="ceph")) == []


def test_wanted_size_rounds_up() -> None:
    assert rules_ceph.wanted_size(1) == 1024 and rules_ceph.wanted_size(20000) == 25600

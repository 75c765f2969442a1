"""ceph-fuse's per-request settings without a cluster: read from its command line, what a
lab's client is restarted with, and the `cephfs-fuse-request-work` rule on facts (golden:
tests/fixtures/ceph/finding-fuse-request-work.expected.json). The lab test:
tests/test_lab_fuseclients.py."""

from __future__ import annotations

import json
from pathlib import Path

from statstorm.adapters.storage import ceph, ceph_admin, ceph_client
from statstorm.model import applyplan, ceph_fuse, rules_ceph, storage_kinds
from statstorm.model.checkfacts import Facts, MountFact, TraceFacts
from statstorm.results.storage_kind import StorageKind

GOLDEN = Path(__file__).parent / "fixtures" / "ceph" / "finding-fuse-request-work.expected.json"


def lab_argv(**options: str) -> list[str]:
    return ceph.fuse_argv(ceph.Cluster(Path("/x/cluster")), options)


def test_settings_from_a_command_line() -> None:
    assert ceph_fuse.argv_options(lab_argv()) == {}
    assert ceph_client.cache_options(lab_argv()) == {"fuse-set-user-groups": "true",
                                                     "debug-client": "0/5"}
    argv = lab_argv(**{"fuse_set_user_groups": "false", "debug-client": "0/0",
                       "client_cache_size": "65536"})
    assert ceph_client.cache_options(argv) == {"fuse-set-user-groups": "false",
                                               "debug-client": "0/0",
                                               "client_cache_size": "65536"}
    assert ceph_fuse.argv_options(["ceph-fuse", "--debug_client", "1/1", "/m"]) == {
        "debug-client": "1/1"}


def test_the_settings_are_cephfs_cache_options() -> None:
    keys = storage_kinds.STORAGE[StorageKind.CEPHFS].cache_keys
    assert all(k in keys for k in ceph_fuse.PER_CALL_KEYS)


def test_what_is_left_to_change() -> None:
    assert ceph_fuse.changes({}) == {"fuse-set-user-groups": "false", "debug-client": "0/0"}
    assert ceph_fuse.changes({"fuse-set-user-groups": "0", "debug-client": "0/0"}) == {}
    assert ceph_fuse.changes({"debug-client": "5"}) == {"fuse-set-user-groups": "false",
                                                       "debug-client": "0/0"}
    assert ceph_fuse.debug_levels("0/5") == (0, 5) and ceph_fuse.debug_levels("3") == (3, 3)
    assert ceph_fuse.conf_lines({"fuse-set-user-groups": "false"}) == [
        "fuse_set_user_groups = false"]


def facts(fstype: str = "fuse.ceph-fuse", trace: TraceFacts | None = None, **cache: str
          ) -> Facts:
    mount = MountFact("docroot", "/srv/ceph/mnt/app", "/srv/ceph/mnt", fstype, "cephfs",
                      cache_options=dict(cache))
    return Facts(pool="www", settings={}, tree_entries=686, mounts=(mount,), trace=trace)


def test_the_rule_golden() -> None:
    t = TraceFacts(requests=10, detail="events", per_request={}, round_trips_per_request=0.0)
    [f] = rules_ceph.cephfs_fuse_request_work(facts(trace=t))
    assert json.loads(GOLDEN.read_text()) == f.to_json()


def test_the_rule_asks_only_what_is_left_and_not_of_the_kernel_client() -> None:
    [f] = rules_ceph.cephfs_fuse_request_work(facts(**{"fuse-set-user-groups": "false"}))
    assert f.change[1] == "debug-client=0/0" and "supplementary" not in f.tradeoff
    assert rules_ceph.cephfs_fuse_request_work(facts(**{"fuse-set-user-groups": "false",
                                                        "debug-client": "0/0"})) == []
    assert rules_ceph.cephfs_fuse_request_work(facts(fstype="ceph")) == []


def test_apply_places_it_on_the_mount_and_makes_it_with_all() -> None:
    [f] = rules_ceph.cephfs_fuse_request_work(facts())
    f = f.__class__(**{**f.__dict__, "id": rules_ceph.PER_CALL_ID})
    changes = applyplan.classify(f)
    assert [(c.kind, c.key, c.value, c.where) for c in changes] == [
        ("mount", "fuse-set-user-groups", "false", "/srv/ceph/mnt"),
        ("mount", "debug-client", "0/0", "/srv/ceph/mnt")]
    assert rules_ceph.PER_CALL_ID not in applyplan.NAMED_ONLY


def test_a_host_client_is_told_how_by_hand() -> None:
    line = ceph_client.manual_line({"fuse-set-user-groups": "false"})
    assert "config set fuse_set_user_groups false" in line
    assert "fuse_set_user_groups = false" in line


def test_a_restarted_client_reads_every_directory_once(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "c").mkdir()
    (tmp_path / "a" / "x.php").write_text("<?php")
    assert ceph_client.list_tree(tmp_path) == 4  # the root, a, a/b, c


def test_the_evidence_says_where_the_settings_were_read() -> None:
    asok = "/lab/cluster/run/client.asok"
    [f] = rules_ceph.cephfs_fuse_request_work(facts(**{
        ceph_fuse.SOURCE: f"{ceph_fuse.FROM_SOCKET} {asok}"}))
    assert any(e.startswith("these are the settings ceph-fuse runs with, read from its admin "
                            f"socket {asok}") for e in f.evidence)
    assert f"ceph daemon {asok} config set fuse_set_user_groups false" in f.change[-1]
    [f] = rules_ceph.cephfs_fuse_request_work(facts(**{
        ceph_fuse.SOURCE: f"{ceph_fuse.FROM_ARGV}: no admin socket answered: x: run check "
                          "as root"}))
    assert ("these settings are read from ceph-fuse's command line (no admin socket answered: "
            "x: run check as root): one made in ceph.conf or the cluster's configuration "
            "database is not seen there") in f.evidence


def test_settings_a_running_client_took_from_ceph_conf_are_not_asked_again() -> None:
    """The real `config show` of a lab's ceph-fuse whose ceph.conf [client] section has
    fuse_set_user_groups = false and debug_client = 0/0 (its command line has neither)."""
    config = ceph_admin.parse_config((GOLDEN.parent / "config-show-fuse-conf.json").read_text())
    options = {**ceph_fuse.running_options(config, storage_kinds.CEPHFS_CACHE_KEYS),
               ceph_fuse.SOURCE: f"{ceph_fuse.FROM_SOCKET} /lab/run/client.asok"}
    assert ceph_fuse.argv_options(lab_argv()) == {}  # what the command line alone says
    assert rules_ceph.cephfs_fuse_request_work(facts(**options)) == []
    assert rules_ceph.cephfs_client_cache_size(facts(**options)) == []


def test_a_restarted_client_runs_with_the_same_values_it_was_given() -> None:
    assert ceph_fuse.same(ceph_fuse.SET_GROUPS, "false", "0")
    assert ceph_fuse.same(ceph_fuse.DEBUG_CLIENT, "0/0", "0")
    assert not ceph_fuse.same(ceph_fuse.DEBUG_CLIENT, "0/5", "0/0")

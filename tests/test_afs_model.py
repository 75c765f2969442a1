"""OpenAFS without a cell: afsd's cache sizes as it autotunes them, the file server's RPC counts
read from captures of the lab's (tests/fixtures/afs/), and the stat-cache rule on facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from statstorm.adapters.storage import afs_client, afs_stats
from statstorm.errors import ComponentError
from statstorm.model import afs_cache, rules_afs, storage_kinds
from statstorm.model.checkfacts import Facts, MountFact, TraceFacts
from statstorm.model.mount_options import CacheView
from statstorm.results.storage_kind import StorageKind

FIXTURES = Path(__file__).parent / "fixtures" / "afs"
LAB_ARGV = ["/usr/sbin/afsd.fuse", "-confdir", "/x/client", "-cachedir", "/x/cache", "-dynroot",
            "-fakestat", "-osubtype=afs", "-mountdir", "/x/mnt"]


def test_afsd_autotunes_as_afsd_c_does() -> None:
    # the lab's (and Debian's) 50,000-block disk cache: 256 KiB chunks, 1562 files, dcache
    # clamped up to 2000, and 1.5 stat entries per dcache entry
    eff = afs_cache.effective(afs_cache.afsd_flags(LAB_ARGV), 50_000)
    assert {k: eff[k] for k in ("stat", "dcache", "files", "chunksize", "volumes")} == {
        "stat": "3000", "dcache": "2000", "files": "1562", "chunksize": "18", "volumes": "200"}
    assert set(eff[afs_cache.AUTOTUNED].split(",")) == {"stat", "dcache", "files", "chunksize",
                                                        "volumes"}
    # a 1 GB cache: 1 MiB chunks, dcache clamped down to 10,000 → 15,000 stat entries
    big = afs_cache.effective({}, 1_000_000)
    assert (big["chunksize"], big["files"], big["dcache"], big["stat"]) == (
        "20", "31250", "10000", "15000")
    # flags given win; only the others are autotuned
    given = afs_cache.effective(afs_cache.afsd_flags([*LAB_ARGV, "-stat", "50"]), 50_000)
    assert given["stat"] == "50" and "stat" not in given[afs_cache.AUTOTUNED]
    # a memory cache of 64 MiB: 32 KiB chunks (~1024 wanted, rounded down), as many stat
    # entries as dcache entries for that chunk size
    mem = afs_cache.effective({"memcache": "", "blocks": "65536"}, None)
    assert (mem["chunksize"], mem["dcache"], mem["stat"]) == ("15", "2048", "2048")


def test_seed_002_options_parse() -> None:
    """The options the seed's site ran afsd with (-stat 150000 among them)."""
    argv = ["afsd", "-fakestat-all", "-chunksize", "20", "-volumes", "400", "-dcache", "50000",
            "-files", "200000", "-stat", "150000", "-daemons", "20"]
    eff = afs_cache.effective(afs_cache.afsd_flags(argv), 100_000)
    assert (eff["stat"], eff["dcache"], eff["volumes"], eff["files"]) == (
        "150000", "50000", "400", "200000")
    assert afs_cache.AUTOTUNED not in eff


def test_size_flags_are_replaced_and_kept() -> None:
    argv = [*LAB_ARGV[:-2], "-stat", "50", "-volumes", "300", "-mountdir", "/x/mnt"]
    assert afs_client.size_args(argv) == ("-stat", "50", "-volumes", "300")
    assert afs_client.with_sizes(("-stat", "50", "-volumes", "300"), {"stat": "4096"}) == (
        "-stat", "4096", "-volumes", "300")
    assert afs_client.with_sizes((), {"stat": "4096"}) == ("-stat", "4096")
    assert afs_client.afs_conf_text({"stat": "32768"}, "-dynroot -stat 3000 -fakestat") == (
        'OPTIONS="-dynroot -fakestat -stat 32768"')


def test_openafs_in_the_table() -> None:
    for fstype in ("afs", "fuse.afs"):
        assert storage_kinds.kind_of(fstype) is StorageKind.OPENAFS
    assert storage_kinds.kind_of("fuse") is StorageKind.FUSE  # a stock afsd.fuse: any FUSE
    s = storage_kinds.STORAGE[StorageKind.OPENAFS]
    assert s.round_trips is storage_kinds.RoundTrips.AFS_XSTAT and s.cache_keys
    eff = afs_cache.effective({}, 50_000)
    meanings = storage_kinds.option_meanings(StorageKind.OPENAFS,
                                             CacheView("fuse.afs", {}, eff, {}))
    stat = next(m for m in meanings if m.option == "-stat")
    assert stat.value == "3000 (autotuned)" and "callback" in stat.meaning


def test_xstat_golden_capture() -> None:
    """Two probes of the lab's file server around 110 page views with `-stat 50`."""
    before = afs_stats.parse((FIXTURES / "xstat_fs_before.txt").read_text())
    after = afs_stats.parse((FIXTURES / "xstat_fs_after.txt").read_text())
    assert before.server == "192.0.2.2"
    assert (before.ops["FetchStatus"], before.ops["FetchData"], before.ops["GetXStats"]) == (
        9108, 1538, 10)
    calls = afs_stats.delta(before, after)
    assert calls == {"FetchStatus": 2493}  # the reader's own GetXStats left out
    assert afs_stats.round_trips(calls) == afs_stats.status_fetches(calls) == 2493
    # a server restarted between probes counts from zero
    assert afs_stats.delta(after, before)["FetchStatus"] == 9108


def test_xstat_without_an_answer_is_one_error() -> None:
    with pytest.raises(ComponentError, match="no RPC statistics"):
        afs_stats.parse("\nStarting up the xstat_fs service, no debugging, one-shot operation\n"
                        "[xstat_fs] Error: no such host\n")


def test_cell_servers_of_a_client(tmp_path: Path) -> None:
    (tmp_path / "ThisCell").write_text("statstorm.lab\n")
    (tmp_path / "CellServDB").write_text(">other.org #x\n10.0.0.1 #a\n>statstorm.lab #lab\n"
                                         "192.0.2.2 #vm\n")
    assert afs_stats.cell_servers(tmp_path) == ["192.0.2.2"]
    assert afs_stats.cell_servers(tmp_path / "none") == []


def _facts(stat: str, tree: int, trace: TraceFacts | None = None) -> Facts:
    m = MountFact("docroot", "/afs/x/app", "/afs", "fuse.afs", "openafs",
                  cache_options=afs_cache.effective({"stat": stat} if stat else {}, 50_000))
    return Facts(pool="www", settings={}, mounts=(m,), tree_entries=tree, trace=trace)


def test_stat_cache_rule() -> None:
    # MediaWiki's tree (~23,000 files and directories) against the autotuned 3000
    assert rules_afs.RULE_ID == "openafs-stat-cache"
    found = rules_afs.openafs_stat_cache(_facts("", 23_000))
    assert len(found) == 1
    f = found[0]
    assert "3000" in f.title and "(autotuned)" not in f.title
    assert "afsd autotuned it" in f.evidence[0]
    assert f.change[:2] == ("# mount options for /afs:", "stat=65536")
    assert "afs.conf.client" in f.change[2]
    # a tree the stat cache holds: nothing to say
    assert rules_afs.openafs_stat_cache(_facts("", 645)) == []
    assert rules_afs.openafs_stat_cache(_facts("50", 645))[0].change[1] == "stat=4096"
    # a trace's working set is what the pool touches, when there is one
    t = TraceFacts(requests=10, detail="events", per_request={}, working_set_entries=400,
                   round_trips_per_request=6.9)
    found = rules_afs.openafs_stat_cache(_facts("50", 23_000, t))
    assert "400 files and directories the traced requests touched" in found[0].evidence[1]
    assert "6.9 RPCs per request" in found[0].evidence[2]
    assert rules_afs.openafs_stat_cache(_facts("3000", 23_000, t)) == []
    # a mount whose client was not read: no finding
    m = MountFact("docroot", "/afs/x", "/afs", "afs", "openafs")
    assert rules_afs.openafs_stat_cache(Facts(pool="p", settings={}, mounts=(m,),
                                              tree_entries=9999)) == []


def test_the_fuse_clients_rules_are_registered() -> None:
    """The FUSE clients' own work (tests/test_afs_fuse.py, tests/test_ceph_fuse.py) judged with
    every other rule: their ids in the registry, after the cache-size rule of each storage."""
    from statstorm.model.rules import RULES
    ids = list(RULES)
    assert ids.index("openafs-fuse-timeouts") == ids.index("openafs-stat-cache") + 1
    assert ids.index("cephfs-fuse-request-work") == ids.index("cephfs-client-cache-size") + 1

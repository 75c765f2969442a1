"""`statstorm check` rules for CephFS read through ceph-fuse. Pure code; see model.rules for
the registry.

ceph-fuse answers the kernel with 0 s entry and attribute timeouts, so every stat and path
lookup PHP makes reaches it; it answers them from its own cache while the MDS lets it hold
the inodes' capabilities, with no timeout and no staleness (model/storage_kinds.py's CephFS
entry). What it cannot keep it asks the MDS for again: its cache holds at most
`client_cache_size` inodes (16384 by default), trimmed least recently used first, and a
directory it no longer holds every entry of loses its completeness, so a name PHP probes
there and does not find (an autoloader's, an include_path's) is an MDS lookup again.

Measured on the CephFS lab (docs/lab-ceph-notes.md), MDS requests per request counted with
ceph-fuse's `perf dump` (client.reply), 20 requests each:

- MediaWiki 1.39 Main_Page, 24,743 files and directories: 1.05 with the default 16384 (the
  lookups of missing class names under one vendor directory), 0 with 65536 once the tree's
  directories were listed once (`find`); 1.0 with 65536 and no listing; 292 with 2000.
- the synthetic app (686 entries): 0 with the default; 110-145 with 50.

So the one finding: a code tree with more files and directories than the client keeps. The
gain is small where the request's walk fits (a round trip or so per request), large where it
does not; it is not predicted, it is measured.
"""

from __future__ import annotations

from statstorm.model.checkfacts import Facts, MountFact
from statstorm.model.finding import Finding, Rule, code_mounts, finding
from statstorm.model.storage_kinds import CEPH_FUSE_CACHE_SIZE, STORAGE, StorageKind, mount_type
from statstorm.results.check import Severity

RULE_ID = "cephfs-client-cache-size"
KEY = "client_cache_size"
HEADROOM = 1.25  # the size asked: the tree's entries and a quarter more (it grows)
TRADEOFF = ("ceph-fuse keeps more inodes and their capabilities: a few KB of its memory each, "
            "and more capabilities for the MDS to track and recall (mds_max_caps_per_client, "
            "1M by default, is far above); coherence is unchanged: a deploy is still seen at "
            "once")
GAIN_NOTE = ("not predicted: whether the walk of a request outgrows the cache depends on which "
             "files the app touches; measure the MDS requests per request before and after "
             "(`ceph daemon <ceph-fuse admin socket> perf dump`, client.reply)")


def cache_size(m: MountFact) -> int:
    """The client's cache size as the mount's facts give it, else Ceph's default."""
    try:
        return int(m.cache_options.get(KEY, CEPH_FUSE_CACHE_SIZE))
    except ValueError:
        return CEPH_FUSE_CACHE_SIZE


def wanted_size(tree_entries: int) -> int:
    """The size asked for a tree of `tree_entries` files and directories, to the next 1024."""
    want = int(tree_entries * HEADROOM)
    return -(-want // 1024) * 1024


def cephfs_client_cache_size(facts: Facts) -> list[Finding]:
    out = []
    label = STORAGE[StorageKind.CEPHFS].label
    for m in code_mounts(facts, label):
        if m.fstype == mount_type(StorageKind.CEPHFS):
            continue  # the kernel client caches in the kernel's dcache: no such limit
        size = cache_size(m)
        if facts.tree_entries <= size:
            continue
        want = wanted_size(facts.tree_entries)
        ev = [f"{m.mount_point} is CephFS through ceph-fuse, whose cache keeps at most "
              f"{size:,} inodes ({KEY}"
              + (")" if KEY in m.cache_options else ", Ceph's default)"),
              f"the code under it has {facts.tree_entries:,} files and directories: a walk "
              "that needs more than the cache keeps asks the MDS again for what was trimmed",
              "measured on the CephFS lab's MediaWiki (24,743 entries): 1.05 MDS requests per "
              "request with 16384, 0 with 65536 and its directories listed once, 292 with "
              "2000 (docs/lab-ceph-notes.md)"]
        t = facts.trace
        if t is not None and t.round_trips_per_request is not None:
            ev.append(f"{t.round_trips_per_request:g} network round trips per request measured "
                      "while tracing")
        change = [f"# ceph.conf of the client, [client] section: {KEY} = {want}",
                  f"ceph daemon <ceph-fuse admin socket> config set {KEY} {want}",
                  f"# then list the code's directories once (find {m.mount_point} "
                  ">/dev/null): a directory the client holds whole answers a missing name "
                  "itself"]
        out.append(finding(Severity.INFO, f"CephFS mount {m.mount_point}: ceph-fuse keeps "
                           f"{size:,} inodes, the code has {facts.tree_entries:,}", ev, change,
                           TRADEOFF, None, GAIN_NOTE))
    return out


RULES: tuple[tuple[str, Rule], ...] = (
    (RULE_ID, cephfs_client_cache_size),
)

__all__ = ["RULES", "RULE_ID", "cache_size", "cephfs_client_cache_size", "wanted_size"]

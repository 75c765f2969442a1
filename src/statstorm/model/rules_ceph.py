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

So the first finding: a code tree with more files and directories than the client keeps. The
gain is small where the request's walk fits (a round trip or so per request), large where it
does not; it is not predicted, it is measured.

The second, `cephfs-fuse-request-work`: with the MDS out of the way, what is left is the
work ceph-fuse does for each of the FUSE requests PHP's stats and path steps make (the kernel
keeps nothing: 0 s timeouts, which no option changes). Two of its settings add work to every
request without adding anything a PHP site needs (model/ceph_fuse.py): the caller's groups
read from /proc (`fuse_set_user_groups`) and the client's in-memory log (`debug_client`
`0/5`). Neither changes coherence, so `apply --all` makes it. The settings judged are those the
running client answers on its admin socket (set on its command line, in ceph.conf or in the
cluster's configuration database), its command line's when no socket answers; the evidence
says which.
"""

from __future__ import annotations

from statstorm.model import ceph_fuse
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
        asok = ceph_fuse.from_socket(m.cache_options)
        ev = [f"{m.mount_point} is CephFS through ceph-fuse, whose cache keeps at most "
              f"{size:,} inodes ({KEY}"
              + (f", as its admin socket {asok} says)" if asok and KEY in m.cache_options
                 else ")" if KEY in m.cache_options else ", Ceph's default)"),
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


PER_CALL_ID = "cephfs-fuse-request-work"
PER_CALL_TRADEOFF = {
    ceph_fuse.SET_GROUPS: "ceph-fuse then checks permissions with the caller's uid and "
                          "primary gid only: a file the PHP user may read only through a "
                          "supplementary group is refused (make that group the pool user's "
                          "primary one, or leave groups on)",
    ceph_fuse.DEBUG_CLIENT: "a crash of ceph-fuse leaves no recent client log in its dump "
                            "(raise it again while debugging)",
}
PER_CALL_WHY = {
    ceph_fuse.SET_GROUPS: "reads the calling process's /proc/PID/task/TID/status for its "
                          "supplementary groups before every lookup, getattr and open "
                          "(fuse_set_user_groups = true, Ceph's default)",
    ceph_fuse.DEBUG_CLIENT: "formats log lines into its in-memory ring for every lookup and "
                            "getattr (debug_client = {value}: the in-memory level is above 0)",
}
PER_CALL_NOTE = ("not predicted: the cost is CPU in ceph-fuse per FUSE request, which the "
                 "request rate decides; measure throughput against local disk before and "
                 "after (statstorm demo --storage cephfs)")


def cephfs_fuse_request_work(facts: Facts) -> list[Finding]:
    out = []
    label = STORAGE[StorageKind.CEPHFS].label
    for m in code_mounts(facts, label):
        if m.fstype == mount_type(StorageKind.CEPHFS):
            continue  # the kernel client: no FUSE requests
        want = ceph_fuse.changes(m.cache_options)
        if not want:
            continue
        now = ceph_fuse.settings(m.cache_options)
        asok = ceph_fuse.from_socket(m.cache_options) or "<ceph-fuse admin socket>"
        ev = [f"{m.mount_point} is CephFS through ceph-fuse, which answers the kernel with 0 s "
              "entry and attribute timeouts (no option changes them): every stat and every "
              "path step PHP makes there is a FUSE request into ceph-fuse"]
        ev += ["ceph-fuse " + PER_CALL_WHY[k].format(value=now[k]) for k in want]
        ev.append(ceph_fuse.source_line(m.cache_options))
        t = facts.trace
        if t is not None and t.round_trips_per_request is not None:
            ev.append(f"{t.round_trips_per_request:g} MDS and OSD round trips per request "
                      "measured while tracing: the rest of the cost is the client's own work")
        options = ",".join(f"{k}={v}" for k, v in want.items())
        change = [f"# mount options for {m.mount_point}:", options,
                  "# ceph.conf of the client, [client] section: "
                  + "; ".join(ceph_fuse.conf_lines(want)),
                  "# live: " + "; ".join(f"ceph daemon {asok} config set "
                                          f"{k.replace('-', '_')} {v}" for k, v in want.items())]
        tradeoff = "; ".join(PER_CALL_TRADEOFF[k] for k in want) + (
            "; coherence is unchanged: a deploy is still seen at once")
        out.append(finding(Severity.WARNING, f"CephFS mount {m.mount_point}: ceph-fuse does "
                           f"extra work for every FUSE request ({', '.join(want)})", ev, change,
                           tradeoff, None, PER_CALL_NOTE))
    return out


RULES: tuple[tuple[str, Rule], ...] = (
    (RULE_ID, cephfs_client_cache_size),
    (PER_CALL_ID, cephfs_fuse_request_work),
)

__all__ = ["PER_CALL_ID", "RULES", "RULE_ID", "cache_size", "cephfs_client_cache_size",
           "cephfs_fuse_request_work", "wanted_size"]

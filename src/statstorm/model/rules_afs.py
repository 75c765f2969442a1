"""`statstorm check` rule for OpenAFS clients: a stat cache smaller than the code tree the pool
touches. Pure code; see model.rules for the registry.

An AFS client answers a stat from its stat cache (vcache) without a round trip for as long as
the file server's callback on the file holds, which is until the file changes. That makes AFS
the network file system where warm PHP metadata can be free, but only while every file and
directory PHP touches has an entry: afsd autotunes `-stat` from the cache size (3000 entries
for Debian's 50 MB disk cache), and MediaWiki alone is ~23,000 files. A smaller stat cache
recycles entries every request, and each recycled file costs a FetchStatus (or a bulk status)
again; the file server's RPC counts show it (adapters/storage/afs_stats.py).

With its callbacks held the client makes no RPC, and what AFS still costs through afsd.fuse is
the client's own work per FUSE request: libfuse's high-level path lookup and afsd.fuse walking
the whole path again in the cache manager (model/afs_fuse.py). The kernel keeps afsd.fuse's
answers for libfuse's default 1 s (attributes, names) and not at all for missing names, and
missing names are what PHP asks for again and again (include_path and autoloader probes). The
second finding, `openafs-fuse-timeouts`, asks the kernel to keep those for 60 s
(`negative_timeout`; the attribute and entry timeouts measured no gain): a coherence trade (a
new file can stay unseen that long on this client), so it is measure-first, named or tried by
`statstorm tune`, never part of `apply --all`.
"""

from __future__ import annotations

from statstorm.model import afs_cache, afs_fuse
from statstorm.model.checkfacts import Facts, MountFact
from statstorm.model.finding import Finding, Rule, code_mounts, finding
from statstorm.model.storage_kinds import STORAGE
from statstorm.results.check import Severity
from statstorm.results.storage_kind import StorageKind

RULE_ID = "openafs-stat-cache"
LABEL = STORAGE[StorageKind.OPENAFS].label
TRADEOFF = ("each stat cache entry is about 1 KiB of the client's memory (32768 entries: ~32 "
            "MiB), and the file server keeps a callback per entry for this client; the "
            "client's cache sizes change only when it restarts: AFS paths fail for the "
            "second in between, so restart it while the site is quiet")
GAIN_NOTE = ("measure it: the round trips per request the file server counts (statstorm "
             "trace on an AFS mount reads them from its xstat statistics) before and after")


def touched(facts: Facts) -> tuple[int, str]:
    """The files and directories the pool touches, and where that figure comes from: the
    trace's working set when there is one, else the code tree under the docroot."""
    t = facts.trace
    if t is not None and t.working_set_entries:
        return t.working_set_entries, "files and directories the traced requests touched"
    if facts.tree_entries:
        return facts.tree_entries, "PHP files and their directories under the docroot"
    if facts.php_files:
        return facts.php_files, "PHP files under the docroot"
    return 0, ""


def stat_cache_gap(m: MountFact, need: int) -> int | None:
    """The -stat to ask for when the client's stat cache is smaller than `need` (None: it is
    not, or its size is not known)."""
    have = afs_cache.stat_entries(m.cache_options)
    if have is None or need <= have:
        return None
    return afs_cache.stat_cache_for(need)


def openafs_stat_cache(facts: Facts) -> list[Finding]:
    need, source = touched(facts)
    if not need:
        return []
    out = []
    for m in code_mounts(facts, LABEL):
        want = stat_cache_gap(m, need)
        if want is None:
            continue
        c = m.cache_options
        auto = "stat" in c.get(afs_cache.AUTOTUNED, "").split(",")
        ev = [f"{m.mount_point} (OpenAFS, {c.get(afs_cache.CLIENT) or 'client'}): the stat cache "
              f"holds {c['stat']} entries" + (" (afsd autotuned it from the "
                                             f"{c.get('blocks', '?')} KiB cache)" if auto else ""),
              f"the pool touches {need} {source}: more than the stat cache holds, so entries "
              "are recycled every request and their status fetched from the file server again"]
        t = facts.trace
        if t is not None and t.round_trips_per_request is not None:
            ev.append(f"{t.round_trips_per_request:g} RPCs per request counted at the file "
                      "server while tracing")
        conf = f'OPTIONS="-stat {want}"'
        change = [f"# mount options for {m.mount_point}:", f"stat={want}",
                  f"# the client's flag: -stat {want}; a kernel client on Debian: {conf} in "
                  "/etc/openafs/afs.conf.client (keep its other flags), then "
                  "`systemctl restart openafs-client` while the site is quiet"]
        out.append(finding(Severity.WARNING, f"OpenAFS mount {m.mount_point}: the client's stat "
                           f"cache ({c['stat']}) is smaller than the code the pool touches "
                           f"({need})", ev, change, TRADEOFF, None, GAIN_NOTE))
    return out


TIMEOUTS_ID = "openafs-fuse-timeouts"
TIMEOUTS_TRADEOFF = ("the kernel answers a lookup of a missing name itself for "
                     f"{afs_fuse.WANTED_S} s: a file server's callback break empties afsd.fuse's "
                     "cache at once but not the kernel's, so a file created where PHP already "
                     f"looked can stay unseen for up to {afs_fuse.WANTED_S} s on this client (a "
                     "deploy's new class file: 'class not found' meanwhile); changed files are "
                     "still seen within the 1 s attribute timeout; the client restarts to take "
                     "it: AFS paths fail for the second in between")
TIMEOUTS_NOTE = ("not predicted: how many of a request's stats and lookups the kernel then "
                 "answers itself depends on the app's walk; measure throughput against local "
                 "disk before and after (statstorm tune measures it and keeps it only when it "
                 "helps)")


def openafs_fuse_timeouts(facts: Facts) -> list[Finding]:
    out = []
    for m in code_mounts(facts, LABEL):
        c = m.cache_options
        if c.get(afs_cache.CLIENT) != STORAGE[StorageKind.OPENAFS].client:
            continue  # the kernel's AFS client keeps its own coherent caches
        want = afs_fuse.short(c)
        if not want:
            continue
        now = {**afs_fuse.DEFAULTS, **{k: c[k] for k in afs_fuse.TIMEOUT_KEYS if k in c}}
        ev = [f"{m.mount_point} is OpenAFS through afsd.fuse, whose FUSE timeouts are attribute "
              f"{now[afs_fuse.ATTR]} s, entry {now[afs_fuse.ENTRY]} s, negative "
              f"{now[afs_fuse.NEGATIVE]} s (libfuse's defaults unless given)",
              "so each probe of a missing name (include_path, autoloaders) is a FUSE request "
              "every time, which afsd.fuse answers by walking the whole path again in its "
              "cache manager: no RPC while the callbacks hold, but its CPU and a context "
              "switch each time",
              "measured on the synthetic lab: ~34 FUSE requests per page view, nearly all "
              f"missing names; 0 with negative_timeout={afs_fuse.WANTED_S} and 3x the "
              "throughput; attr/entry timeouts of 60 s alone changed nothing "
              "(docs/lab-afs-notes.md)"]
        t = facts.trace
        if t is not None and t.round_trips_per_request is not None:
            ev.append(f"{t.round_trips_per_request:g} RPCs per request counted at the file "
                      "server while tracing: the rest of the cost is the client's own work")
        opts = ",".join(f"{k}={v}" for k, v in want.items())
        word = afs_fuse.timeout_word({**{k: v for k, v in now.items()
                                         if v != afs_fuse.DEFAULTS[k]}, **want})[0]
        change = [f"# mount options for {m.mount_point}:", opts,
                  f"# afsd.fuse's argument: {word} (add it to the command line that starts "
                  "the client; the kernel's AFS client has no such timeouts)"]
        out.append(finding(Severity.INFO, f"OpenAFS mount {m.mount_point}: the kernel keeps "
                           f"afsd.fuse's missing names {now[afs_fuse.NEGATIVE]} s: every probe "
                           "goes to the client", ev, change, TIMEOUTS_TRADEOFF, None,
                           TIMEOUTS_NOTE))
    return out


RULES: tuple[tuple[str, Rule], ...] = (
    (RULE_ID, openafs_stat_cache),
    (TIMEOUTS_ID, openafs_fuse_timeouts),
)

__all__ = ["RULES", "RULE_ID", "TIMEOUTS_ID", "openafs_fuse_timeouts", "openafs_stat_cache",
           "stat_cache_gap", "touched"]

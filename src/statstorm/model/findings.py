"""The rules of `statstorm check`: Facts in, graded findings out. Pure code.

Each rule is a function `Facts -> list[Finding]` registered in RULES under its stable id; the
id is the anchor of its section in docs/check.md (a test fails if a rule has none). A finding
carries the evidence (settings and measured figures), the exact lines to change, the trade-off,
and a predicted gain where statstorm can estimate one from the trace (syscalls per request it
removes, and with an fsbench result their time); otherwise `predicted_gain` is None and
`gain_note` says why.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from statstorm.model.checkfacts import (OPCACHE_MAX_FILES, Facts, MountFact, human_bytes,
                                        ini_bool, ini_bytes,
                                        ini_int, ini_size, opcache_rounded)

SEVERITIES = ("info", "warning", "critical")
DOCS = "docs/check.md#"
NETWORK_KINDS = ("nfs", "glusterfs-fuse", "sshfs", "fuse")
REALPATH_DEFAULT = 4 << 20
NO_TRACE = "no trace given: run `statstorm trace` and pass it with --trace to measure this"


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str  # info | warning | critical
    title: str
    evidence: tuple[str, ...]
    change: tuple[str, ...]  # exact ini / pool / mount / web-server lines, or commands
    tradeoff: str
    predicted_gain: dict[str, Any] | None = None
    gain_note: str = ""  # why there is no prediction, or how it was made
    pool: str = ""
    docs: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["evidence"] = list(self.evidence)
        data["change"] = list(self.change)
        return data


def rank(severity: str) -> int:
    return SEVERITIES.index(severity)


Rule = Callable[[Facts], list["Finding"]]
RULES: dict[str, Rule] = {}


def rule(rule_id: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        RULES[rule_id] = fn
        return fn
    return register


def evaluate(facts: Facts) -> list[Finding]:
    """All findings for one pool, most severe first (stable order within a severity)."""
    out: list[Finding] = []
    for rule_id, fn in RULES.items():
        for f in fn(facts):
            out.append(Finding(**{**asdict(f), "evidence": tuple(f.evidence),
                                  "change": tuple(f.change), "id": rule_id, "pool": facts.pool,
                                  "docs": DOCS + rule_id}))
    return sorted(out, key=lambda f: -rank(f.severity))


def _f(severity: str, title: str, evidence: list[str], change: list[str], tradeoff: str,
       gain: dict[str, Any] | None = None, note: str = "") -> Finding:
    return Finding(id="", severity=severity, title=title, evidence=tuple(evidence),
                   change=tuple(change), tradeoff=tradeoff, predicted_gain=gain, gain_note=note)


def _s(facts: Facts, key: str) -> str | None:
    return facts.settings.get(key)


def _gain(facts: Facts, what: str, calls: float, op: str) -> dict[str, Any]:
    """Syscalls per request removed, and their time where fsbench measured the code's mount."""
    gain: dict[str, Any] = {"metric": f"{what} per request", "syscalls_per_request": -round(calls, 1)}
    mount = next((m for m in facts.mounts if m.role == "docroot"), None)
    p50 = facts.fsbench_p50_us.get(mount.mount_point, {}).get(op) if mount else None
    if p50 is not None:
        gain["us_per_request"] = -round(calls * p50, 1)
        gain["from"] = f"fsbench {op} p50 {p50:g} µs on {mount.mount_point if mount else ''}"
    return gain


def _opcache_on(facts: Facts) -> bool:
    return ini_bool(_s(facts, "opcache.enable"), False)


CODE_ROLES = ("docroot", "include_path")


def _on_network(facts: Facts) -> list[MountFact]:
    """The network mounts holding code (not writable data)."""
    return [m for m in facts.mounts if m.kind in NETWORK_KINDS and m.role in CODE_ROLES]


# -- realpath cache ------------------------------------------------------------------------------
@rule("realpath-cache-small")
def realpath_cache_small(facts: Facts) -> list[Finding]:
    limit = ini_bytes(_s(facts, "realpath_cache_size"))
    if limit is None:
        return []
    basedir = bool(_s(facts, "open_basedir"))
    # With open_basedir the cache is off: nothing to measure, but the size bites once it goes.
    t = None if basedir else facts.trace
    ev = [f"realpath_cache_size = {_s(facts, 'realpath_cache_size')} ({limit:,} bytes)"]
    if basedir:
        ev.append("the cache is off while open_basedir is set (see open-basedir); this size "
                  "applies once open_basedir is removed")
    measured = False
    need = 0
    if facts.realpath_used is not None and not basedir:
        ev.append(f"a worker's realpath_cache_size() = {facts.realpath_used:,} bytes "
                  f"({facts.realpath_used / max(limit, 1):.0%} of the limit; PHP never evicts)")
        measured |= facts.realpath_used >= 0.9 * limit
    if t is not None and t.working_set_bytes:
        need = t.working_set_bytes
        ev.append(f"the trace touched {t.working_set_entries:,} path entries needing "
                  f"{t.working_set_bytes:,} bytes (48 + length + 1 each)")
        measured |= need > limit
    events = t is not None and t.detail == "events"
    if t is not None and events:
        ev.append(f"successful lstat per request (median): {t.ok_lstat_per_request:g}")
        measured |= t.ok_lstat_per_request >= 5 and facts.tree_bytes > limit
    if facts.tree_bytes:
        ev.append(f"{facts.php_files or 0:,} PHP files under the docroot and include_path: "
                  f"{facts.tree_entries:,} entries, {facts.tree_bytes:,} bytes if all are used")
    if measured:
        sev = "warning"
    elif facts.tree_bytes > limit and not events:
        sev = "warning" if facts.tree_bytes > 2 * limit else "info"
    else:
        return []
    want = max(2 * max(need, facts.tree_bytes, facts.realpath_used or 0), REALPATH_DEFAULT)
    gain = None
    note = ("open_basedir disables the cache: see open-basedir for the gain" if basedir
            else NO_TRACE)
    if t is not None and events:
        gain = _gain(facts, "successful lstat", t.ok_lstat_per_request, "walk")
        note = ("estimate: once warm, every path fits, so the successful lstat calls the trace "
                "saw per request go (failed lookups stay)")
    return [_f(sev, "realpath cache too small for the working set", ev,
               [f"realpath_cache_size = {ini_size(want)}"],
               f"costs up to {human_bytes(want)} of memory per worker (only what is used is "
               "allocated); nothing else", gain, note)]


@rule("realpath-cache-ttl")
def realpath_cache_ttl(facts: Facts) -> list[Finding]:
    ttl = _s(facts, "realpath_cache_ttl")
    if ttl is None or _s(facts, "open_basedir"):
        return []
    secs = ini_int(ttl, 120)
    if secs == 0 or secs >= 600:
        return []
    sev = "warning" if secs < 60 else "info"
    ev = [f"realpath_cache_ttl = {secs}: every cached path is resolved again (1 lstat per "
          f"component) every {secs} s in every worker"]
    if facts.symlinks:
        ev.append("the code is reached through a symlink, so a long TTL keeps the old target; "
                  "see symlink-deploy-stale")
    return [_f(sev, "realpath cache entries expire sooner than useful", ev,
               ["realpath_cache_ttl = 600"],
               "a file or symlink moved by a deploy resolves to its old place for up to 600 s "
               "in each worker unless the deploy reloads php-fpm",
               None, "the gain depends on request rate per worker; whatif models it "
               "(not part of check)")]


@rule("open-basedir")
def open_basedir(facts: Facts) -> list[Finding]:
    value = _s(facts, "open_basedir")
    if not value:
        return []
    entries = [e for e in value.split(":") if e]
    ev = [f"open_basedir = {value}: PHP sets the realpath cache limit to 0 in every worker "
          "that serves a request with it, so every path is resolved with 1 lstat per component",
          f"modeled: each include or file check costs about 2 x (path components) + "
          f"(components of the matching basedir) lstat, tried against {len(entries)} entr"
          f"{'y' if len(entries) == 1 else 'ies'} in order"]
    if facts.realpath_used is not None:
        ev.append(f"a worker's realpath_cache_size() = {facts.realpath_used:,}")
    gain = None
    note = NO_TRACE
    t = facts.trace
    if t is not None:
        lstat = t.per_request.get("lstat", 0.0)
        ev.append(f"measured: {lstat:g} lstat per request")
        if t.detail == "events":
            gain = _gain(facts, "successful lstat", t.ok_lstat_per_request, "walk")
            note = ("estimate: with the cache on, the successful lstat calls per request "
                    "go once warm")
    sev = "critical" if _on_network(facts) else "warning"
    return [_f(sev, "open_basedir disables the realpath cache", ev,
               ["open_basedir =",
                "; isolate the pool with its own user, a container or a chroot instead"],
               "open_basedir is a safety net against path traversal in the PHP code: removing "
               "it needs another isolation (per-pool user, container); the realpath_turbo "
               "extension keeps it with the cache on, with its symlink caveats", gain, note)]


# -- OPcache -------------------------------------------------------------------------------------
@rule("opcache-disabled")
def opcache_disabled(facts: Facts) -> list[Finding]:
    if "opcache.enable" in facts.settings and _opcache_on(facts):
        return []
    loaded = "opcache.enable" in facts.settings
    ev = [f"opcache.enable = {_s(facts, 'opcache.enable')}" if loaded
          else "OPcache is not loaded in this SAPI (no opcache.* settings)"]
    t = facts.trace
    gain = None
    note = NO_TRACE
    if t is not None:
        ev.append(f"measured: {t.per_request.get('open', 0):g} open and "
                  f"{t.per_request.get('fstat', 0):g} fstat per request")
        if t.detail == "events" and t.php_opens_per_request:
            ev.append(f"{t.php_opens_per_request:g} PHP files opened and compiled per request")
            gain = _gain(facts, "open of PHP files", t.php_opens_per_request, "stat")
            note = "estimate: every PHP file opened per request is served from shared memory"
    return [_f("critical", "OPcache is off: every request compiles every file", ev,
               (["opcache.enable = 1"] if loaded else
                ["zend_extension = opcache", "opcache.enable = 1"]),
               "needs shared memory (opcache.memory_consumption) and a php-fpm restart; code "
               "changes are then seen only after revalidation", gain, note)]


@rule("opcache-revalidate")
def opcache_revalidate(facts: Facts) -> list[Finding]:
    if not _opcache_on(facts) or not ini_bool(_s(facts, "opcache.validate_timestamps"), True):
        return []
    freq = ini_int(_s(facts, "opcache.revalidate_freq"), 2)
    network = _on_network(facts)
    if freq >= 60 or (freq > 0 and not network and freq >= 2):
        return []
    ev = [f"opcache.validate_timestamps = 1, opcache.revalidate_freq = {freq}: "
          + ("every include stats its file on every request" if freq == 0 else
             f"each cached file is stat'ed again every {freq + 1} s")]
    if network:
        ev.append(f"the code is on {network[0].kind} ({network[0].mount_point}): each of those "
                  "stats can be a network round trip")
    t = facts.trace
    gain = None
    note = NO_TRACE
    if t is not None and t.detail == "events":
        ev.append(f"measured: {t.revalidate_per_request:g} OPcache revalidation stat per request")
        gain = _gain(facts, "OPcache revalidation stat", t.revalidate_per_request, "stat")
        note = "estimate: with a 60 s window almost all of these stats go"
    sev = "warning" if freq == 0 or network else "info"
    return [_f(sev, "OPcache checks file timestamps too often", ev,
               ["opcache.revalidate_freq = 60",
                "; or: opcache.validate_timestamps = 0 and reset OPcache on every deploy"],
               "a changed file is picked up up to 60 s late (with validate_timestamps = 0 only "
               "after a php-fpm reload or opcache_reset())", gain, note)]


@rule("opcache-revalidate-path")
def opcache_revalidate_path(facts: Facts) -> list[Finding]:
    if not _opcache_on(facts) or not ini_bool(_s(facts, "opcache.revalidate_path")):
        return []
    return [_f("warning", "opcache.revalidate_path resolves and opens every include",
               ["opcache.revalidate_path = 1: each include is resolved through the realpath "
                "cache and plain include/require also open the file, even on a cache hit"],
               ["opcache.revalidate_path = 0"],
               "with symlink-swap deploys, the old release's cached files stay in use under the "
               "symlinked path until OPcache is reset (do that on deploy)",
               None, "the open per include is not in a trace summary; whatif models it")]


@rule("opcache-max-files")
def opcache_max_files(facts: Facts) -> list[Finding]:
    if not _opcache_on(facts) or facts.php_files is None:
        return []
    setting = ini_int(_s(facts, "opcache.max_accelerated_files"), 10000)
    slots = opcache_rounded(setting)
    st = facts.opcache_status or {}
    keys = st.get("opcache_statistics", {}).get("num_cached_keys")
    ev = [f"opcache.max_accelerated_files = {setting} (PHP rounds it up to {slots} keys)",
          f"{facts.php_files:,} PHP files under the docroot and include_path"]
    if keys is not None:
        ev.append(f"the pool's OPcache holds {keys:,} keys now")
    if facts.php_files <= slots * 0.8 and not (keys and keys >= slots * 0.9):
        return []
    want = min(opcache_rounded(math.ceil(max(facts.php_files, keys or 0) * 1.5)),
               OPCACHE_MAX_FILES)
    return [_f("warning", "opcache.max_accelerated_files is below the number of PHP files", ev,
               [f"opcache.max_accelerated_files = {want}"],
               "a few bytes of shared memory per key; none otherwise", None,
               "files beyond the limit are compiled on every request or trigger restarts; "
               "the count of those requests is not in a trace summary")]


@rule("opcache-memory")
def opcache_memory(facts: Facts) -> list[Finding]:
    st = facts.opcache_status
    if not _opcache_on(facts) or not st:
        return []
    mem = st.get("memory_usage") or {}
    stats = st.get("opcache_statistics") or {}
    used, free = int(mem.get("used_memory", 0)), int(mem.get("free_memory", 0))
    wasted = int(mem.get("wasted_memory", 0))
    total = used + free + wasted
    oom = int(stats.get("oom_restarts", 0))
    if total == 0 or (free >= 0.1 * total and oom == 0):
        return []
    size = ini_int(_s(facts, "opcache.memory_consumption"), 128)
    ev = [f"opcache.memory_consumption = {size} (MiB)",
          f"the pool's OPcache: {human_bytes(used)} used, {human_bytes(free)} free, "
          f"{human_bytes(wasted)} wasted, {oom} out-of-memory restarts"]
    return [_f("warning", "OPcache shared memory is (nearly) full", ev,
               [f"opcache.memory_consumption = {max(size * 2, 128)}"],
               "more shared memory, allocated once per php-fpm master; restarts (which also "
               "wipe every worker's realpath cache) stop", None,
               "restart counts come from the pool's status; their cost is not predicted")]


@rule("opcache-file-override")
def opcache_file_override(facts: Facts) -> list[Finding]:
    if not _opcache_on(facts) or ini_bool(_s(facts, "opcache.enable_file_override")):
        return []
    t = facts.trace
    if t is None or t.detail != "events" or t.ok_probe_per_request < 1:
        return []
    ev = ["opcache.enable_file_override = 0",
          f"measured: {t.ok_probe_per_request:g} successful file_exists/is_file/is_readable "
          "calls per request (e.g. the Composer autoloader finding classes)"]
    return [_f("info", "file_exists()/is_file() of cached scripts still hit the file system", ev,
               ["opcache.enable_file_override = 1"],
               "with validate_timestamps = 0 a deleted file still 'exists' until OPcache is "
               "reset; misses still reach the file system",
               _gain(facts, "successful file probe", t.ok_probe_per_request, "stat"),
               "estimate: upper bound, only probes of files already in OPcache go")]


@rule("opcache-file-update-protection")
def opcache_file_update_protection(facts: Facts) -> list[Finding]:
    prot = ini_int(_s(facts, "opcache.file_update_protection"), 2)
    files = facts.future_php_files or facts.recent_php_files
    if not _opcache_on(facts) or prot <= 0 or not files:
        return []
    ev = [f"opcache.file_update_protection = {prot}: a file whose modification time is less "
          f"than {prot} s before the request (or later) is compiled on every request and "
          "never cached"]
    if facts.future_php_files:
        ev.append(f"{len(facts.future_php_files)} PHP file(s) are dated in the future (the "
                  f"writer's clock is ahead), e.g. {facts.future_php_files[0]}: they stay "
                  "uncached until this machine's clock passes them")
        change = ["# fix the clock of the machine that writes the code (NTP), or:",
                  "opcache.file_update_protection = 0"]
        sev = "warning"
    else:
        ev.append(f"{len(facts.recent_php_files)} PHP file(s) changed in the last {prot} s "
                  f"(a deploy writing in place?), e.g. {facts.recent_php_files[0]}")
        change = ["# deploy to a new directory and switch, instead of writing files in place"]
        sev = "info"
    return [_f(sev, "PHP files too new (or dated in the future) are not cached", ev, change,
               "0 lets OPcache cache a file while a deploy is still writing it in place", None,
               "recompiles per request are not in a trace summary")]


# -- include_path, autoloader, .user.ini ---------------------------------------------------------
def _dead_entries(facts: Facts) -> list[str]:
    """include_path entries without any PHP file (or missing) that come before an entry with
    PHP files: every relative include resolved through include_path misses there first."""
    counts = list(facts.include_path_php)
    last_live = max((i for i, (_, n) in enumerate(counts) if n > 0), default=-1)
    return [e for i, (e, n) in enumerate(counts) if n <= 0 and i < last_live]


@rule("include-path-misses")
def include_path_misses(facts: Facts) -> list[Finding]:
    t = facts.trace
    inc = _s(facts, "include_path") or ""
    entries = [e for e in inc.split(":") if e]
    failed = [(e, c, r) for e, c, r in (t.failed_by_entry if t else ())
              if e != "(not from include_path)"]
    total = sum(r for _, _, r in failed)
    dead = _dead_entries(facts)
    if total < 1 and not dead:
        return []
    ev = [f"include_path = {inc}"] + [f"{r:g} failed lookups per request in {e!r} ({c:,} in "
                                      "the trace)" for e, c, r in failed]
    if dead:
        ev.append("entries without a single PHP file, before the entry that holds the code: "
                  + ", ".join(dead))
    bad = {e for e, _, _ in failed} | set(dead)
    good = [e for e in entries if e not in bad]
    new = good + [e for e in entries if e in bad and e not in dead]
    change = ["; include files by absolute path: require __DIR__ . '/lib/file.php';"]
    if good and new != entries:
        change.insert(0, f"include_path = \"{':'.join(new)}\"")
    if total >= 1:
        sev = "warning" if total >= 5 else "info"
        gain = _gain(facts, "failed lstat", total, "negative")
        note = ("estimate: each failed candidate is one lstat that goes once the holding entry "
                "comes first")
    else:
        # Not measured: with OPcache, resolved relative includes are cached by key, so the
        # misses come back on compiles and revalidations; without it, on every include.
        sev = "info" if _opcache_on(facts) else "warning"
        gain = None
        note = NO_TRACE if t is None else ("the trace saw no failed lookups in include_path "
                                           "(OPcache answered the includes by key)")
    return [_f(sev, "relative includes miss in include_path entries first", ev, change,
               "moving entries changes which file wins if two entries hold the same name; "
               "check that none does", gain, note)]


@rule("autoloader-storm")
def autoloader_storm(facts: Facts) -> list[Finding]:
    t = facts.trace
    if t is None or t.vendor_failed_per_request < 1:
        return []
    ev = [f"measured: {t.vendor_failed_per_request:g} failed access/stat under vendor/ per "
          "request (Composer probing PSR-4/PSR-0 directories, class_exists() of missing "
          "classes)"] + [f"e.g. {p}" for p in t.vendor_failed_examples]
    sev = "warning" if t.vendor_failed_per_request >= 10 else "info"
    return [_f(sev, "the autoloader probes the file system for classes", ev,
               ["composer dump-autoload --optimize --classmap-authoritative",
                "; or, if classes are generated at run time: composer dump-autoload "
                "--optimize --apcu"],
               "an authoritative classmap must be dumped again whenever classes are added; "
               "classes missing from it are not found",
               _gain(facts, "failed vendor probe", t.vendor_failed_per_request, "negative"),
               "estimate: an authoritative classmap answers every lookup without the file "
               "system")]


@rule("user-ini-lookups")
def user_ini_lookups(facts: Facts) -> list[Finding]:
    name = _s(facts, "user_ini.filename")
    if not name or facts.user_ini_files is None or facts.user_ini_files > 0:
        return []
    ev = [f"user_ini.filename = {name}, user_ini.cache_ttl = "
          f"{_s(facts, 'user_ini.cache_ttl') or '300'}, and no file named {name} under "
          f"{facts.docroot}: php-fpm still stats one per directory from the docroot down "
          "to the script, per worker"]
    t = facts.trace
    gain = None
    note = NO_TRACE
    if t is not None and t.detail == "events":
        ev.append(f"measured: {t.user_ini_per_request:g} {name} lookups per request "
                  f"({t.user_ini_dirs} directories)")
        if t.user_ini_per_request > 0:
            gain = _gain(facts, f"{name} stat", t.user_ini_per_request, "negative")
            note = "estimate: all of them go"
        else:
            note = (f"none in this trace: each worker repeats them once per "
                    f"user_ini.cache_ttl and after every respawn")
    return [_f("info", f"{name} lookups although none exists", ev, ["user_ini.filename ="],
               f"a {name} added later is ignored until the setting is restored", gain, note)]


# -- storage -------------------------------------------------------------------------------------
def _roles(facts: Facts, mp: str) -> str:
    return ", ".join(sorted({f"{m.role} {m.path}" for m in facts.mounts
                             if m.mount_point == mp and m.role in CODE_ROLES}))


@rule("nfs-mount-caching")
def nfs_mount_caching(facts: Facts) -> list[Finding]:
    out = []
    seen: set[str] = set()
    for m in facts.mounts:
        if m.kind != "nfs" or m.mount_point in seen or m.role not in CODE_ROLES:
            continue
        seen.add(m.mount_point)
        o = m.cache_options
        acreg = ini_int(o.get("acregmax"), 60)
        bad = []
        if o.get("noac") == "yes":
            bad.append("noac: no attribute cache, every stat is a GETATTR")
        elif acreg < 30:
            bad.append(f"acregmax = {acreg} s: attributes of code files expire quickly")
        if o.get("lookupcache", "all") not in ("all",):
            bad.append(f"lookupcache = {o.get('lookupcache')}: every include_path/autoloader "
                       "miss is a LOOKUP on the server")
        if not bad:
            continue
        ev = [f"{m.mount_point} ({m.fstype}) holds {_roles(facts, m.mount_point)}", *bad]
        out.append(_f("warning", f"NFS mount {m.mount_point} caches little metadata", ev,
                      [f"# /etc/fstab options for {m.mount_point}:",
                       "actimeo=60,lookupcache=all,nocto",
                       "# or keep the code on local disk and sync it on deploy"],
                      "a deploy is seen up to 60 s late (old mtimes, new files reported "
                      "missing); deploy to a new directory and reload php-fpm to be safe",
                      None, "fsbench on this mount measures the per-call cost"))
    return out


@rule("glusterfs-mount-caching")
def glusterfs_mount_caching(facts: Facts) -> list[Finding]:
    out = []
    seen: set[str] = set()
    for m in facts.mounts:
        if m.kind != "glusterfs-fuse" or m.mount_point in seen or m.role not in CODE_ROLES:
            continue
        seen.add(m.mount_point)
        o, vol = m.cache_options, m.volume_options
        attr = float(o.get("attribute-timeout", "1") or 1)
        entry = float(o.get("entry-timeout", "1") or 1)
        neg = float(o.get("negative-timeout", "0") or 0)
        mdc = float(vol.get("performance.md-cache-timeout", "1") or 1)
        nl = vol.get("performance.nl-cache", "off")
        bad = []
        if attr < 60:
            bad.append(f"attribute-timeout = {attr:g} s")
        if entry < 60:
            bad.append(f"entry-timeout = {entry:g} s")
        if neg < 60:
            bad.append(f"negative-timeout = {neg:g} s: every failed lookup goes to the bricks")
        if vol and mdc < 60:
            bad.append(f"performance.md-cache-timeout = {mdc:g} s")
        if vol and nl != "on":
            bad.append(f"performance.nl-cache = {nl}")
        if not bad:
            continue
        ev = [f"{m.mount_point} (GlusterFS FUSE, volume {m.volume or '?'}) holds "
              f"{_roles(facts, m.mount_point)}", *bad]
        lat = facts.fsbench_p50_us.get(m.mount_point)
        if lat:
            ev.append("fsbench warm p50: " + ", ".join(f"{k} {v:g} µs" for k, v in sorted(lat.items())))
        v = m.volume or "VOLUME"
        out.append(_f("warning", f"GlusterFS mount {m.mount_point} uses short metadata caches",
                      ev,
                      [f"# mount options for {m.mount_point}:",
                       "attribute-timeout=600,entry-timeout=600,negative-timeout=600",
                       f"gluster volume set {v} features.cache-invalidation on",
                       f"gluster volume set {v} performance.md-cache-timeout 600",
                       f"gluster volume set {v} performance.nl-cache on"],
                      "a deploy through another client is seen up to 600 s late (old attributes, "
                      "new files missing) unless cache-invalidation reaches this client; deploy "
                      "to a new directory and reload php-fpm", None,
                      "the gain depends on the kernel cache hit rate; fsbench measures the "
                      "per-call cost, whatif the per-request effect"))
    return out


LOCAL_HOMES = {"session files": "session.save_path = /var/lib/php/sessions",
               "OPcache file cache": "opcache.file_cache = /var/cache/php/opcache",
               "upload temp dir": "upload_tmp_dir = /tmp",
               "temp dir": "sys_temp_dir = /tmp"}


@rule("writable-data-on-network")
def writable_data_on_network(facts: Facts) -> list[Finding]:
    hits = [m for m in facts.mounts if m.role.startswith("writable:") and m.kind in NETWORK_KINDS]
    if not hits:
        return []
    ev = [f"{m.role.split(':', 1)[1]} {m.path} on {m.kind} ({m.mount_point})" for m in hits]
    change = [LOCAL_HOMES.get(m.role.split(":", 1)[1],
                              f"# move {m.path} to local disk (symlink it from the release "
                              "or point the app's cache setting there)") for m in hits]
    sessions = any(m.role == "writable:session files" for m in hits)
    return [_f("warning" if sessions else "info",
               "writable data and caches live on network storage", ev, list(dict.fromkeys(change)),
               "data on local disk is per machine: sessions then need a shared store (Redis, "
               "memcached, a database) or sticky load balancing when there are several web "
               "servers", None,
               "each session lock, cache write and rename is a network round trip (and a "
               "rename wipes the worker's realpath cache); not in a trace summary")]


@rule("symlink-deploy-stale")
def symlink_deploy_stale(facts: Facts) -> list[Finding]:
    if not facts.symlinks:
        return []
    ttl = ini_int(_s(facts, "realpath_cache_ttl"), 120)
    vt = ini_bool(_s(facts, "opcache.validate_timestamps"), True)
    risky = []
    if ttl == 0 or ttl >= 600:
        risky.append(f"realpath_cache_ttl = {ttl}" + (" (never expires)" if ttl == 0 else ""))
    if _opcache_on(facts) and not vt:
        risky.append("opcache.validate_timestamps = 0")
    sf = facts.nginx_script_filename
    if not risky and (sf is None or "$realpath_root" in sf):
        return []
    link, target = facts.symlinks[0]
    ev = [f"the code path goes through the symlink {link} -> {target}"] + risky
    if sf is not None:
        ev.append(f"nginx: fastcgi_param SCRIPT_FILENAME {sf}")
    sev = "warning" if risky else "info"
    return [_f(sev, "a symlink-swap deploy can keep serving the old release", ev,
               ["# nginx, in the PHP location:",
                "fastcgi_param SCRIPT_FILENAME $realpath_root$fastcgi_script_name;",
                "fastcgi_param DOCUMENT_ROOT $realpath_root;",
                "# and after switching the symlink: reload php-fpm (clears OPcache and the "
                "realpath caches)"],
               "none at run time; each deploy costs a reload (a cold OPcache for the next "
               "requests)", None, "this is about correctness, not speed")]


# -- php-fpm process manager ---------------------------------------------------------------------
@rule("pm-max-requests")
def pm_max_requests(facts: Facts) -> list[Finding]:
    mr = ini_int(facts.pm.get("pm.max_requests"), 0)
    if mr <= 0 or mr >= 1000:
        return []
    ev = [f"pm.max_requests = {mr}: each worker exits after {mr} requests; its successor "
          "starts with empty realpath, stat and .user.ini caches"]
    t = facts.trace
    gain = None
    note = "no trace with a worker's first request: its cold cost is not measured"
    if t is not None and t.cold_extra_calls is not None:
        ev.append(f"measured: a worker's first request made {t.cold_extra_calls:g} more "
                  "syscalls than the median")
        gain = {"metric": "syscalls per request", "syscalls_per_request":
                -round(max(t.cold_extra_calls, 0) / mr - max(t.cold_extra_calls, 0) / 5000, 2)}
        note = "estimate: the cold first request's extra calls spread over max_requests"
    return [_f("warning" if mr < 100 else "info", "workers recycle often and restart cold", ev,
               ["pm.max_requests = 5000"],
               "a worker that leaks memory lives longer before it is replaced", gain, note)]


@rule("pm-max-children-memory")
def pm_max_children_memory(facts: Facts) -> list[Finding]:
    children = ini_int(facts.pm.get("pm.max_children"), 0)
    pss = sorted(facts.worker_pss_kb)
    if children <= 0 or not pss or facts.mem_available_kb is None:
        return []
    per = pss[min(len(pss) - 1, int(len(pss) * 0.95))]
    need = children * per
    have = facts.mem_available_kb + sum(pss)
    if need <= have:
        return []
    fit = max(1, have // per)
    ev = [f"pm.max_children = {children}; worker PSS p95 {per / 1024:.1f} MiB over "
          f"{len(pss)} workers",
          f"all children need about {need / 1024:.0f} MiB; available for them: "
          f"{have / 1024:.0f} MiB (MemAvailable + what the workers use now)"]
    return [_f("critical" if need > 1.5 * have else "warning",
               "pm.max_children does not fit in memory", ev,
               [f"pm.max_children = {fit}"],
               "fewer concurrent requests; under a burst requests wait in the listen queue "
               "instead of the machine swapping", None, "a memory bound, not a speed-up")]


# -- huge pages -----------------------------------------------------------------------------------
@rule("huge-code-pages")
def huge_code_pages(facts: Facts) -> list[Finding]:
    hp = facts.hugepages
    if not _opcache_on(facts) or hp is None or not facts.text_bytes:
        return []
    page = max(hp.page_kb, 1) * 1024
    pages = -(-facts.text_bytes // page)
    on = ini_bool(_s(facts, "opcache.huge_code_pages"))
    explicit = hp.free_hugepages >= pages
    thp = hp.thp_enabled in ("always", "madvise")
    ev = [f"opcache.huge_code_pages = {int(on)}",
          f"{facts.php_binary or 'the PHP binary'}: executable segment "
          f"{facts.text_bytes / (1 << 20):.1f} MiB = {pages} huge page(s) of {hp.page_kb} kB",
          f"explicit huge pages free: {hp.free_hugepages} of {hp.nr_hugepages}; "
          f"transparent huge pages: {hp.thp_enabled or 'unknown'}"]
    if on and not explicit and not thp:
        return [_f("warning", "opcache.huge_code_pages is on but no huge pages are available", ev,
                   [f"vm.nr_hugepages = {hp.nr_hugepages + pages}",
                    "# or: echo madvise > /sys/kernel/mm/transparent_hugepage/enabled"],
                   f"reserves {pages * hp.page_kb // 1024} MiB of RAM for huge pages", None,
                   "the gain is iTLB misses, not file-system calls (about 2-3 % QPS reported)")]
    if on:
        return []
    change = ["opcache.huge_code_pages = 1"]
    if not explicit and not thp:
        change.append(f"vm.nr_hugepages = {hp.nr_hugepages + pages}")
    return [_f("info", "PHP's code could run from huge pages", ev, change,
               "needs a php-fpm restart; "
               + ("uses transparent huge pages (no reservation)" if thp and not explicit else
                  f"reserves {pages * hp.page_kb // 1024} MiB of RAM"), None,
               "the gain is iTLB misses, not file-system calls (about 2-3 % QPS reported); "
               "measure it with a sweep")]


# -- comparison ------------------------------------------------------------------------------------
COMPARED = ("realpath_cache_size", "realpath_cache_ttl", "open_basedir", "include_path",
            "opcache.enable", "opcache.validate_timestamps", "opcache.revalidate_freq",
            "opcache.memory_consumption", "opcache.max_accelerated_files", "user_ini.filename")


def _norm(value: str) -> str:
    v = value.strip().lower()
    if v in ("on", "yes", "true", "1"):
        return "1"
    if v in ("off", "no", "false", "0", ""):
        return "0"
    return value.strip()


@rule("cli-differs")
def cli_differs(facts: Facts) -> list[Finding]:
    if not facts.cli_settings:
        return []
    diff = [f"{k}: pool {facts.settings.get(k)!r}, CLI {facts.cli_settings.get(k)!r}"
            for k in COMPARED
            if k in facts.settings and k in facts.cli_settings
            and _norm(facts.settings[k]) != _norm(facts.cli_settings[k])]
    if not diff:
        return []
    return [_f("info", "the pool runs with other settings than `php -i` shows", diff,
               ["# nothing to change: judge the pool by its own settings (as check does), not "
                "by php -i"],
               "none", None, "informational")]

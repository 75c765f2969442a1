"""`statstorm check` rules about PHP itself: realpath cache, open_basedir, OPcache, include_path,
the Composer autoloader and `.user.ini`. Pure code; see model.rules for the registry."""

from __future__ import annotations

import math

from statstorm.model.checkfacts import (OPCACHE_MAX_FILES, Facts, human_bytes, ini_bool,
                                        ini_bytes, ini_int, ini_size, opcache_rounded)
from statstorm.model.finding import (NO_TRACE, REALPATH_DEFAULT, Finding, Rule,
                                     code_on_network, finding, gain_estimate, opcache_on,
                                     opcache_reset_step, setting)
from statstorm.model.mirror import mirror_switch
from statstorm.model.php_versions import setting_of
from statstorm.results.check import Severity


def _known(facts: Facts, key: str) -> str | None:
    """The pool's value of `key`, else its PHP version's default (model/php_versions.py)."""
    return setting_of(facts.settings, facts.php_binary, key)


# -- realpath cache ------------------------------------------------------------------------------
def realpath_cache_small(facts: Facts) -> list[Finding]:
    limit = ini_bytes(setting(facts, "realpath_cache_size"))
    if limit is None:
        return []
    basedir = bool(setting(facts, "open_basedir"))
    # With open_basedir the cache is off: nothing to measure, but the size bites once it goes.
    t = None if basedir else facts.trace
    ev = [f"realpath_cache_size = {setting(facts, 'realpath_cache_size')} ({limit:,} bytes)"]
    if basedir:
        ev.append("the cache is off while open_basedir is set (see open-basedir); this size "
                  "applies once open_basedir is removed")
    measured = False
    need = 0
    if facts.realpath_used is not None and not basedir:
        each = facts.realpath_used_by_worker or (facts.realpath_used,)
        ev.append(f"realpath_cache_size() in {len(each)} worker(s): "
                  f"{', '.join(f'{u:,}' for u in each)} bytes (up to "
                  f"{facts.realpath_used / max(limit, 1):.0%} of the limit; PHP never evicts)")
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
        sev = Severity.WARNING
    elif facts.tree_bytes > limit and not events:
        sev = Severity.WARNING if facts.tree_bytes > 2 * limit else Severity.INFO
    else:
        return []
    want = max(2 * max(need, facts.tree_bytes, facts.realpath_used or 0), REALPATH_DEFAULT)
    gain = None
    note = ("open_basedir disables the cache: see open-basedir for the gain" if basedir
            else NO_TRACE)
    if t is not None and events:
        gain = gain_estimate(facts, "successful lstat", t.ok_lstat_per_request, "walk")
        note = ("estimate: once warm, every path fits, so the successful lstat calls the trace "
                "saw per request go (failed lookups stay)")
    return [finding(sev, "realpath cache too small for the working set", ev,
               [f"realpath_cache_size = {ini_size(want)}"],
               f"costs up to {human_bytes(want)} of memory per worker (only what is used is "
               "allocated); nothing else", gain, note)]


def realpath_cache_ttl(facts: Facts) -> list[Finding]:
    ttl = setting(facts, "realpath_cache_ttl")
    if ttl is None or setting(facts, "open_basedir"):
        return []
    secs = ini_int(ttl, 120)
    if secs == 0 or secs >= 600:
        return []
    sev = Severity.WARNING if secs < 60 else Severity.INFO
    ev = [f"realpath_cache_ttl = {secs}: every cached path is resolved again (1 lstat per "
          f"component) every {secs} s in every worker"]
    if any(not mirror_switch(facts.mirror, link) for link, _ in facts.symlinks):
        ev.append("the code is reached through a symlink, so a long TTL keeps the old target; "
                  "see symlink-deploy-stale")
    elif facts.symlinks:  # only the mirror's own `current`
        ev.append("the code is reached through its local mirror's `current` symlink: "
                  "`statstorm mirror sync` reloads the pool after switching it")
    return [finding(sev, "realpath cache entries expire sooner than useful", ev,
               ["realpath_cache_ttl = 600"],
               "a file or symlink moved by a deploy resolves to its old place for up to 600 s "
               "in each worker unless the deploy reloads php-fpm",
               None, "the gain depends on request rate per worker; whatif models it "
               "(not part of check)")]


def open_basedir(facts: Facts) -> list[Finding]:
    value = setting(facts, "open_basedir")
    if not value:
        return []
    entries = [e for e in value.split(":") if e]
    ev = [f"open_basedir = {value}: PHP sets the realpath cache limit to 0 in every worker "
          "that serves a request with it, so every path is resolved with 1 lstat per component",
          f"modeled: each include or file check costs about 2 x (path components) + "
          f"(components of the matching basedir) lstat, tried against {len(entries)} entr"
          f"{'y' if len(entries) == 1 else 'ies'} in order"]
    if facts.realpath_used is not None:
        ev.append(f"realpath_cache_size() of the workers asked: {facts.realpath_used:,} bytes")
    gain = None
    note = NO_TRACE
    t = facts.trace
    if t is not None:
        lstat = t.per_request.get("lstat", 0.0)
        ev.append(f"measured: {lstat:g} lstat per request")
        if t.detail == "events":
            gain = gain_estimate(facts, "successful lstat", t.ok_lstat_per_request, "walk")
            note = ("estimate: with the cache on, the successful lstat calls per request "
                    "go once warm")
    sev = Severity.CRITICAL if code_on_network(facts) else Severity.WARNING
    return [finding(sev, "open_basedir disables the realpath cache", ev,
               ["open_basedir =",
                "; isolate the pool with its own user, a container or a chroot instead"],
               "open_basedir is a safety net against path traversal in the PHP code: removing "
               "it needs another isolation (per-pool user, container); the realpath_turbo "
               "extension keeps it with the cache on, with its symlink caveats", gain, note)]


# -- OPcache -------------------------------------------------------------------------------------
def opcache_disabled(facts: Facts) -> list[Finding]:
    if "opcache.enable" in facts.settings and opcache_on(facts):
        return []
    loaded = "opcache.enable" in facts.settings
    ev = [f"opcache.enable = {setting(facts, 'opcache.enable')}" if loaded
          else "OPcache is not loaded in this SAPI (no opcache.* settings)"]
    t = facts.trace
    gain = None
    note = NO_TRACE
    if t is not None:
        ev.append(f"measured: {t.per_request.get('open', 0):g} open and "
                  f"{t.per_request.get('fstat', 0):g} fstat per request")
        if t.detail == "events" and t.php_opens_per_request:
            ev.append(f"{t.php_opens_per_request:g} PHP files opened and compiled per request")
            gain = gain_estimate(facts, "open of PHP files", t.php_opens_per_request, "stat")
            note = "estimate: every PHP file opened per request is served from shared memory"
    return [finding(Severity.CRITICAL, "OPcache is off: every request compiles every file", ev,
               (["opcache.enable = 1"] if loaded else
                ["zend_extension = opcache", "opcache.enable = 1"]),
               "needs shared memory (opcache.memory_consumption) and a php-fpm restart; code "
               "changes are then seen only after revalidation", gain, note)]


def opcache_revalidate(facts: Facts) -> list[Finding]:
    if not opcache_on(facts) or not ini_bool(setting(facts, "opcache.validate_timestamps"), True):
        return []
    freq = ini_int(_known(facts, "opcache.revalidate_freq"), 2)
    network = code_on_network(facts)
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
        gain = gain_estimate(facts, "OPcache revalidation stat", t.revalidate_per_request, "stat")
        note = "estimate: with a 60 s window almost all of these stats go"
    sev = Severity.WARNING if freq == 0 or network else Severity.INFO
    step = opcache_reset_step(facts)
    return [finding(sev, "OPcache checks file timestamps too often", ev,
               ["opcache.revalidate_freq = 60",
                f"; or: opcache.validate_timestamps = 0, and after each deploy run {step}"],
               "a changed file is picked up up to 60 s late; with validate_timestamps = 0 "
               f"never by itself: after each deploy run {step} (until then the old code is "
               "served)", gain, note)]


def opcache_revalidate_path(facts: Facts) -> list[Finding]:
    if not opcache_on(facts) or not ini_bool(setting(facts, "opcache.revalidate_path")):
        return []
    return [finding(Severity.WARNING, "opcache.revalidate_path resolves and opens every include",
               ["opcache.revalidate_path = 1: each include is resolved through the realpath "
                "cache and plain include/require also open the file, even on a cache hit"],
               ["opcache.revalidate_path = 0"],
               "with symlink-swap deploys, the old release's cached files stay in use under the "
               "symlinked path until OPcache is reset (do that on deploy)",
               None, "the open per include is not in a trace summary; whatif models it")]


def opcache_max_files(facts: Facts) -> list[Finding]:
    if not opcache_on(facts) or facts.php_files is None:
        return []
    configured = ini_int(_known(facts, "opcache.max_accelerated_files"), 10000)
    slots = opcache_rounded(configured)
    keys = facts.opcache.num_cached_keys if facts.opcache else None
    ev = [f"opcache.max_accelerated_files = {configured} (PHP rounds it up to {slots} keys)",
          f"{facts.php_files:,} PHP files under the docroot and include_path"]
    if keys is not None:
        ev.append(f"the pool's OPcache holds {keys:,} keys now")
    if facts.php_files <= slots * 0.8 and not (keys and keys >= slots * 0.9):
        return []
    want = min(opcache_rounded(math.ceil(max(facts.php_files, keys or 0) * 1.5)),
               OPCACHE_MAX_FILES)
    return [finding(Severity.WARNING, "opcache.max_accelerated_files is below the number of PHP files", ev,
               [f"opcache.max_accelerated_files = {want}"],
               "a few bytes of shared memory per key; none otherwise", None,
               "files beyond the limit are compiled on every request or trigger restarts; "
               "the count of those requests is not in a trace summary")]


def opcache_memory(facts: Facts) -> list[Finding]:
    st = facts.opcache
    if not opcache_on(facts) or st is None:
        return []
    used, free, wasted = st.used_memory, st.free_memory, st.wasted_memory
    total = used + free + wasted
    oom = st.oom_restarts
    if total == 0 or (free >= 0.1 * total and oom == 0):
        return []
    size = ini_int(_known(facts, "opcache.memory_consumption"), 128)
    ev = [f"opcache.memory_consumption = {size} (MiB)",
          f"the pool's OPcache: {human_bytes(used)} used, {human_bytes(free)} free, "
          f"{human_bytes(wasted)} wasted, {oom} out-of-memory restarts"]
    return [finding(Severity.WARNING, "OPcache shared memory is (nearly) full", ev,
               [f"opcache.memory_consumption = {max(size * 2, 128)}"],
               "more shared memory, allocated once per php-fpm master; restarts (which also "
               "wipe every worker's realpath cache) stop", None,
               "restart counts come from the pool's status; their cost is not predicted")]


def opcache_file_override(facts: Facts) -> list[Finding]:
    if not opcache_on(facts) or ini_bool(setting(facts, "opcache.enable_file_override")):
        return []
    t = facts.trace
    if t is None or t.detail != "events" or t.ok_probe_per_request < 1:
        return []
    ev = ["opcache.enable_file_override = 0",
          f"measured: {t.ok_probe_per_request:g} successful file_exists/is_file/is_readable "
          "calls per request (e.g. the Composer autoloader finding classes)"]
    return [finding(Severity.INFO, "file_exists()/is_file() of cached scripts still hit the file system", ev,
               ["opcache.enable_file_override = 1"],
               "with validate_timestamps = 0 a deleted file still 'exists' until OPcache is "
               "reset; misses still reach the file system",
               gain_estimate(facts, "successful file probe", t.ok_probe_per_request, "stat"),
               "estimate: upper bound, only probes of files already in OPcache go")]


def opcache_file_update_protection(facts: Facts) -> list[Finding]:
    prot = ini_int(_known(facts, "opcache.file_update_protection"), 2)
    files = facts.future_php_files or facts.recent_php_files
    if not opcache_on(facts) or prot <= 0 or not files:
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
        sev = Severity.WARNING
    else:
        ev.append(f"{len(facts.recent_php_files)} PHP file(s) changed in the last {prot} s "
                  f"(a deploy writing in place?), e.g. {facts.recent_php_files[0]}")
        change = ["# deploy to a new directory and switch, instead of writing files in place"]
        sev = Severity.INFO
    return [finding(sev, "PHP files too new (or dated in the future) are not cached", ev, change,
               "0 lets OPcache cache a file while a deploy is still writing it in place", None,
               "recompiles per request are not in a trace summary")]


# -- include_path, autoloader, .user.ini ---------------------------------------------------------
def _dead_entries(facts: Facts) -> list[str]:
    """include_path entries without any PHP file (or missing) that come before an entry with
    PHP files: every relative include resolved through include_path misses there first."""
    counts = list(facts.include_path_php)
    last_live = max((i for i, (_, n) in enumerate(counts) if n > 0), default=-1)
    return [e for i, (e, n) in enumerate(counts) if n <= 0 and i < last_live]


def include_path_misses(facts: Facts) -> list[Finding]:
    t = facts.trace
    inc = setting(facts, "include_path") or ""
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
        sev = Severity.WARNING if total >= 5 else Severity.INFO
        gain = gain_estimate(facts, "failed lstat", total, "negative")
        note = ("estimate: each failed candidate is one lstat that goes once the holding entry "
                "comes first")
    else:
        # Not measured: with OPcache, resolved relative includes are cached by key, so the
        # misses come back on compiles and revalidations; without it, on every include.
        sev = Severity.INFO if opcache_on(facts) else Severity.WARNING
        gain = None
        note = NO_TRACE if t is None else ("the trace saw no failed lookups in include_path "
                                           "(OPcache answered the includes by key)")
    return [finding(sev, "relative includes miss in include_path entries first", ev, change,
               "moving entries changes which file wins if two entries hold the same name; "
               "check that none does", gain, note)]


def autoloader_storm(facts: Facts) -> list[Finding]:
    t = facts.trace
    if t is None or t.vendor_failed_per_request < 1:
        return []
    ev = [f"measured: {t.vendor_failed_per_request:g} failed access/stat under vendor/ per "
          "request (Composer probing PSR-4/PSR-0 directories, class_exists() of missing "
          "classes)"] + [f"e.g. {p}" for p in t.vendor_failed_examples]
    sev = Severity.WARNING if t.vendor_failed_per_request >= 10 else Severity.INFO
    return [finding(sev, "the autoloader probes the file system for classes", ev,
               ["composer dump-autoload --optimize --classmap-authoritative",
                "; or, if classes are generated at run time: composer dump-autoload "
                "--optimize --apcu"],
               "an authoritative classmap must be dumped again whenever classes are added; "
               "classes missing from it are not found",
               gain_estimate(facts, "failed vendor probe", t.vendor_failed_per_request, "negative"),
               "estimate: an authoritative classmap answers every lookup without the file "
               "system")]


def user_ini_lookups(facts: Facts) -> list[Finding]:
    name = setting(facts, "user_ini.filename")
    if not name or facts.user_ini_files is None or facts.user_ini_files > 0:
        return []
    ev = [f"user_ini.filename = {name}, user_ini.cache_ttl = "
          f"{setting(facts, 'user_ini.cache_ttl') or '300'}, and no file named {name} under "
          f"{facts.docroot}: php-fpm still stats one per directory from the docroot down "
          "to the script, per worker"]
    t = facts.trace
    gain = None
    note = NO_TRACE
    if t is not None and t.detail == "events":
        ev.append(f"measured: {t.user_ini_per_request:g} {name} lookups per request "
                  f"({t.user_ini_dirs} directories)")
        if t.user_ini_per_request > 0:
            gain = gain_estimate(facts, f"{name} stat", t.user_ini_per_request, "negative")
            note = "estimate: all of them go"
        else:
            note = ("none in this trace: each worker repeats them once per "
                    "user_ini.cache_ttl and after every respawn")
    return [finding(Severity.INFO, f"{name} lookups although none exists", ev, ["user_ini.filename ="],
               f"a {name} added later is ignored until the setting is restored", gain, note)]


# The rules in the order they are evaluated, each under its id (the anchor of its section
# in docs/check.md).
RULES: tuple[tuple[str, Rule], ...] = (
    ("realpath-cache-small", realpath_cache_small),
    ("realpath-cache-ttl", realpath_cache_ttl),
    ("open-basedir", open_basedir),
    ("opcache-disabled", opcache_disabled),
    ("opcache-revalidate", opcache_revalidate),
    ("opcache-revalidate-path", opcache_revalidate_path),
    ("opcache-max-files", opcache_max_files),
    ("opcache-memory", opcache_memory),
    ("opcache-file-override", opcache_file_override),
    ("opcache-file-update-protection", opcache_file_update_protection),
    ("include-path-misses", include_path_misses),
    ("autoloader-storm", autoloader_storm),
    ("user-ini-lookups", user_ini_lookups),
)

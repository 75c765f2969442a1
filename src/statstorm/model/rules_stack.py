"""`statstorm check` rules about the stack around PHP: network mounts, writable data, symlink
deploys, the php-fpm process manager, huge pages, and the CLI's settings. Pure code; see
model.rules for the registry."""

from __future__ import annotations


from statstorm.model.checkfacts import Facts, ini_bool, ini_int
from statstorm.model.finding import (CODE_ROLES, NETWORK_KINDS, Finding, Rule, code_mounts, finding,
                                     memory_fit, opcache_on, setting)
from statstorm.model.mirror import mirror_switch
from statstorm.results.check import Severity

# -- storage -------------------------------------------------------------------------------------
def _roles(facts: Facts, mp: str) -> str:
    return ", ".join(sorted({f"{m.role} {m.path}" for m in facts.mounts
                             if m.mount_point == mp and m.role in CODE_ROLES}))


def nfs_mount_caching(facts: Facts) -> list[Finding]:
    out = []
    for m in code_mounts(facts, "nfs"):
        o = m.cache
        bad = []
        if o.noac:
            bad.append("noac: no attribute cache, every stat is a GETATTR")
        elif o.acregmax < 30:
            bad.append(f"acregmax = {o.acregmax} s: attributes of code files expire quickly")
        if o.lookupcache != "all":
            bad.append(f"lookupcache = {o.lookupcache}: every include_path/autoloader "
                       "miss is a LOOKUP on the server")
        if not bad:
            continue
        ev = [f"{m.mount_point} ({m.fstype}) holds {_roles(facts, m.mount_point)}", *bad]
        out.append(finding(Severity.WARNING, f"NFS mount {m.mount_point} caches little metadata", ev,
                      [f"# /etc/fstab options for {m.mount_point}:",
                       "actimeo=60,lookupcache=all,nocto",
                       "# or keep the code on local disk and sync it on deploy"],
                      "a deploy is seen up to 60 s late (old mtimes, new files reported "
                      "missing); deploy to a new directory and reload php-fpm to be safe",
                      None, "fsbench on this mount measures the per-call cost"))
    return out


def glusterfs_mount_caching(facts: Facts) -> list[Finding]:
    out = []
    for m in code_mounts(facts, "glusterfs-fuse"):
        o = m.cache
        attr, entry, neg = o.attribute_timeout, o.entry_timeout, o.negative_timeout
        mdc, nl = o.md_cache_seconds, o.nl_cache_state
        bad = []
        if attr < 60:
            bad.append(f"attribute-timeout = {attr:g} s")
        if entry < 60:
            bad.append(f"entry-timeout = {entry:g} s")
        if neg < 60:
            bad.append(f"negative-timeout = {neg:g} s: every failed lookup goes to the bricks")
        if o.volume_read and mdc < 60:
            bad.append(f"performance.md-cache-timeout = {mdc:g} s")
        if o.volume_read and nl != "on":
            bad.append(f"performance.nl-cache = {nl}")
        if not bad:
            continue
        ev = [f"{m.mount_point} (GlusterFS FUSE, volume {m.volume or '?'}) holds "
              f"{_roles(facts, m.mount_point)}", *bad]
        if facts.trace is not None and facts.trace.round_trips_per_request is not None:
            ev.append(f"{facts.trace.round_trips_per_request:g} network round trips per request "
                      "measured while tracing (the volume's profile)")
        lat = facts.fsbench_p50_us.get(m.mount_point)
        if lat:
            ev.append("fsbench warm p50: " + ", ".join(f"{k} {v:g} µs" for k, v in sorted(lat.items())))
        v = m.volume or "VOLUME"
        out.append(finding(Severity.WARNING, f"GlusterFS mount {m.mount_point} uses short metadata caches",
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


def writable_data_on_network(facts: Facts) -> list[Finding]:
    hits = [m for m in facts.mounts if m.role.startswith("writable:") and m.kind in NETWORK_KINDS]
    if not hits:
        return []
    ev = [f"{m.role.split(':', 1)[1]} {m.path} on {m.kind} ({m.mount_point})" for m in hits]
    change = [LOCAL_HOMES.get(m.role.split(":", 1)[1],
                              f"# move {m.path} to local disk (symlink it from the release "
                              "or point the app's cache setting there)") for m in hits]
    sessions = any(m.role == "writable:session files" for m in hits)
    return [finding(Severity.WARNING if sessions else Severity.INFO,
               "writable data and caches live on network storage", ev, list(dict.fromkeys(change)),
               "data on local disk is per machine: sessions then need a shared store (Redis, "
               "memcached, a database) or sticky load balancing when there are several web "
               "servers", None,
               "each session lock, cache write and rename is a network round trip (and a "
               "rename wipes the worker's realpath cache); not in a trace summary")]


def symlink_deploy_stale(facts: Facts) -> list[Finding]:
    links = [(link, to) for link, to in facts.symlinks if not mirror_switch(facts.mirror, link)]
    if not links:
        return []
    ttl = ini_int(setting(facts, "realpath_cache_ttl"), 120)
    vt = ini_bool(setting(facts, "opcache.validate_timestamps"), True)
    risky = []
    if ttl == 0 or ttl >= 600:
        risky.append(f"realpath_cache_ttl = {ttl}" + (" (never expires)" if ttl == 0 else ""))
    if opcache_on(facts) and not vt:
        risky.append("opcache.validate_timestamps = 0")
    sf = facts.nginx_script_filename
    if not risky and (sf is None or "$realpath_root" in sf):
        return []
    link, target = links[0]
    ev = [f"the code path goes through the symlink {link} -> {target}"] + risky
    if sf is not None:
        ev.append(f"nginx: fastcgi_param SCRIPT_FILENAME {sf}")
    sev = Severity.WARNING if risky else Severity.INFO
    return [finding(sev, "a symlink-swap deploy can keep serving the old release", ev,
               ["# nginx, in the PHP location:",
                "fastcgi_param SCRIPT_FILENAME $realpath_root$fastcgi_script_name;",
                "fastcgi_param DOCUMENT_ROOT $realpath_root;",
                "# and after switching the symlink: reload php-fpm (clears OPcache and the "
                "realpath caches)"],
               "none at run time; each deploy costs a reload (a cold OPcache for the next "
               "requests)", None, "this is about correctness, not speed")]


# -- php-fpm process manager ---------------------------------------------------------------------
def pm_max_requests(facts: Facts) -> list[Finding]:
    mr = facts.max_requests
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
    return [finding(Severity.WARNING if mr < 100 else Severity.INFO, "workers recycle often and restart cold", ev,
               ["pm.max_requests = 5000"],
               "a worker that leaks memory lives longer before it is replaced", gain, note)]


def fpm_reload_ends_requests(facts: Facts) -> list[Finding]:
    timeout = facts.fpm_global.get("process_control_timeout")
    if timeout is None or timeout.strip().rstrip("s") not in ("", "0"):
        return []
    ev = ["process_control_timeout = 0 in php-fpm's [global]: on a reload (SIGUSR2, "
          "`systemctl reload`) the master asks its workers to stop and kills them at once, so "
          f"every request running then fails (up to pm.max_children = {facts.max_children} "
          "at a time)",
          "every deploy, log rotation or `statstorm apply` that reloads this master ends them"]
    return [finding(Severity.WARNING, "a php-fpm reload ends the requests running", ev,
                    ["process_control_timeout = 10s"],
                    "a reload waits up to 10 s for a slow request before the new settings take "
                    "over; the change itself takes effect at the next reload, so the reload "
                    "that applies it still ends the requests running then", None,
                    "requests kept, not speed")]


def pm_max_children_memory(facts: Facts) -> list[Finding]:
    children = facts.max_children
    m = memory_fit(facts.worker_pss_kb, children, facts.mem_available_kb)
    if m is None:
        return []
    ev = [f"pm.max_children = {children}; worker PSS p95 {m.per_kb / 1024:.1f} MiB over "
          f"{m.seen} workers", m.evidence("workers")]
    return [finding(m.severity, "pm.max_children does not fit in memory", ev,
               [f"pm.max_children = {m.fits}"],
               "fewer concurrent requests; under a burst requests wait in the listen queue "
               "instead of the machine swapping", None, "a memory bound, not a speed-up")]


# -- huge pages -----------------------------------------------------------------------------------
def _code_window(facts: Facts, page: int) -> tuple[int, str] | None:
    """Whole huge pages in the code PHP would remap (the main binary's executable mapping, at
    the address this master loaded it), and a line of evidence; None when not read."""
    if facts.code_mapping is None:
        return None
    path, start, end = facts.code_mapping
    lo, hi = -(-start // page) * page, end // page * page
    n = max(0, (hi - lo) // page)
    return n, (f"opcache.huge_code_pages remaps only the main binary's code: {path} at "
               f"{start:#x}-{end:#x} ({(end - start) / (1 << 20):.1f} MiB) holds {n} whole "
               f"{page >> 10} kB page(s) at this load address (it changes at every start)")


def huge_code_pages(facts: Facts) -> list[Finding]:
    hp = facts.hugepages
    if not opcache_on(facts) or hp is None or not facts.text_bytes:
        return []
    page = max(hp.page_kb, 1) * 1024
    pages = -(-facts.text_bytes // page)
    on = ini_bool(setting(facts, "opcache.huge_code_pages"))
    explicit = hp.free_hugepages >= pages
    thp = hp.thp_enabled in ("always", "madvise")
    ev = [f"opcache.huge_code_pages = {int(on)}",
          f"{facts.php_binary or 'the PHP binary'}: executable segment "
          f"{facts.text_bytes / (1 << 20):.1f} MiB = {pages} huge page(s) of {hp.page_kb} kB",
          f"explicit huge pages free: {hp.free_hugepages} of {hp.nr_hugepages}; "
          f"transparent huge pages: {hp.thp_enabled or 'unknown'}"]
    window = _code_window(facts, page)
    used = facts.huge_mapped_kb
    if used:
        ev.append("huge pages mapped in the PHP processes (AnonHugePages + FilePmdMapped): "
                  + ", ".join(f"{kb} kB" for kb in used[:8]))
    if window is not None:
        ev.append(window[1])
    gain_note = ("the gain is iTLB misses, not file-system calls (about 2-3 % QPS reported); "
                 "`statstorm matrix --huge-code-pages off,on` measures it with its interval")
    if window is not None and window[0] == 0:
        return [finding(Severity.INFO, "huge code pages have nothing to move here", ev,
                        ["# nothing to change: no whole huge page of PHP's code at this load "
                         "address (a later start may load it elsewhere; PHP's code in a shared "
                         "library, as mod_php's, is never moved)"],
                        "none", None, gain_note)]
    if on and not explicit and not thp:
        return [finding(Severity.WARNING, "opcache.huge_code_pages is on but no huge pages are available", ev,
                   [f"vm.nr_hugepages = {hp.nr_hugepages + pages}",
                    "# or: echo madvise > /sys/kernel/mm/transparent_hugepage/enabled"],
                   f"reserves {pages * hp.page_kb // 1024} MiB of RAM for huge pages", None,
                   gain_note)]
    if on and used is not None and used and not any(used):
        return [finding(Severity.WARNING, "opcache.huge_code_pages is on but PHP got no huge pages", ev,
                   ["# echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
                    f"# or: vm.nr_hugepages = {hp.nr_hugepages + pages}",
                    "# then restart the PHP master (a reload keeps the old mapping)"],
                   "none: the setting costs nothing when it takes effect", None, gain_note)]
    if on:
        return []
    change = ["opcache.huge_code_pages = 1"]
    if not explicit and not thp:
        change.append(f"vm.nr_hugepages = {hp.nr_hugepages + pages}")
    return [finding(Severity.INFO, "PHP's code could run from huge pages", ev, change,
               "needs a restart of the PHP master (apply reloads it); "
               + ("uses transparent huge pages (no reservation)" if thp and not explicit else
                  f"reserves {pages * hp.page_kb // 1024} MiB of RAM"), None, gain_note)]


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


def cli_differs(facts: Facts) -> list[Finding]:
    if not facts.cli_settings:
        return []
    diff = [f"{k}: pool {facts.settings.get(k)!r}, CLI {facts.cli_settings.get(k)!r}"
            for k in COMPARED
            if k in facts.settings and k in facts.cli_settings
            and _norm(facts.settings[k]) != _norm(facts.cli_settings[k])]
    if not diff:
        return []
    return [finding(Severity.INFO, "the pool runs with other settings than `php -i` shows", diff,
               ["# nothing to change: judge the pool by its own settings (as check does), not "
                "by php -i"],
               "none", None, "informational")]


# The rules in the order they are evaluated, each under its id (the anchor of its section
# in docs/check.md).
RULES: tuple[tuple[str, Rule], ...] = (
    ("nfs-mount-caching", nfs_mount_caching),
    ("glusterfs-mount-caching", glusterfs_mount_caching),
    ("writable-data-on-network", writable_data_on_network),
    ("symlink-deploy-stale", symlink_deploy_stale),
    ("pm-max-requests", pm_max_requests),
    ("pm-max-children-memory", pm_max_children_memory),
    ("fpm-reload-ends-requests", fpm_reload_ends_requests),
    ("huge-code-pages", huge_code_pages),
    ("cli-differs", cli_differs),
)

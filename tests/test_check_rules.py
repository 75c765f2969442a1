"""Each `statstorm check` rule on fixture configurations: it fires on the bad one with the
right evidence and change, and stays silent on the good one. Pure, no root."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from statstorm.model.checkfacts import (Facts, MountFact, OpcacheStatus, TraceFacts, ini_bytes,
                                        opcache_rounded)
from statstorm.model.finding import Finding
from statstorm.model.rules import RULES, evaluate
from statstorm.results.facts import HugePageFacts, realpath_bytes, with_parents

# php-fpm 8.2 defaults as `php-fpm -i` prints them (Debian), plus a sane pool.
GOOD = {
    "realpath_cache_size": "4096K", "realpath_cache_ttl": "600", "open_basedir": "",
    "include_path": "/srv/app/lib:.:/usr/share/php", "opcache.enable": "On",
    "opcache.validate_timestamps": "On", "opcache.revalidate_freq": "60",
    "opcache.revalidate_path": "Off", "opcache.max_accelerated_files": "10000",
    "opcache.memory_consumption": "128", "opcache.enable_file_override": "On",
    "opcache.file_update_protection": "2", "opcache.huge_code_pages": "Off",
    "user_ini.filename": "", "user_ini.cache_ttl": "300",
}
LOCAL = MountFact(role="docroot", path="/srv/app/public", mount_point="/", fstype="ext4",
                  kind="local")
TRACE = TraceFacts(requests=10, detail="events", per_request={"lstat": 2.0, "total": 20.0})


def facts(settings: dict[str, str] | None = None, **kw: Any) -> Facts:
    base: dict[str, Any] = dict(pool="www", settings={**GOOD, **(settings or {})},
                                pm={"pm": "static", "pm.max_children": "4",
                                    "pm.max_requests": "0"},
                                docroot="/srv/app/public", php_files=500, tree_entries=600,
                                tree_bytes=60_000, user_ini_files=0, mounts=(LOCAL,))
    base.update(kw)
    return Facts(**base)


def ids(f: Facts) -> dict[str, Finding]:
    return {x.id: x for x in evaluate(f)}


def test_good_config_has_no_findings() -> None:
    hp = HugePageFacts(thp_enabled="never", nr_hugepages=0, free_hugepages=0, page_kb=2048)
    assert ids(facts(trace=TRACE, hugepages=hp, text_bytes=0)) == {}


def test_every_finding_is_complete() -> None:
    bad = facts({"realpath_cache_size": "16K", "opcache.revalidate_freq": "0",
                 "user_ini.filename": ".user.ini"})
    found = evaluate(bad)
    assert found
    for f in found:
        j = f.to_json()
        assert j["id"] in RULES and j["severity"] in ("info", "warning", "critical")
        assert j["title"] and j["evidence"] and j["change"] and j["tradeoff"]
        assert j["docs"] == f"docs/check.md#{f.id}"
        assert j["predicted_gain"] is not None or j["gain_note"]


def test_helpers() -> None:
    assert ini_bytes("4096K") == 4 << 20 and ini_bytes("16M") == 16 << 20
    assert ini_bytes("512") == 512 and ini_bytes("x") is None
    assert opcache_rounded(10000) == 16229 and opcache_rounded(100) == 223
    # the accounting PHP reports: 7 keys of 121 bytes in all = 7*48 + 121 + 7
    keys = ["/a" * (121 // 14)] * 0 + [f"/k{i:0{15}d}" for i in range(7)]
    n, size = realpath_bytes(keys)
    assert n == 7 and size == 7 * 48 + sum(len(k) for k in keys) + 7
    assert with_parents(["/srv/app/x.php"]) == {"/srv", "/srv/app", "/srv/app/x.php"}


# -- realpath --------------------------------------------------------------------------------------
def test_realpath_cache_small_from_tree_and_trace() -> None:
    f = ids(facts({"realpath_cache_size": "16K"}))["realpath-cache-small"]
    assert f.severity == "warning" and "60,000 bytes" in " ".join(f.evidence)
    assert f.change == ("realpath_cache_size = 4M",)  # never below PHP's default
    t = dataclasses.replace(TRACE, ok_lstat_per_request=40.0, working_set_entries=300,
                            working_set_bytes=30_000)
    f = ids(facts({"realpath_cache_size": "16K"}, trace=t))["realpath-cache-small"]
    assert "40" in " ".join(f.evidence) and f.predicted_gain is not None
    assert f.predicted_gain["syscalls_per_request"] == -40.0
    # large enough: silent, even with the trace
    assert "realpath-cache-small" not in ids(facts(trace=t))


def test_realpath_cache_small_when_a_worker_reports_it_full() -> None:
    f = ids(facts({"realpath_cache_size": "64K"}, tree_bytes=10_000, realpath_used=63_000,
                  realpath_used_by_worker=(63_000, 12_000)))
    assert "in 2 worker(s): 63,000, 12,000 bytes (up to 96% of the limit" in " ".join(
        f["realpath-cache-small"].evidence)
    assert f["realpath-cache-small"].change == ("realpath_cache_size = 4M",)
    big = facts({"realpath_cache_size": "16M"}, tree_bytes=12 << 20, realpath_used=15 << 20)
    assert ids(big)["realpath-cache-small"].change == ("realpath_cache_size = 30M",)


def test_realpath_ttl() -> None:
    f = ids(facts({"realpath_cache_ttl": "120"}))["realpath-cache-ttl"]
    assert f.severity == "info" and f.change == ("realpath_cache_ttl = 600",)
    assert ids(facts({"realpath_cache_ttl": "10"}))["realpath-cache-ttl"].severity == "warning"
    assert "realpath-cache-ttl" not in ids(facts({"realpath_cache_ttl": "0"}))  # never expires


def test_open_basedir_disables_cache_and_silences_realpath_rules() -> None:
    f = ids(facts({"open_basedir": "/srv/app:/tmp", "realpath_cache_size": "16K",
                   "realpath_cache_ttl": "5"}, trace=TRACE))
    assert "open-basedir" in f
    # the cache is off: no measured evidence is used, but the size still matters once
    # open_basedir goes (the tree, 60,000 bytes, is more than twice 16K)
    small = f["realpath-cache-small"]
    assert small.predicted_gain is None and "open_basedir" in small.evidence[1]
    assert "lstat per request" not in " ".join(small.evidence)
    assert "realpath-cache-ttl" not in f
    assert f["open-basedir"].severity == "warning"
    assert "2 entries" in " ".join(f["open-basedir"].evidence)
    nfs = MountFact(role="docroot", path="/srv/app/public", mount_point="/srv", fstype="nfs4",
                    kind="nfs", cache_options={"acregmax": "60", "lookupcache": "all"})
    assert ids(facts({"open_basedir": "/srv"}, mounts=(nfs,)))["open-basedir"].severity == "critical"


# -- OPcache --------------------------------------------------------------------------------------
def test_opcache_disabled() -> None:
    t = dataclasses.replace(TRACE, php_opens_per_request=25.0)
    f = ids(facts({"opcache.enable": "Off"}, trace=t))
    assert f["opcache-disabled"].severity == "critical"
    assert f["opcache-disabled"].change == ("opcache.enable = 1",)
    assert f["opcache-disabled"].predicted_gain["syscalls_per_request"] == -25.0  # type: ignore[index]
    # the other OPcache rules say nothing about a disabled OPcache
    assert not {k for k in f if k.startswith("opcache-") and k != "opcache-disabled"}
    s = {k: v for k, v in GOOD.items() if not k.startswith("opcache.")}
    bare = dataclasses.replace(facts(), settings=s)
    assert "zend_extension = opcache" in ids(bare)["opcache-disabled"].change


def test_opcache_revalidate() -> None:
    t = dataclasses.replace(TRACE, revalidate_per_request=30.0)
    f = ids(facts({"opcache.revalidate_freq": "0"}, trace=t))["opcache-revalidate"]
    assert f.severity == "warning" and f.change[0] == "opcache.revalidate_freq = 60"
    assert f.predicted_gain["syscalls_per_request"] == -30.0  # type: ignore[index]
    assert "opcache-revalidate" not in ids(facts({"opcache.revalidate_freq": "2"}))  # local: ok
    nfs = dataclasses.replace(LOCAL, kind="nfs", fstype="nfs4", mount_point="/srv")
    assert ids(facts({"opcache.revalidate_freq": "2"}, mounts=(nfs,)))["opcache-revalidate"]
    assert "opcache-revalidate" not in ids(facts({"opcache.revalidate_freq": "0",
                                                  "opcache.validate_timestamps": "Off"}))


def test_opcache_revalidate_names_the_reset_with_the_pools_name() -> None:
    """validate_timestamps = 0 needs a reset on every deploy: the finding names the command,
    with the pool's (or the lab's) real name, or Apache's graceful restart for mod_php."""
    bad = {"opcache.revalidate_freq": "0"}
    f = ids(facts(bad, pool="shop"))["opcache-revalidate"]
    assert "after each deploy run `statstorm opcache reset --pool shop`" in f.change[1]
    assert "opcache.validate_timestamps = 0" in f.change[1]
    assert "`statstorm opcache reset --pool shop`" in f.tradeoff
    lab = ids(facts(bad, pool="statstorm-demo", lab="demo", handler="fpm"))["opcache-revalidate"]
    assert "`statstorm opcache reset --lab demo`" in lab.change[1] and "--pool" not in lab.change[1]
    mod_php = ids(facts(bad, pool="apache:default:80", handler="mod_php"))["opcache-revalidate"]
    assert "`apache2ctl graceful`" in mod_php.change[1]


def test_opcache_revalidate_path() -> None:
    assert "opcache-revalidate-path" in ids(facts({"opcache.revalidate_path": "On"}))
    assert "opcache-revalidate-path" not in ids(facts())


def test_opcache_max_files() -> None:
    f = ids(facts({"opcache.max_accelerated_files": "2000"}, php_files=5000))
    assert f["opcache-max-files"].change == ("opcache.max_accelerated_files = 7963",)
    # 10000 is really 16229 slots: 12000 files fit
    assert "opcache-max-files" not in ids(facts(php_files=12000))
    st = {"opcache_statistics": {"num_cached_keys": 16000}}
    assert "opcache-max-files" in ids(facts(php_files=100, opcache=OpcacheStatus.from_json(st)))


def test_opcache_memory() -> None:
    full = {"memory_usage": {"used_memory": 130_000_000, "free_memory": 2_000_000,
                             "wasted_memory": 2_000_000},
            "opcache_statistics": {"oom_restarts": 3}}
    f = ids(facts(opcache=OpcacheStatus.from_json(full)))["opcache-memory"]
    assert f.change == ("opcache.memory_consumption = 256",) and "3 out-of-memory" in f.evidence[1]
    roomy = {"memory_usage": {"used_memory": 30_000_000, "free_memory": 100_000_000,
                              "wasted_memory": 0}, "opcache_statistics": {"oom_restarts": 0}}
    assert "opcache-memory" not in ids(facts(opcache=OpcacheStatus.from_json(roomy)))
    assert "opcache-memory" not in ids(facts())  # no status: no guess


def test_opcache_file_override() -> None:
    t = dataclasses.replace(TRACE, ok_probe_per_request=100.0)
    f = ids(facts({"opcache.enable_file_override": "Off"}, trace=t))
    assert f["opcache-file-override"].change == ("opcache.enable_file_override = 1",)
    assert "opcache-file-override" not in ids(facts({"opcache.enable_file_override": "Off"},
                                                    trace=TRACE))
    assert "opcache-file-override" not in ids(facts(trace=t))


def test_opcache_file_update_protection() -> None:
    f = ids(facts(future_php_files=("/srv/app/public/index.php",)))
    w = f["opcache-file-update-protection"]
    assert w.severity == "warning" and "index.php" in " ".join(w.evidence)
    assert "opcache.file_update_protection = 0" in w.change
    r = ids(facts(recent_php_files=("/srv/app/x.php",)))["opcache-file-update-protection"]
    assert r.severity == "info"  # a deploy in progress: it passes by itself
    assert "opcache-file-update-protection" not in ids(
        facts({"opcache.file_update_protection": "0"}, future_php_files=("/x.php",)))


# -- include_path, autoloader, .user.ini -------------------------------------------------------------
def test_include_path_misses() -> None:
    inc = "/app/a:/app/b:/app/lib"
    t = dataclasses.replace(TRACE, failed_by_entry=(("/app/a", 200, 20.0), ("/app/b", 200, 20.0)))
    f = ids(facts({"include_path": inc}, trace=t))["include-path-misses"]
    assert f.severity == "warning"
    assert f.change[0] == 'include_path = "/app/lib:/app/a:/app/b"'
    assert f.predicted_gain["syscalls_per_request"] == -40.0  # type: ignore[index]
    assert "include-path-misses" not in ids(facts({"include_path": inc}, trace=TRACE))
    assert "include-path-misses" not in ids(facts({"include_path": inc}))


def test_include_path_entries_without_php_files() -> None:
    inc = "/app/a:/app/lib:/usr/share/php:/app/gone"
    php = (("/app/a", 0), ("/app/lib", 20), ("/usr/share/php", 0), ("/app/gone", -1))
    f = ids(facts({"include_path": inc}, include_path_php=php))["include-path-misses"]
    assert f.severity == "info"  # OPcache on: misses only on compiles and revalidations
    assert "before the entry that holds the code: /app/a" in f.evidence[1]
    assert f.change[0] == 'include_path = "/app/lib:/usr/share/php:/app/gone"'
    off = ids(facts({"include_path": inc, "opcache.enable": "Off"}, include_path_php=php))
    assert off["include-path-misses"].severity == "warning"
    # empty entries after the code's entry cost nothing for includes found there
    ok = (("/app/lib", 20), ("/usr/share/php", 0))
    assert "include-path-misses" not in ids(facts({"include_path": "/app/lib:/usr/share/php"},
                                                  include_path_php=ok))


def test_autoloader_storm() -> None:
    t = dataclasses.replace(TRACE, vendor_failed_per_request=35.0,
                            vendor_failed_examples=("/srv/app/vendor/acme/x/lib/Foo.php",))
    f = ids(facts(trace=t))["autoloader-storm"]
    assert f.severity == "warning" and "--classmap-authoritative" in f.change[0]
    assert "vendor/acme" in " ".join(f.evidence)
    assert "autoloader-storm" not in ids(facts(trace=TRACE))


def test_user_ini_lookups() -> None:
    t = dataclasses.replace(TRACE, user_ini_per_request=2.0, user_ini_dirs=2)
    f = ids(facts({"user_ini.filename": ".user.ini"}, trace=t))["user-ini-lookups"]
    assert f.change == ("user_ini.filename =",) and "2 .user.ini lookups" in f.evidence[1]
    assert "user-ini-lookups" not in ids(facts({"user_ini.filename": ".user.ini"},
                                               user_ini_files=1))
    assert "user-ini-lookups" not in ids(facts())  # already disabled
    quiet = dataclasses.replace(TRACE, user_ini_per_request=0.0)
    f = ids(facts({"user_ini.filename": ".user.ini"}, trace=quiet))["user-ini-lookups"]
    assert f.predicted_gain is None and "cache_ttl" in f.gain_note


# -- storage, deploys -------------------------------------------------------------------------------
def test_nfs_mount_caching() -> None:
    nfs = MountFact(role="docroot", path="/srv/app", mount_point="/srv", fstype="nfs4",
                    kind="nfs", cache_options={"noac": "yes", "acregmax": "0",
                                               "lookupcache": "positive"})
    f = ids(facts(mounts=(nfs,)))["nfs-mount-caching"]
    assert "noac" in " ".join(f.evidence) and "lookupcache = positive" in " ".join(f.evidence)
    assert "actimeo=60,lookupcache=all,nocto" in f.change
    ok = dataclasses.replace(nfs, cache_options={"noac": "no", "acregmax": "60",
                                                 "lookupcache": "all"})
    assert "nfs-mount-caching" not in ids(facts(mounts=(ok,)))


def test_glusterfs_mount_caching() -> None:
    g = MountFact(role="docroot", path="/mnt/app", mount_point="/mnt", fstype="fuse.glusterfs",
                  kind="glusterfs-fuse", volume="vol0",
                  cache_options={"attribute-timeout": "1", "entry-timeout": "1",
                                 "negative-timeout": "0"},
                  volume_options={"performance.md-cache-timeout": "1",
                                  "performance.nl-cache": "off"})
    f = ids(facts(mounts=(g,), fsbench_p50_us={"/mnt": {"negative": 180.0}}))
    g_f = f["glusterfs-mount-caching"]
    assert "negative-timeout = 0 s" in " ".join(g_f.evidence)
    assert "gluster volume set vol0 performance.nl-cache on" in g_f.change
    assert "negative 180 µs" in " ".join(g_f.evidence)
    tuned = dataclasses.replace(g, cache_options={k: "600" for k in g.cache_options},
                                volume_options={"performance.md-cache-timeout": "600",
                                                "performance.nl-cache": "on"})
    assert "glusterfs-mount-caching" not in ids(facts(mounts=(tuned,)))
    # the next tier, quick-read's cache, once the metadata caches are in place (more in
    # test_gluster_content_rule.py)
    assert "glusterfs-content-caching" not in ids(facts(mounts=(g,)))
    with_qr = dataclasses.replace(tuned, volume_options={**tuned.volume_options,
                                                         "performance.qr-cache-timeout": "1"})
    assert ids(facts(mounts=(with_qr,)))["glusterfs-content-caching"].severity == "info"


def test_writable_data_on_network() -> None:
    nfs = dict(mount_point="/srv", fstype="nfs4", kind="nfs",
               cache_options={"noac": "yes", "acregmax": "0", "lookupcache": "none"})
    sess = MountFact(role="writable:session files", path="/srv/sessions", **nfs)  # type: ignore[arg-type]
    cache = MountFact(role="writable:app directory", path="/srv/app/var", **nfs)  # type: ignore[arg-type]
    f = ids(facts(mounts=(LOCAL, sess, cache)))
    w = f["writable-data-on-network"]
    assert w.severity == "warning" and "session.save_path = /var/lib/php/sessions" in w.change
    assert "app directory /srv/app/var on nfs (/srv)" in w.evidence
    # writable data on NFS is not code on NFS: the code-mount rules stay silent
    assert "nfs-mount-caching" not in f and "opcache-revalidate" not in f
    only_cache = ids(facts(mounts=(LOCAL, cache)))["writable-data-on-network"]
    assert only_cache.severity == "info"
    local = dataclasses.replace(sess, kind="local", fstype="ext4", mount_point="/")
    assert "writable-data-on-network" not in ids(facts(mounts=(LOCAL, local)))


def test_symlink_deploy_stale() -> None:
    link = (("/srv/app/current", "/srv/app/releases/42"),)
    f = ids(facts({"opcache.validate_timestamps": "Off"}, symlinks=link,
                  nginx_script_filename="$document_root$fastcgi_script_name"))
    s = f["symlink-deploy-stale"]
    assert s.severity == "warning" and "validate_timestamps = 0" in " ".join(s.evidence)
    assert "fastcgi_param SCRIPT_FILENAME $realpath_root$fastcgi_script_name;" in s.change
    safe = facts({"realpath_cache_ttl": "120"}, symlinks=link,
                 nginx_script_filename="$realpath_root$fastcgi_script_name")
    assert "symlink-deploy-stale" not in ids(safe)
    assert "symlink-deploy-stale" not in ids(facts({"opcache.validate_timestamps": "Off"}))


def test_pm_max_requests() -> None:
    t = dataclasses.replace(TRACE, cold_extra_calls=200.0)
    f = ids(facts(pm={"pm.max_requests": "50", "pm.max_children": "4"}, trace=t))
    m = f["pm-max-requests"]
    assert m.severity == "warning" and m.change == ("pm.max_requests = 5000",)
    assert m.predicted_gain["syscalls_per_request"] == pytest.approx(-3.96)  # type: ignore[index]
    assert "pm-max-requests" not in ids(facts(pm={"pm.max_requests": "0"}))


def test_fpm_reload_ends_requests() -> None:
    f = ids(facts(pm={"pm.max_children": "5"}, fpm_global={"process_control_timeout": "0s"}))
    m = f["fpm-reload-ends-requests"]
    assert m.severity == "warning" and m.change == ("process_control_timeout = 10s",)
    assert "pm.max_children = 5" in m.evidence[0]
    for kept in ({"process_control_timeout": "10s"}, {}):  # graceful, or not php-fpm
        assert "fpm-reload-ends-requests" not in ids(facts(fpm_global=kept))


def test_pm_max_children_memory() -> None:
    f = ids(facts(pm={"pm.max_children": "50"}, worker_pss_kb=(40_000,) * 4,
                  mem_available_kb=500_000))
    m = f["pm-max-children-memory"]
    assert m.severity == "critical" and m.change == ("pm.max_children = 16",)
    assert "pm-max-children-memory" not in ids(facts(pm={"pm.max_children": "10"},
                                                     worker_pss_kb=(40_000,) * 4,
                                                     mem_available_kb=500_000))


def test_huge_code_pages() -> None:
    thp = HugePageFacts(thp_enabled="madvise", nr_hugepages=0, free_hugepages=0, page_kb=2048)
    f = ids(facts(hugepages=thp, text_bytes=5 << 20, php_binary="/usr/sbin/php-fpm8.2"))
    h = f["huge-code-pages"]
    assert h.severity == "info" and h.change == ("opcache.huge_code_pages = 1",)
    assert "3 huge page(s)" in " ".join(h.evidence)
    none = dataclasses.replace(thp, thp_enabled="never")
    w = ids(facts({"opcache.huge_code_pages": "On"}, hugepages=none, text_bytes=5 << 20))
    assert w["huge-code-pages"].severity == "warning"
    assert w["huge-code-pages"].change[0] == "vm.nr_hugepages = 3"
    assert "huge-code-pages" not in ids(facts({"opcache.huge_code_pages": "On"}, hugepages=thp,
                                              text_bytes=5 << 20))


def test_cli_differs() -> None:
    f = ids(facts(cli_settings={**GOOD, "realpath_cache_ttl": "120"}))
    assert "realpath_cache_ttl: pool '600', CLI '120'" in f["cli-differs"].evidence
    assert "cli-differs" not in ids(facts(cli_settings=dict(GOOD)))
    # a worker reports booleans as 1/0, php -i as On/Off: the same values
    pool = {**GOOD, "opcache.enable": "1", "opcache.validate_timestamps": "1"}
    assert "cli-differs" not in ids(facts(pool, cli_settings=dict(GOOD)))


def test_app_rules_need_a_trace_of_code_on_network_storage() -> None:
    """The app rules (more in test_app_cache.py) read only measured figures: no trace, no
    finding; a trace of local code, none either."""
    busy = dataclasses.replace(TRACE, data_opens_per_request=30.0, network_time_share=0.9)
    assert "app-data-on-network" not in ids(facts(trace=busy))  # the code is on local disk
    assert "network-bound" in ids(facts(trace=busy))  # measured, wherever the calls went
    assert "network-bound" not in ids(facts())


def test_evidence_rules_compare_the_times_they_are_given() -> None:
    """A trace older than apply's last change is stale; code on network storage without a
    timed trace is said (the times are data: the model reads no clock)."""
    from statstorm.model.checkfacts import AppliedChange, TraceOrigin
    gv = MountFact(role="docroot", path="/mnt/gv/www", mount_point="/mnt/gv",
                   fstype="fuse.glusterfs", kind="glusterfs-fuse")
    origin = TraceOrigin("/t.sst.gz", "2025-01-01T10:00:00+00:00", 100.0, remembered=True)
    later = AppliedChange("/state/apply/x", "2025-01-01T11:00:00+00:00", 200.0)
    f = ids(facts(trace=TRACE, trace_origin=origin, last_change=later))
    assert f["trace-predates-change"].severity == "warning"
    assert f["trace-predates-change"].change == (
        "statstorm trace --pool www -d 20 -o after.sst.gz",
        "statstorm check --pool www --trace after.sst.gz")
    lab = ids(facts(trace=TRACE, trace_origin=origin, last_change=later, target_args="--lab l"))
    assert lab["trace-predates-change"].change[0].startswith("statstorm trace --lab l ")
    earlier = dataclasses.replace(later, at=50.0)
    assert "trace-predates-change" not in ids(facts(trace=TRACE, trace_origin=origin,
                                                    last_change=earlier))
    unknown = dataclasses.replace(later, at=None)
    assert "trace-predates-change" not in ids(facts(trace=TRACE, trace_origin=origin,
                                                    last_change=unknown))
    # no-trace: code on network storage and no trace that timed a call there
    assert ids(facts(mounts=(gv,)))["no-trace"].severity == "info"
    counts = dataclasses.replace(TRACE, detail="counts")
    assert "--counts" in " ".join(ids(facts(mounts=(gv,), trace=counts))["no-trace"].evidence)
    timed = dataclasses.replace(TRACE, network_time_share=0.1)
    assert "no-trace" not in ids(facts(mounts=(gv,), trace=timed))
    assert "no-trace" not in ids(facts())  # local code: nothing to measure there
    # network-bound names the trace that measured it
    bound = dataclasses.replace(TRACE, network_time_share=0.6, network_ms_per_request=6.0)
    nb = ids(facts(mounts=(gv,), trace=bound, trace_origin=origin))["network-bound"]
    assert nb.severity == "warning"
    assert "measured by the last trace of this pool /t.sst.gz, taken at " \
        "2025-01-01T10:00:00+00:00" in nb.evidence


def test_every_rule_has_a_test_here() -> None:
    here = Path(__file__).parent
    text = open(__file__).read() + (here / "test_apache_rules.py").read_text() + (
        here / "test_afs_model.py").read_text()
    for rule_id in RULES:
        assert f'"{rule_id}"' in text, rule_id


def test_a_mounts_cache_options_are_typed_once_and_written_as_text() -> None:
    from statstorm.results.mount_cache import CacheOptions
    g = MountFact("docroot", "/mnt/www", "/mnt", "fuse.glusterfs", "glusterfs-fuse",
                  {"attribute-timeout": "600", "entry-timeout": "", "negative-timeout": "x"},
                  {"performance.nl-cache": "on"}, "vol")
    assert g.cache == CacheOptions(attribute_timeout=600.0, entry_timeout=1.0,
                                   negative_timeout=0.0, volume_read=True, nl_cache="on")
    assert list(g.to_json()) == ["role", "path", "mount_point", "fstype", "kind",
                                 "cache_options", "volume_options", "volume"]
    assert MountFact.from_json(g.to_json()) == g and MountFact.from_json(g.to_json()).cache == g.cache
    n = MountFact("docroot", "/nfs/www", "/nfs", "nfs4", "nfs",
                  {"acregmax": " 10 ", "noac": "no", "lookupcache": "pos"})
    assert (n.cache.acregmax, n.cache.noac, n.cache.lookupcache, n.cache.volume_read) == \
        (10, False, "pos", False)


def test_mirror_rules_need_network_bound_code_or_a_mirror() -> None:
    """code-local-mirror and mirror-stale (more in test_mirror_plan.py): a network-bound
    trace of local code gives neither; no mirror, no staleness."""
    busy = dataclasses.replace(TRACE, network_time_share=0.9)
    assert "code-local-mirror" not in ids(facts(trace=busy))  # the code is on local disk
    assert "mirror-stale" not in ids(facts(trace=busy))


def test_cephfs_client_cache_size_through_evaluate() -> None:
    """A ceph-fuse mount whose code tree outgrows the client's inode cache (the rule's own
    cases: tests/test_rules_ceph.py)."""
    mount = MountFact("docroot", "/srv/app/public", "/srv/app", "fuse.ceph-fuse", "cephfs")
    f = Facts(pool="www", settings={}, tree_entries=30000, mounts=(mount,))
    assert "cephfs-client-cache-size" in ids(f)
    assert "cephfs-client-cache-size" not in ids(dataclasses.replace(f, tree_entries=100))


def test_opcache_timestamps_off_is_in_the_registry() -> None:
    # its behaviour: tests/test_tune_escalation.py (tune's escalation, a measure-first change)
    assert "opcache-timestamps-off" in RULES


def test_a_measured_gap_to_local_disk_makes_a_pool_network_bound() -> None:
    """tune's ratio to its shadow (check's `local_ratio`) is evidence on its own: the trace's
    share counts metadata calls only, not reads of data files through the FUSE client."""
    mount = MountFact("docroot", "/srv/gl/app", "/srv/gl", "fuse.glusterfs", "glusterfs-fuse")
    f = Facts(pool="www", settings={"opcache.enable": "1"}, docroot="/srv/gl/app",
              mounts=(mount,), trace=dataclasses.replace(TRACE, network_time_share=0.2))
    quiet = ids(f)
    assert not {"network-bound", "opcache-timestamps-off", "code-local-mirror"} & set(quiet)
    gap = dataclasses.replace(f, local_ratio=0.575)
    assert {"network-bound", "opcache-timestamps-off", "code-local-mirror"} <= set(ids(gap))
    (nb,) = [x for x in evaluate(gap) if x.id == "network-bound"]
    assert any("0.575x the throughput of the same code on local disk" in e for e in nb.evidence)
    assert "network-bound" not in ids(dataclasses.replace(f, local_ratio=0.93))


def test_a_gap_to_local_disk_is_no_network_evidence_for_local_code() -> None:
    """A pool on local disk slower than its shadow (another PHP, another machine's load) is
    not told its time goes to network storage."""
    mount = MountFact("docroot", "/srv/app", "/", "ext4", "local")
    f = Facts(pool="www", settings={"opcache.enable": "1"}, docroot="/srv/app", mounts=(mount,),
              trace=TRACE, local_ratio=0.5)
    assert not {"network-bound", "code-local-mirror", "opcache-timestamps-off"} & set(ids(f))

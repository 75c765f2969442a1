"""`statstorm check` on real labs: deliberately bad settings are found with evidence from a
real `statstorm trace` of the lab; a well-set lab gets no warning of those ids."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli, unique_name, wait_cacheable
from test_trace_lab import finish, start_trace, wait_attached

pytestmark = pytest.mark.root


def get(url: str) -> None:
    with urllib.request.urlopen(url, timeout=60) as resp:
        resp.read()


def traced(home: Path, st: dict[str, Any], out: Path, requests: int) -> dict[str, Any]:
    """Warm the lab, trace `requests` requests of it while sending them, return the summary."""
    url = str(st["url"]) + str(st.get("entry_path") or "/")
    wait_cacheable(st["code_path"], st["docroot"])  # OPcache caches no younger file
    for _ in range(6):
        get(url)
    proc = start_trace(home, ["--lab", str(st["name"]), "--requests", str(requests), "-d",
                              "120", "-o", str(out), "--json"])
    wait_attached(proc)  # earlier requests are simply not seen
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            get(url)
            time.sleep(0.05)

    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        return finish(proc)
    finally:
        stop.set()
        t.join()


def check(home: Path, *args: str) -> tuple[int, dict[str, Any]]:
    p = run_cli(["check", *args, "--json"], home)
    assert p.returncode in (0, 1), p.stderr
    return p.returncode, dict(json.loads(p.stdout))


def by_id(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["id"]: f for f in result["findings"]}


def test_bad_local_lab(lab, state_home: Path, tmp_path: Path) -> None:
    st = lab("--app", "synthetic", "--workers", "2", "--include-path-entries", "4",
             "--php-ini", "realpath_cache_size=16K", "--php-ini", "opcache.revalidate_freq=0")
    out = tmp_path / "bad.sst.gz"
    s = traced(state_home, st, out, 20)
    code, r = check(state_home, "--lab", str(st["name"]), "--trace", str(out),
                    "--fail-on", "warning")
    assert code == 1  # warnings present
    f = by_id(r)
    pool = r["pools"][0]
    assert "2 worker(s) of the pool over FastCGI" in pool["settings_source"]
    assert pool["php_files"] > 200  # public/, vendor/ and lib/ of the app
    assert len(pool["worker_pss_kb"]) == 2 and min(pool["worker_pss_kb"]) > 1000
    assert pool["text_bytes"] > 1 << 20 and pool["hugepages"]["page_kb"] > 0
    assert pool["nginx_script_filename"] == "$document_root$fastcgi_script_name"
    assert pool["opcache_memory"]["used_memory"] > 0  # the pool's own OPcache status

    rp = f["realpath-cache-small"]
    ev = " ".join(rp["evidence"])
    assert rp["severity"] == "warning" and rp["change"] == ["realpath_cache_size = 4M"]
    assert "realpath_cache_size() in 2 worker(s)" in ev  # each worker's own figure
    assert len(pool["realpath_used_by_worker"]) == 2
    assert rp["predicted_gain"]["syscalls_per_request"] <= -5
    assert s["per_request"]["lstat"] >= -rp["predicted_gain"]["syscalls_per_request"]

    rv = f["opcache-revalidate"]
    assert rv["severity"] == "warning" and rv["change"][0] == "opcache.revalidate_freq = 60"
    assert rv["predicted_gain"]["syscalls_per_request"] < 0
    assert "revalidation stat per request" in " ".join(rv["evidence"])

    au = f["autoloader-storm"]
    assert "/vendor/" in " ".join(au["evidence"]) and au["predicted_gain"]["syscalls_per_request"] < 0


def test_bad_glusterfs_lab(lab, state_home: Path, tmp_path: Path) -> None:
    """The issue's bad lab: 16K realpath cache, revalidate_freq=0, a long include_path with
    empty entries, open_basedir, a GlusterFS mount with default options."""
    name = unique_name("chk")
    mnt = state_home / "labs" / name / "mnt"
    st = lab("--app", "synthetic", "--storage", "glusterfs", "--workers", "2",
             "--include-path-entries", "6", "--php-ini", f"open_basedir={mnt}:/tmp",
             "--php-ini", "realpath_cache_size=16K", "--php-ini", "opcache.revalidate_freq=0",
             name=name)
    out = tmp_path / "bad2.sst.gz"
    s = traced(state_home, st, out, 8)
    code, r = check(state_home, "--lab", name, "--trace", str(out), "--fail-on", "critical")
    assert code == 1
    f = by_id(r)
    ob = f["open-basedir"]
    assert ob["severity"] == "critical"  # on network storage
    assert ob["change"][0] == "open_basedir ="
    assert f"measured: {s['per_request']['lstat']:g} lstat per request" in ob["evidence"]
    assert ob["predicted_gain"]["syscalls_per_request"] < -100
    small = f["realpath-cache-small"]  # off now, too small once open_basedir goes
    assert small["change"] == ["realpath_cache_size = 4M"]
    assert "once open_basedir is removed" in " ".join(small["evidence"])
    rv = f["opcache-revalidate"]
    assert "glusterfs-fuse" in " ".join(rv["evidence"])
    assert rv["predicted_gain"]["syscalls_per_request"] < 0
    g = f["glusterfs-mount-caching"]
    assert "negative-timeout = 0 s" in " ".join(g["evidence"])
    # the trace of a lab on GlusterFS measured the round trips its volume served
    net = s["trace"]["network"]
    assert net["volume"] == f"statstorm-{name}" and net["round_trips"] > 0
    assert net["per_request"] > 0
    assert net["by_fop"].get("LOOKUP", 0) > 0
    assert f"{net['per_request']:g} network round trips per request" in " ".join(g["evidence"])
    assert any("negative-timeout=600" in c for c in g["change"])
    ip = f["include-path-misses"]
    app = f"{mnt}/app/lib"
    assert all(f"{app}/inc{i}" in " ".join(ip["evidence"]) for i in range(1, 6))
    assert ip["change"][0] == f'include_path = "{app}"'
    # open_basedir keeps the query script out: check says where its settings came from
    assert "php-fpm -i" in r["pools"][0]["settings_source"]
    assert any("FastCGI" in n for n in r["pools"][0]["notes"])


WATCHED = {"realpath-cache-small", "realpath-cache-ttl", "open-basedir", "opcache-disabled",
           "opcache-revalidate", "include-path-misses", "glusterfs-mount-caching",
           "nfs-mount-caching", "pm-max-requests", "pm-max-children-memory"}


def test_good_lab(lab, state_home: Path, tmp_path: Path) -> None:
    st = lab("--app", "synthetic", "--workers", "2", "--include-path-entries", "1",
             "--php-ini", "opcache.revalidate_freq=60", "--php-ini", "realpath_cache_ttl=600")
    out = tmp_path / "good.sst.gz"
    traced(state_home, st, out, 20)
    code, r = check(state_home, "--lab", str(st["name"]), "--trace", str(out),
                    "--fail-on", "critical")
    assert code == 0
    found = {f["id"]: f["severity"] for f in r["findings"]}
    assert not (set(found) & WATCHED), found
    # the text report groups by severity and ends with the counts
    p = run_cli(["check", "--lab", str(st["name"]), "--trace", str(out)], state_home, check=True)
    assert "warning:" in p.stdout and "finding(s)" in p.stdout and "autoloader-storm" in p.stdout


def test_pool_mode_finds_docroot_and_real_settings(lab, state_home: Path) -> None:
    """--pool NAME: the master's title hides its -d options, so only the worker's own answer
    over FastCGI gives the real values; nginx -T of the running nginx gives the docroot."""
    st = lab("--app", "synthetic", "--workers", "1", "--php-ini", "realpath_cache_ttl=7",
             "--php-ini", "opcache.enable=0")
    pool = f"statstorm-{st['name']}"
    code, r = check(state_home, "--pool", pool)
    p = r["pools"][0]
    assert p["pool"] == pool and "FastCGI" in p["settings_source"]
    assert p["docroot"] == st["docroot"]
    assert p["settings"]["realpath_cache_ttl"] == "7"
    assert by_id(r)["realpath-cache-ttl"]["severity"] == "warning"
    off = by_id(r)["opcache-disabled"]
    assert off["severity"] == "critical" and off["change"] == ["opcache.enable = 1"]
    assert p["settings"]["opcache.enable"] in ("0", "")  # as the worker reports it
    # without the query, php-fpm -i of the master's config alone does not see the override
    code, r = check(state_home, "--pool", pool, "--no-query")
    assert r["pools"][0]["settings"]["realpath_cache_ttl"] == "120"

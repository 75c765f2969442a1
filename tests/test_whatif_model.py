"""The what-if model as pure code: realpath cache, resolution, include_path, OPcache, stat
family, open_basedir, .user.ini, workers; the replay of a trace file and the CLI's error
paths (no root needed)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import invoke
from statstorm.model import latency_profile as lp
from statstorm.model.php_engine import Engine
from statstorm.model.engine_events import E_CLEAR, E_INCLUDE, E_PROBE, E_REALPATH, E_REQ, E_USER_INI, Event
from statstorm.model.phpsettings import PhpSettings, from_recorded, parse_set, with_changes
from statstorm.model.fs_view import DIR, FILE, LINK, MISSING, FsView
from statstorm.model.realpath_cache import (CHAINS, FILEPATH, REALPATH, RealpathCache, Resolver,
                                            fnv_key)
from statstorm.model.replay import prepare, replay
from statstorm.errors import UsageError
from statstorm.results.trace import Operation, Request, Syscall, Trace, new_header, write_trace

APP = "/srv/www/app"
FILES = [f"{APP}/lib/A{i}.php" for i in range(5)]


def fs_view() -> FsView:
    fs = FsView()
    for f in FILES:
        fs.observe(f, FILE)
    fs.observe(f"{APP}/inc/x.php", FILE)
    fs.observe("/srv/releases/r2/lib/B.php", FILE)
    fs.observe_link("/srv/current", "releases/r2")
    fs.observe(f"{APP}/missing.php", MISSING)
    fs.finish()
    return fs


class Calls:
    def __init__(self) -> None:
        self.log: list[tuple[str, str, bool]] = []

    def __call__(self, call: str, path: str, failed: bool) -> None:
        self.log.append((call, path, failed))

    def of(self, call: str) -> list[str]:
        return [p for c, p, _ in self.log if c == call]


def resolver(limit: int = 4096 << 10, ttl: int = 120) -> tuple[Resolver, Calls]:
    calls = Calls()
    return Resolver(fs_view(), RealpathCache(limit, ttl), calls), calls


# -- realpath cache --------------------------------------------------------------------------
def test_cold_resolution_lstats_leaf_first_then_caches_every_component() -> None:
    r, calls = resolver()
    assert r.resolve(FILES[0], "/") == FILES[0]
    assert calls.of("lstat") == [FILES[0], f"{APP}/lib", APP, "/srv/www", "/srv"]
    # entry bytes: 48 + len(key) + 1 each (resolved == key)
    keys = [FILES[0], f"{APP}/lib", APP, "/srv/www", "/srv"]
    assert r.cache.used == sum(48 + len(k) + 1 for k in keys)
    calls.log.clear()
    assert r.resolve(FILES[1], "/") == FILES[1]
    assert calls.log == [("lstat", FILES[1], False)]  # only the new leaf
    calls.log.clear()
    r.resolve(FILES[1], "/")
    assert calls.log == []


def test_symlinks_and_dot_spellings_make_their_own_entries() -> None:
    r, calls = resolver()
    assert r.resolve("/srv/current/lib/B.php", "/") == "/srv/releases/r2/lib/B.php"
    assert calls.of("readlink") == ["/srv/current"]
    e = r.cache.entries["/srv/current/lib/B.php"]
    key, res = "/srv/current/lib/B.php", "/srv/releases/r2/lib/B.php"
    assert e[0] == res and e[3] == 48 + len(key) + 1 + len(res) + 1
    calls.log.clear()
    assert r.resolve("./lib/A0.php", APP) == FILES[0]
    assert calls.of("getcwd") == [APP]
    # up to the first cached prefix (/srv, from the first resolution)
    assert calls.of("lstat") == [f"{APP}/./lib/A0.php", f"{APP}/./lib", APP, "/srv/www"]
    assert f"{APP}/./lib" in r.cache.entries
    calls.log.clear()
    assert r.resolve(f"{APP}/lib/../lib/A1.php", "/") == FILES[1]
    assert f"{APP}/lib/.." not in r.cache.entries  # `..` is applied, not cached


def test_missing_leaf_realpath_vs_filepath() -> None:
    r, calls = resolver()
    assert r.resolve(f"{APP}/missing.php", "/", REALPATH) is None
    assert calls.log == [("lstat", f"{APP}/missing.php", True)] and not r.cache.entries
    calls.log.clear()
    r.resolve(f"{APP}/missing.php", "/", FILEPATH)
    assert calls.of("lstat")[0] == f"{APP}/missing.php" and len(calls.of("lstat")) == 4
    assert f"{APP}/missing.php" not in r.cache.entries and APP in r.cache.entries


def test_full_cache_adds_nothing_and_keeps_parents() -> None:
    r, calls = resolver(limit=200)
    r.resolve(FILES[0], "/")
    # parents are added first (the recursion returns from the top): only those that fit
    assert set(r.cache.entries) == {"/srv", "/srv/www", APP} and r.cache.used == 53 + 57 + 61
    calls.log.clear()
    r.resolve(FILES[0], "/")
    assert calls.of("lstat") == [FILES[0], f"{APP}/lib"]


def test_ttl_expiry_is_lazy_and_zero_never_expires() -> None:
    r, calls = resolver(ttl=1)
    r.now = 100
    r.resolve(FILES[0], "/")
    r.now = 101  # expires = 101, expired only when 101 < now
    calls.log.clear()
    r.resolve(FILES[0], "/")
    assert calls.log == []
    r.now = 102
    r.resolve(FILES[0], "/")
    assert len(calls.of("lstat")) == 5
    r0, calls0 = resolver(ttl=0)
    r0.now = 100
    r0.resolve(FILES[0], "/")
    r0.now = 10 ** 9
    calls0.log.clear()
    r0.resolve(FILES[0], "/")
    assert calls0.log == []


def test_expired_entries_leave_only_when_their_chain_is_walked() -> None:
    # two keys in the same chain: a lookup of one frees the other if it has expired
    base = "/k"
    first = f"{base}0"
    chain = fnv_key(first) % CHAINS
    other = next(f"{base}{i}" for i in range(1, 100000) if fnv_key(f"{base}{i}") % CHAINS == chain)
    third = next(f"{base}{i}" for i in range(1, 100000)
                 if fnv_key(f"{base}{i}") % CHAINS != chain)
    c = RealpathCache(1 << 20, 5)
    c.add(first, first, False, 100)
    c.add(third, third, False, 100)
    c.add(other, other, False, 200)
    before = c.used
    assert c.find(third + "x", 300) is None  # another chain: nothing freed
    assert c.used == before
    assert c.find(other, 300) is None  # walks the chain: both expired ones go
    assert first not in c.entries and third in c.entries
    assert c.used == before - (48 + len(first) + 1) - (48 + len(other) + 1)


def test_fnv_key_matches_phps_hash() -> None:
    h = 2166136261
    for ch in b"/a":
        h = (h * 16777619) & ((1 << 64) - 1)
        h ^= ch
    assert fnv_key("/a") == h
    h = 2166136261
    for ch in b"/\xe9":  # C's char is signed: 0xe9 is xor-ed as -23
        h = (h * 16777619) & ((1 << 64) - 1)
        h ^= ch if ch < 0x80 else (ch - 256) & ((1 << 64) - 1)
    assert fnv_key("/\udce9") == h


# -- engine ----------------------------------------------------------------------------------
def run(settings: PhpSettings, events: list[Event], wid: int = 1, now: int = 1000,
        engine: Engine | None = None) -> tuple[Engine, list[int]]:
    eng = engine or Engine(settings, fs_view())
    eng.run(wid, events, [now] * len(events))
    return eng, eng.tally.per_req.get(0, [0] * 14)


def count(c: list[int], call: str, failed: bool | None = None) -> int:
    from statstorm.model.php_engine import CALL_INDEX
    i = CALL_INDEX[call]
    if failed is None:
        return c[2 * i] + c[2 * i + 1]
    return c[2 * i + (1 if failed else 0)]


def inc(name: str, once: bool = False, ip: str = f".:{APP}/inc", req: int = 0) -> Event:
    return (E_INCLUDE, req, name, once, APP, ip, APP)


def test_include_path_misses_are_never_cached() -> None:
    evs = [(E_REQ, 0, "")] + [inc("x.php")] * 3
    _, c = run(PhpSettings(), evs)
    # each include: getcwd + failed lstat of ./x.php, then inc/x.php (cached after the first)
    assert count(c, "getcwd") == 3 and count(c, "lstat", True) == 3
    assert count(c, "open") == 3 and count(c, "fstat") == 3


def test_once_includes_open_once_per_request() -> None:
    evs = [(E_REQ, 0, ""), inc(FILES[0], once=True), inc(FILES[0], once=True)]
    _, c = run(PhpSettings(), evs)
    assert count(c, "open") == 1


def test_opcache_hits_windows_and_validate_timestamps() -> None:
    evs = [(E_REQ, 0, "")] + [inc(FILES[0])] * 4
    on = PhpSettings(opcache=True, opcache_revalidate_freq=2)
    _, c = run(on, evs)
    assert count(c, "open") == 1 and count(c, "stat") == 0  # a miss, then hits in the window
    _, c = run(replace(on, opcache_revalidate_freq=0), evs)
    assert count(c, "open") == 1 and count(c, "stat") == 3  # every hit stats
    _, c = run(replace(on, opcache_validate_timestamps=False, opcache_revalidate_freq=0), evs)
    assert count(c, "stat") == 0


def test_opcache_window_is_shared_by_the_workers_of_one_master() -> None:
    s = PhpSettings(opcache=True, opcache_revalidate_freq=2)
    eng = Engine(s, fs_view())
    eng.run(1, [(E_REQ, 0, ""), inc(FILES[0])], [1000, 1000])
    eng.run(2, [(E_REQ, 1, ""), inc(FILES[0], req=1)], [1001, 1001])  # same window
    assert count(eng.tally.per_req[1], "stat") == 0
    eng.run(2, [(E_REQ, 2, ""), inc(FILES[0], req=2)], [1003, 1003])  # over: one stat
    eng.run(1, [(E_REQ, 3, ""), inc(FILES[0], req=3)], [1003, 1003])  # renewed for all
    assert count(eng.tally.per_req[2], "stat") == 1 and count(eng.tally.per_req[3], "stat") == 0


def test_stat_family_access_and_one_entry_stat_cache() -> None:
    probe = [(E_PROBE, 0, FILES[0], "file_exists", FILES[0], APP)] * 2
    stat = [(E_PROBE, 0, FILES[0], "is_file", FILES[0], APP)] * 2
    evs = [(E_REQ, 0, "")] + probe + stat + [(E_CLEAR, 0, False, "")] + stat
    _, c = run(PhpSettings(), evs)
    assert count(c, "access") == 2 and count(c, "stat") == 2
    miss = [(E_PROBE, 0, f"{APP}/missing.php", "is_file", f"{APP}/missing.php", APP)] * 3
    _, c = run(PhpSettings(), [(E_REQ, 0, "")] + miss)
    assert count(c, "stat", True) == 3  # failures are not cached


def test_file_override_answers_cached_scripts_without_a_call() -> None:
    s = PhpSettings(opcache=True, opcache_enable_file_override=True)
    evs = [(E_REQ, 0, ""), inc(FILES[0]), (E_PROBE, 0, FILES[0], "file_exists", FILES[0], APP),
           (E_PROBE, 0, FILES[1], "file_exists", FILES[1], APP)]
    _, c = run(s, evs)
    assert count(c, "access") == 1


def test_open_basedir_disables_the_cache_and_checks_every_open() -> None:
    # the reference's verified figure: a 7-component include, open_basedir=A:B with A
    # matching, costs 7 (resolve) + 7 + 7 (check) + 2 (basedir) = 23 lstat
    fs = FsView()
    path = "/a/b/c/d/e/f/g.php"
    fs.observe(path, FILE)
    fs.finish()
    s = PhpSettings(open_basedir="/a/b:/x")
    eng = Engine(s, fs)
    eng.run(1, [(E_REQ, 0, ""), (E_INCLUDE, 0, path, False, "/", "", "")] * 2, [1] * 4)
    c = eng.tally.per_req[0]
    assert count(c, "lstat") == 2 * 23 and count(c, "open") == 2
    assert eng.workers[1].cache.used == 0


def test_rename_wipe_and_exact_key_delete() -> None:
    evs = [(E_REQ, 0, ""), inc(FILES[0]), (E_CLEAR, 0, True, ""), inc(FILES[0])]
    _, c = run(PhpSettings(), evs)
    assert count(c, "lstat") == 10  # the whole chain twice
    evs = [(E_REQ, 0, ""), inc(FILES[0]), (E_CLEAR, 0, True, FILES[0]), inc(FILES[0])]
    _, c = run(PhpSettings(), evs)
    assert count(c, "lstat") == 6  # only that key


def test_max_requests_recycles_workers_with_cold_caches() -> None:
    evs: list[Event] = []
    for r in range(4):
        evs += [(E_REQ, 0, ""), (E_REALPATH, 0, FILES[0], "/", REALPATH, False)]
    _, c = run(PhpSettings(max_requests=2), evs)
    assert count(c, "lstat") == 10  # a cold chain in requests 1 and 3
    _, c = run(PhpSettings(max_requests=0), evs)
    assert count(c, "lstat") == 5


def test_user_ini_rescans_after_cache_ttl() -> None:
    fs = FsView()
    fs.observe("/www/.user.ini", MISSING)
    fs.observe("/www/sub/.user.ini", FILE)
    fs.finish()
    s = PhpSettings(user_ini_cache_ttl=300)
    eng = Engine(s, fs)
    scan = (E_USER_INI, 0, "/www/sub", ("/www", "/www/sub"))
    eng.run(1, [(E_REQ, 0, ""), scan, (E_REQ, 0, ""), scan, (E_REQ, 0, ""), scan],
            [100, 100, 200, 200, 401, 401])
    c = eng.tally.per_req[0]
    assert count(c, "stat") == 4 and count(c, "open") == 2
    eng = Engine(replace(s, user_ini_filename=""), fs)
    eng.run(1, [(E_REQ, 0, ""), scan], [1, 1])
    assert count(eng.tally.per_req[0], "stat") == 0


def test_fs_view_follows_links_and_changes_over_time() -> None:
    fs = fs_view()
    assert fs.kind("/srv/current") == LINK and fs.kind("/srv/current/lib") == DIR
    assert fs.exists("/srv/current/lib/B.php") and not fs.exists("/srv/current/lib/C.php")
    fs2 = FsView()
    fs2.observe("/t/x", MISSING, 10)
    fs2.observe("/t/x", FILE, 20)
    fs2.finish()
    fs2.now_ns = 5
    assert not fs2.exists("/t/x")
    fs2.now_ns = 15
    assert fs2.exists("/t/x")


# -- settings --------------------------------------------------------------------------------
def test_settings_from_a_trace_header_and_set() -> None:
    rec = {"sapi": "cli", "realpath_cache_size": "4096K", "realpath_cache_ttl": "120",
           "opcache.enable": "On", "opcache.enable_cli": "Off", "opcache.revalidate_freq": "2",
           "include_path": ".:/usr/share/php"}
    s = from_recorded(rec)
    assert s.realpath_cache_size == 4 << 20 and not s.opcache
    p = with_changes(s, rec, parse_set(["opcache.enable_cli=1", "realpath_cache_size=16k"]))
    assert p.opcache and p.realpath_cache_size == 16384
    assert not from_recorded({"sapi": "cli"}).opcache  # extension not loaded
    assert with_changes(from_recorded({}), {}, [("opcache.enable_cli", "1")]).opcache
    for bad in (["realpath_cache_size"], ["nope=1"]):
        with pytest.raises(UsageError):
            parse_set(bad)
    with pytest.raises(UsageError):
        with_changes(s, rec, [("realpath_cache_size", "lots")])


# -- replay of a trace file, the CLI ---------------------------------------------------------
def small_trace(path: Path, settings: dict[str, Any] | None = None) -> Path:
    """A traced command: one include of FILES[0] (cold: 5 lstat + open + fstat), a failed
    file_exists, then the same include again (open + fstat only)."""
    h = new_header("bpftrace", created="2026-01-01T00:00:00+00:00", host="h",
                   targets={"mode": "cmd", "cmd": ["php", "x.php"]},
                   settings=settings or {"sapi": "cli", "realpath_cache_size": "4096K",
                                         "realpath_cache_ttl": "120",
                                         "include_path": ".:/usr/share/php"},
                   mounts=[("/", "ext4")])
    t = Trace(header=h)
    ts = 0

    def sc(op: int, call: str, p: str, ret: int = 0, kind: str = "include_resolve") -> None:
        nonlocal ts
        ts += 1000
        t.syscalls.append(Syscall(ts, 7, call, call, p, ret, 5000, 0, op, 0, kind))

    def op(oid: int, kind: str, parent: int, args: dict[str, Any]) -> None:
        t.operations[oid] = Operation(oid, 0, 7, ts - 500 * (3 if parent < 0 else 1), ts,
                                      kind, parent, args)
    sc(-1, "open", "/etc/localtime", 0, "startup")
    for i, p in enumerate([FILES[0], f"{APP}/lib", APP, "/srv/www", "/srv"]):
        sc(1, "lstat", p)
    op(1, "include_resolve", 0, {"name": FILES[0], "cwd": APP, "include_path": ".:/usr/share/php",
                                 "candidates": [FILES[0]]})
    sc(0, "open", FILES[0], 3, "include")
    sc(0, "fstat", FILES[0], 0, "include")
    op(0, "include", -1, {"name": FILES[0], "type": "include"})
    sc(2, "access", f"{APP}/nope.php", -2, "file_probe")
    op(2, "file_probe", -1, {"name": f"{APP}/nope.php", "func": "file_exists"})
    ts += 1000
    op(4, "include_resolve", 3, {"name": FILES[0], "cwd": APP, "include_path": ".:/usr/share/php",
                                 "candidates": [FILES[0]]})
    sc(3, "open", FILES[0], 3, "include")
    sc(3, "fstat", FILES[0], 0, "include")
    op(3, "include", -1, {"name": FILES[0], "type": "include"})
    t.requests[0] = Request(0, 0, 0, ts + 10, f"{APP}/x.php", "")
    write_trace(path, t)
    return path


def test_replay_reproduces_and_predicts(tmp_path: Path) -> None:
    from statstorm.results.trace import read_trace
    t = read_trace(small_trace(tmp_path / "t.sst.gz"))
    prep = prepare(t)
    cur = replay(prep, from_recorded(t.header["settings"]))
    assert cur.per_request == {"lstat": 5.0, "stat": 0.0, "fstat": 2.0, "access": 1.0,
                               "open": 3.0, "readlink": 0.0, "getcwd": 0.0, "total": 11.0,
                               "failed": 1.0}
    off = replay(prep, replace(from_recorded(t.header["settings"]), realpath_cache_size=0))
    assert off.per_request["lstat"] == 10 and off.cache_bytes_peak == 0


def test_whatif_cli_json_and_text(tmp_path: Path) -> None:
    tr = small_trace(tmp_path / "t.sst.gz")
    proc = invoke(["whatif", str(tr), "--set", "realpath_cache_size=0", "--json",
                   "--find-min", "realpath_cache_size", "--profile", "gluster"], tmp_path,
                   check=True)
    d = json.loads(proc.stdout)
    assert set(d["current"]["per_request"]) == set(d["proposed"]["per_request"]) == {
        "lstat", "stat", "fstat", "access", "open", "readlink", "getcwd", "total", "failed"}
    assert d["proposed"]["per_request"]["lstat"] == 10
    assert d["proposed"]["metadata_time_us_per_request"] > d["current"][
        "metadata_time_us_per_request"]
    need = sum(48 + len(k) + 1 for k in [FILES[0], f"{APP}/lib", APP, "/srv/www", "/srv"])
    assert d["find_min"]["bytes"] == need
    text = invoke(["whatif", str(tr), "--set", "realpath_cache_size=16K"], tmp_path,
                  check=True).stdout
    assert "proposed" in text and "realpath cache bytes" in text


def test_latency_profiles(tmp_path: Path) -> None:
    counts = {(0, 0, False): 10, (0, 0, True): 2}  # 10 lstat hits, 2 ENOENT on mount 0
    mounts = [("/", "ext4")]
    assert lp.cost_us(lp.BUILTIN_PROFILES["local"], mounts, counts) == pytest.approx(10 * 3.6 + 2 * 5.6)
    prof = {"schema": lp.SCHEMA, "source": "x", "mounts": {"/": {
        "lstat": {"hit": 4.8, "enoent": 1160.0}}}}
    assert lp.cost_us(lp.LatencyProfile.from_json(lp.validate(prof, "f")), mounts, counts) == pytest.approx(48 + 2320)
    # a mount the profile does not name is priced as local disk
    other = {(1, 0, False): 10}
    assert lp.cost_us(lp.LatencyProfile.from_json(prof), [("/", "ext4"), ("/boot", "ext4")],
                      other) == pytest.approx(36)
    tr = small_trace(tmp_path / "t.sst.gz")
    pf = tmp_path / "p.json"
    pf.write_text(json.dumps(prof))
    d = json.loads(invoke(["whatif", str(tr), "--profile", str(pf), "--json"], tmp_path,
                          check=True).stdout)
    assert d["current"]["metadata_time_us_per_request"] > 0
    d = json.loads(invoke(["whatif", str(tr), "--profile", "trace", "--json"], tmp_path,
                          check=True).stdout)
    assert d["current"]["metadata_time_us_per_request"] == pytest.approx(11 * 5.0, rel=0.01)


@pytest.mark.parametrize("args,expect", [
    (["whatif", "/nonexistent.sst"], "no such trace file"),
    (["whatif", "TRACE", "--set", "realpath_cache_size"], "KEY=VALUE"),
    (["whatif", "TRACE", "--set", "memory_limit=1G"], "not a setting"),
    (["whatif", "TRACE", "--set", "realpath_cache_size=big"], "size"),
    (["whatif", "TRACE", "--profile", "/nonexistent.json"], "--profile"),
    (["whatif", "TRACE", "--profile", "BADPROFILE"], "latency profile"),
    (["whatif", "TRACE", "--find-min", "memory_limit"], "--find-min"),
    (["whatif", "COUNTS"], "counts only"),
])
def test_bad_input_is_a_one_line_error(tmp_path: Path, args: list[str], expect: str) -> None:
    tr = small_trace(tmp_path / "t.sst.gz")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something-else"}')
    counts = tmp_path / "k.sst"
    h = new_header("bpftrace", created="", host="", targets={"mode": "cmd"}, settings={},
                   mounts=[], detail="counts")
    write_trace(counts, Trace(header=h))
    args = [{"TRACE": str(tr), "BADPROFILE": str(bad), "COUNTS": str(counts)}.get(a, a)
            for a in args]
    proc = invoke(args, tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0], proc.stderr


def test_a_cut_getcwd_path_names_no_directory() -> None:
    """The tracer can record a getcwd path shorter than the call returned (its length, NUL
    included). Such a path, and an include resolution's cwd taken from it, is not the cwd:
    the directory chdir() named is. Taken as reported, the cut path became a directory, the
    chdir's directory a symlink to it, and a relative include resolved under it."""
    long = f"{APP}/a-directory-with-a-rather-long-name"
    cut = long[:30]
    h = new_header("bpftrace", created="2026-01-01T00:00:00+00:00", host="h",
                   targets={"mode": "cmd", "cmd": ["php", "x.php"]},
                   settings={"sapi": "cli", "realpath_cache_size": "4096K",
                             "include_path": "/usr/share/php"}, mounts=[("/", "ext4")])
    t = Trace(header=h)

    def sc(ts: int, op: int, call: str, p: str, ret: int, kind: str) -> None:
        t.syscalls.append(Syscall(ts, 7, call, call, p, ret, 5000, 0, op, 0, kind))
    sc(1000, -1, "getcwd", APP, len(APP) + 1, "startup")
    sc(2000, -1, "chdir", long, 0, "other")
    sc(3000, -1, "getcwd", cut, len(long) + 1, "other")
    sc(4100, 1, "getcwd", cut, len(long) + 1, "include_resolve")
    sc(4200, 1, "lstat", f"{long}/x.php", 0, "include_resolve")
    sc(4300, 1, "lstat", long, 0, "include_resolve")
    sc(4400, 0, "open", f"{long}/x.php", 3, "include")
    sc(4500, 0, "fstat", f"{long}/x.php", 0, "include")
    t.operations[1] = Operation(1, 0, 7, 4050, 4350, "include_resolve", 0,
                                {"name": "./x.php", "cwd": cut, "include_path": "/usr/share/php",
                                 "candidates": ["./x.php"]})
    t.operations[0] = Operation(0, 0, 7, 4000, 4600, "include", -1,
                                {"name": "./x.php", "type": "include"})
    t.requests[0] = Request(0, 7, 0, 5000, f"{APP}/x.php", "")
    prep = prepare(t)
    incs = [ev for evs, _, _ in prep.streams.values() for ev in evs if ev[0] == E_INCLUDE]
    assert [ev[4] for ev in incs] == [long]
    assert long not in prep.fs.links and prep.fs.kind(cut) == MISSING
    off = replay(prep, replace(from_recorded(t.header["settings"]), realpath_cache_size=0))
    assert off.per_request["readlink"] == 0
    assert off.per_request["lstat"] == 5  # x.php, the directory, app, www, srv

"""The fast paths of `statstorm whatif`: the batched trace reader and the input cache.

Both must give exactly what the straightforward paths give; none of these tests time anything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from statstorm.commands import whatif as whatif_cmd
from statstorm.errors import UsageError
from statstorm.model.phpsettings import from_recorded
from statstorm.model.replay import prepare, replay
from statstorm.model.tracestats import summarize_trace
from statstorm.adapters.tracing import whatif_input
from statstorm.results.trace import jsonl, raw, sidecar
from statstorm.results.trace import (INTERNED_ARGS, CountRow, Operation, Request,
                                     RequestCounts, Syscall, Trace, TraceWriter, new_header,
                                     read_trace)
from test_whatif_model import small_trace


def reference_read(path: Path) -> Trace:
    """The plain reader: one json.loads and one record at a time (the test's oracle)."""
    with jsonl._open_text(path) as fh:
        recs = [json.loads(line) for line in fh if line.strip()]
    t = Trace(header=recs[0])
    paths: dict[int, str] = {}
    for rec in recs[1:]:
        if rec[0] == "p":
            paths[rec[1]] = rec[2]
        elif rec[0] == "s":
            _, ts, pid, req, op, call, sysname, pth, ret, lat, mnt, kind = rec
            t.syscalls.append(Syscall(ts, pid, call, sysname, paths.get(pth, ""), ret, lat,
                                      req, op, mnt, kind))
        elif rec[0] == "r":
            t.requests[rec[1]] = Request(*rec[1:7])
        elif rec[0] == "o":
            args = rec[8]
            for k in INTERNED_ARGS:
                if isinstance(args.get(k), int):
                    args[k] = paths.get(args[k], "")
            if isinstance(args.get("candidates"), list):
                args["candidates"] = [paths.get(c, "") for c in args["candidates"]]
            t.operations[rec[1]] = Operation(*rec[1:8], args)
        elif rec[0] == "k":
            t.request_counts.append(RequestCounts(rec[1], rec[2], {
                k: tuple(v) for k, v in rec[3].items()}))
        elif rec[0] == "c":
            t.counts.append(CountRow(rec[1], rec[2], rec[3], float(rec[4])))
        elif rec[0] == "e":
            t.trailer = rec[1]
    return t


def per_request(t: Trace) -> dict[str, float | None]:
    """The summary's calls per request, as a dict (what whatif's input measures)."""
    return dict(summarize_trace(t).per_request.items())


def varied_trace(path: Path) -> Path:
    """Every record kind, a non-UTF-8 path, operations with and without path arguments."""
    weird = b"/srv/caf\xe9/x.php".decode("utf-8", "surrogateescape")
    h = new_header("bpftrace", created="2026-01-01T00:00:00+00:00", host="h",
                   targets={"mode": "pool"}, settings={"include_path": ".:/usr/share/php"},
                   mounts=[("/", "ext4")])
    with TraceWriter(path, h) as w:
        for i in range(300):
            f = weird if i % 50 == 0 else f"/srv/app/C{i % 37}.php"
            w.syscall(Syscall(10 * i, 7, "lstat", "newfstatat", f, -2 if i % 3 else 0, 100,
                              i // 100, i, 0, "include_resolve"))
            w.operation(Operation(i, i // 100, 7, 10 * i, 10 * i + 5, "include_resolve", -1,
                                  {"name": f, "cwd": "/srv/app", "include_path": "",
                                   "candidates": [f, "/usr/share/php/x"], "n": 3}))
            w.operation(Operation(1000 + i, i // 100, 7, 10 * i, 10 * i + 5, "other", -1, {}))
        for r in range(3):
            w.request(Request(r, 7, 1000 * r, 1000 * r + 999, "/srv/app/index.php", "/"))
        w.request_counts(RequestCounts(3, 7, {"lstat": (4, 1, 900)}))
        w.count(CountRow("stat", 10, 2, 0.5))
    return path


@pytest.mark.parametrize("name", ["v.sst", "v.sst.gz"])
def test_batched_reader_gives_the_plain_readers_trace(tmp_path: Path, name: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = varied_trace(tmp_path / name)
    want = reference_read(path)
    assert read_trace(path) == want
    monkeypatch.setattr(jsonl, "BATCH_BYTES", 200)  # many batches, cut anywhere
    got = read_trace(path)
    assert got == want and summarize_trace(got) == summarize_trace(want)
    small = small_trace(tmp_path / "s.sst.gz")
    assert read_trace(small) == reference_read(small)


def test_blank_lines_are_skipped_and_damaged_lines_named(tmp_path: Path) -> None:
    path = varied_trace(tmp_path / "v.sst")
    lines = path.read_text(errors="surrogateescape").split("\n")
    blank = tmp_path / "blank.sst"
    blank.write_text("\n".join(lines[:5] + ["", "  "] + lines[5:]), errors="surrogateescape")
    assert read_trace(blank) == read_trace(path)
    for lineno, bad in ((200, '["s", 1, 2'), (201, '["s"],["s"]'), (202, "{}"), (203, "[1]")):
        damaged = tmp_path / "damaged.sst"
        damaged.write_text("\n".join(lines[:lineno - 1] + [bad] + lines[lineno - 1:]),
                           errors="surrogateescape")
        with pytest.raises(UsageError) as exc:
            read_trace(damaged)
        msg = str(exc.value)
        assert f"damaged.sst:{lineno}:" in msg and "\n" not in msg, msg


def test_input_cache_is_used_only_while_it_matches_the_trace(tmp_path: Path) -> None:
    path = small_trace(tmp_path / "s.sst")
    cached, trace = whatif_cmd.load_input(path)
    assert trace is not None and whatif_input.cache_path(path).is_file()
    again, none = whatif_cmd.load_input(path)
    assert none is None  # answered by the cache
    assert again.header == trace.header and again.measured == cached.measured
    fresh = prepare(read_trace(path))
    s = from_recorded(trace.header["settings"])
    assert replay(again.prep, s) == replay(fresh, s)
    assert again.prep.events == fresh.events and again.prep.streams == fresh.streams
    # a changed trace (new size or mtime) is read again
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert whatif_cmd.load_input(path)[1] is not None
    # a damaged cache is ignored, then replaced
    whatif_input.cache_path(path).write_bytes(b"\x00garbage")
    assert whatif_input.load(path) is None
    assert whatif_cmd.load_input(path)[1] is not None
    assert whatif_input.load(path) is not None


def test_whatif_with_and_without_the_cache_agree(tmp_path: Path) -> None:
    path = small_trace(tmp_path / "t.sst.gz")
    args = ["whatif", str(path), "--set", "realpath_cache_size=0", "--json",
            "--find-min", "realpath_cache_size"]
    plain = json.loads(run_cli(args + ["--no-cache"], tmp_path, check=True).stdout)
    assert not whatif_input.cache_path(path).exists()
    first = json.loads(run_cli(args, tmp_path, check=True).stdout)
    assert whatif_input.cache_path(path).is_file()
    cached = json.loads(run_cli(args, tmp_path, check=True).stdout)
    assert plain == first == cached
    with_trace: Any = whatif_cmd.run(whatif_cmd.WhatifOptions(path, profile="trace"))
    assert with_trace.profile_source


def test_cache_is_a_plain_sidecar_with_a_versioned_header(tmp_path: Path) -> None:
    import marshal
    path = small_trace(tmp_path / "t.sst")
    whatif_cmd.load_input(path)
    data = marshal.loads(whatif_input.cache_path(path).read_bytes())
    assert data["format"] == "statstorm-whatif-input"
    assert data["version"] == whatif_input.VERSION
    st = path.stat()
    assert data["source"][:3] == [st.st_size, st.st_mtime_ns, st.st_ino]
    data["version"] = whatif_input.VERSION + 1
    whatif_input.cache_path(path).write_bytes(marshal.dumps(data))
    assert whatif_input.load(path) is None


# -- the record sidecar (results.trace.sidecar) and the raw records (results.trace.raw) --------
def pool_trace(path: Path, records: bool = True, build: bool = False) -> Path:
    """A php-fpm-shaped trace: 3 workers whose requests interleave (some events at the same
    ns in two workers), includes with and without a resolution, relative names, probes,
    revalidations, a symlink, .user.ini scans and a realpath() call."""
    h = new_header("bpftrace", created="2026-01-01T00:00:00+00:00", host="h",
                   targets={"mode": "pool", "pids": [11]},
                   settings={"sapi": "fpm-fcgi", "realpath_cache_size": "4096K",
                             "include_path": ".:/srv/app/inc", "opcache.enable": "On",
                             "opcache.revalidate_freq": "2"},
                   mounts=[("/", "ext4"), ("/srv", "nfs")])
    oid = 0
    with TraceWriter(path, h, records=records) as w:
        for req in range(12):
            pid = 11 + req % 3
            start = (req // 3) * 3_000_000_000 + (req % 3) * 7
            ts = start
            w.syscall(Syscall(ts + 1, pid, "getcwd", "getcwd", "/srv/app", 9, 10, req, -1, 0,
                              "other"))
            for i in range(6):
                ts += 1000
                f = f"/srv/app/src/C{i}.php" if i % 2 else f"lib/L{i}.php"
                if req < 3:  # each worker's first request: a cold resolution
                    w.syscall(Syscall(ts, pid, "lstat", "newfstatat", f"/srv/app/inc/{f}",
                                      -2, 30, req, oid + 1, 1, "include_resolve"))
                    w.operation(Operation(oid + 1, req, pid, ts - 5, ts + 5, "include_resolve",
                                          oid, {"name": f, "cwd": "/srv/app",
                                                "include_path": ".:/srv/app/inc",
                                                "candidates": [f"/srv/app/{f}",
                                                               f"/srv/app/inc/{f}"]}))
                    w.syscall(Syscall(ts + 6, pid, "open", "openat", f"/srv/app/inc/{f}", 5,
                                      40, req, oid, 1, "include"))
                w.operation(Operation(oid, req, pid, ts - 10, ts + 10, "include", -1,
                                      {"name": f, "type": "once" if i == 3 else "include"}))
                oid += 2
                w.syscall(Syscall(ts + 20, pid, "access", "access", f"/srv/app/x{i}.php",
                                  -2 if i % 3 else 0, 25, req, oid, 1, "file_probe"))
                w.operation(Operation(oid, req, pid, ts + 15, ts + 25, "file_probe", -1,
                                      {"name": f"/srv/app/x{i}.php", "func": "file_exists"}))
                oid += 1
            w.syscall(Syscall(ts + 30, pid, "stat", "newfstatat", "/srv/app/index.php", 0, 20,
                              req, -1, 1, "opcache_revalidate"))
            w.syscall(Syscall(ts + 40, pid, "readlink", "readlinkat", "/srv/app/current", 8,
                              20, req, oid, 1, "realpath"))
            w.syscall(Syscall(ts + 41, pid, "lstat", "newfstatat", "/srv/app/releases/7", 0,
                              20, req, oid, 1, "realpath"))
            w.operation(Operation(oid, req, pid, ts + 35, ts + 45, "realpath", -1,
                                  {"path": "/srv/app/current/a.txt", "mode": "realpath"}))
            oid += 1
            w.operation(Operation(oid, req, pid, ts + 50, ts + 55, "user_ini", -1,
                                  {"name": "/srv/app"}))
            oid += 1
            w.syscall(Syscall(ts + 60, pid, "open", "openat", "/tmp/sess", 3, 50, req, -1, 0,
                              "other"))
            # created and removed while traced
            w.syscall(Syscall(ts + 61, pid, "stat", "newfstatat", "/srv/app/flip.lock",
                              -2 if req % 4 < 2 else 0, 50, req, -1, 1, "other"))
            w.request(Request(req, pid, start, ts + 100, "/srv/app/index.php", "/"))
    if build:  # as the tracer does once the trace is in place
        whatif_input.build(path)
    return path


def flat(path: Path, sidecar: bool) -> list[Any]:
    return [rec for batch in jsonl.iter_batches(path, sidecar) for rec in batch]


@pytest.mark.parametrize("name", ["p.sst", "p.sst.gz"])
def test_record_sidecar_gives_the_json_lines_records(tmp_path: Path, name: str) -> None:
    path = pool_trace(tmp_path / name)
    side = sidecar.records_path(path)
    assert side.is_file() and sidecar.load(path) is not None
    assert flat(path, True) == flat(path, False)
    assert read_trace(path) == reference_read(path)
    v = varied_trace(tmp_path / ("v" + name))  # every record kind, a non-UTF-8 path
    assert sidecar.load(v) is not None
    assert flat(v, True) == flat(v, False) and read_trace(v) == reference_read(v)


def test_record_sidecar_holds_only_what_json_gives_back(tmp_path: Path) -> None:
    h = new_header("bpftrace", created="2026-01-01T00:00:00+00:00", host="h", targets={},
                   settings={}, mounts=[])
    path = tmp_path / "t.sst"
    mine = [1, 2]
    with TraceWriter(path, h) as w:
        w.operation(Operation(1, 0, 7, 1, 2, "other", -1, {"pair": (1, 2), "list": mine,
                                                           "map": {"a": (3,)}}))
        mine.append(3)  # the caller changes its own list after writing
        w.request(Request(0, 7, 0, 5, "/x.php", "/"))
    assert sidecar.load(path) is not None
    assert flat(path, True) == flat(path, False)
    assert read_trace(path).operations[1].args == {"pair": [1, 2], "list": [1, 2],
                                                   "map": {"a": [3]}}


def test_record_sidecar_dropped_when_a_value_cannot_be_kept(tmp_path: Path) -> None:
    import enum

    class Ret(enum.IntEnum):
        OK = 0

    h = new_header("bpftrace", created="2026-01-01T00:00:00+00:00", host="h", targets={},
                   settings={}, mounts=[])
    path = pool_trace(tmp_path / "t.sst")  # an older trace (and sidecar) at the same path
    with TraceWriter(path, h) as w:
        w.syscall(Syscall(1, 7, "stat", "stat", "/x", Ret.OK, 5, 0, -1, 0, "other"))
    assert not sidecar.records_path(path).exists()
    assert read_trace(path).syscalls[0].ret == 0  # the JSON lines are complete
    with TraceWriter(tmp_path / "plain.sst", h, records=False):
        pass
    assert not sidecar.records_path(tmp_path / "plain.sst").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files


def test_stale_or_damaged_record_sidecar_is_ignored(tmp_path: Path) -> None:
    path = pool_trace(tmp_path / "p.sst")
    side = sidecar.records_path(path)
    want = flat(path, False)
    good = side.read_bytes()
    # the sidecar names the trace's bytes, not its mtime
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert sidecar.load(path) is not None and flat(path, True) == want
    # another trace's sidecar
    other = varied_trace(tmp_path / "q.sst")  # (pool_trace would give the same bytes)
    side.write_bytes(sidecar.records_path(other).read_bytes())
    assert sidecar.load(path) is None and flat(path, True) == want
    # damaged: garbage, cut short, a chunk changed, another format version
    for bad in (b"\x00garbage", good[:len(good) // 2], good[:-3], good[:20] + b"\xff" * 40
                + good[60:], b""):
        side.write_bytes(bad)
        assert sidecar.load(path) is None
        assert flat(path, True) == want
    import marshal
    import struct
    first = marshal.dumps({"format": sidecar.FORMAT, "version": 99, "header": {}})
    n = struct.unpack_from("<Q", good)[0]
    side.write_bytes(struct.pack("<Q", len(first)) + first + good[8 + n:])
    assert sidecar.load(path) is None
    side.write_bytes(good)
    assert sidecar.load(path) is not None


@pytest.mark.parametrize("name", ["p.sst", "p.sst.gz"])
def test_raw_records_give_the_same_model_input_and_replays(tmp_path: Path, name: str) -> None:
    from dataclasses import replace as dc_replace
    path = pool_trace(tmp_path / name)
    trace = read_trace(path)
    fast = prepare(raw.read_records(path))
    assert raw.read_records(path) == raw.read_records(path, sidecar=False)
    for other in (prepare(trace), prepare(raw.read_records(path, sidecar=False))):
        for f in ("streams", "counted", "first_request", "mounts", "events", "modeled_ops",
                  "kept_syscalls", "preexisting", "revalidated", "compiled", "lstatted",
                  "user_ini_scanned", "start_s"):
            assert getattr(other, f) == getattr(fast, f), f
        assert vars(other.fs) == vars(fast.fs)
    assert fast.events > 100 and fast.kept_syscalls > 10 and fast.fs.links
    s = from_recorded(trace.header["settings"])
    for st in (s, dc_replace(s, realpath_cache_size=16 << 10, opcache_revalidate_freq=0),
               dc_replace(s, workers=2), dc_replace(s, opcache=False)):
        assert replay(fast, st) == replay(prepare(trace), st)
    rec = raw.read_records(path)
    assert whatif_input.measured_per_request(rec, path) == per_request(trace)
    v = varied_trace(tmp_path / "v.sst")  # counts records: the full summary
    assert whatif_input.measured_per_request(raw.read_records(v), v) == per_request(
        read_trace(v))


def test_streams_merge_in_time_then_index_then_pid_order() -> None:
    import heapq
    import random

    from statstorm.model.replay import Prepared, _merged
    from statstorm.model.replay_input import _seconds
    from statstorm.model.fs_view import FsView
    rng = random.Random(4)
    for _ in range(200):
        streams = {}
        for pid in rng.sample(range(1, 50), rng.randint(1, 5)):
            ns = sorted(rng.choice([rng.randint(-5, 40), 7]) for _ in range(rng.randint(0, 30)))
            evs: list[Any] = [(1, 0, "stat", f"/p{pid}/{i}", False) for i in range(len(ns))]
            streams[pid] = (evs, [n // 10 for n in ns], ns)
        pids = sorted(streams)
        want = list(heapq.merge(*[[(n, i, pid, e, t) for i, (e, t, n) in
                                   enumerate(zip(*streams[pid]))] for pid in pids]))
        prep = Prepared(FsView(), streams, [], {}, [])
        wids, evs, times, ns = _merged(prep, pids)
        assert list(zip(ns, wids, evs, times)) == [(n, p, e, t) for n, _, p, e, t in want]
        for stream in streams.values():
            epoch = rng.randint(0, 3 * 10**9)
            assert _seconds(stream[2], epoch) == [(epoch + max(n, 0)) // 10**9
                                                  for n in stream[2]]
    ns = [-3, 0, 1, 10**9 - 7, 10**9 - 6, 2 * 10**9, 5 * 10**9 + 1]
    assert _seconds(ns, 7) == [(7 + max(n, 0)) // 10**9 for n in ns]


def test_the_tracers_close_builds_the_input_cache(tmp_path: Path) -> None:
    path = pool_trace(tmp_path / "p.sst.gz", build=True)
    cached, read = whatif_cmd.load_input(path)
    assert read is None  # the first whatif starts from what the tracer built
    trace = read_trace(path)
    fresh = prepare(trace)
    assert cached.prep.streams == fresh.streams and cached.measured == per_request(trace)
    s = from_recorded(trace.header["settings"])
    assert replay(cached.prep, s) == replay(fresh, s)
    # nothing to replay: no cache
    h = new_header("bpftrace", created="2026-01-01T00:00:00+00:00", host="h", targets={},
                   settings={}, mounts=[])
    with TraceWriter(tmp_path / "n.sst", h) as w:
        w.syscall(Syscall(1, 7, "stat", "stat", "/x", 0, 5, 0, -1, 0, "other"))
    assert not whatif_input.build(tmp_path / "n.sst")
    assert not whatif_input.cache_path(tmp_path / "n.sst").exists()


def test_sidecars_are_trusted_when_ours_or_roots_alone() -> None:
    from statstorm.results.common import trusted

    def st(uid: int, mode: int) -> os.stat_result:
        return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))
    me = os.getuid()
    assert trusted(st(me, 0o100666))
    assert trusted(st(0, 0o100644))
    if me != 0:  # root's, when someone else could have written it
        assert not trusted(st(0, 0o100664)) and not trusted(st(0, 0o100646))
    assert not trusted(st(12345 if me != 12345 else 12346, 0o100600))


def test_file_system_view_from_calls_quick_and_plain_agree(tmp_path: Path) -> None:
    from statstorm.model import replay_fs
    from statstorm.model import replay_input as rp
    from statstorm.model.fs_view import FsView
    path = pool_trace(tmp_path / "p.sst")
    for t in (raw.read_records(path), raw.of_trace(small_trace_read(tmp_path))):
        quick, plain = FsView(), FsView()
        quick_enoent: set[str] = set()
        plain_enoent: set[str] = set()
        assert (replay_fs._observe_calls(quick, t, quick_enoent)
                == replay_fs._observe_each_call(plain, t, plain_enoent))
        assert quick_enoent == plain_enoent
        assert quick.types == plain.types and list(quick.types) == list(plain.types)
        quick.finish()
        plain.finish()
        assert vars(quick) == vars(plain)
    fs = rp.build_fs(read_trace(path))
    assert fs.changing["/srv/app/flip.lock"][0][1] is False and len(
        fs.changing["/srv/app/flip.lock"]) == 12
    # one path under two ids (not something TraceWriter writes): each call in turn
    t = raw.read_records(path)
    t.paths[max(t.paths) + 1] = t.paths[0]
    assert vars(replay_fs.from_records(t, [])) == vars(
        replay_fs.from_records(raw.read_records(path), []))


def small_trace_read(tmp_path: Path) -> Trace:
    return read_trace(small_trace(tmp_path / "small.sst"))

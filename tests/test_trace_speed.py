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
from statstorm.model import inputcache
from statstorm.model.phpsettings import from_recorded
from statstorm.model.replay import prepare, replay
from statstorm.model.tracestats import summarize
from statstorm.results import trace as tr
from statstorm.results.trace import (INTERNED_ARGS, CountRow, Operation, Request,
                                     RequestCounts, Syscall, Trace, TraceWriter, new_header,
                                     read_trace)
from test_whatif_model import small_trace


def reference_read(path: Path) -> Trace:
    """The plain reader: one json.loads and one record at a time (the test's oracle)."""
    with tr._open_text(path) as fh:
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
    monkeypatch.setattr(tr, "BATCH_BYTES", 200)  # many batches, cut anywhere
    got = read_trace(path)
    assert got == want and summarize(got) == summarize(want)
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
    assert trace is not None and inputcache.cache_path(path).is_file()
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
    inputcache.cache_path(path).write_bytes(b"\x00garbage")
    assert inputcache.load(path) is None
    assert whatif_cmd.load_input(path)[1] is not None
    assert inputcache.load(path) is not None


def test_whatif_with_and_without_the_cache_agree(tmp_path: Path) -> None:
    path = small_trace(tmp_path / "t.sst.gz")
    args = ["whatif", str(path), "--set", "realpath_cache_size=0", "--json",
            "--find-min", "realpath_cache_size"]
    plain = json.loads(run_cli(args + ["--no-cache"], tmp_path, check=True).stdout)
    assert not inputcache.cache_path(path).exists()
    first = json.loads(run_cli(args, tmp_path, check=True).stdout)
    assert inputcache.cache_path(path).is_file()
    cached = json.loads(run_cli(args, tmp_path, check=True).stdout)
    assert plain == first == cached
    with_trace: Any = whatif_cmd.run(whatif_cmd.WhatifOptions(path, profile="trace"))
    assert with_trace.profile_source


def test_cache_is_a_plain_sidecar_with_a_versioned_header(tmp_path: Path) -> None:
    import marshal
    path = small_trace(tmp_path / "t.sst")
    whatif_cmd.load_input(path)
    data = marshal.loads(inputcache.cache_path(path).read_bytes())
    assert data["format"] == "statstorm-whatif-input" and data["version"] == 1
    assert data["source"] == [path.stat().st_size, path.stat().st_mtime_ns]
    data["version"] = 2
    inputcache.cache_path(path).write_bytes(marshal.dumps(data))
    assert inputcache.load(path) is None

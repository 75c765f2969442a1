#!/usr/bin/env python3
"""Benchmark: how fast `statstorm whatif` replays a trace of one million logical operations.

Generates a php-fpm-shaped trace (8 workers, warm OPcache: most includes are key hits that
make no syscall but are still recorded; a Composer-style file_exists probe per class; a few
relative includes through include_path; a cold realpath cache in each worker's first
request), writes it as a real trace file, then times reading it, building the model input,
and replaying it under its own settings and under a proposed one. Prints operations/second
for each stage, the median of --repeat runs. No root, no PHP needed.

  python3 bench/whatif_speed.py                 # 1,000,000 operations
  python3 bench/whatif_speed.py --ops 200000 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from statstorm.model.phpsettings import from_recorded
from statstorm.model.replay import prepare, replay
from statstorm.results.trace import (Operation, Request, Syscall, TraceWriter, new_header,
                                     read_trace)

WORKERS = 8
CLASSES = 400  # files per request
ROOT = "/srv/app/vendor"


def generate(path: Path, ops: int) -> int:
    """Write a trace holding `ops` operations; returns the number written."""
    settings = {"sapi": "fpm-fcgi", "realpath_cache_size": "4096K", "realpath_cache_ttl": "120",
                "include_path": ".:/usr/share/php", "opcache.enable": "On",
                "opcache.validate_timestamps": "On", "opcache.revalidate_freq": "2",
                "pm.max_requests": "0"}
    h = new_header("bpftrace", created="2026-01-01T00:00:00+00:00", host="bench",
                   targets={"mode": "pool"}, settings=settings, mounts=[("/", "ext4")])
    files = [f"{ROOT}/pkg{i % 40}/src/Sub{i % 7}/Class{i}.php" for i in range(CLASSES)]
    n = oid = req = 0
    ts = 1000
    cold: set[int] = set()
    with TraceWriter(path, h) as w:
        while n < ops:
            pid = 100 + req % WORKERS
            start = ts
            for i, f in enumerate(files):
                if n >= ops:
                    break
                ts += 2000
                # an autoloader probe (a miss in the first directory, then the hit)
                w.syscall(Syscall(ts, pid, "access", "access", f + ".x", -2, 4000, req, oid, 0,
                                  "file_probe"))
                w.operation(Operation(oid, req, pid, ts - 100, ts + 100, "file_probe", -1,
                                      {"name": f + ".x", "func": "file_exists"}))
                oid += 1
                n += 1
                ts += 2000
                if pid not in cold:  # the worker's first request: a cold miss
                    w.syscall(Syscall(ts, pid, "lstat", "newfstatat", f, 0, 3000, req, oid + 1,
                                      0, "include_resolve"))
                    w.operation(Operation(oid + 1, req, pid, ts - 50, ts + 50,
                                          "include_resolve", oid,
                                          {"name": f, "cwd": "/srv/app", "include_path":
                                           ".:/usr/share/php", "candidates": [f]}))
                    w.syscall(Syscall(ts + 60, pid, "open", "openat", f, 5, 9000, req, oid, 0,
                                      "include"))
                    w.syscall(Syscall(ts + 70, pid, "fstat", "newfstatat", f, 0, 2000, req, oid,
                                      0, "include"))
                w.operation(Operation(oid, req, pid, ts - 100, ts + 100, "include", -1,
                                      {"name": f, "type": "include"}))
                oid += 2
                n += 1
            cold.add(pid)
            w.request(Request(req, pid, start, ts + 1000, "/srv/app/index.php", "/index.php"))
            req += 1
            ts += 10_000
    return n


def timed(fn: object, repeat: int) -> tuple[float, object]:
    times = []
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="statstorm-whatif-bench-") as tmp:
        path = Path(tmp) / "bench.sst"
        t0 = time.perf_counter()
        ops = generate(path, a.ops)
        gen_s = time.perf_counter() - t0
        size = path.stat().st_size
        read_s, trace = timed(lambda: read_trace(path), 1)
        prep_s, prep = timed(lambda: prepare(trace), 1)  # type: ignore[arg-type]
        s = from_recorded(trace.header["settings"])  # type: ignore[attr-defined]
        cur_s, cur = timed(lambda: replay(prep, s), a.repeat)  # type: ignore[arg-type]
        small = replace(s, realpath_cache_size=16 << 10, opcache_revalidate_freq=0)
        prop_s, prop = timed(lambda: replay(prep, small), a.repeat)  # type: ignore[arg-type]
    print(f"trace: {ops:,} operations, {len(trace.syscalls):,} syscalls, "  # type: ignore[attr-defined]
          f"{len(trace.requests):,} requests, {size / 1e6:.1f} MB "  # type: ignore[attr-defined]
          f"(generated in {gen_s:.1f} s)")
    print(f"{'stage':<34}{'seconds':>10}{'ops/s':>14}")
    for name, secs in (("read the trace file", read_s), ("build the model input", prep_s),
                       ("replay, recorded settings", cur_s),
                       ("replay, 16K cache + revalidate 0", prop_s)):
        print(f"{name:<34}{secs:>10.2f}{ops / secs:>14,.0f}")
    total = prep_s + cur_s
    print(f"{'model input + one replay':<34}{total:>10.2f}{ops / total:>14,.0f}")
    print(f"per request, recorded: {cur.per_request['total']:.1f} calls; "  # type: ignore[attr-defined]
          f"proposed: {prop.per_request['total']:.1f} calls")  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()

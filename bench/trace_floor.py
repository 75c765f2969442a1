#!/usr/bin/env python3
"""Benchmark: what one traced event costs on this kernel — the floor under any tracer mode.

Two PHP CLI loops, each run untraced and under `statstorm trace --cmd` (the compiled eBPF
tracer), the order alternating every round; each loop prints its own ns per iteration, so the
tracer's start-up, decoding and attribution do not count:
  probe    is_file() on one path: PHP's stat cache answers, so an iteration is one traced
           PHP function (php_stat): an entry uprobe and a return uprobe, two records, no
           syscall
  syscall  clearstatcache(); is_file() on one path: the same plus one newfstatat (its
           entry and exit tracepoints, one more record) and the clearstatcache probes
The difference per iteration is the tracer's cost per event pair. For the probe loop it also
measures the bare traps: the same two uprobes attached by bpftrace with a `count()` program
and nothing recorded (`bare`), and the entry uprobe alone (`entry`): what any uprobe-based
tracer pays before doing anything. MediaWiki enters the traced
PHP functions about 1,300 times and makes about 300 metadata syscalls per request (docs/
trace-overhead.md): with these figures that bounds what full-event tracing can cost it.
Run as root:  PYTHONPATH=src python3 bench/trace_floor.py [--iterations N] [--rounds R]
The machine-wide load lock (/tmp/statstorm-load.lock) is held for the whole measurement.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from statstorm.adapters.load.loadgen import LOAD_LOCK

LOOPS = {
    "probe": "for ($i = 0; $i < {n}; $i++) {{ is_file('/etc/hostname'); }}",
    "syscall": "for ($i = 0; $i < {n}; $i++) {{ clearstatcache(); is_file('/etc/hostname'); }}",
}


def script(kind: str, n: int) -> str:
    body = LOOPS[kind].format(n=n)
    return ("$t = hrtime(true); " + body
            + " fprintf(STDERR, \"NS_PER_ITER %.1f\\n\", (hrtime(true) - $t) / " + str(n) + ");")


def run(kind: str, n: int, traced: bool, workdir: Path) -> float:
    php = ["php", "-n", "-r", script(kind, n)]
    if traced:
        argv = [sys.executable, "-m", "statstorm", "trace", "--backend", "ebpf", "--cmd",
                " ".join(_quote(a) for a in php), "-o", str(workdir / "floor.sst.gz"),
                "--json"]
    else:
        argv = php
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    m = re.search(r"NS_PER_ITER ([\d.]+)", proc.stderr)
    if proc.returncode != 0 or not m:
        raise SystemExit(f"{' '.join(argv[:6])}…: failed ({proc.returncode}): "
                         f"{proc.stderr.strip()[-400:]}")
    return float(m.group(1))


def bare(n: int, retprobe: bool) -> float:
    """The probe loop with bpftrace counting php_stat's entries (and returns)."""
    php = os.path.realpath(shutil.which("php") or "php")
    prog = f"uprobe:{php}:php_stat {{ @n = count(); }}\n"
    if retprobe:
        prog += f"uretprobe:{php}:php_stat {{ @m = count(); }}\n"
    bt = subprocess.Popen(["bpftrace", "-e", prog], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True)
    try:
        assert bt.stdout is not None
        for line in bt.stdout:
            if line.startswith("Attaching"):
                break
        time.sleep(2)  # bpftrace prints "Attaching" just before it attaches
        proc = subprocess.run(["php", "-n", "-r", script("probe", n)], capture_output=True,
                              text=True, timeout=600)
    finally:
        bt.send_signal(signal.SIGINT)
        bt.communicate(timeout=60)
    m = re.search(r"NS_PER_ITER ([\d.]+)", proc.stderr)
    if not m:
        raise SystemExit(f"php failed under bpftrace: {proc.stderr.strip()[-400:]}")
    return float(m.group(1))


def _quote(a: str) -> str:
    return "'" + a.replace("'", "'\"'\"'") + "'"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if os.geteuid() != 0:
        ap.error("run as root (tracing needs it)")
    lock_fd = os.open(LOAD_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(lock_fd, fcntl.LOCK_EX)
    work = Path(tempfile.mkdtemp(prefix="statstorm-floor-"))
    try:
        for kind in LOOPS:
            plain, traced = [], []
            for i in range(a.rounds):
                for t in ((False, True) if i % 2 == 0 else (True, False)):
                    (traced if t else plain).append(run(kind, a.iterations, t, work))
            p, t = statistics.median(plain), statistics.median(traced)
            print(f"{kind:8} untraced {p:8.1f} ns/iter, traced {t:8.1f} ns/iter: "
                  f"+{t - p:.1f} ns per iteration "
                  f"(rounds: {', '.join(f'{x:.0f}' for x in plain)} | "
                  f"{', '.join(f'{x:.0f}' for x in traced)})")
            if kind == "probe" and shutil.which("bpftrace"):
                for label, ret in (("bare", True), ("entry", False)):
                    b = statistics.median(bare(a.iterations, ret) for _ in range(a.rounds))
                    print(f"{label:8} untraced {p:8.1f} ns/iter, counted {b:8.1f} ns/iter: "
                          f"+{b - p:.1f} ns per iteration (uprobe{'s' if ret else ''} only)")
    finally:
        for f in work.iterdir():
            f.unlink()
        work.rmdir()
        os.close(lock_fd)


if __name__ == "__main__":
    main()

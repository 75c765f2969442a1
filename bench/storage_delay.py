#!/usr/bin/env python3
"""Benchmark: how far a GlusterFS lab stands from its client, with `--storage-delay`.

MediaWiki labs on local disk and on GlusterFS with no delay, `200us` (a LAN) and `1ms` (storage
farther away), measured with fsbench, interleaved: `find` over the whole tree cold and warm
(seed 001's `time (find . > /dev/null)`, first and subsequent run), then PHP's warm metadata
calls (stat, failed lookup, open, readdir) on a sample of the files. Prints seed 001's table
shape — each storage's time and its ratio to local disk — and tears the labs down, also on
Ctrl-C or failure. The delay is per round trip to the brick: a call that makes one measures
the delay plus the machine's lateness ending a wait (model/storage_delay.py).

Run as root on a quiet machine, under the shared lock:
  flock /tmp/statstorm-load.lock python3 bench/storage_delay.py -o storage-delay.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from types import FrameType

from statstorm.adapters.storage import gluster
from statstorm.commands import fsbench as cmd
from statstorm.commands import lab as lab_cmd
from statstorm.errors import StatstormError
from statstorm.env import Env
from statstorm.model import storage_delay
from statstorm.results.fsbench import FsbenchResult

# (lab name, storage, delay in µs); the first is the local reference
LABS = (("sd-local", "local", 0), ("sd-gl0", "glusterfs", 0), ("sd-gl200", "glusterfs", 200),
        ("sd-gl1ms", "glusterfs", 1000))
# seed 001 (Aimeos, ~6,500 entries): find's time and its ratio to ext4, first and later runs
SEED = (("ext4", "2.722 s", "0.043 s", "", ""), ("NFS", "4.197 s", "0.490 s", "1.5x", "11x"),
        ("GlusterFS", "9.031 s", "4.769 s", "3.3x", "111x"))


def _fmt(us: float) -> str:
    return f"{us / 1e6:.3f} s" if us >= 1e5 else f"{us / 1e3:.2f} ms" if us >= 1e3 else f"{us:.1f} µs"


def table(find: FsbenchResult, calls: FsbenchResult) -> list[str]:
    names = [storage_delay.label(s, d) if s != "local" else "local disk" for _, s, d in LABS]
    out = [f"find over the MediaWiki tree ({find.workload[0].files} files, "
           f"{find.workload[0].dirs} dirs), p50 of {find.iterations} passes:",
           f"  {'storage':18} {'first (cold)':>14} {'later (warm)':>14} {'cold ratio':>11} "
           f"{'warm ratio':>11}"]
    ref = {s: find.cell("find", s, 0) for s in find.states}
    for i, name in enumerate(names):
        row = [name]
        for state in ("cold", "warm"):
            c = find.cell("find", state, i)
            row.append(_fmt(c.stats.p50_us) if c else "-")
        for state in ("cold", "warm"):
            c, r = find.cell("find", state, i), ref.get(state)
            row.append(f"{c.stats.p50_us / r.stats.p50_us:.1f}x" if c and r and i else "")
        out.append(f"  {row[0]:18} {row[1]:>14} {row[2]:>14} {row[3]:>11} {row[4]:>11}")
    warm = [(name, find.cell("find", "warm", i)) for i, name in enumerate(names)]
    local = warm[0][1]
    if local is not None and local.stats.p50_us:
        out.append("  warm find against local disk: " + ", ".join(
            f"{name} {c.stats.p50_us / local.stats.p50_us:.1f}x" for name, c in warm[1:] if c)
            + " (seed 001: NFS 11x, GlusterFS 111x)")
    out.append("  seed 001 (Aimeos, about 6,500 entries, a real network):")
    for name, cold, warm, rc, rw in SEED:
        out.append(f"  {name:18} {cold:>14} {warm:>14} {rc:>11} {rw:>11}")
    out.append("")
    out.append(f"PHP's warm metadata calls, p50 per call ({calls.max_files} files sampled; "
               "ratio: time per call / local disk's):")
    out.append(f"  {'op':9} " + " ".join(f"{n:>20}" for n in names))
    for op in calls.ops:
        cells = [calls.cell(op, "warm", i) for i in range(len(names))]
        out.append(f"  {op:9} " + " ".join(
            f"{(_fmt(c.stats.p50_us) + (f' {c.ratio_to_first:.0f}x' if c.ratio_to_first else '')) if c else '-':>20}"
            for c in cells))
    return out


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM as Ctrl-C: the labs still come down


def check(env: Env, a: argparse.Namespace) -> str:
    """What stops the bench before any lab starts ('' if nothing)."""
    if a.iterations < 1 or a.max_files < 1:
        return "--iterations and --max-files must be 1 or more"
    parent = a.output.parent if str(a.output.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        return f"-o {a.output}: {parent} is not a writable directory"
    if not env.is_root():
        return "run it as root (it starts labs): sudo flock /tmp/statstorm-load.lock …"
    taken = [name for name, _, _ in LABS if name in {s.name for s in lab_cmd.list_labs(env)}]
    if taken:
        return (f"lab(s) {', '.join(taken)} exist: take them down with `statstorm lab down "
                f"--name NAME` first")
    try:
        gluster.require_delay_translator()
    except StatstormError as exc:
        return str(exc)
    return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=3, help="fsbench passes per cell (p50)")
    ap.add_argument("--max-files", type=int, default=2000,
                    help="files sampled for the warm metadata calls")
    ap.add_argument("-o", "--output", type=Path, default=Path("storage-delay.json"),
                    help="fsbench result of the warm calls; find's beside it (.find.json)")
    ap.add_argument("--check-only", action="store_true",
                    help="check the arguments and exit (no lab, no load)")
    a = ap.parse_args()
    env = Env()
    problem = check(env, a)
    if problem:
        sys.exit(f"bench/storage_delay.py: {problem}")
    if a.check_only:
        print(f"labs: {', '.join(f'{n} ({storage_delay.label(s, d)})' for n, s, d in LABS)}; "
              f"output {a.output} and {a.output.with_suffix('.find.json')}")
        return
    signal.signal(signal.SIGTERM, _stop)
    up: list[str] = []
    try:
        for name, storage, delay in LABS:
            up.append(name)
            lab_cmd.up(env, lab_cmd.LabOptions(name=name, app="mediawiki", storage=storage,
                                               workers=1, storage_delay_us=delay))
        paths = tuple(lab_cmd.status(env, name).code_path for name, _, _ in LABS)
        find_out = a.output.with_suffix(".find.json")
        find = cmd.run(env, cmd.FsbenchOptions(paths=paths, ops=("find",), states=("cold", "warm"),
                                               iterations=a.iterations, output=find_out))
        calls = cmd.run(env, cmd.FsbenchOptions(paths=paths, ops=("stat", "negative", "open",
                                                                  "readdir"),
                                                states=("warm",), iterations=a.iterations,
                                                max_files=a.max_files, output=a.output))
        print("\n".join(table(find, calls)))
        print(json.dumps({"output": [str(find_out), str(a.output)]}))
    finally:
        for name in up:
            lab_cmd.down(env, name, quiet=True)


if __name__ == "__main__":
    main()

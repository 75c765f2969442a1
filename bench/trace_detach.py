#!/usr/bin/env python3
"""Benchmark: how long `statstorm trace -d D` takes past its D seconds, side by side.

A user who stops a trace (its duration ends, Ctrl-C) waits for the tracer to detach its
probes and for the trace file to be written; so does every trace of the demo, tune and the
test suite. One synthetic lab on local disk, a steady trickle of requests from a thread, and
in rotated order every round:
  full        `statstorm trace --lab L -d D -o F` (full events: raw syscall tracepoints,
              uprobe_multi links where the kernel has them)
  perf        the same with STATSTORM_BPF_UPROBE_MULTI=0 (uprobes as perf events, as on a
              kernel before 6.6)
  counts      `--counts` (each syscall's own tracepoints: bpf/trace.bpf.c says why)
  full-b      full with another build of the tracer (--loader-b DIR), when given
Printed per mode: the time from the tracer attached (trace's startup line) to the file
written and the process gone, less D — median, min and max over rounds — and the requests
the trace holds (nothing lost at the end: every request of the window).
Run as root:  PYTHONPATH=src python3 bench/trace_detach.py [--rounds 5] [--duration 10]
              [--loader-b DIR] [--json]
The machine-wide load lock (/tmp/statstorm-load.lock) is held for the whole measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from statstorm.adapters.load.loadgen import load_lock
from statstorm.commands import lab as lab_cmd
from statstorm.env import Env

ATTACHED = "Ctrl-C to stop."


def trickle(url: str, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                resp.read()
        except OSError:
            pass
        time.sleep(0.05)


def one(home: Path, lab: str, out: Path, duration: float, flags: list[str],
        environ: dict[str, str]) -> tuple[float, int]:
    """(seconds past the duration from attached to exit, requests in the trace)"""
    env = dict(os.environ, STATSTORM_HOME=str(home), **environ)
    argv = [sys.executable, "-m", "statstorm", "trace", "--lab", lab, "-d", f"{duration:g}",
            "-o", str(out), "--json", *flags]
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
        attached = None
        while proc.poll() is None and attached is None:
            err.seek(0)
            if ATTACHED in err.read():
                attached = time.monotonic()
            else:
                time.sleep(0.01)
        stdout, _ = proc.communicate(timeout=duration + 120)
        end = time.monotonic()
        if proc.returncode != 0 or attached is None:
            err.seek(0)
            raise SystemExit(f"trace_detach: {' '.join(argv)} failed: {err.read()[-400:]}")
    return end - attached - duration, int(json.loads(stdout)["requests"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--loader-b", help="another build of the tracer (its directory)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    modes: dict[str, tuple[list[str], dict[str, str]]] = {
        "full": ([], {}),
        "perf": ([], {"STATSTORM_BPF_UPROBE_MULTI": "0"}),
        "counts": (["--counts"], {}),
    }
    if a.loader_b:
        modes["full-b"] = ([], {"STATSTORM_BPF_DIR": a.loader_b})
    home = Path(tempfile.mkdtemp(prefix="statstorm-detach-", dir="/var/tmp"))
    home.chmod(0o755)
    os.environ["STATSTORM_HOME"] = str(home)
    env = Env(state_root=home)
    name = "detach"
    past: dict[str, list[float]] = {m: [] for m in modes}
    reqs: dict[str, list[int]] = {m: [] for m in modes}
    with load_lock(env):
        try:
            st = lab_cmd.up(env, lab_cmd.LabOptions(name=name, app="synthetic", storage="local",
                                                    workers=2))
            url = st.url + st.entry_path
            stop = threading.Event()
            t = threading.Thread(target=trickle, args=(url, stop), daemon=True)
            t.start()
            try:
                names = list(modes)
                for r in range(a.rounds):
                    for m in names[r % len(names):] + names[:r % len(names)]:
                        flags, extra = modes[m]
                        s, n = one(home, name, home / f"{m}-{r}.sst.gz", a.duration, flags,
                                   extra)
                        past[m].append(s)
                        reqs[m].append(n)
                        print(f"round {r + 1} {m:7s} {s:6.2f} s past -d, {n} requests",
                              file=sys.stderr)
            finally:
                stop.set()
                t.join()
        finally:
            lab_cmd.down(env, name, quiet=True)
            subprocess.run(["rm", "-rf", str(home)], check=False)
    result = {m: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v),
                  "requests": reqs[m]} for m, v in past.items()}
    if a.json:
        print(json.dumps(result, indent=2))
        return
    print(f"seconds from attached to the file written and the tracer gone, past -d "
          f"{a.duration:g} ({a.rounds} rounds):")
    for m, v in result.items():
        print(f"  {m:7s} median {v['median_s']:.2f}  min {v['min_s']:.2f}  "
              f"max {v['max_s']:.2f}  requests {v['requests']}")


if __name__ == "__main__":
    main()

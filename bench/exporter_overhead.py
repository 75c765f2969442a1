#!/usr/bin/env python3
"""Benchmark: what `statstorm exporter` costs a node, and what one scrape of it costs.

Goals (issue "Fleets: statstorm exporter for Prometheus"):
  (1) the exporter attached to the MediaWiki lab at saturation: >= 0.97x untraced throughput;
  (2) a scrape of a pool with 16 workers: < 50 ms and < 2,000 series.

(1) Starts a lab (MediaWiki on local disk by default), drives it at saturation with wrk
(-c 2 x workers), warms up, then runs interleaved rounds of two modes, the order rotating:
  none      wrk alone
  exporter  wrk while `statstorm exporter --lab NAME` runs with its defaults (status every
            30 s, check every 300 s; --exporter-args adds flags) and is scraped every
            --scrape-every seconds, as Prometheus would; wrk starts once the exporter's
            first status read and check are done (its start-up is not the steady state)
Per mode: req/s per round, the median, the ratio to `none`, and the CPU the exporter's
process and its bpftrace used during the wrk window.
(2) Starts a synthetic lab with 16 workers, the exporter on it with status every second,
sends requests to every worker, then times --scrapes scrapes of /metrics: median and max
milliseconds, the number of series (sample lines) and the bytes of one scrape, and what 100
such nodes send Prometheus per scrape interval.

Run as root on a quiet machine:  PYTHONPATH=src python3 bench/exporter_overhead.py [--json]
The machine-wide load lock (/tmp/statstorm-load.lock) is held for the whole measurement.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

LOAD_LOCK = Path("/tmp/statstorm-load.lock")
TICK = os.sysconf("SC_CLK_TCK")
GOAL_RATIO, GOAL_SCRAPE_MS, GOAL_SERIES = 0.97, 50.0, 2000
# Student's t, two-sided 95 %, by degrees of freedom (the paired rounds' ratio interval)
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
       10: 2.23, 11: 2.20, 12: 2.18, 13: 2.16, 14: 2.14, 15: 2.13, 19: 2.09, 24: 2.06}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cli(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, STATSTORM_HOME=str(home))
    proc = subprocess.run([sys.executable, "-m", "statstorm", *args], capture_output=True,
                          text=True, env=env)
    if check and proc.returncode != 0:
        raise SystemExit(f"statstorm {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def cpu_s(pid: int) -> float:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def fetch(url: str, timeout: float = 10) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return bytes(resp.read())


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Exporter:
    """`statstorm exporter` as its own process, as a user starts it."""

    def __init__(self, home: Path, lab: str, extra: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        env = dict(os.environ, STATSTORM_HOME=str(home))
        self.proc = subprocess.Popen([sys.executable, "-m", "statstorm", "exporter", "--lab", lab,
                                      "--listen", f"127.0.0.1:{self.port}", *extra, "--json"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env)

    def wait_ready(self, timeout: float = 120) -> None:
        """Until /metrics answers with check's last run (the start-up reads are done)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the exporter ended: {self.proc.communicate()[1]}")
            try:
                if b"statstorm_check_last_run_timestamp_seconds{" in fetch(self.url):
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise SystemExit("the exporter did not become ready")

    def cpu(self) -> float:
        return cpu_s(self.proc.pid) + sum(cpu_s(c) for c in children(self.proc.pid))

    def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=120)
        if self.proc.returncode != 0:
            raise SystemExit(f"the exporter failed: {err}")
        return dict(json.loads(out))


def wrk(url: str, conns: int, duration: float) -> float:
    out = subprocess.run(["wrk", "-t", "2", "-c", str(conns), "-d", f"{duration:g}s",
                          "--timeout", "10s", url], capture_output=True, text=True).stdout
    m = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    if not m:
        raise SystemExit(f"wrk printed no rate:\n{out}")
    if re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        raise SystemExit(f"wrk saw failed answers:\n{out}")
    return float(m.group(1))


def part_overhead(a: argparse.Namespace, home: Path) -> dict[str, Any]:
    name = f"bexp-{os.getpid()}"
    st = json.loads(cli(home, "lab", "up", "--name", name, "--app", a.app, "--workers",
                        str(a.workers), "--json").stdout)
    url = str(st["url"]) + str(st.get("entry_path") or "")
    conns = a.concurrency or 2 * a.workers
    rows: dict[str, list[float]] = {"none": [], "exporter": []}
    cpu: list[float] = []
    try:
        log(f"lab {name}: {url}; warming up {a.warmup:g} s")
        wrk(url, conns, a.warmup)
        for r in range(a.rounds):
            order = ["none", "exporter"] if r % 2 == 0 else ["exporter", "none"]
            for mode in order:
                if mode == "none":
                    rows[mode].append(wrk(url, conns, a.duration))
                else:
                    exp = Exporter(home, name, a.exporter_args.split())
                    try:
                        exp.wait_ready()
                        time.sleep(a.settle)  # the start-up reads' last effects die down
                        scraper = subprocess.Popen(
                            ["bash", "-c", f"while sleep {a.scrape_every}; do "
                             f"curl -s -o /dev/null {exp.url}; done"])
                        c0 = exp.cpu()
                        rows[mode].append(wrk(url, conns, a.duration))
                        cpu.append(exp.cpu() - c0)
                        scraper.terminate()
                        scraper.wait()
                    finally:
                        exp.stop()
                log(f"round {r + 1}/{a.rounds} {mode:<8} {rows[mode][-1]:8.1f} req/s")
    finally:
        cli(home, "lab", "down", "--name", name, check=False)
    none, withx = statistics.median(rows["none"]), statistics.median(rows["exporter"])
    # Paired: each round measured both modes back to back, so a round's ratio cancels the
    # drift the two share; the geometric mean of the ratios with a t interval (as matrix).
    logs = [math.log(b / x) for x, b in zip(rows["none"], rows["exporter"])]
    gm = math.exp(statistics.fmean(logs))
    half = (T95.get(len(logs) - 1, 2.0) * statistics.stdev(logs) / math.sqrt(len(logs))
            if len(logs) > 1 else math.nan)
    return {"app": a.app, "workers": a.workers, "concurrency": conns, "duration_s": a.duration,
            "rounds": a.rounds, "rps": rows, "median_none": none, "median_exporter": withx,
            "ratio": withx / none if none else None, "paired_ratio": gm,
            "paired_ci": [math.exp(math.log(gm) - half), math.exp(math.log(gm) + half)],
            "exporter_cpu_s_per_round": statistics.median(cpu) if cpu else None,
            "exporter_args": a.exporter_args}


def part_scrape(a: argparse.Namespace, home: Path) -> dict[str, Any]:
    name = f"bscr-{os.getpid()}"
    st = json.loads(cli(home, "lab", "up", "--name", name, "--app", "synthetic", "--workers",
                        "16", "--json").stdout)
    url = str(st["url"]) + str(st.get("entry_path") or "")
    try:
        exp = Exporter(home, name, ["--status-every", "1"])
        try:
            exp.wait_ready()
            wrk(url, 32, 3)  # every worker serves: every metric has its values
            time.sleep(2)
            times, sizes, series = [], [], []
            for _ in range(a.scrapes):
                t0 = time.perf_counter()
                body = fetch(exp.url)
                times.append(1000 * (time.perf_counter() - t0))
                sizes.append(len(body))
                series.append(sum(1 for line in body.decode().splitlines()
                                  if line and not line.startswith("#")))
        finally:
            exp.stop()
    finally:
        cli(home, "lab", "down", "--name", name, check=False)
    return {"workers": 16, "scrapes": a.scrapes, "ms_median": statistics.median(times),
            "ms_max": max(times), "series": max(series), "bytes": max(sizes),
            "fleet_100_series": 100 * max(series), "fleet_100_bytes": 100 * max(sizes)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="overhead,scrape")
    ap.add_argument("--app", default="mediawiki")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("-c", "--concurrency", type=int, default=0, help="[default: 2 x workers]")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("-d", "--duration", type=float, default=10.0, help="seconds of wrk per run")
    ap.add_argument("--settle", type=float, default=3.0,
                    help="seconds between the exporter's start-up reads and wrk")
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--scrape-every", type=float, default=1.0,
                    help="seconds between scrapes while the exporter is measured")
    ap.add_argument("--exporter-args", default="", help="more flags for the exporter")
    ap.add_argument("--scrapes", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (labs and eBPF)")
    home = Path(tempfile.mkdtemp(prefix="statstorm-bench-", dir="/var/tmp"))
    os.chmod(home, 0o755)
    lock = open(LOAD_LOCK, "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    parts = set(a.only.split(","))
    out: dict[str, Any] = {}
    try:
        if "overhead" in parts:
            out["overhead"] = part_overhead(a, home)
        if "scrape" in parts:
            out["scrape"] = part_scrape(a, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)  # the labs are down: their state goes too
    if a.json:
        print(json.dumps(out, indent=2))
        return
    if "overhead" in out:
        o = out["overhead"]
        print(f"(1) {o['app']} at saturation ({o['workers']} workers, wrk -c {o['concurrency']}, "
              f"{o['rounds']} rotated rounds of {o['duration_s']:g} s)")
        for mode in ("none", "exporter"):
            print(f"    {mode:<9} " + " ".join(f"{v:7.1f}" for v in o["rps"][mode])
                  + f"   median {o[f'median_{mode}']:.1f} req/s")
        lo, hi = o["paired_ci"]
        print(f"    exporter / none: ratio of medians {o['ratio']:.3f}x; paired per round "
              f"{o['paired_ratio']:.3f}x [{lo:.3f} – {hi:.3f}] (goal >= {GOAL_RATIO}x: "
              f"{'met' if o['paired_ratio'] >= GOAL_RATIO else 'MISSED'}); exporter CPU "
              f"{o['exporter_cpu_s_per_round']:.2f} s per {o['duration_s']:g}-s round")
    if "scrape" in out:
        s = out["scrape"]
        print(f"(2) scrape of a pool with 16 workers: median {s['ms_median']:.1f} ms, max "
              f"{s['ms_max']:.1f} ms (goal < {GOAL_SCRAPE_MS:g}: "
              f"{'met' if s['ms_max'] < GOAL_SCRAPE_MS else 'MISSED'}); {s['series']} series "
              f"(goal < {GOAL_SERIES}: {'met' if s['series'] < GOAL_SERIES else 'MISSED'}), "
              f"{s['bytes']:,} bytes; 100 such nodes: {s['fleet_100_series']:,} series, "
              f"{s['fleet_100_bytes'] / 1e6:.1f} MB per scrape interval")


if __name__ == "__main__":
    main()

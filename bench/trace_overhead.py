#!/usr/bin/env python3
"""Benchmark: the throughput cost of `statstorm trace` (every backend) at saturation.

Starts a lab (MediaWiki on local disk by default, like `statstorm lab up`), drives its pool
at saturation with wrk (`-c` = 2 x workers, or --concurrency), warms up, then runs
interleaved rounds of these modes, the order rotating every round:
  none      wrk alone
  counts    wrk while `statstorm trace --lab NAME --backend ebpf --counts -d D+margin --json`
            runs (the compiled tracer, counted in the kernel, one record per request)
  bcounts   the same with `--backend bpftrace` (bpftrace's counting program)
  ebpf      `--backend ebpf`: the compiled tracer, every call and PHP operation recorded
  sampled   the same with `--sample 10`: one request in 10 recorded, the others counted
  sparse    the same with `--sample 1000000`: after its first window (about a second of one
            worker's requests) every request is counted, none recorded: what the compiled
            tracer's syscall counting costs alone, under what sampling adds to it
  bpftrace  `--backend bpftrace`: the same events through bpftrace's text output
  strace    `--backend strace`
  perf      `perf trace -e <the same syscalls> -p <workers> -o FILE` (the anchor users pick)
  ebpf-b, sampled-b  ebpf and sampled with another build of the tracer (--loader-b DIR):
            two builds side by side in one run
The tracer runs as its own process, exactly as a user starts it; wrk starts once the tracer
has attached (its helper's perf events stop growing in number, or every worker is ptraced), and the
tracer's duration covers the whole wrk run. Per mode it prints req/s per round, the median,
the ratio to `none`, what the tracer captured (requests recorded or counted, syscalls per
recorded request, dropped events) and where the CPU went during the wrk window (PHP workers
user/sys, nginx, the tracer's Python process, its helper: statstorm-trace, bpftrace, strace
or perf; the rest: wrk and the kernel), and the ratios against the issues' goals.
Run as root:  PYTHONPATH=src python3 bench/trace_overhead.py [--modes none,ebpf,...] [--json]
Rounds taken one after another carry the host's drift between them; bench/trace_paired.py
measures the compiled tracer's cost inside one window (half the pool traced), without it.
The machine-wide load lock (/tmp/statstorm-load.lock) is held for the whole measurement.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from statstorm.adapters.host import procs
from statstorm.adapters.tracing import libbpf_trace
from statstorm.adapters.load.loadgen import LOAD_LOCK, RunSpec
from statstorm.adapters.load.wrk import Wrk
from statstorm.commands import lab as lab_cmd
from statstorm.env import Env
from statstorm.model.stats import compare_paired

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_profile import CATEGORIES, Profile  # noqa: E402

MODES = ("none", "counts", "bcounts", "ebpf", "sampled", "sparse", "bpftrace", "strace", "perf",
         "ebpf-b", "sampled-b")
BACKEND = {"counts": "ebpf", "bcounts": "bpftrace", "ebpf": "ebpf", "sampled": "ebpf",
           "sparse": "ebpf", "bpftrace": "bpftrace", "strace": "strace", "perf": "perf"}
HELPER = {**BACKEND, "counts": "statstorm-trace", "ebpf": "statstorm-trace",
          "sampled": "statstorm-trace", "sparse": "statstorm-trace"}
SAMPLE = {"sampled": 10, "sparse": 1_000_000}  # one request in N recorded
# the modes run with the other build of the compiled tracer (--loader-b): the mode each repeats
OTHER_BUILD = {"ebpf-b": "ebpf", "sampled-b": "sampled"}
for _b, _m in OTHER_BUILD.items():
    BACKEND[_b], HELPER[_b] = BACKEND[_m], HELPER[_m]
    if _m in SAMPLE:
        SAMPLE[_b] = SAMPLE[_m]
PERF_SET = ("newfstatat,statx,stat,lstat,fstat,access,faccessat,faccessat2,open,openat,"
            "readlink,readlinkat,getcwd,chdir,fchdir,accept,accept4")
TICK = os.sysconf("SC_CLK_TCK")
GOAL_PCT = 5.0
# throughput with the tracer over without (the issues' goals)
GOAL_RATIO = {"counts": 1 - GOAL_PCT / 100, "ebpf": 0.90, "sampled": 0.97}
LABEL = {"counts": "eBPF --counts", "bcounts": "bpftrace --counts",
         "ebpf": "eBPF full events",
         "sampled": f"eBPF full events, 1 request in {SAMPLE['sampled']}",
         "sparse": "eBPF counted (compiled tracer, one window)", "bpftrace": "bpftrace full events",
         "strace": "strace", "perf": "perf trace",
         "ebpf-b": "eBPF full events, the other build (--loader-b)",
         "sampled-b": "eBPF 1 in 10, the other build (--loader-b)"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- CPU accounting from /proc ---------------------------------------------------------------
def cpu_ticks(pid: int) -> tuple[int, int]:
    """(utime, stime) of a process in clock ticks; (0, 0) once it is gone."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(f[11]), int(f[12])
    except (OSError, IndexError, ValueError):
        return 0, 0


def machine_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + f[4]
    total = sum(f[:8])
    return total - idle, total


class CpuWindow:
    """CPU seconds spent by groups of processes between start() and stop()."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self.groups = groups
        self.t0: dict[int, tuple[int, int]] = {}
        self.m0 = (0, 0)
        self.w0 = 0.0

    def start(self) -> None:
        self.t0 = {p: cpu_ticks(p) for pids in self.groups.values() for p in pids}
        self.m0 = machine_ticks()
        self.w0 = time.monotonic()

    def stop(self) -> dict[str, float]:
        wall = time.monotonic() - self.w0
        m1 = machine_ticks()
        out: dict[str, float] = {"wall_s": round(wall, 2)}
        known = 0.0
        for name, pids in self.groups.items():
            u = s = 0
            for p in pids:
                u1, s1 = cpu_ticks(p)
                u0, s0 = self.t0.get(p, (u1, s1))
                if (u1, s1) != (0, 0):
                    u += u1 - u0
                    s += s1 - s0
            if name == "php":
                out["php_usr_s"] = round(u / TICK, 2)
                out["php_sys_s"] = round(s / TICK, 2)
            else:
                out[f"{name}_s"] = round((u + s) / TICK, 2)
            known += (u + s) / TICK
        busy = (m1[0] - self.m0[0]) / TICK
        out["busy_s"] = round(busy, 2)
        out["rest_s"] = round(busy - known, 2)  # wrk, softirq, everything else
        ncpu = os.cpu_count() or 1
        out["busy_pct"] = round(100.0 * (m1[0] - self.m0[0]) / max(1, m1[1] - self.m0[1]), 1)
        out["idle_cpu_s"] = round(max(0.0, wall * ncpu - busy), 2)
        return out


# -- other load on the machine ---------------------------------------------------------------
NOISY = ("bpftrace", "strace", "perf", "wrk", "ab", "vegeta", "stress-ng", "fio")


def foreign_noise(own_parents: set[int]) -> list[str]:
    """Tracers and load generators that this bench did not start (an eBPF program attached
    by anyone slows every traced syscall on the machine; other load steals CPU)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            if comm not in NOISY:
                continue
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid not in own_parents:
            found.append(f"{comm}[{entry.name}]")
    return sorted(found)


def wait_quiet(timeout: float) -> list[str]:
    """Wait up to `timeout` s for foreign tracers / load generators to go; return those left."""
    deadline = time.monotonic() + timeout
    noise = foreign_noise({os.getpid()})
    if noise:
        log(f"waiting up to {timeout:.0f} s for other tracers/load to finish: {' '.join(noise)}")
    while noise and time.monotonic() < deadline:
        time.sleep(1)
        noise = foreign_noise({os.getpid()})
    return noise


class NoiseWatch(threading.Thread):
    """Samples foreign tracers / load generators every 0.5 s while a run is measured."""

    def __init__(self, own_parents: set[int]) -> None:
        super().__init__(daemon=True)
        self.own = own_parents
        self.seen: set[str] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.seen.update(foreign_noise(self.own))

    def stop(self) -> list[str]:
        self.done.set()
        self.join()
        return sorted(self.seen)


# -- the tracer ------------------------------------------------------------------------------
class Tracer:
    """`statstorm trace` run in the background, in its own session, ended by its PID only."""

    def __init__(self, mode: str, lab: str, duration_s: float, out: Path, workdir: Path,
                 workers: list[int], loader_b: Path | None = None,
                 pids: list[int] | None = None) -> None:
        """pids: trace these workers (`-p`) instead of the lab's whole pool."""
        self.mode = mode
        self.loader_b = loader_b if mode in OTHER_BUILD else None
        self.out = out
        self.stdout_path = workdir / f"{out.name}.stdout"
        self.stderr_path = workdir / f"{out.name}.stderr"
        where = [a for p in pids for a in ("-p", str(p))] if pids else ["--lab", lab]
        self.argv = [sys.executable, "-m", "statstorm", "trace", *where,
                     "--backend", BACKEND[mode], "-d", f"{duration_s:g}", "-o", str(out),
                     "--json"] + (["--counts"] if mode in ("counts", "bcounts") else []) + (
                         ["--sample", str(SAMPLE[mode])] if mode in SAMPLE else [])
        if mode == "perf":  # the anchor: `perf trace` of the same calls, to a file
            self.argv = ["timeout", "-s", "INT", f"{duration_s:g}", "perf", "trace",
                         "-e", PERF_SET, "-p", ",".join(map(str, workers)),
                         "-o", str(out.with_suffix(".perf.txt"))]
        self.proc: subprocess.Popen[bytes] | None = None
        self.helper = 0  # the bpftrace / strace child
        self.rusage: Any = None
        self.rc: int | None = None
        self.started = 0.0
        self.attach_s = 0.0
        self.perf_events = -1  # the helper's perf events at the last look (attach check)

    def start(self) -> None:
        with open(self.stdout_path, "wb") as o, open(self.stderr_path, "wb") as e:
            env = dict(os.environ)
            if self.loader_b is not None:
                env[libbpf_trace.OTHER_BUILD_ENV] = str(self.loader_b)
            self.proc = subprocess.Popen(self.argv, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                         start_new_session=True, env=env)
        self.started = time.monotonic()

    def _find_helper(self) -> int:
        assert self.proc is not None
        if self.mode == "perf":
            kids = procs.children(self.proc.pid)
            return kids[0] if kids else 0
        for kid in procs.children(self.proc.pid):
            try:
                comm = Path(f"/proc/{kid}/comm").read_text().strip()
            except OSError:
                continue
            if comm == HELPER[self.mode]:
                return kid
        return 0

    def _attached(self, workers: list[int]) -> bool:
        if BACKEND[self.mode] != "strace":
            # The eBPF tracers and perf hold one perf event per probe once attached: attached
            # when there are some and their number has stopped growing.
            try:
                fds = os.listdir(f"/proc/{self.helper}/fd")
            except OSError:
                return False
            n = 0
            for fd in fds:
                try:
                    if "perf_event" in os.readlink(f"/proc/{self.helper}/fd/{fd}"):
                        n += 1
                except OSError:
                    pass
            settled = n > 0 and n == self.perf_events
            self.perf_events = n
            return settled
        for w in workers:  # strace: every worker is ptraced by it
            try:
                status = Path(f"/proc/{w}/status").read_text()
            except OSError:
                continue
            tracer = next((ln.split()[1] for ln in status.splitlines()
                           if ln.startswith("TracerPid:")), "0")
            if int(tracer) != self.helper:
                return False
        return True

    def wait_attached(self, workers: list[int], timeout: float, settle: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the tracer exited early (status {self.proc.returncode}): "
                                   + self.stderr_path.read_text(errors="replace").strip()[-400:])
            if not self.helper:
                self.helper = self._find_helper()
            if self.helper and self._attached(workers):
                self.attach_s = time.monotonic() - self.started
                time.sleep(settle)
                return
            time.sleep(0.1)
        raise RuntimeError(f"the tracer did not attach within {timeout:.0f} s")

    def finish(self, timeout: float) -> dict[str, Any]:
        """Wait for the tracer to stop on its own; return its --json summary."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status, ru = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                self.rusage = ru
                self.rc = os.waitstatus_to_exitcode(status)
                self.proc.returncode = self.rc
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"the tracer did not stop within {timeout:.0f} s")
        if self.mode == "perf":  # timeout's SIGINT ends perf trace (status 124)
            self.out.with_suffix(".perf.txt").unlink(missing_ok=True)
            return {}
        if self.rc != 0:
            raise RuntimeError(f"the tracer failed (status {self.rc}): "
                               + self.stderr_path.read_text(errors="replace").strip()[-400:])
        summary: dict[str, Any] = json.loads(self.stdout_path.read_text())
        return summary

    def warnings(self) -> list[str]:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return []
        # The CLI wraps long warnings over several lines: rejoin each one.
        return [" ".join(("warning: " + w).split())
                for w in re.split(r"(?m)^warning: ", text)[1:]]

    def kill(self) -> None:
        """End the tracer (SIGINT: it writes its file and stops its helper), then the helper,
        each by its PID; SIGKILL what outlives the grace period."""
        if self.proc is not None and self.proc.returncode is None:
            if not self.helper:
                self.helper = self._find_helper()
            procs.terminate(self.proc.pid, timeout=20, sig=signal.SIGINT)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.helper:
            procs.terminate(self.helper, timeout=5)


# -- one measured run ------------------------------------------------------------------------
def lab_groups(env: Env, name: str) -> tuple[list[int], dict[str, list[int]]]:
    st = lab_cmd.status(env, name)
    nginx = [st.nginx_pid, *procs.children(st.nginx_pid)] if st.nginx_pid else []
    return st.worker_pids, {"php": st.worker_pids, "nginx": nginx}


def run_wrk(env: Env, spec: RunSpec, workdir: Path) -> dict[str, Any]:
    r = Wrk().run(env, spec, workdir)
    e = r.errors
    return {"rps": r.rps, "requests": r.requests, "p50_ms": r.p50, "p99_ms": r.p99,
            "errors": e.connect + e.read_write + e.timeout + e.non_2xx + e.wrong_content}


def profiled(env: Env, spec: RunSpec, workdir: Path, prof: Profile | None, workers: list[int],
             res: dict[str, Any]) -> dict[str, Any]:
    """wrk, sampled by perf when profiling: the PHP workers' CPU per request, by category
    (res["profile"], microseconds)."""
    if prof is None:
        return run_wrk(env, spec, workdir)
    comm = Path(f"/proc/{workers[0]}/comm").read_text().strip()
    prof.start()
    try:
        w = run_wrk(env, spec, workdir)
    finally:
        prof.stop()
    res["profile"] = prof.split(comm, w["requests"])
    return w


def measure(env: Env, mode: str, a: argparse.Namespace, lab: str, spec: RunSpec,
            workdir: Path, tag: str, active: list[Tracer]) -> dict[str, Any]:
    noise = wait_quiet(a.quiet_wait)
    workers, groups = lab_groups(env, lab)
    res: dict[str, Any] = {"mode": mode}
    prof = Profile(workdir / f"{tag}-{mode}.perf.data") if a.profile else None
    if mode == "none":
        win = CpuWindow(groups)
        watch = NoiseWatch({os.getpid()})
        watch.start()
        win.start()
        res["wrk"] = profiled(env, spec, workdir, prof, workers, res)
        res["cpu"] = win.stop()
        res["noise"] = sorted(set(noise) | set(watch.stop()))
        return res
    tr = Tracer(mode, lab, a.duration + a.margin, workdir / f"{tag}-{mode}.sst.gz", workdir,
                workers, a.loader_b)
    active.append(tr)
    tr.start()
    tr.wait_attached(workers, timeout=120, settle=a.settle)
    win = CpuWindow({**groups, "tracer_py": [tr.proc.pid] if tr.proc else [],
                     "helper": [tr.helper]})
    watch = NoiseWatch({os.getpid(), tr.proc.pid if tr.proc else 0})
    watch.start()
    t_wrk = time.monotonic()
    win.start()
    res["wrk"] = profiled(env, spec, workdir, prof, workers, res)
    res["cpu"] = win.stop()
    res["noise"] = sorted(set(noise) | set(watch.stop()))
    covered = (t_wrk - tr.started - tr.attach_s) + a.duration < a.duration + a.margin
    summary = tr.finish(timeout=a.duration + a.margin + 180)
    active.remove(tr)
    t = summary.get("trace", {})
    ru = tr.rusage
    res["tracer"] = {
        "attach_s": round(tr.attach_s, 1),
        "covered_wrk": covered,
        # recorded requests, and those a sampled trace counted without recording
        "requests": summary.get("requests", 0) + (t.get("sampling") or {}).get(
            "counted_requests", 0),
        "syscalls": summary.get("totals", {}).get("total", 0),
        "per_request_total": summary.get("per_request", {}).get("total", 0.0),
        "dropped": t.get("dropped"),
        "stopped": t.get("stopped"),
        "wall_s": t.get("wall_s"),
        # The tracer process and the children it waited for (bpftrace / strace), whole life.
        "cpu_total_s": round(ru.ru_utime + ru.ru_stime, 2) if ru else None,
        "warnings": tr.warnings(),
    }
    if not a.keep_traces:
        tr.out.unlink(missing_ok=True)
    return res


# -- report ----------------------------------------------------------------------------------
def summarize(runs: list[dict[str, Any]], modes: list[str]) -> dict[str, Any]:
    by_mode: dict[str, Any] = {}
    for m in modes:
        rs = [r for r in runs if r["mode"] == m]
        rps = [r["wrk"]["rps"] for r in rs]
        by_mode[m] = {"rps": rps, "median_rps": statistics.median(rps) if rps else 0.0}
    base = by_mode.get("none", {}).get("median_rps", 0.0)
    rounds = max((r["round"] for r in runs), default=-1) + 1
    for m, d in by_mode.items():
        d["ratio"] = round(d["median_rps"] / base, 4) if base else None
        paired = []
        for i in range(rounds):
            x = [r["wrk"]["rps"] for r in runs if r["mode"] == m and r["round"] == i]
            b = [r["wrk"]["rps"] for r in runs if r["mode"] == "none" and r["round"] == i]
            if x and b and b[0]:
                paired.append(x[0] / b[0])
        d["paired_ratio_median"] = round(statistics.median(paired), 4) if paired else None
        # the geometric mean of the rounds' ratios with its 95 % t interval (model.stats)
        if m != "none" and len(paired) > 1:
            c = compare_paired([1.0] * len(paired), paired)
            d["paired_gm"] = [round(c.ratio, 4), round(c.ci_low, 4), round(c.ci_high, 4)]
    return by_mode


def print_table(out: Any, a: argparse.Namespace, by_mode: dict[str, Any],
                runs: list[dict[str, Any]]) -> None:
    def p(line: str = "") -> None:
        print(line, file=out)

    p(f"{'mode':7} {'req/s per round':>30} {'median':>9} {'ratio':>6} {'paired':>7} "
      f"{'req traced':>11} {'sysc/req':>8} {'dropped':>8} {'errors':>6}")
    for m, d in by_mode.items():
        rs = [r for r in runs if r["mode"] == m]
        per_round = " ".join(f"{x:9.1f}" for x in d["rps"])
        tr = [r["tracer"] for r in rs if r.get("tracer")]
        if tr:
            captured = sum(t["requests"] for t in tr)
            sent = sum(r["wrk"]["requests"] for r in rs)
            reqs = f"{captured / sent:.0%}" if sent else "-"
            spr = f"{statistics.median(t['per_request_total'] for t in tr):.1f}"
            drops = [t["dropped"] for t in tr if t["dropped"] is not None]
            dropped = f"{sum(drops):,}" if drops else "-"
        else:
            reqs, spr, dropped = "-", "-", "-"
        errs = sum(r["wrk"]["errors"] for r in rs)
        ratio = f"{d['ratio']:.3f}" if d["ratio"] is not None else "-"
        paired = f"{d['paired_ratio_median']:.3f}" if d["paired_ratio_median"] else "-"
        p(f"{m:7} {per_round:>30} {d['median_rps']:9.1f} {ratio:>6} {paired:>7} "
          f"{reqs:>11} {spr:>8} {dropped:>8} {errs:>6}")
    p()
    p("CPU seconds during each wrk window (median over rounds; "
      f"{os.cpu_count()} CPUs x {a.duration:g} s):")
    keys = ("php_usr_s", "php_sys_s", "nginx_s", "tracer_py_s", "helper_s", "rest_s",
            "idle_cpu_s")
    p(f"{'mode':7} " + " ".join(f"{k[:-2]:>10}" for k in keys) + f" {'php ms/req':>10}")
    for m in by_mode:
        rs = [r for r in runs if r["mode"] == m]
        cells = []
        for k in keys:
            v = [r["cpu"][k] for r in rs if k in r["cpu"]]
            cells.append(f"{statistics.median(v):10.2f}" if v else f"{'-':>10}")
        php = [(r["cpu"]["php_usr_s"] + r["cpu"]["php_sys_s"]) * 1000 / r["wrk"]["requests"]
               for r in rs if r["wrk"]["requests"]]
        p(f"{m:7} " + " ".join(cells) + f" {statistics.median(php):10.3f}")
    p()
    p("Paired per round, geometric mean of the rounds' ratios [95 % interval]:")
    for m, d in by_mode.items():
        if d.get("paired_gm"):
            gm, lo, hi = d["paired_gm"]
            goal = GOAL_RATIO.get(m)
            verdict = ""
            if goal is not None:
                shown = "met" if lo >= goal else "not shown" if hi >= goal else "missed"
                verdict = f"  (goal >= {goal:.2f}x: {shown})"
            p(f"  {m:8} {gm:.3f} [{lo:.3f} - {hi:.3f}]{verdict}")
    profiles = [r for r in runs if r.get("profile")]
    if profiles:
        p()
        p("PHP workers' CPU per request by where it went (perf cpu-clock samples, "
          "microseconds, median over rounds; +: above none):")
        p(f"{'mode':8} " + " ".join(f"{c[:12]:>12}" for c in CATEGORIES) + f" {'total':>9}")
        med: dict[str, dict[str, float]] = {}
        for m in by_mode:
            rs = [r["profile"] for r in profiles if r["mode"] == m]
            if rs:
                med[m] = {c: statistics.median(x[c] for x in rs) for c in CATEGORIES}
                med[m]["total"] = statistics.median(sum(x.values()) for x in rs)
        for m, v in med.items():
            p(f"{m:8} " + " ".join(f"{v[c]:12.0f}" for c in CATEGORIES) + f" {v['total']:9.0f}")
            if m != "none" and "none" in med:
                p(f"{'  +':8} " + " ".join(f"{v[c] - med['none'][c]:+12.0f}" for c in CATEGORIES)
                  + f" {v['total'] - med['none']['total']:+9.0f}")
    noisy = [f"round {r['round'] + 1} {r['mode']}" for r in runs if r.get("noise")]
    if noisy:
        p(f"\nWARNING: other tracers or load generators ran during: {', '.join(noisy)}")
    tr = [r["tracer"] for r in runs if r.get("tracer")]
    if tr:
        p()
        for m in by_mode:
            t = [r["tracer"] for r in runs if r["mode"] == m and r.get("tracer")]
            if t:
                p(f"{m}: tracer attached in {statistics.median(x['attach_s'] for x in t):.1f} s;"
                  f" tracer process CPU over its whole life (incl. {HELPER[m]}): "
                  + ", ".join(f"{x['cpu_total_s']:.1f} s" for x in t)
                  + "; syscalls captured: " + ", ".join(f"{x['syscalls']:,}" for x in t))
                for w in sorted({w for x in t for w in x["warnings"]}):
                    p(f"  {w}")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--app", choices=("synthetic", "mediawiki"), default="mediawiki",
                    help="the lab app (default: the lab's own default, MediaWiki)")
    ap.add_argument("--storage", choices=("local", "glusterfs"), default="local")
    ap.add_argument("--workers", type=int, default=4, help="php-fpm workers (pm=static)")
    ap.add_argument("-c", "--concurrency", type=int, default=0,
                    help="wrk connections [default: 2 x workers]")
    ap.add_argument("-d", "--duration", type=float, default=10.0, help="seconds per wrk run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of discarded load")
    ap.add_argument("--margin", type=float, default=4.0,
                    help="the tracer runs this much longer than wrk (covers the start delay)")
    ap.add_argument("--settle", type=float, default=0.5,
                    help="seconds between the tracer attaching and wrk starting")
    ap.add_argument("--modes", default=",".join(MODES),
                    help="comma-separated subset of " + ",".join(MODES))
    ap.add_argument("--quiet-wait", type=float, default=60.0,
                    help="before each run, wait this long for other tracers/load generators "
                         "to go (runs measured while they ran are flagged)")
    ap.add_argument("--keep-traces", action="store_true", help="keep the .sst.gz files")
    ap.add_argument("--home-parent", type=Path, default=Path("/var/tmp"),
                    help="where the bench's own STATSTORM_HOME is created")
    ap.add_argument("--profile", action="store_true",
                    help="sample every CPU with perf during each wrk run and split the PHP "
                         "workers' CPU per request by where it went (bench/cpu_profile.py)")
    ap.add_argument("--loader-b", type=Path, default=None,
                    help="a directory holding another build of statstorm-trace (bash "
                         "src/statstorm/bpf/build.sh DIR from another commit), run by the modes "
                         "ebpf-b and sampled-b side by side with this build's")
    ap.add_argument("--json", action="store_true", help="print all results as JSON on stdout")
    a = ap.parse_args()
    modes = [m for m in MODES if m in a.modes.split(",")]
    if "none" not in modes or len(modes) < 2:
        ap.error("--modes needs none and at least one tracer mode")
    if any(m in OTHER_BUILD for m in modes):
        if a.loader_b is None or not (a.loader_b / "statstorm-trace").is_file():
            ap.error("ebpf-b and sampled-b need --loader-b DIR with a built statstorm-trace")
        a.loader_b = a.loader_b.resolve()
    if os.geteuid() != 0:
        ap.error("run as root (lab up and tracing need it)")
    conc = a.concurrency or 2 * a.workers

    # SIGTERM unwinds like Ctrl-C so every `finally` runs.
    signal.signal(signal.SIGTERM, _interrupt)
    home = Path(tempfile.mkdtemp(prefix="statstorm-bench-", dir=a.home_parent))
    home.chmod(0o755)  # www-data serves the lab's code from below here
    os.environ["STATSTORM_HOME"] = str(home)  # also for the tracer subprocesses
    env = Env(state_root=home)
    name = f"tb{os.getpid() % 100000}"
    workdir = home / "bench"
    workdir.mkdir()
    active: list[Tracer] = []
    runs: list[dict[str, Any]] = []
    lab_started = False
    LOAD_LOCK.parent.mkdir(parents=True, exist_ok=True)
    lock_fd = os.open(LOAD_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for the load lock {LOAD_LOCK} (another load test is running)…")
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        lab_started = True
        st = lab_cmd.up(env, lab_cmd.LabOptions(name=name, app=a.app, storage=a.storage,
                                                workers=a.workers))
        url = st.url + st.entry_path
        spec = RunSpec(url, a.duration, timeout_s=10.0, concurrency=conc)
        log(f"lab {name}: {a.app} on {a.storage}, {a.workers} workers, {url}; "
            f"wrk -c {conc}, {a.duration:g} s x {a.rounds} rounds x {','.join(modes)}")
        if a.warmup > 0:
            w = run_wrk(env, RunSpec(url, a.warmup, timeout_s=10.0, concurrency=conc), workdir)
            log(f"warm-up: {w['rps']:.1f} req/s, {w['errors']} errors")
        for i in range(a.rounds):
            order = modes[i % len(modes):] + modes[:i % len(modes)]
            for m in order:
                r = measure(env, m, a, name, spec, workdir, f"r{i}", active)
                r["round"] = i
                runs.append(r)
                extra = ""
                if "tracer" in r:
                    t = r["tracer"]
                    extra = (f"; traced {t['requests']} requests, {t['per_request_total']:.1f} "
                             f"syscalls/req, dropped {t['dropped']}, attach {t['attach_s']} s")
                if r["noise"]:
                    extra += f"; NOISY (also running: {' '.join(r['noise'])})"
                log(f"round {i + 1} {m:6}: {r['wrk']['rps']:8.1f} req/s "
                    f"({r['wrk']['errors']} errors){extra}")
        by_mode = summarize(runs, modes)
        cost = {m: round((1 - d["ratio"]) * 100, 2) for m, d in by_mode.items()
                if m != "none" and d["ratio"] is not None}
        result = {"app": a.app, "storage": a.storage, "workers": a.workers,
                  "concurrency": conc, "duration_s": a.duration, "rounds": a.rounds,
                  "cpus": os.cpu_count(), "modes": by_mode, "runs": runs,
                  "cost_pct": cost, "goal_pct": GOAL_PCT}
        print_table(sys.stderr if a.json else sys.stdout, a, by_mode, runs)
        verdict = "; ".join(
            f"{LABEL[m]}: {by_mode[m]['ratio']:.3f}x untraced"
            + (f" (goal ≥ {GOAL_RATIO[m]:.2f}x: "
               f"{'met' if by_mode[m]['ratio'] >= GOAL_RATIO[m] else 'not met'})"
               if m in GOAL_RATIO else "")
            for m in cost)
        if a.json:
            log(verdict)
            print(json.dumps(result, indent=2))
        else:
            print(verdict)
    finally:
        for tr in list(active):
            tr.kill()
        if lab_started:
            lab_cmd.down(env, name, quiet=True)
        os.close(lock_fd)
        if a.keep_traces:
            log(f"traces kept in {workdir}")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()

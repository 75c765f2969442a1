"""`statstorm trace` on a lab's php-fpm pool: per-request counts, respawned workers, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli, wait_cacheable
from statstorm.results.trace import read_trace

pytestmark = pytest.mark.root
# The run's synthetic and MediaWiki labs (conftest.session_lab, shared with test_lab.py and
# test_whatif_real.py): tracing changes nothing in them, and the worker one test kills is
# replaced by php-fpm.
SYNTHETIC = ("--app", "synthetic", "--storage", "local", "--workers", "2")
MEDIAWIKI = ("--app", "mediawiki", "--storage", "local", "--workers", "2")


def get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=60) as resp:
        resp.read()
        return int(resp.status)


def send(url: str, n: int, delay: float = 0.0, pace: float = 0.05) -> threading.Thread:
    def go() -> None:
        time.sleep(delay)
        for _ in range(n):
            get(url)
            time.sleep(pace)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


class TraceProc(subprocess.Popen[str]):
    """`statstorm trace` running, its stderr in a file: read while it runs (wait_attached)
    and whole once it has ended."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.err_file = tempfile.NamedTemporaryFile("w", prefix="statstorm-trace-",
                                                    suffix=".err")
        super().__init__(argv, stdout=subprocess.PIPE, stderr=self.err_file, text=True,
                         env=env)

    def err_text(self) -> str:
        return Path(self.err_file.name).read_text(errors="replace")


def start_trace(home: Path, args: list[str], **environ: str) -> TraceProc:
    env = dict(os.environ, STATSTORM_HOME=str(home), **environ)
    return TraceProc([sys.executable, "-m", "statstorm", "trace", *args], env)


# trace's startup line: printed once the tracer is attached (the compiled tracer and
# bpftrace: every probe in place; strace: started)
ATTACHED = "Ctrl-C to stop."


def wait_attached(proc: TraceProc, seconds: float = 120.0) -> None:
    """Until the tracer is attached (its startup line, within a second or two here);
    requests sent before that are simply not seen."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if ATTACHED in proc.err_text():
            return
        time.sleep(0.1)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # statstorm then detaches what it attached
    out, _ = proc.communicate(timeout=120)
    raise AssertionError(f"the trace never attached: {out} {proc.err_text()}")


def finish(proc: TraceProc) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=300)
    err = proc.err_text()
    assert proc.returncode == 0, err
    return dict(json.loads(out))


def test_synthetic_lab_stable_counts_and_respawned_worker(session_lab, state_home: Path,
                                                         tmp_path: Path) -> None:
    st = session_lab(*SYNTHETIC)
    url = str(st["url"]) + str(st.get("entry_path") or "/")
    # OPcache does not cache files changed less than 2 s ago (file_update_protection): wait
    # until the app is older (at once on a lab made earlier), then warm every worker's caches.
    wait_cacheable(st["code_path"], st["docroot"])
    for _ in range(10):
        assert get(url) == 200
    out = tmp_path / "lab.sst.gz"
    proc = start_trace(state_home, ["--lab", str(st["name"]), "--requests", "30", "-d", "120",
                                    "-o", str(out), "--json"])
    wait_attached(proc)
    first = send(url, 10)
    first.join()
    # Recycle a worker: the master forks a new one, which the trace must follow.
    old = set(int(p) for p in st["worker_pids"])  # type: ignore[union-attr]
    victim = min(old)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = json.loads(run_cli(["lab", "status", "--name", str(st["name"]), "--json"],
                                    state_home, check=True).stdout)
        if len(set(status["worker_pids"]) - old) == 1:
            break
        time.sleep(0.3)
    new = set(status["worker_pids"]) - old
    assert len(new) == 1
    send(url, 40).join()
    s = finish(proc)
    assert s["requests"] >= 30
    assert s["trace"]["stopped"] == "requests"
    dist = s["per_request_dist"]["total"]
    assert dist["p50"] > 0
    tr = read_trace(out)
    by_pid: dict[int, int] = {}
    for r in tr.requests.values():
        if r.end_ns >= 0:
            by_pid[r.pid] = by_pid.get(r.pid, 0) + 1
            assert r.script.endswith("index.php")
    assert new & set(by_pid), (new, by_pid)  # the respawned worker's requests are in
    # Warm workers do the same work for every request of this deterministic app. Only two
    # things may add calls: OPcache revalidation (a stat per script once its window ends,
    # plus the scripts' path resolution in a worker whose realpath cache is still cold) and
    # the respawned worker's first request (cold realpath cache). Those are set aside.
    first_of_new = min((r.id for r in tr.requests.values() if r.pid in new), default=-1)
    revalidated = {c.req for c in tr.syscalls if c.kind == "opcache_revalidate"}
    totals = sorted(sum(1 for c in tr.syscalls if c.req == rid and c.call != "chdir")
                    for rid, r in tr.requests.items()
                    if r.end_ns >= 0 and rid != first_of_new and rid not in revalidated)
    assert len(totals) >= 20 and totals[0] > 0 and totals[0] == totals[-1], totals


def test_counts_mode_sees_what_full_tracing_sees(session_lab, state_home: Path,
                                                 tmp_path: Path) -> None:
    """Three tracers at once on the same requests: full events and `--counts` with the
    compiled tracer and with bpftrace agree exactly."""
    st = session_lab(*SYNTHETIC)
    url = str(st["url"]) + str(st.get("entry_path") or "/")
    wait_cacheable(st["code_path"], st["docroot"])
    for _ in range(6):
        assert get(url) == 200
    full = start_trace(state_home, ["--lab", str(st["name"]), "-d", "120", "-o",
                                    str(tmp_path / "full.sst.gz"), "--json"])
    counts = {b: start_trace(state_home, ["--lab", str(st["name"]), "--counts", "--backend", b,
                                          "-d", "120", "-o", str(tmp_path / f"{b}.sst.gz"),
                                          "--json"])
              for b in ("ebpf", "bpftrace")}
    # and one that stops itself after 10 requests
    bounded = start_trace(state_home, ["--lab", str(st["name"]), "--counts", "--requests", "10",
                                       "-d", "120", "-o", str(tmp_path / "ten.sst.gz"),
                                       "--json"])
    for p in (full, *counts.values(), bounded):
        wait_attached(p)
    time.sleep(2)
    send(url, 20).join()
    time.sleep(1)
    for p in (full, *counts.values()):
        p.send_signal(signal.SIGINT)
    a = finish(full)
    assert a["detail"] == "events" and a["requests"] == 20
    assert a["trace"]["dropped"] == 0
    for backend, proc in counts.items():
        b = finish(proc)
        assert b["detail"] == "counts" and b["source"] == backend
        assert b["requests"] == 20
        assert {k: a["totals"][k] for k in ("lstat", "stat", "fstat", "access", "open",
                                             "readlink", "getcwd", "total", "failed")
                } == b["totals"], backend
        assert a["per_request_dist"]["total"] == b["per_request_dist"]["total"], backend
        tr = read_trace(tmp_path / f"{backend}.sst.gz")
        assert len(tr.request_counts) == 20 and not tr.syscalls
        assert all(r.script.endswith("index.php") for r in tr.requests.values())
    ten = finish(bounded)
    # (not interrupted: it stopped itself, at the status line after the 10th request)
    assert ten["trace"]["stopped"] == "requests" and 10 <= ten["requests"] <= 20, ten["trace"]


def test_ctrl_c_writes_a_valid_trace(session_lab, state_home: Path, tmp_path: Path) -> None:
    st = session_lab(*SYNTHETIC)
    url = str(st["url"]) + str(st.get("entry_path") or "/")
    out = tmp_path / "int.sst.gz"
    proc = start_trace(state_home, ["--lab", str(st["name"]), "-d", "120", "-o", str(out),
                                    "--json"])
    wait_attached(proc)
    send(url, 5, pace=0).join()
    time.sleep(1)  # php-fpm ends a request (php_request_shutdown) after its answer is sent
    proc.send_signal(signal.SIGINT)
    s = finish(proc)
    assert s["trace"]["stopped"] == "interrupted"
    tr = read_trace(out)
    assert tr.trailer["stopped"] == "interrupted" and tr.syscalls
    # Nothing lost at the end: the last request is whole, with no fewer calls than the
    # others (the synthetic page costs the same each time once warm, but for OPcache's
    # revalidations)
    reqs = sorted(tr.requests.values(), key=lambda r: r.start_ns)
    assert s["requests"] == len(reqs) == 5 and all(r.end_ns >= 0 for r in reqs)
    calls = Counter(c.req for c in tr.syscalls if c.kind != "opcache_revalidate")
    assert calls[reqs[-1].id] >= min(calls[r.id] for r in reqs[:-1]) > 0, calls
    assert not list(tmp_path.glob(".int.sst.gz.*"))  # no temp file left behind
    # No bpftrace of ours is left running.
    assert "bpftrace" not in subprocess.run(["ps", "-o", "comm=", "--ppid", str(proc.pid)],
                                            capture_output=True, text=True).stdout


@pytest.mark.slow
def test_mediawiki_lab_per_request_counts(session_lab, state_home: Path,
                                         tmp_path: Path) -> None:
    st = session_lab(*MEDIAWIKI)
    url = str(st["url"]) + str(st.get("entry_path") or "/")
    wait_cacheable(st["code_path"], st["docroot"])
    for _ in range(6):
        assert get(url) == 200
    out = tmp_path / "mw.sst.gz"
    proc = start_trace(state_home, ["--lab", str(st["name"]), "--requests", "10", "-d", "120",
                                    "-o", str(out), "--json"])
    wait_attached(proc)
    send(url, 14).join()
    s = finish(proc)
    assert s["requests"] >= 10
    assert s["per_request_dist"]["total"]["p50"] > 20
    # Most page views cost exactly the same; some add OPcache revalidation or cache writes.
    tr = read_trace(out)
    totals = [sum(1 for c in tr.syscalls if c.req == rid and c.kind != "opcache_revalidate")
              for rid, r in tr.requests.items() if r.end_ns >= 0]
    mode = max(set(totals), key=totals.count)
    assert mode > 20 and totals.count(mode) >= 0.6 * len(totals), totals
    assert s["settings"].get("realpath_cache_size")
    assert "opcache.enable" in s["settings"]


def ops_of(path: Path, pid: int = 0) -> Counter[tuple[str, str, str]]:
    """A trace's PHP operations of its requests (of the process `pid` only, if given): kind,
    name and type, counted."""
    tr = read_trace(path)
    return Counter((o.kind, str(o.args.get("name", o.args.get("path", ""))),
                    str(o.args.get("type", ""))) for o in tr.operations.values()
                   if o.req >= 0 and pid in (0, o.pid))


# PHP functions the compiled tracer probes at their entry in every mode but --counts
PROBED = ("php_resolve_path", "compile_filename", "php_stat")


def breakpoints(pid: int) -> int:
    """How many of PROBED hold a uprobe's breakpoint (x86's int3) at their entry in this
    process's memory: a uprobe writes it into the processes it is attached to only. (The
    private copies of code pages a uprobe leaves behind are no sign: the kernel keeps them
    after some detaches and not after others.)"""
    exe = os.readlink(f"/proc/{pid}/exe")
    out = subprocess.run(["nm", "-D", "--defined-only", exe], capture_output=True, text=True,
                         check=True).stdout
    addrs = {f[2]: int(f[0], 16) for f in (line.split() for line in out.splitlines())
             if len(f) == 3 and f[2] in PROBED}
    assert set(addrs) == set(PROBED), addrs
    base = None
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        f = line.split()
        if len(f) > 5 and f[5] == exe and int(f[2], 16) == 0:
            base = int(f[0].split("-")[0], 16)  # PHP is a PIE: its first segment at 0
            break
    assert base is not None
    with open(f"/proc/{pid}/mem", "rb") as mem:
        found = 0
        for addr in addrs.values():
            mem.seek(base + addr)
            found += mem.read(1) == b"\xcc"
    return found


@pytest.mark.alone  # reads the breakpoints in the workers' memory: no other lane's trace then
def test_workers_given_by_pid_are_the_only_ones_probed(session_lab, state_home: Path,
                                                       tmp_path: Path) -> None:
    """`trace -p WORKER` puts PHP's function probes in that worker only (the compiled tracer
    attaches them per PID): the pool's other worker runs untouched, and the traced worker's
    requests carry the same operations as a trace of the whole pool gives them."""
    st = session_lab(*SYNTHETIC)
    url = str(st["url"]) + str(st.get("entry_path") or "/")
    w1, w2 = (int(p) for p in st["worker_pids"])  # type: ignore[attr-defined]
    wait_cacheable(st["code_path"], st["docroot"])
    for _ in range(6):
        assert get(url) == 200
    assert breakpoints(w1) == breakpoints(w2) == 0
    own = start_trace(state_home, ["-p", str(w1), "--backend", "ebpf", "-d", "120", "-o",
                                   str(tmp_path / "own.sst.gz"), "--json"])
    wait_attached(own)
    assert breakpoints(w1) == len(PROBED) and breakpoints(w2) == 0
    # the pool's trace with uprobes made as perf events, as on a kernel before 6.6 (the
    # other with uprobe_multi links where this kernel has them): both record the same
    pool = start_trace(state_home, ["--lab", str(st["name"]), "--backend", "ebpf", "-d", "120",
                                    "-o", str(tmp_path / "pool.sst.gz"), "--json"],
                       STATSTORM_BPF_UPROBE_MULTI="0")
    wait_attached(pool)
    assert breakpoints(w2) == len(PROBED)  # (a pool's trace probes every process of the binary)
    for t in [send(url, 12, pace=0.02), send(url, 12, pace=0.02)]:
        t.join()
    time.sleep(1)
    for p in (own, pool):
        p.send_signal(signal.SIGINT)
    a, b = finish(own), finish(pool)
    assert breakpoints(w1) == breakpoints(w2) == 0  # every probe detached
    assert b["requests"] == 24 and a["trace"]["dropped"] == b["trace"]["dropped"] == 0
    by_pid = Counter(r.pid for r in read_trace(tmp_path / "pool.sst.gz").requests.values())
    assert set(by_pid) == {w1, w2}
    assert a["requests"] == by_pid[w1]
    own_ops = ops_of(tmp_path / "own.sst.gz")
    assert own_ops == ops_of(tmp_path / "pool.sst.gz", w1)
    assert sum(n for (kind, _, _), n in own_ops.items() if kind == "include") >= by_pid[w1] * 20


def test_backends_agree_and_a_sampled_trace_scales_to_the_full_one(session_lab,
                                                                   state_home: Path,
                                                                   tmp_path: Path) -> None:
    """Three tracers on the same requests: the compiled tracer and bpftrace record the same
    calls; a trace sampling 1 request in 4 records some and counts the others, and adds up to
    the full trace exactly, its per-request mean within the error it states."""
    st = session_lab(*SYNTHETIC)
    url = str(st["url"]) + str(st.get("entry_path") or "/")
    wait_cacheable(st["code_path"], st["docroot"])
    for _ in range(6):
        assert get(url) == 200
    name = str(st["name"])
    runs = {
        "ebpf": start_trace(state_home, ["--lab", name, "--backend", "ebpf", "-d", "120", "-o",
                                         str(tmp_path / "ebpf.sst.gz"), "--json"]),
        "bpftrace": start_trace(state_home, ["--lab", name, "--backend", "bpftrace", "-d",
                                             "120", "-o", str(tmp_path / "bt.sst.gz"),
                                             "--json"]),
        "sampled": start_trace(state_home, ["--lab", name, "--sample", "4", "-d", "120", "-o",
                                            str(tmp_path / "sampled.sst.gz"), "--json"]),
    }
    for p in runs.values():
        wait_attached(p)
    time.sleep(2)
    send(url, 40).join()
    time.sleep(1)
    for p in runs.values():
        p.send_signal(signal.SIGINT)
    full, bt, sampled = (finish(runs[k]) for k in ("ebpf", "bpftrace", "sampled"))
    keys = ("lstat", "stat", "fstat", "access", "open", "readlink", "getcwd", "total", "failed")
    assert full["source"] == "ebpf" and bt["source"] == "bpftrace"
    assert full["requests"] == bt["requests"] == 40
    assert full["trace"]["dropped"] == bt["trace"]["dropped"] == 0
    assert {k: full["totals"][k] for k in keys} == {k: bt["totals"][k] for k in keys}
    assert full["per_request_dist"]["total"] == bt["per_request_dist"]["total"]
    assert full["by_operation"] == bt["by_operation"]
    # The same PHP operations, includes too: the compiled tracer reads the includes that open
    # nothing (OPcache's cached scripts) from PHP's included-files table, bpftrace probes them.
    ops = {k: ops_of(tmp_path / f) for k, f in (("ebpf", "ebpf.sst.gz"), ("bt", "bt.sst.gz"))}
    assert ops["ebpf"] == ops["bt"]
    assert sum(n for (kind, _, _), n in ops["ebpf"].items() if kind == "include") >= 40 * 20

    s = sampled["trace"]["sampling"]
    assert s["one_in"] == 4 and sampled["trace"]["dropped"] == 0
    # Every request accounted for: recorded (whole requests of the armed worker, one worker
    # at a time) or counted.
    assert s["recorded_requests"] == sampled["requests"]
    assert s["recorded_requests"] + s["counted_requests"] == 40
    assert 1 <= s["recorded_requests"] < 40 and s["windows"] >= 1
    assert s["scale"] == round(40 / s["recorded_requests"], 4)
    # The counted requests did not trap into the PHP function probes, which follow the armed
    # worker only: attached for every worker, each counted request would run them about 260
    # times (a synthetic request's include, probe and realpath calls).
    assert s["probe_hits_unrecorded"] < s["counted_requests"] * 50, s
    # Recorded plus counted calls are the full trace's calls, type by type.
    for call in ("lstat", "stat", "fstat", "access", "open"):
        counted = s["counted_calls"].get(call, {}).get("calls", 0)
        assert sampled["totals"][call] + counted == full["totals"][call], call
    # The recorded requests' mean lies within the stated error of all requests' mean.
    err = s["calls_per_request_error"]
    assert abs(sampled["per_request"]["total"] - full["per_request"]["total"]) <= \
        max(2 * err, 0.5)
    # whatif replays the recorded requests and says what sampling leaves out; the text
    # summary states the sample.
    w = run_cli(["whatif", str(tmp_path / "sampled.sst.gz"), "--set", "realpath_cache_size=0",
                 "--json"], state_home, check=True)
    assert any("about 1 request in 4" in n for n in json.loads(w.stdout)["notes"])
    shown = run_cli(["trace", "show", str(tmp_path / "sampled.sst.gz")], state_home, check=True)
    assert "about 1 request in 4 recorded" in shown.stdout

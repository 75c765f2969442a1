"""`statstorm exporter`: a real Prometheus scraping it on a real lab, and its parts alone."""

from __future__ import annotations

import json
import os
import re
import signal
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT, invoke, run_cli, unique_name, wait_cacheable
from test_trace_lab import finish, start_trace, wait_attached
from statstorm.adapters.tracing import bpftrace
from statstorm.adapters.tracing.count_lines import (Counted, CountLine, Exit, Fork, ScriptStart,
                                                    Uri, from_fields, from_record)
from statstorm.adapters.host.metrics_server import Snapshot, families
from statstorm.commands import exporter as cmd
from statstorm.errors import UsageError
from statstorm.model import exporter_metrics as em
from statstorm.model.checkfacts import OpcacheStatus

pytestmark = pytest.mark.alone  # the lane it runs in (tests/README.md); root per test

REPO = Path(__file__).resolve().parent.parent
DASHBOARD = REPO / "contrib/grafana/statstorm.json"


# -- the parts -----------------------------------------------------------------------------------
def test_the_catalogue_counts_the_tracers_call_types() -> None:
    assert em.CALLS == bpftrace.COUNT_CALLS


@pytest.mark.parametrize("text", ["9733", "localhost:9733", "127.0.0.1:0", "127.0.0.1:99999",
                                  "127.0.0.1:", ":9733", "[::1:9733"])
def test_a_bad_listen_address_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="--listen"):
        cmd.parse_listen(text)


def test_listen_addresses_parse() -> None:
    assert cmd.parse_listen("127.0.0.1:9733") == ("127.0.0.1", 9733)
    assert cmd.parse_listen("[::1]:9100") == ("::1", 9100)


def test_a_request_folds_into_counters_and_histograms() -> None:
    c = em.PoolCounters()
    c.add_request({"lstat": (10, 2, 5_000), "open": (3, 0, 1_000)}, request=True)
    c.add_request({"lstat": (4, 0, 1_000)}, request=False)  # a worker's start-up: no request
    assert c.requests == 1
    assert c.calls == {("lstat", "ok"): 12, ("lstat", "failed"): 2, ("open", "ok"): 3}
    assert c.seconds == pytest.approx({"lstat": 6e-6, "open": 1e-6})
    assert c.per_request_calls.n == 1 and c.per_request_calls.total == 13
    assert dict(c.per_request_calls.cumulative())["25.0"] == 1
    assert dict(c.per_request_calls.cumulative())["10.0"] == 0
    assert c.per_request_calls.cumulative()[-1] == ("+Inf", 1)


def _exposition(s: Snapshot) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    class One:
        def collect(self):  # type: ignore[no-untyped-def]
            return list(families(s))

    reg = CollectorRegistry(auto_describe=False)
    reg.register(One())  # type: ignore[arg-type]
    return generate_latest(reg).decode()


def sample_names(text: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]", text, re.M)}


def test_a_snapshot_renders_only_catalogue_names_with_bounded_labels() -> None:
    c = em.PoolCounters()
    c.add_request({"lstat": (10, 2, 5_000)}, request=True)
    st = em.PoolStatus(workers=4, realpath_size=4 << 20, realpath_used=(100, 300),
                       opcache=OpcacheStatus.from_json({"opcache_enabled": True,
                                "opcache_statistics": {"hits": 90, "misses": 10,
                                                       "num_cached_scripts": 5,
                                                       "oom_restarts": 0, "hash_restarts": 0,
                                                       "manual_restarts": 1},
                                "memory_usage": {"used_memory": 1, "free_memory": 2}}),
                       pss_kb=(1000, 3000), round_trips={("/mnt/code", "fuse.glusterfs"): 7},
                       findings=(("realpath-cache-small", "warning"),), check_time=1.0)
    text = _exposition(Snapshot({"www": c}, {"www": st}, 1.5, 1, "bpftrace-counts", "0.1.0"))
    names = sample_names(text)
    assert names <= em.exposed_names() | {n + "_created" for n in
                                         (m.name for m in em.METRICS)}
    assert 'statstorm_metadata_syscalls_total{call="lstat",pool="www",result="failed"} 2.0' in text
    assert 'statstorm_realpath_cache_used_bytes{pool="www",stat="max"} 300.0' in text
    assert 'statstorm_php_memory_pss_bytes{pool="www",stat="sum"} 4.096e+06' in text
    assert 'statstorm_opcache_restarts_total{pool="www"} 1.0' in text
    assert ('statstorm_check_findings{pool="www",rule="realpath-cache-small",severity="warning"}'
            ' 1.0') in text
    assert 'statstorm_storage_round_trips_total{fstype="fuse.glusterfs",mount="/mnt/code",' \
           'pool="www"} 7.0' in text
    assert 'statstorm_request_metadata_syscalls_bucket{le="+Inf",pool="www"} 1.0' in text
    for line in text.splitlines():  # no path and no PID as a label, except the mount
        if line.startswith("statstorm_") and "{" in line:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("{", 1)[1]))
            assert set(labels) <= {"pool", "call", "result", "mount", "fstype", "rule",
                                   "severity", "stat", "le", "version", "backend", "source"}


def test_the_exporters_own_queries_are_not_counted() -> None:
    class Env:
        def debug(self, msg: str) -> None: ...
    exp = cmd.Exporter(Env(), cmd.ExporterOptions())  # type: ignore[arg-type]
    exp.pid_pool = {100: "www", 1: "www"}
    zeros = (0,) * 16
    k = Counted(100, 5, 9, (3 << bpftrace.COUNT_SHIFT | 1000, *zeros[1:]))
    exp.on_event(ScriptStart(100, 5, b"/run/statstorm-check-ab12/query.php"))
    exp.on_event(k)
    assert exp.own_queries == 1 and "www" not in exp.counters
    exp.on_event(ScriptStart(100, 6, b"/srv/www/index.php"))
    exp.on_event(k)
    assert exp.counters["www"].requests == 1
    assert exp.counters["www"].calls == {("lstat", "ok"): 3}
    exp.on_event(Fork(1, 101))  # the master forks a worker: it is the pool's
    exp.on_event(ScriptStart(101, 7, b"/srv/www/index.php"))
    exp.on_event(Counted(101, 7, 9, zeros))
    assert exp.counters["www"].requests == 2
    exp.on_event(Exit(101))
    assert exp.counters["www"].worker_exits == 1


def test_the_compiled_tracers_records_read_as_the_counting_lines() -> None:
    """Records from the pipe, cut anywhere: only whole ones are handed out, each as the
    counting program's line."""
    import struct
    from statstorm.adapters.tracing import count_stream, libbpf_trace

    def rec(tag: str, pid: int, ts: int, body: bytes) -> bytes:
        return struct.pack("<HBBIQ", 16 + len(body), ord(tag), 0, pid, ts) + body

    counters = [3 << bpftrace.COUNT_SHIFT | 1000] + [0] * 15
    script = b"/srv/www/index.php"
    stream = (rec("U", 100, 5, struct.pack("<Q3q", 0, 0, 0, 0) + script)
              + rec("K", 100, 9, struct.pack("<Q16Q", 5, *counters))
              + rec("F", 1, 10, struct.pack("<Q", 101)) + rec("E", 101, 11, b""))
    lines: list[CountLine] = []
    cs = count_stream.CompiledCountStream([], lines.append)
    for cut in (7, 40, 150, len(stream)):
        cs._buf += stream[:cut]
        stream = stream[cut:]
        cs._hand_out()
        assert libbpf_trace.complete(cs._buf) == 0  # what is left is a cut record
    assert lines == [ScriptStart(100, 5, script), Counted(100, 5, 9, tuple(counters)),
                     Fork(1, 101), Exit(101)]
    # bpftrace's counting lines are read by the same reader into the same records
    assert [from_fields(f.split(b"\t")) for f in (
        b"U\t100\t5\t" + script, b"K\t100\t5\t9\t" + b"\t".join(b"%d" % c for c in counters),
        b"F\t1\t101", b"E\t101")] == lines
    assert from_fields([b"SYNC", b"0"]) is None and from_record(("S", 1, 2)) is None
    # bpftrace's stream hands out the same records from its framed lines
    got: list[CountLine] = []
    count_stream.CountStream([], got.append)._hand_out(
        [[b"U", b"100", b"5", script], [b"V", b"100", b"/"], [b"F", b"1", b"101"]])
    assert got == [ScriptStart(100, 5, script), Uri(100, b"/"), Fork(1, 101)]


def test_bad_usage_is_one_line() -> None:
    home = Path("/tmp")
    for args, needle in ((["--pool", "a", "--lab", "b"], "not both"),
                         (["--listen", "nowhere"], "--listen"),
                         (["--status-every", "0"], "--status-every")):
        proc = invoke(["exporter", *args], home)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and needle in proc.stderr
    with pytest.raises(UsageError, match="--backend"):
        cmd.validate(cmd.ExporterOptions(backend="perf"))


# -- with a real lab and a real Prometheus ------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


def wait_for(what: str, fn: Any, timeout: float = 60.0, every: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except (OSError, ValueError, KeyError, IndexError):
            pass
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


class Prometheus:
    """A real Prometheus server on loopback scraping one target every second."""

    def __init__(self, tmp: Path, target: str) -> None:
        self.port = free_port()
        conf = tmp / "prometheus.yml"
        conf.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                        "scrape_configs:\n  - job_name: statstorm\n    static_configs:\n"
                        f"      - targets: ['{target}']\n")
        self.log = open(tmp / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [shutil.which("prometheus") or "prometheus", f"--config.file={conf}",
             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--log.level=warn"], stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("Prometheus to be ready",
                 lambda: "Ready" in http_get(f"http://127.0.0.1:{self.port}/-/ready"))

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": expr}))
        data = json.loads(http_get(url))
        assert data["status"] == "success", data
        return list(data["data"]["result"])

    def value(self, expr: str) -> float:
        r = self.query(expr)
        if not r:
            raise KeyError(expr)
        return float(r[0]["value"][1])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def start_exporter(home: Path, args: list[str]) -> subprocess.Popen[str]:
    env = dict(os.environ, STATSTORM_HOME=str(home))
    return subprocess.Popen([sys.executable, "-m", "statstorm", "exporter", *args, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def stop_exporter(proc: subprocess.Popen[str]) -> dict[str, Any]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return dict(json.loads(out))


def our_tracers() -> set[int]:
    """bpftrace processes running a program of statstorm's (in a statstorm-trace- dir), and
    compiled tracers counting (statstorm-trace --counts 1)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                raw = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if (b"bpftrace" in raw and b"statstorm-trace-" in raw) or (
                    b"/statstorm-trace\0" in raw and b"\0--counts\0" in raw):
                found.add(int(entry.name))
    return found


def get(url: str) -> None:
    with urllib.request.urlopen(url, timeout=60) as resp:
        resp.read()
        assert resp.status == 200


def dashboard_names() -> set[str]:
    text = DASHBOARD.read_text()
    return set(re.findall(r"statstorm_[a-z0-9_]+", text))


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(ROOT and not shutil.which("prometheus"),
                    reason="prometheus not installed (scripts/setup.sh --dev installs it)")
@pytest.mark.parametrize("backend", ("ebpf", "bpftrace"))
def test_prometheus_sees_the_tracers_counts_check_findings_and_respawns(
        lab, state_home: Path, tmp_path: Path, backend: str) -> None:
    st = lab("--app", "synthetic", "--storage", "local", "--workers", "2")
    name, pool = str(st["name"]), str(st["pool"])
    url = str(st["url"]) + str(st.get("entry_path") or "/")
    # the new lab's files older than OPcache's file_update_protection first: the exporter's
    # one check (at its start) and `check` below then judge the same tree
    wait_cacheable(st["code_path"])
    for _ in range(6):  # both workers warm: every later request makes the same calls
        get(url)
    before = our_tracers()
    port = free_port()
    exp = start_exporter(state_home, ["--lab", name, "--listen", f"127.0.0.1:{port}",
                                      "--status-every", "600", "--check-every", "600",
                                      "--rescan-every", "1", "--backend", backend])
    prom = None
    try:
        metrics = wait_for("the exporter's /metrics",
                           lambda: http_get(f"http://127.0.0.1:{port}/metrics"))
        prom = Prometheus(tmp_path, f"127.0.0.1:{port}")
        sel = f'{{pool="{pool}"}}'
        # The first check ran at start; its FastCGI queries are the exporter's own: not counted.
        wait_for("check's findings", lambda: prom.query(f"statstorm_check_findings{sel}"))
        assert prom.value(f"statstorm_requests_total{sel}") == 0

        def by_call(result: str = "") -> dict[str, float]:
            match = f'pool="{pool}"' + (f',result="{result}"' if result else "")
            return {r["metric"]["call"]: float(r["value"][1]) for r in prom.query(
                f"sum by (call) (statstorm_metadata_syscalls_total{{{match}}})")}

        base, base_failed = by_call(), by_call("failed")

        # The same 20 requests, counted by the exporter and by `trace --counts` at once.
        trace = start_trace(state_home, ["--lab", name, "--counts", "-d", "120", "-o",
                                         str(tmp_path / "c.sst.gz"), "--json"])
        wait_attached(trace)
        for _ in range(20):
            get(url)
            time.sleep(0.05)
        time.sleep(1)
        trace.send_signal(signal.SIGINT)
        t = finish(trace)
        assert t["requests"] == 20
        wait_for("20 requests in Prometheus",
                 lambda: prom.value(f"statstorm_requests_total{sel}") == 20, timeout=30)
        time.sleep(2)  # a scrape after the last request's counts
        # Each call type rose by requests × the tracer's per-request mean (its total; a
        # request's calls vary a little as the workers' realpath caches fill).
        now, now_failed = by_call(), by_call("failed")
        calls = [c for c in em.CALLS if c in t["totals"]]
        assert {c: now.get(c, 0) - base.get(c, 0) for c in calls} == {
            c: t["totals"][c] for c in calls}
        for c in calls:
            assert t["totals"][c] == pytest.approx(20 * t["per_request"].get(c, 0), abs=0.05)
        assert sum(now_failed.get(c, 0) - base_failed.get(c, 0) for c in calls) == \
            t["totals"]["failed"]
        assert prom.value(f"statstorm_request_metadata_syscalls_count{sel}") == 20
        assert prom.value(f"statstorm_pool_up{sel}") == 1
        assert prom.value("statstorm_tracer_up") == 1
        assert prom.query(f'statstorm_exporter_info{{backend="{backend}-counts"}}')

        # check's findings, as `statstorm check` makes them
        chk = json.loads(run_cli(["check", "--lab", name, "--json"], state_home,
                                 check=True).stdout)
        expected = {(f["id"], f["severity"]) for f in chk["findings"]}
        got = {(r["metric"]["rule"], r["metric"]["severity"])
               for r in prom.query(f"statstorm_check_findings{sel}")}
        assert got == expected and got

        # A worker that dies is respawned by its master and followed.
        worker = int(st["worker_pids"][0])  # type: ignore[index]
        os.kill(worker, signal.SIGKILL)
        time.sleep(1)
        for _ in range(10):
            get(url)
        wait_for("the respawned worker's requests",
                 lambda: prom.value(f"statstorm_requests_total{sel}") == 30, timeout=30)
        assert prom.value(f"statstorm_worker_exits_total{sel}") == 1

        # What the dashboard asks for, the exporter serves.
        served = sample_names(http_get(f"http://127.0.0.1:{port}/metrics"))
        # (round trips: network storage only; status errors: only once a read fails)
        absent_here = {"statstorm_storage_round_trips_total", "statstorm_status_errors_total"}
        assert dashboard_names() - absent_here <= served
        assert served <= em.exposed_names() | {m.name + "_created" for m in em.METRICS}
        assert metrics  # the first scrape answered too
    finally:
        if prom is not None:
            prom.stop()
        summary = stop_exporter(exp)
    assert summary["stopped"] == "signal" and summary["own_queries"] >= 2
    assert our_tracers() <= before  # every probe detached, no bpftrace left


@pytest.mark.root
@pytest.mark.slow
def test_a_pool_that_starts_later_and_stops_is_followed(lab, state_home: Path) -> None:
    name = unique_name("exp")
    pool = f"statstorm-{name}"
    port = free_port()
    exp = start_exporter(state_home, ["--pool", pool, "--listen", f"127.0.0.1:{port}",
                                      "--rescan-every", "1", "--status-every", "1",
                                      "--check-every", "600"])
    try:
        wait_for("/metrics", lambda: http_get(f"http://127.0.0.1:{port}/metrics"))
        assert f'pool="{pool}"' not in http_get(f"http://127.0.0.1:{port}/metrics")
        st = lab("--app", "synthetic", "--storage", "local", "--workers", "1", name=name)
        assert st["pool"] == pool
        url = str(st["url"]) + str(st.get("entry_path") or "/")
        wait_for("the pool up in the metrics", lambda: f'statstorm_pool_up{{pool="{pool}"}} 1.0'
                 in http_get(f"http://127.0.0.1:{port}/metrics"), timeout=30)
        time.sleep(4)  # the tracer reattaches to the new pool (bpftrace takes about 2 s)
        for _ in range(5):
            get(url)
        wait_for("its requests", lambda: re.search(
            rf'statstorm_requests_total{{pool="{pool}"}} ([0-9.]+)',
            http_get(f"http://127.0.0.1:{port}/metrics")), timeout=30)
        run_cli(["lab", "down", "--name", name], state_home, check=True)
        wait_for("the pool down in the metrics", lambda: f'statstorm_pool_up{{pool="{pool}"}} 0.0'
                 in http_get(f"http://127.0.0.1:{port}/metrics"), timeout=30)
    finally:
        summary = stop_exporter(exp)
    assert summary["tracer_starts"] >= 1 and pool in summary["requests"]


@pytest.mark.root
def test_a_busy_port_is_a_one_line_error(state_home: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = run_cli(["exporter", "--listen", f"127.0.0.1:{port}", "--duration", "1"],
                       state_home)
    assert proc.returncode == 2 and "in use" in proc.stderr and proc.stderr.count("\n") == 1


def test_the_compiled_tracers_sources_are_where_its_build_check_looks() -> None:
    """Its loader is used only when built from these sources (adapters/tracing/libbpf_trace.py
    `loader`): they must be found, or every trace falls back to bpftrace unsaid."""
    from statstorm.adapters.tracing import libbpf_trace
    for name in libbpf_trace.SOURCES:
        assert (libbpf_trace.SOURCE_DIR / name).is_file(), name
    assert len(libbpf_trace.source_hash()) == 16
    # setup.sh stamps its build with the hash of the same files, in the same order
    setup = (libbpf_trace.SOURCE_DIR.parents[2] / "scripts/setup.sh").read_text()
    stamp = next(line for line in setup.splitlines() if line.startswith("bpf_want="))
    assert tuple(re.findall(r'"\$bpf_src/([^"]+)"', stamp)) == libbpf_trace.SOURCES


def test_opcache_figures_take_only_what_the_status_gives() -> None:
    assert em.opcache_figures(None) == {}
    st = OpcacheStatus.from_json({"opcache_enabled": False,
                                  "opcache_statistics": {"hits": 3, "oom_restarts": 1}})
    assert em.opcache_figures(st) == {"enabled": 0.0, "hits": 3.0}

"""`statstorm exporter`: a long-running Prometheus exporter for the pools of this machine.

Order of work: validate the options → find the pools (a lab's, the named ones, or every
running php-fpm pool) → attach the counting tracer to all of them at once
(adapters/tracing/count_stream.py) → serve /metrics → until SIGTERM, Ctrl-C or `--duration`:
  - the main thread hands the tracer's lines to the per-pool counters (model/exporter_metrics);
  - a refresher thread reads each pool's state at its own rate: every `--status-every` its
    workers over FastCGI (realpath cache use, OPcache), their PSS and the storage's round
    trips; every `--check-every` check's facts and rules (adapters/php/pool_facts.py, model/rules);
    every `--rescan-every` which pools run (a cheap /proc scan), so pools that appear or go
    and masters that restart make the tracer reattach;
→ detach the tracer, stop serving, return a summary.

The exporter's own FastCGI queries are requests too: they are recognised by their script and
left out of the request and syscall counters.
"""

from __future__ import annotations

import copy
import ipaddress
import os
import re
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from statstorm import __version__
from statstorm.adapters.host import procs, smaps
from statstorm.adapters.labs import state as labs
from statstorm.adapters.php import php_targets, pool_facts
from statstorm.adapters.tracing import bpftrace, count_stream, libbpf_trace, tracer_host
from statstorm.adapters.php.pool_watch import Pools, Watched
from statstorm.adapters.tracing.bpftrace_session import Refused
from statstorm.adapters.tracing.count_lines import Counted, CountLine, Exit, Fork, ScriptStart
from statstorm.adapters.tracing.count_stream import CompiledCountStream, CountStream
from statstorm.adapters.host.metrics_server import MetricsServer, Snapshot
from statstorm.env import Env
from statstorm.errors import DependencyError, StatstormError, UsageError
from statstorm.model.checkfacts import ini_bytes
from statstorm.model.exporter_metrics import PoolCounters, PoolStatus
from statstorm.model.rules import evaluate
from statstorm.results.doctor import Mode
from statstorm.results.jsontypes import JsonObject

SCHEMA = "statstorm.exporter/1"
DEFAULT_LISTEN = "127.0.0.1:9733"


@dataclass(frozen=True)
class ExporterOptions:
    pools: tuple[str, ...] = ()
    lab: str | None = None
    listen: str = DEFAULT_LISTEN
    status_every_s: float = 30.0
    check_every_s: float = 300.0
    rescan_every_s: float = 30.0
    duration_s: float | None = None  # None: until SIGTERM or Ctrl-C
    backend: str = "auto"  # the counting tracer: ebpf (compiled), bpftrace, auto (ebpf if built)


@dataclass
class ExporterSummary:
    listen: str
    url: str
    pools: list[str]
    requests: dict[str, int]
    duration_s: float
    tracer_starts: int
    tracer_cpu_s: float
    own_queries: int
    stopped: str
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "listen": self.listen, "url": self.url,
                "pools": list(self.pools), "requests": dict(self.requests),
                "duration_s": self.duration_s, "tracer_starts": self.tracer_starts,
                "tracer_cpu_s": self.tracer_cpu_s, "own_queries": self.own_queries,
                "stopped": self.stopped, "warnings": list(self.warnings)}


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) → (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not re.fullmatch(r"[0-9]{1,5}", port) or not 0 < int(port) < 65536:
        raise UsageError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise UsageError(f"--listen {text!r}: the host must be an IP address, e.g. "
                         f"127.0.0.1 or [::1]") from None
    return host, int(port)


def validate(opts: ExporterOptions) -> None:
    if opts.pools and opts.lab:
        raise UsageError("give --pool or --lab, not both")
    parse_listen(opts.listen)
    for flag, v in (("--status-every", opts.status_every_s), ("--check-every", opts.check_every_s),
                    ("--rescan-every", opts.rescan_every_s)):
        if not v > 0:
            raise UsageError(f"{flag} must be a positive number of seconds")
    if opts.duration_s is not None and not opts.duration_s > 0:
        raise UsageError("--duration must be a positive number of seconds")
    if opts.backend not in ("auto", "ebpf", "bpftrace"):
        raise UsageError(f"--backend {opts.backend!r}: expected auto, ebpf or bpftrace")


# -- the exporter --------------------------------------------------------------------------------
class Exporter:
    """The counters and states of every pool, fed by the tracer and the refresher, read by
    the metrics server (under one lock)."""

    def __init__(self, env: Env, opts: ExporterOptions, backend: str = "") -> None:
        self.env, self.opts = env, opts
        self.lock = threading.Lock()
        self.counters: dict[str, PoolCounters] = {}
        self.status: dict[str, PoolStatus] = {}
        self.pools = Pools(env, lab=opts.lab, pools=opts.pools)
        self.pid_pool: dict[int, str] = {}
        self.scripts: dict[int, bytes] = {}
        self.own_queries = 0
        self.tracer_starts = 0
        self.tracer_cpu_s = 0.0  # of tracers that ended
        self.stream: CountStream | CompiledCountStream | None = None
        self.backend = backend or count_stream.available(opts.backend)

    # ---- the tracer's lines
    def on_event(self, line: CountLine) -> None:
        match line:
            case Counted():
                script = self.scripts.pop(line.pid, b"")
                pool = self._pool_of(line.pid)
                if not pool:
                    return
                if php_targets.is_query_script(script):
                    self.own_queries += 1
                    return
                with self.lock:
                    self.counters.setdefault(pool, PoolCounters()).add_request(
                        line.calls(), request=line.start_ns > 0)
            case ScriptStart():
                self.scripts[line.pid] = line.script
            case Fork():
                parent_pool = self.pid_pool.get(line.parent)
                if parent_pool:
                    self.pid_pool[line.child] = parent_pool
            case Exit():
                pool = self.pid_pool.pop(line.pid, "")
                self.scripts.pop(line.pid, None)
                if pool and not any(line.pid in w.masters for w in self.pools.watched.values()):
                    with self.lock:
                        self.counters.setdefault(pool, PoolCounters()).worker_exits += 1

    def _pool_of(self, pid: int) -> str:
        known = self.pid_pool.get(pid)
        if known is not None:
            return known
        title = php_targets.pool_of_worker(pid)  # a worker forked before its fork line was read
        pool = title if title in self.pools.watched else ""
        self.pid_pool[pid] = pool
        return pool

    # ---- attaching
    def attach(self) -> None:
        """(Re)start the tracer on the pools watched now (none: it stays detached)."""
        self.detach()
        watched = list(self.pools.watched.values())
        self.pid_pool = {p: w.name for w in watched
                         for p in (*w.target.pids, *w.target.parents, *w.masters)}
        if not watched:
            return
        stream = count_stream.new_stream(self.backend, [w.target for w in watched],
                                         self.on_event, env=self.env)
        try:
            stream.start()
        except Refused as exc:
            stream.stop()
            raise DependencyError(f"the counting tracer ({self.backend}) could not attach: "
                                  f"{exc}") from None
        self.stream = stream
        self.tracer_starts += 1

    def detach(self) -> None:
        if self.stream is not None:
            self.tracer_cpu_s += self.stream.cpu_seconds()
            self.stream.stop()
            self.stream = None

    # ---- reading the pools' state
    def refresh_status(self, w: Watched) -> None:
        st = PoolStatus(up=True)
        workers = (php_targets.pool_workers(w.facts_target.pool.name)
                   if not w.facts_target.pool.handler.php_in_server
                   else [p for p in w.target.pids if procs.alive(p)])
        st.workers = len(workers)
        errors: dict[str, int] = {}
        if w.listen and workers:
            try:
                answers = php_targets.ask_pool(self.env, w.listen, len(workers))
                st.realpath_used = tuple(a.realpath_used for a in answers
                                         if a.realpath_used is not None)
                ini = answers[0].ini if answers else {}
                st.realpath_size = ini_bytes(ini.get("realpath_cache_size", "") or None)
                st.opcache = answers[0].opcache if answers else None
            except StatstormError as exc:
                errors["fastcgi"] = 1
                self.env.debug(f"pool {w.name}: FastCGI query failed ({exc})")
        try:
            st.pss_kb = tuple(m.pss_kb for m in smaps.read_all(workers) if m.pss_kb)
        except OSError:
            errors["memory"] = 1
        if w.window is not None and w.window.before is not None:
            try:
                calls = w.window.diff(w.window.before, w.window.snapshot())
                st.round_trips = {w.mount: w.window.total(calls)}
            except StatstormError as exc:
                errors["round_trips"] = 1
                self.env.debug(f"pool {w.name}: round trips not read ({exc})")
        with self.lock:
            old = self.status.get(w.name)
            if old is not None:
                st.findings, st.check_time = old.findings, old.check_time
                st.errors = Counter(old.errors)
                if not st.round_trips:
                    st.round_trips = old.round_trips
            for source, n in errors.items():
                st.errors[source] += n
            self.status[w.name] = st

    def refresh_check(self, w: Watched) -> None:
        try:
            got = pool_facts.gather(self.env, w.facts_target, query_pool=True)
            findings = tuple(sorted({(f.id, f.severity) for f in evaluate(got.facts)}))
        except StatstormError as exc:
            self.env.debug(f"pool {w.name}: check failed ({exc})")
            with self.lock:
                st = self.status.setdefault(w.name, PoolStatus())
                st.errors["check"] += 1
            return
        with self.lock:
            st = self.status.setdefault(w.name, PoolStatus())
            st.findings, st.check_time = findings, time.time()

    def mark_gone(self, names: list[str]) -> None:
        with self.lock:
            for name in names:
                self.status.setdefault(name, PoolStatus()).up = False
                self.status[name].workers = 0

    def snapshot(self) -> Snapshot:
        """A copy of the state for one scrape."""
        stream = self.stream
        cpu = self.tracer_cpu_s + (stream.cpu_seconds() if stream is not None else 0.0)
        with self.lock:
            return Snapshot(counters=copy.deepcopy(self.counters),
                            status=copy.deepcopy(self.status), tracer_cpu_s=cpu,
                            tracer_starts=self.tracer_starts,
                            backend=f"{self.backend}-counts",
                            version=__version__, tracer_up=stream is not None)


class Refresher(threading.Thread):
    """Reads the pools' state at its rates; asks the main thread to reattach on a change."""

    def __init__(self, exp: Exporter, stop: threading.Event) -> None:
        super().__init__(name="statstorm-exporter-refresh", daemon=True,
                         target=self.refresh_until_stopped)
        self.exp, self.stop = exp, stop
        self.retarget = threading.Event()
        self.error: BaseException | None = None

    def refresh_until_stopped(self) -> None:
        """The thread's loop: each job when it is due, until `stop` is set."""
        opts = self.exp.opts
        due_status = due_check = due_scan = time.monotonic()
        due_scan += opts.rescan_every_s
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                if now >= due_scan:
                    due_scan = now + opts.rescan_every_s
                    if self.exp.pools.key() != self.exp.pools.current_key():
                        self.retarget.set()
                if now >= due_status:
                    due_status = now + opts.status_every_s
                    for w in list(self.exp.pools.watched.values()):
                        self.exp.refresh_status(w)
                if now >= due_check:
                    due_check = now + opts.check_every_s
                    for w in list(self.exp.pools.watched.values()):
                        self.exp.refresh_check(w)
                self.stop.wait(max(0.05, min(due_scan, due_status, due_check) - time.monotonic()))
        except BaseException as exc:  # handed to the main thread, which stops
            self.error = exc
            self.stop.set()


def run(env: Env, opts: ExporterOptions, *, ready: threading.Event | None = None,
        stop: threading.Event | None = None,
        progress: Callable[[str], None] | None = None) -> ExporterSummary:
    """Serve the pools' metrics until SIGTERM, Ctrl-C, `opts.duration_s` or `stop`."""
    validate(opts)
    if os.geteuid() != 0:
        bpftrace.check_privileges()
    if opts.backend == "bpftrace" or (opts.backend == "auto" and libbpf_trace.loader() is None):
        bpftrace.find()  # not installed: its own line
    # what this host's kernel cannot run: passed over, or refused, in doctor's words (no
    # strace fallback)
    judged = tracer_host.judge()
    backend = count_stream.available(opts.backend, judged)
    passed_over = tracer_host.refusal(judged, Mode.COUNTS)
    bpftrace.ensure_tracefs()
    host, port = parse_listen(opts.listen)
    if procs.port_in_use(port, host):
        raise UsageError(f"--listen {opts.listen}: the port is in use; choose another "
                         f"(e.g. --listen {host}:{port + 1})")
    if opts.lab:
        labs.require_up(env, opts.lab, pool=True)  # a one-line error naming the fix
    stop = stop or threading.Event()
    exp = Exporter(env, opts, backend)
    exp.pools.resolve()
    warnings: list[str] = []
    if backend == "bpftrace" and opts.backend == "auto" and libbpf_trace.loader() is not None:
        warnings.append(f"{passed_over}; counting with bpftrace")
        env.log("exporter: " + warnings[-1])
    if not exp.pools.watched:
        warnings.append(f"no pool {'named ' + ', '.join(opts.pools) + ' ' if opts.pools else ''}"
                        "is running yet: serving empty metrics until one starts")
        env.log("exporter: " + warnings[-1])
    server = MetricsServer(exp.snapshot, host, port)
    main = threading.current_thread() is threading.main_thread()
    old_term = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if main else None
    refresher = Refresher(exp, stop)
    t0 = time.monotonic()
    stopped = "end"
    try:
        exp.attach()
        server.start()
        names = ", ".join(exp.pools.watched) or "none yet"
        env.log(f"exporter: serving {server.url} for pool(s) {names} (in-kernel counting, "
                f"{exp.backend}); status every {opts.status_every_s:g} s, check every "
                f"{opts.check_every_s:g} s")
        refresher.start()
        if ready is not None:
            ready.set()
        last_log = t0
        while not stop.is_set():
            if opts.duration_s is not None and time.monotonic() - t0 >= opts.duration_s:
                break
            if exp.stream is not None and not exp.stream.pump(0.2):
                warnings.append("the tracer ended on its own; reattached")
                env.log("exporter: " + warnings[-1])
                exp.attach()
            elif exp.stream is None:
                stop.wait(0.2)
            if refresher.retarget.is_set():
                refresher.retarget.clear()
                gone = exp.pools.resolve()
                exp.mark_gone(gone)
                exp.attach()
                env.log(f"exporter: pools now {', '.join(exp.pools.watched) or 'none'}"
                        + (f" ({', '.join(gone)} gone)" if gone else ""))
            if progress is not None and time.monotonic() - last_log >= 60:
                last_log = time.monotonic()
                with exp.lock:
                    seen = sum(c.requests for c in exp.counters.values())
                progress(f"{seen:,} requests counted")
        if refresher.error is not None:
            raise refresher.error
        stopped = "signal" if stop.is_set() else "duration"
    except KeyboardInterrupt:
        stopped = "interrupted"
    finally:
        stop.set()
        if main:
            signal.signal(signal.SIGTERM, old_term)
        try:
            exp.detach()
        finally:
            server.stop()
            refresher.join(timeout=30)
    with exp.lock:
        requests = {k: v.requests for k, v in exp.counters.items()}
    return ExporterSummary(opts.listen, server.url, sorted(exp.pools.watched), requests,
                           round(time.monotonic() - t0, 1), exp.tracer_starts,
                           round(exp.tracer_cpu_s, 2), exp.own_queries, stopped, warnings)


__all__ = ["ExporterOptions", "ExporterSummary", "run", "validate", "parse_listen"]

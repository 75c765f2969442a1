"""What `statstorm exporter` exposes: the metric catalogue, and the per-pool state the
counting tracer, the pools' own answers and check's findings fold into.

Names follow Prometheus's rules: base units (`_seconds`, `_bytes`), counters end in `_total`
when exposed (the catalogue names them without it, as the client library does), labels of
bounded cardinality only: `pool` (a php-fpm pool or lab), `call` (one of the tracer's eight
call types), `result` (`ok`, `failed`), `mount` and `fstype` (the storage under a pool's code),
`rule` and `severity` (check's rules), `stat` (`min`, `max`, `mean` or `sum` over a pool's
workers), `source` (what a failed read was reading).
No path and no PID is ever a label: the paths stay in `statstorm trace`.

The contrib dashboard and alerts are checked against this catalogue, and the catalogue against
what the exporter really serves (tests/test_exporter.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

from statstorm.model.checkfacts import OpcacheStatus
from statstorm.results.check import Severity

# The counting tracer's call types (adapters/bpftrace.COUNT_CALLS, repeated here: model/ is
# pure and imports no adapter; tests/test_exporter.py checks the two agree).
CALLS = ("lstat", "stat", "fstat", "access", "open", "readlink", "getcwd", "chdir")
# Seconds of metadata syscalls per request: local disk serves a request's few hundred calls in
# well under a millisecond; network storage without caching takes tens to hundreds.
REQUEST_SECONDS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                           0.1, 0.25, 0.5, 1.0, 2.5)
# Metadata syscalls per request (MediaWiki makes about 300 warm, a cold worker thousands).
REQUEST_CALLS_BUCKETS = (10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str  # counter | gauge | histogram | info
    help: str
    labels: tuple[str, ...] = ()

    @property
    def exposed(self) -> tuple[str, ...]:
        """The sample names this metric appears under in the text format."""
        if self.kind == "counter":
            return (self.name + "_total",)
        if self.kind == "histogram":
            return (self.name + "_bucket", self.name + "_count", self.name + "_sum")
        if self.kind == "info":
            return (self.name + "_info",)
        return (self.name,)


METRICS: tuple[Metric, ...] = (
    Metric("statstorm_pool_up", "gauge", "1 while the pool's master runs, 0 once it is gone",
           ("pool",)),
    Metric("statstorm_pool_workers", "gauge", "Worker processes of the pool", ("pool",)),
    Metric("statstorm_requests", "counter", "PHP requests the counting tracer saw end",
           ("pool",)),
    Metric("statstorm_metadata_syscalls", "counter",
           "File-metadata syscalls made by the pool's workers during requests, by call type and "
           "result (failed: the call returned an error, e.g. a lookup of a missing file)",
           ("pool", "call", "result")),
    Metric("statstorm_metadata_syscall_seconds", "counter",
           "Time spent in those syscalls (entry to exit), by call type", ("pool", "call")),
    Metric("statstorm_request_metadata_seconds", "histogram",
           "Per request: seconds spent in file-metadata syscalls", ("pool",)),
    Metric("statstorm_request_metadata_syscalls", "histogram",
           "Per request: file-metadata syscalls made", ("pool",)),
    Metric("statstorm_worker_exits", "counter",
           "Worker processes that ended (the master respawns them: pm.max_requests, crashes)",
           ("pool",)),
    Metric("statstorm_storage_round_trips", "counter",
           "Network round trips the storage under the pool's code reports (GlusterFS volume "
           "profile, NFS client mountstats); absent for local disks", ("pool", "mount", "fstype")),
    Metric("statstorm_realpath_cache_size_bytes", "gauge",
           "realpath_cache_size of the pool's workers", ("pool",)),
    Metric("statstorm_realpath_cache_used_bytes", "gauge",
           "realpath cache in use, over the workers that answered (min, max, mean)",
           ("pool", "stat")),
    Metric("statstorm_opcache_enabled", "gauge", "1 when OPcache runs in the pool", ("pool",)),
    Metric("statstorm_opcache_hits", "counter", "OPcache hits since the pool started",
           ("pool",)),
    Metric("statstorm_opcache_misses", "counter", "OPcache misses since the pool started",
           ("pool",)),
    Metric("statstorm_opcache_cached_scripts", "gauge", "Scripts in OPcache", ("pool",)),
    Metric("statstorm_opcache_memory_used_bytes", "gauge", "OPcache shared memory in use",
           ("pool",)),
    Metric("statstorm_opcache_memory_free_bytes", "gauge", "OPcache shared memory free",
           ("pool",)),
    Metric("statstorm_opcache_restarts", "counter",
           "OPcache restarts (out of memory, hash full, manual)", ("pool",)),
    Metric("statstorm_php_memory_pss_bytes", "gauge",
           "Proportional set size of the pool's workers: their sum, and the largest",
           ("pool", "stat")),
    Metric("statstorm_check_findings", "gauge",
           "1 for each finding `statstorm check` makes on the pool now, by rule and severity",
           ("pool", "rule", "severity")),
    Metric("statstorm_check_last_run_timestamp_seconds", "gauge",
           "When check's rules last ran on the pool (Unix time)", ("pool",)),
    Metric("statstorm_status_errors", "counter",
           "Failed reads of a pool's state, by source (fastcgi, check, round_trips, memory)",
           ("pool", "source")),
    Metric("statstorm_tracer_cpu_seconds", "counter",
           "CPU time of the counting tracer's own process (user + system)"),
    Metric("statstorm_tracer_up", "gauge",
           "1 while the counting tracer is attached, 0 while it is not (no pool to follow yet, "
           "or reattaching)"),
    Metric("statstorm_tracer_starts", "counter",
           "Times the counting tracer was (re)started: the first start, then pools appearing "
           "or going"),
    Metric("statstorm_scrape_duration_seconds", "gauge",
           "Time the exporter took to render the previous scrape"),
    Metric("statstorm_exporter", "info", "The exporter's version and tracer backend",
           ("version", "backend")),
)
BY_NAME: Mapping[str, Metric] = {m.name: m for m in METRICS}


def exposed_names() -> set[str]:
    """Every sample name the catalogue can appear under (for checking dashboards and alerts)."""
    return {n for m in METRICS for n in m.exposed}


@dataclass
class Histogram:
    """A cumulative histogram with fixed upper bounds (Prometheus's `le`)."""
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket, not cumulative; last: +Inf
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        i = 0
        while i < len(self.bounds) and value > self.bounds[i]:
            i += 1
        self.counts[i] += 1
        self.total += value

    @property
    def n(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, "+Inf" last."""
        out, run = [], 0
        for bound, c in zip([*map(_le, self.bounds), "+Inf"], self.counts):
            run += c
            out.append((bound, run))
        return out


def _le(v: float) -> str:
    return repr(float(v))


@dataclass
class PoolCounters:
    """What the counting tracer has added up for one pool since the exporter started."""
    requests: int = 0
    calls: dict[tuple[str, str], int] = field(default_factory=dict)  # (call, ok|failed)
    seconds: dict[str, float] = field(default_factory=dict)  # call → seconds
    worker_exits: int = 0
    per_request_seconds: Histogram = field(
        default_factory=lambda: Histogram(REQUEST_SECONDS_BUCKETS))
    per_request_calls: Histogram = field(default_factory=lambda: Histogram(REQUEST_CALLS_BUCKETS))

    def add_request(self, calls: Mapping[str, tuple[int, int, int]], *, request: bool) -> None:
        """Fold one counted stretch of a worker ({call: (calls, failed, latency ns)}).
        `request`: it was a request (not a worker's start-up or the tail of one under way
        when the tracer attached); only requests count towards the per-request figures."""
        n_calls, ns = 0, 0
        for call, (c, failed, lat) in calls.items():
            if c - failed:
                self.calls[(call, "ok")] = self.calls.get((call, "ok"), 0) + c - failed
            if failed:
                self.calls[(call, "failed")] = self.calls.get((call, "failed"), 0) + failed
            self.seconds[call] = self.seconds.get(call, 0.0) + lat / 1e9
            n_calls += c
            ns += lat
        if request:
            self.requests += 1
            self.per_request_seconds.observe(ns / 1e9)
            self.per_request_calls.observe(n_calls)


@dataclass
class PoolStatus:
    """A pool's state as last read (FastCGI query, smaps, storage counters, check)."""
    up: bool = True
    workers: int = 0
    realpath_size: int | None = None
    realpath_used: tuple[int, ...] = ()
    opcache: OpcacheStatus | None = None
    pss_kb: tuple[int, ...] = ()
    round_trips: dict[tuple[str, str], int] = field(default_factory=dict)  # (mount, fstype)
    findings: tuple[tuple[str, Severity], ...] = ()  # (rule, severity)
    check_time: float | None = None
    errors: Counter[str] = field(default_factory=Counter)  # source → count


def opcache_figures(status: OpcacheStatus | None) -> dict[str, float]:
    """The OPcache gauges and counters from `opcache_get_status(false)` ({} if absent)."""
    if status is None:
        return {}
    out: dict[str, float] = {"enabled": 1.0 if status.enabled else 0.0}
    st = status.statistics
    if st is not None:
        for key, name in (("hits", "hits"), ("misses", "misses"),
                          ("num_cached_scripts", "cached_scripts")):
            if key in st:
                out[name] = float(st[key])
        restarts = [st[k] for k in ("oom_restarts", "hash_restarts", "manual_restarts") if k in st]
        if len(restarts) == 3:
            out["restarts"] = float(sum(restarts))
    mem = status.memory_usage
    if mem is not None:
        for key, name in (("used_memory", "memory_used"), ("free_memory", "memory_free")):
            if key in mem:
                out[name] = float(mem[key])
    return out

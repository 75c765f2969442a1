"""The exporter's HTTP side: /metrics in Prometheus's text format (OpenMetrics when the scraper
asks for it), served by the `prometheus_client` library from the exporter's own state.

The state is turned into metric families at every scrape (a custom collector), so pools that
come and go need no registration, and nothing is counted twice.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily, InfoMetricFamily)
from prometheus_client.metrics_core import Metric as Family

from statstorm.errors import UsageError
from statstorm.model.exporter_metrics import (BY_NAME, Histogram, PoolCounters, PoolStatus,
                                              opcache_figures)


@dataclass
class Snapshot:
    """The exporter's state at one scrape (copied under its lock)."""
    counters: Mapping[str, PoolCounters]
    status: Mapping[str, PoolStatus]
    tracer_cpu_s: float
    tracer_starts: int
    backend: str
    version: str
    tracer_up: bool = False
    scrape_s: float = 0.0


def _family(name: str) -> Family:
    m = BY_NAME[name]
    labels = list(m.labels)
    if m.kind == "counter":
        return CounterMetricFamily(m.name, m.help, labels=labels)
    if m.kind == "histogram":
        return HistogramMetricFamily(m.name, m.help, labels=labels)
    if m.kind == "info":
        return InfoMetricFamily(m.name, m.help, labels=labels)
    return GaugeMetricFamily(m.name, m.help, labels=labels)


def _histogram(fam: Family, labels: list[str], h: Histogram) -> None:
    assert isinstance(fam, HistogramMetricFamily)
    fam.add_metric(labels, buckets=[(le, float(c)) for le, c in h.cumulative()],
                   sum_value=h.total)


def families(s: Snapshot) -> Iterator[Family]:
    """Every metric of the catalogue that has a value now."""
    f: dict[str, Any] = {name: _family(name) for name in BY_NAME}  # each kind's add_metric
    pools = sorted(set(s.counters) | set(s.status))
    for pool in pools:
        c = s.counters.get(pool) or PoolCounters()
        f["statstorm_requests"].add_metric([pool], c.requests)
        for (call, result), n in sorted(c.calls.items()):
            f["statstorm_metadata_syscalls"].add_metric([pool, call, result], n)
        for call, sec in sorted(c.seconds.items()):
            f["statstorm_metadata_syscall_seconds"].add_metric([pool, call], sec)
        _histogram(f["statstorm_request_metadata_seconds"], [pool], c.per_request_seconds)
        _histogram(f["statstorm_request_metadata_syscalls"], [pool], c.per_request_calls)
        f["statstorm_worker_exits"].add_metric([pool], c.worker_exits)
        st = s.status.get(pool)
        if st is None:
            continue
        f["statstorm_pool_up"].add_metric([pool], 1.0 if st.up else 0.0)
        f["statstorm_pool_workers"].add_metric([pool], st.workers)
        for (mount, fstype), n in sorted(st.round_trips.items()):
            f["statstorm_storage_round_trips"].add_metric([pool, mount, fstype], n)
        if st.realpath_size is not None:
            f["statstorm_realpath_cache_size_bytes"].add_metric([pool], st.realpath_size)
        if st.realpath_used:
            used = st.realpath_used
            for stat, v in (("min", min(used)), ("max", max(used)),
                            ("mean", sum(used) / len(used))):
                f["statstorm_realpath_cache_used_bytes"].add_metric([pool, stat], v)
        op = opcache_figures(st.opcache)
        for key, name in (("enabled", "statstorm_opcache_enabled"),
                          ("hits", "statstorm_opcache_hits"),
                          ("misses", "statstorm_opcache_misses"),
                          ("cached_scripts", "statstorm_opcache_cached_scripts"),
                          ("memory_used", "statstorm_opcache_memory_used_bytes"),
                          ("memory_free", "statstorm_opcache_memory_free_bytes"),
                          ("restarts", "statstorm_opcache_restarts")):
            if key in op:
                f[name].add_metric([pool], op[key])
        if st.pss_kb:
            f["statstorm_php_memory_pss_bytes"].add_metric([pool, "sum"], 1024.0 * sum(st.pss_kb))
            f["statstorm_php_memory_pss_bytes"].add_metric([pool, "max"], 1024.0 * max(st.pss_kb))
        for rule, severity in st.findings:
            f["statstorm_check_findings"].add_metric([pool, rule, severity], 1.0)
        if st.check_time is not None:
            f["statstorm_check_last_run_timestamp_seconds"].add_metric([pool], st.check_time)
        for source, n in sorted(st.errors.items()):
            f["statstorm_status_errors"].add_metric([pool, source], n)
    f["statstorm_tracer_cpu_seconds"].add_metric([], s.tracer_cpu_s)
    f["statstorm_tracer_up"].add_metric([], 1.0 if s.tracer_up else 0.0)
    f["statstorm_tracer_starts"].add_metric([], s.tracer_starts)
    f["statstorm_scrape_duration_seconds"].add_metric([], s.scrape_s)
    info = f["statstorm_exporter"]
    assert isinstance(info, InfoMetricFamily)
    info.add_metric([], {"version": s.version, "backend": s.backend})
    for fam in f.values():
        if fam.samples:
            yield fam


class _Collector:
    def __init__(self, snapshot: Callable[[], Snapshot]) -> None:
        self.snapshot = snapshot
        self.last_s = 0.0
        self._lock = threading.Lock()

    def collect(self) -> Iterable[Family]:
        with self._lock:  # two scrapes at once: one after the other
            t0 = time.perf_counter()
            s = self.snapshot()
            s.scrape_s = self.last_s
            out = list(families(s))
            self.last_s = time.perf_counter() - t0
        return out


class MetricsServer:
    """/metrics on HOST:PORT in a thread of its own, until `stop()`."""

    def __init__(self, snapshot: Callable[[], Snapshot], host: str, port: int) -> None:
        self.host, self.port = host, port
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(snapshot))
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> None:
        try:
            self._server, self._thread = start_http_server(self.port, addr=self.host,
                                                           registry=self.registry)
        except OSError as exc:
            raise UsageError(f"cannot listen on {self.host}:{self.port} ({exc.strerror}); "
                             "choose another --listen") from None

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

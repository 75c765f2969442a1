"""One cell's latency statistics as results hold them (fsbench's cells; computed by
model/latency.py `summarize`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LatencyStats:
    """Statistics of one cell's samples; latencies in microseconds."""

    count: int
    errors: int
    wall_s: float
    ops_per_s: float
    min_us: float
    mean_us: float
    p50_us: float
    p95_us: float
    p99_us: float
    max_us: float
    stdev_us: float
    histogram: tuple[tuple[int, int], ...]  # (bucket lower bound in ns, count)

"""Latency statistics of timed samples (pure): percentiles, rate and a log2 histogram."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


def percentile(sorted_ns: Sequence[int], q: float) -> float:
    """Nearest-rank-with-interpolation percentile `q` (0-100) of already sorted samples."""
    if not sorted_ns:
        return 0.0
    if len(sorted_ns) == 1:
        return float(sorted_ns[0])
    pos = (len(sorted_ns) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_ns) - 1)
    frac = pos - lo
    return sorted_ns[lo] + (sorted_ns[hi] - sorted_ns[lo]) * frac


def log2_histogram(samples_ns: Sequence[int]) -> list[tuple[int, int]]:
    """Buckets [2^k, 2^(k+1)) ns as (lower bound ns, count), only non-empty ones, ascending."""
    counts: dict[int, int] = {}
    for v in samples_ns:
        k = max(int(v), 1).bit_length() - 1
        counts[k] = counts.get(k, 0) + 1
    return [(1 << k, counts[k]) for k in sorted(counts)]


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


def summarize(samples_ns: Sequence[int], *, wall_s: float, errors: int = 0) -> LatencyStats:
    """Reduce samples (ns) measured over `wall_s` seconds of wall time."""
    s = sorted(samples_ns)
    n = len(s)
    if n == 0:
        return LatencyStats(0, errors, wall_s, 0.0, 0, 0, 0, 0, 0, 0, 0, ())
    mean = sum(s) / n
    var = sum((x - mean) ** 2 for x in s) / (n - 1) if n > 1 else 0.0
    return LatencyStats(
        count=n, errors=errors, wall_s=wall_s,
        ops_per_s=n / wall_s if wall_s > 0 else 0.0,
        min_us=s[0] / 1000, mean_us=mean / 1000,
        p50_us=percentile(s, 50) / 1000, p95_us=percentile(s, 95) / 1000,
        p99_us=percentile(s, 99) / 1000, max_us=s[-1] / 1000,
        stdev_us=math.sqrt(var) / 1000,
        histogram=tuple(log2_histogram(s)),
    )


def ratio(value: float, reference: float) -> float | None:
    """value / reference, or None when the reference is zero (nothing to compare with)."""
    if reference <= 0:
        return None
    return value / reference

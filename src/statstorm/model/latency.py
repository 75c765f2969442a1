"""Latency statistics of timed samples (pure): percentiles, rate and a log2 histogram
(definitions in statstorm.model.stats)."""

from __future__ import annotations

import math
from typing import Sequence

from statstorm.model import stats
from statstorm.results.latency import LatencyStats


def percentile(sorted_ns: Sequence[int], q: float) -> float:
    """Percentile `q` (0-100) of samples: the product's one definition (statstorm.model.stats)."""
    return stats.percentile(sorted_ns, q)


def log2_histogram(samples_ns: Sequence[int]) -> list[tuple[int, int]]:
    """Buckets [2^k, 2^(k+1)) ns as (lower bound ns, count), only non-empty ones, ascending
    (statstorm.model.stats's log2 bucketing; a sample below 1 ns counts in the 1 ns bucket)."""
    return [(int(b), c) for b, c in stats.log2_histogram(max(int(v), 1) for v in samples_ns)]


def summarize(samples_ns: Sequence[int], *, wall_s: float, errors: int = 0) -> LatencyStats:
    """Reduce samples (ns) measured over `wall_s` seconds of wall time."""
    s = sorted(samples_ns)
    n = len(s)
    if n == 0:
        return LatencyStats(0, errors, wall_s, 0.0, 0, 0, 0, 0, 0, 0, 0, ())
    mean = sum(s) / n
    var = sum((x - mean) ** 2 for x in s) / (n - 1) if n > 1 else 0.0
    p50, p95, p99 = stats.percentiles(s, (50, 95, 99))
    return LatencyStats(
        count=n, errors=errors, wall_s=wall_s,
        ops_per_s=n / wall_s if wall_s > 0 else 0.0,
        min_us=s[0] / 1000, mean_us=mean / 1000,
        p50_us=p50 / 1000, p95_us=p95 / 1000, p99_us=p99 / 1000, max_us=s[-1] / 1000,
        stdev_us=math.sqrt(var) / 1000,
        histogram=tuple(log2_histogram(s)),
    )


def ratio(value: float, reference: float) -> float | None:
    """value / reference, or None when the reference is zero (nothing to compare with)."""
    if reference <= 0:
        return None
    return value / reference

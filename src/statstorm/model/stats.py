"""The statistics of the whole product, defined once (pure: numbers in, numbers out).

Definitions (docs/matrix.md, "Statistics", says the same for users):

- **Percentile**: linear interpolation between the closest ranks, Hyndman & Fan type 7
  (numpy's default method "linear", R's default, Excel's PERCENTILE.INC): for n sorted values
  x[0..n-1] the q-th percentile sits at position h = (n - 1) * q / 100 and is
  x[⌊h⌋] + (h - ⌊h⌋) * (x[⌊h⌋+1] - x[⌊h⌋]). p0 is the minimum, p100 the maximum; an empty
  sample gives 0.
- **Log2 buckets**: a value v > 0 falls in [2^k, 2^(k+1)) with k = ⌊log2 v⌋ (k may be negative
  for fractions); a bucket is named by its lower bound 2^k. Values ≤ 0 fall in bucket 0.
- **Latency histograms** that must be merged (runs of a sweep level, rounds of a matrix cell)
  are HdrHistograms (the `hdrh` library) of microseconds at 3 significant digits. A load
  generator that reports only a percentile spectrum is turned into a histogram by placing its
  requests along the piecewise-linear quantile function through the spectrum's points.
  Percentiles of a histogram use the same type 7 definition over its recorded values (each
  value stands for its bucket, so they are exact to 3 significant digits).
- **Median with a confidence interval**: the distribution-free order-statistic interval
  [x(j), x(k)] around the sample median, the narrowest symmetric pair whose binomial coverage
  P(j ≤ B < k), B ~ Binomial(n, 1/2), is at least the level asked for. With too few samples
  for that level (n < 6 at 95 %) it is the full range [min, max] and the `coverage` it really
  has is reported, never a made-up tighter interval.
- **Comparing two samples** (a cell's per-round throughputs against another's): the two-sided
  Mann-Whitney U test (SciPy, exact for small samples) gives the p-value; the ratio of medians
  b/a gets a bootstrap percentile interval (independent resampling of both samples, 10 000
  resamples, fixed seed, so the same data always give the same interval). The verdict is
  "significant" when p < alpha, else "no significant difference".
- **Comparing two interleaved samples** (cells measured round by round, one after the other,
  so that drift hits both alike): the rounds are paired and only their ratios b_i / a_i are
  compared, which removes what the round shares (a warming cache, a neighbour, the clock).
  The ratio is the geometric mean of the per-round ratios; its interval and p-value come from
  the one-sample t-test of the log ratios against 0 (SciPy): exp(mean ± t(n−1) · sd/√n), so
  the verdict is "significant" exactly when the interval excludes 1. (A rank test cannot
  reach p < 0.05 with 5 pairs; the t interval can, and log ratios of throughput are close to
  normal.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, Iterable, Sequence

import numpy as np
from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

PERCENTILE_METHOD: Final = "linear"  # numpy's name for Hyndman & Fan type 7
BOOTSTRAP_SEED = 20240917
BOOTSTRAP_RESAMPLES = 10_000
SIGNIFICANT = "significant"
NOT_SIGNIFICANT = "no significant difference"
# Latency histograms: 1 µs to 1 h at 3 significant digits.
HIST_LOWEST_US = 1
HIST_HIGHEST_US = 3_600_000_000
HIST_DIGITS = 3
SPECTRUM_POINTS = 20_000  # at most this many distinct points per spectrum turned histogram


def _scipy_stats() -> Any:
    """scipy.stats, imported on first use: it takes a second to import, and most verbs (and
    every `--help`) never compare samples."""
    from scipy import stats  # type: ignore[import-untyped]
    return stats


# -- percentiles and buckets ----------------------------------------------------------------
def percentile(values: Sequence[float] | Iterable[float], q: float) -> float:
    """The q-th percentile (0-100) of `values` (any order), type 7; 0.0 when empty."""
    arr = np.asarray(values if isinstance(values, (list, tuple, np.ndarray)) else list(values),
                     dtype=float)
    if arr.size == 0:
        return 0.0
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0-100")
    return float(np.percentile(arr, q, method=PERCENTILE_METHOD))


def percentiles(values: Sequence[float], qs: Sequence[float]) -> list[float]:
    """Several percentiles (0-100) of one sample at once, type 7; zeros when empty."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return [0.0] * len(qs)
    return [float(v) for v in np.percentile(arr, list(qs), method=PERCENTILE_METHOD)]


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def log2_bucket(value: float) -> float:
    """Lower bound 2^k of the log2 bucket [2^k, 2^(k+1)) holding `value`; 0 for value ≤ 0."""
    if value <= 0:
        return 0
    if isinstance(value, int):
        return 1 << (value.bit_length() - 1)
    mantissa, exp = math.frexp(value)  # value = mantissa * 2**exp, 0.5 <= mantissa < 1
    return math.ldexp(1.0, exp - 1)


def log2_histogram(values: Iterable[float]) -> list[tuple[float, int]]:
    """(bucket lower bound, count) of the non-empty log2 buckets, ascending."""
    counts: dict[float, int] = {}
    for v in values:
        b = log2_bucket(v)
        counts[b] = counts.get(b, 0) + 1
    return sorted(counts.items())


# -- mergeable latency histograms -----------------------------------------------------------
class LatencyHistogram:
    """An HdrHistogram of latencies in microseconds, with type 7 percentiles in ms."""

    def __init__(self) -> None:
        self.hist = HdrHistogram(HIST_LOWEST_US, HIST_HIGHEST_US, HIST_DIGITS)

    @property
    def count(self) -> int:
        return int(self.hist.get_total_count())

    def record_ms(self, value_ms: float, count: int = 1) -> None:
        us = min(max(int(round(value_ms * 1000.0)), HIST_LOWEST_US), HIST_HIGHEST_US)
        self.hist.record_value(us, count)

    def add(self, other: "LatencyHistogram") -> None:
        self.hist.add(other.hist)

    def add_spectrum(self, spectrum: Sequence[tuple[float, float]], count: int) -> None:
        """Record `count` requests whose latency percentiles (percent, ms) are `spectrum`."""
        pts = sorted((float(p), float(v)) for p, v in spectrum)
        if count <= 0 or not pts:
            return
        ps = np.array([p for p, _ in pts])
        vs = np.maximum.accumulate(np.array([v for _, v in pts]))  # a quantile function rises
        if ps[0] > 0:
            ps, vs = np.concatenate(([0.0], ps)), np.concatenate(([vs[0]], vs))
        if ps[-1] < 100:
            ps, vs = np.concatenate((ps, [100.0])), np.concatenate((vs, [vs[-1]]))
        points = min(count, SPECTRUM_POINTS)
        qs = (np.arange(points) + 0.5) / points * 100.0
        values_us = np.rint(np.interp(qs, ps, vs) * 1000.0).astype(np.int64)
        weights = np.diff(np.rint(np.linspace(0, count, points + 1)).astype(np.int64))
        uniq, inverse = np.unique(values_us, return_inverse=True)
        totals = np.bincount(inverse, weights=weights).astype(np.int64)
        for v, c in zip(uniq.tolist(), totals.tolist()):
            if c > 0:
                self.hist.record_value(min(max(v, HIST_LOWEST_US), HIST_HIGHEST_US), c)

    def _runs(self) -> tuple[np.ndarray, np.ndarray]:
        vals, counts = [], []
        for item in self.hist.get_recorded_iterator():
            vals.append(item.value_iterated_to)
            counts.append(item.count_at_value_iterated_to)
        return np.array(vals, dtype=float), np.array(counts, dtype=np.int64)

    def percentiles_ms(self, qs: Sequence[float]) -> list[float]:
        """Type 7 percentiles (0-100) of the recorded values, in ms (zeros when empty)."""
        vals, counts = self._runs()
        n = int(counts.sum())
        if n == 0:
            return [0.0] * len(qs)
        ends = np.cumsum(counts)  # rank r (0-based) holds vals[searchsorted(ends, r, 'right')]
        out = []
        for q in qs:
            h = (n - 1) * q / 100.0
            lo = int(math.floor(h))
            hi = min(lo + 1, n - 1)
            v_lo = vals[np.searchsorted(ends, lo, side="right")]
            v_hi = vals[np.searchsorted(ends, hi, side="right")]
            out.append(float(v_lo + (h - lo) * (v_hi - v_lo)) / 1000.0)
        return out

    def percentile_ms(self, q: float) -> float:
        return self.percentiles_ms([q])[0]


def merged_percentiles(runs: Sequence[tuple[Sequence[tuple[float, float]], int]],
                       qs: Sequence[float]) -> list[float] | None:
    """Percentiles (ms) of the requests of several runs together, each run given as its
    (percentile spectrum, request count); None when no run has a spectrum."""
    hist = LatencyHistogram()
    for spectrum, count in runs:
        part = LatencyHistogram()
        part.add_spectrum(spectrum, count)
        hist.add(part)
    if hist.count == 0:
        return None
    return hist.percentiles_ms(qs)


# -- the median and its interval ------------------------------------------------------------
@dataclass(frozen=True)
class MedianCI:
    """A sample's median and its order-statistic confidence interval."""

    n: int
    median: float
    ci_low: float
    ci_high: float
    coverage: float  # the interval's real coverage probability (≥ level unless n is too small)


def median_ci(values: Sequence[float], level: float = 0.95) -> MedianCI:
    """The median and the distribution-free interval [x(j), x(n-1-j)] (0-based order
    statistics) with the largest j whose coverage is still at least `level`."""
    x = np.sort(np.asarray(values, dtype=float))
    n = int(x.size)
    if n == 0:
        return MedianCI(0, 0.0, 0.0, 0.0, 0.0)
    med = float(np.percentile(x, 50, method=PERCENTILE_METHOD))
    # Interval [x(j), x(n-1-j)] covers the true median with P(j+1 ≤ B ≤ n-1-j), B ~ Bin(n, ½).
    best_j, best_cov = 0, _coverage(n, 0)
    for j in range(1, (n + 1) // 2):
        cov = _coverage(n, j)
        if cov < level:
            break
        best_j, best_cov = j, cov
    return MedianCI(n, med, float(x[best_j]), float(x[n - 1 - best_j]), round(best_cov, 6))


def _coverage(n: int, j: int) -> float:
    """P(j+1 ≤ B ≤ n-1-j) for B ~ Binomial(n, ½): how often [x(j), x(n-1-j)] holds the median."""
    if n == 1:
        return 0.0
    return float(_scipy_stats().binom.cdf(n - 1 - j, n, 0.5) - _scipy_stats().binom.cdf(j, n, 0.5))


# -- comparing two samples ------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """B against A: the ratio of medians (B / A), its bootstrap interval, the Mann-Whitney
    p-value and the verdict at `alpha`."""

    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    alpha: float
    verdict: str

    @property
    def significant(self) -> bool:
        return self.verdict == SIGNIFICANT


def compare(a: Sequence[float], b: Sequence[float], alpha: float = 0.05,
            resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> Comparison:
    """Compare sample `b` with sample `a` (see the module doc for the method)."""
    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    if xa.size == 0 or xb.size == 0:
        raise ValueError("compare needs at least one value in each sample")
    ma = float(np.median(xa))
    mb = float(np.median(xb))
    ratio = mb / ma if ma else math.nan
    rng = np.random.default_rng(seed)
    ra = np.median(rng.choice(xa, size=(resamples, xa.size), replace=True), axis=1)
    rb = np.median(rng.choice(xb, size=(resamples, xb.size), replace=True), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        boot = rb / ra
    boot = boot[np.isfinite(boot)]
    lo, hi = ((float(v) for v in np.percentile(boot, [100 * alpha / 2, 100 * (1 - alpha / 2)],
                                               method=PERCENTILE_METHOD))
              if boot.size else (math.nan, math.nan))
    if np.all(xa == xa[0]) and np.all(xb == xb[0]) and xa[0] == xb[0]:
        p = 1.0  # identical constant samples: nothing to test
    else:
        p = float(_scipy_stats().mannwhitneyu(xa, xb, alternative="two-sided").pvalue)
    verdict = SIGNIFICANT if p < alpha else NOT_SIGNIFICANT
    return Comparison(ratio=ratio, ci_low=lo, ci_high=hi, p_value=p, alpha=alpha,
                      verdict=verdict)


def compare_paired(a: Sequence[float], b: Sequence[float], alpha: float = 0.05) -> Comparison:
    """Compare `b` with `a` round by round (a[i] and b[i] measured in the same round; see the
    module doc). Rounds where either is 0 are left out."""
    if len(a) != len(b):
        raise ValueError("compare_paired needs the same number of rounds in each sample")
    pairs = [(x, y) for x, y in zip(a, b) if x > 0 and y > 0]
    if not pairs:
        raise ValueError("compare_paired needs at least one round with both values > 0")
    d = np.log(np.asarray([y / x for x, y in pairs], dtype=float))
    ratio = float(np.exp(d.mean()))
    sd = float(d.std(ddof=1)) if d.size > 1 else math.nan
    if d.size < 2 or not sd:
        same = bool(np.all(d == 0))
        return Comparison(ratio=ratio, ci_low=ratio if same else math.nan,
                          ci_high=ratio if same else math.nan, p_value=1.0 if same or d.size < 2
                          else 0.0, alpha=alpha,
                          verdict=NOT_SIGNIFICANT if same or d.size < 2 else SIGNIFICANT)
    half = float(_scipy_stats().t.ppf(1 - alpha / 2, d.size - 1)) * sd / math.sqrt(d.size)
    p = float(_scipy_stats().ttest_1samp(d, 0.0).pvalue)
    return Comparison(ratio=ratio, ci_low=math.exp(d.mean() - half),
                      ci_high=math.exp(d.mean() + half), p_value=p, alpha=alpha,
                      verdict=SIGNIFICANT if p < alpha else NOT_SIGNIFICANT)

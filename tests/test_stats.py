"""The product's one statistics module: definitions, interval coverage, comparison verdicts.

Pure and deterministic: every random sample comes from a fixed seed."""

from __future__ import annotations

import numpy as np
import pytest

from statstorm.adapters.load import vegeta
from statstorm.model import latency, stats, tracestats


def test_percentile_is_type_7_everywhere() -> None:
    x = [15, 20, 35, 40, 50]
    assert stats.percentile(x, 40) == 29.0  # h = 1.6: 20 + 0.6 * 15
    assert stats.percentile(x, 0) == 15 and stats.percentile(x, 100) == 50
    assert stats.percentile([], 50) == 0.0 and stats.percentile([7], 99) == 7
    assert stats.percentile([3, 1, 2], 50) == 2  # order does not matter
    # the three former sites now share it
    assert latency.percentile(x, 40) == tracestats.percentile(x, 0.4) == vegeta.percentile(x, 40) == 29.0
    with pytest.raises(ValueError):
        stats.percentile(x, 101)


def test_log2_buckets() -> None:
    assert [stats.log2_bucket(v) for v in (1, 2, 3, 4, 1000)] == [1, 2, 2, 4, 512]
    assert stats.log2_bucket(0.7) == 0.5 and stats.log2_bucket(0) == 0
    assert stats.log2_histogram([1, 2, 3, 4, 1000]) == [(1, 1), (2, 2), (4, 1), (512, 1)]
    assert latency.log2_histogram([0, 1, 1500]) == [(1, 2), (1024, 1)]


def test_histogram_percentiles_match_the_samples_within_resolution() -> None:
    rng = np.random.default_rng(1)
    ms = rng.lognormal(mean=1.0, sigma=0.6, size=20_000)
    h = stats.LatencyHistogram()
    for v in ms:
        h.record_ms(float(v))
    for q in (50, 90, 99):
        assert h.percentile_ms(q) == pytest.approx(stats.percentile(ms, q), rel=2e-3)


def test_spectra_merge_by_request_count() -> None:
    # 9000 requests at 1 ms and 1000 at 10 ms: the merged p50 is 1 ms, p99 is 10 ms —
    # a median of the two runs' p99s would say 5.5 ms.
    fast = [(0.0, 1.0), (100.0, 1.0)]
    slow = [(0.0, 10.0), (100.0, 10.0)]
    p50, p95, p99 = stats.merged_percentiles([(fast, 9000), (slow, 1000)], (50, 95, 99))  # type: ignore[misc]
    # (histogram values are exact to 3 significant digits)
    assert p50 == pytest.approx(1.0, rel=1e-3) and p95 == pytest.approx(10.0, rel=1e-3)
    assert p99 == pytest.approx(10.0, rel=1e-3)
    assert stats.merged_percentiles([], (50,)) is None


def test_spectrum_round_trip() -> None:
    spectrum = [(float(p), 2.0 + p / 10.0) for p in range(0, 101)]
    h = stats.LatencyHistogram()
    h.add_spectrum(spectrum, 50_000)
    assert h.count == 50_000
    for q in (10, 50, 90, 99):
        assert h.percentile_ms(q) == pytest.approx(2.0 + q / 10.0, abs=0.01)


def test_median_ci_order_statistics() -> None:
    ci = stats.median_ci(list(range(1, 21)))  # n = 20: x(6) .. x(15), coverage 95.9 %
    assert (ci.median, ci.ci_low, ci.ci_high) == (10.5, 6, 15)
    assert ci.coverage == pytest.approx(0.9586, abs=1e-4)
    small = stats.median_ci([5, 1, 3])  # too few for 95 %: the range, with its real coverage
    assert (small.ci_low, small.ci_high, small.coverage) == (1, 5, 0.75)
    assert stats.median_ci([]).n == 0


@pytest.mark.parametrize("draw", ["normal", "exponential"])
def test_median_ci_covers_at_its_level(draw: str) -> None:
    rng = np.random.default_rng(7)
    true_median = 100.0 if draw == "normal" else 10.0 * np.log(2)
    hits, trials = 0, 2000
    for _ in range(trials):
        x = rng.normal(100.0, 5.0, 15) if draw == "normal" else rng.exponential(10.0, 15)
        ci = stats.median_ci(x)
        hits += ci.ci_low <= true_median <= ci.ci_high
    assert hits / trials >= 0.94  # the interval's coverage is ≥ 95 % (binomial, exact)


def test_compare_resolves_3_percent_and_says_no_difference() -> None:
    rng = np.random.default_rng(3)
    a = rng.normal(1000.0, 5.0, 10)
    b = rng.normal(970.0, 5.0, 10)
    c = stats.compare(a, b)
    assert c.verdict == stats.SIGNIFICANT and c.p_value < 0.05
    assert c.ci_high < 1.0 and c.ci_low < c.ratio < c.ci_high
    same = stats.compare(a, rng.normal(1000.0, 5.0, 10))
    assert same.verdict == stats.NOT_SIGNIFICANT and same.ci_low < 1.0 < same.ci_high
    assert stats.compare(a, b) == c  # fixed seed: the same data, the same interval


def test_compare_single_runs_never_significant() -> None:
    c = stats.compare([2.65], [3.11])
    assert c.verdict == stats.NOT_SIGNIFICANT and c.ratio == pytest.approx(3.11 / 2.65)
    assert stats.compare([5, 5, 5], [5, 5, 5]).p_value == 1.0


def test_paired_comparison_removes_what_rounds_share() -> None:
    """Interleaved rounds drift together (here +50 % over ten rounds); B is 3 % slower in
    every round. Two-sample statistics drown that in the drift; pairing by round finds it."""
    from statstorm.model import stats
    a = [100.0 * (1 + 0.05 * i) * (1 + (0.004 if i % 2 else -0.004)) for i in range(10)]
    b = [x * 0.97 * (1 + (0.003 if i % 3 else -0.003)) for i, x in enumerate(a)]
    unpaired = stats.compare(a, b)
    paired = stats.compare_paired(a, b)
    assert unpaired.verdict == stats.NOT_SIGNIFICANT
    assert paired.verdict == stats.SIGNIFICANT
    assert paired.ci_low < 0.97 < paired.ci_high < 1.0
    same = stats.compare_paired(a, a)
    assert same.ratio == 1.0 and same.p_value == 1.0 and same.verdict == stats.NOT_SIGNIFICANT

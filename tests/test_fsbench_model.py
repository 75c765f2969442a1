"""Pure tests of the fsbench workload construction and latency statistics."""

from __future__ import annotations

from statstorm.model import fsworkload
from statstorm.model.latency import log2_histogram, percentile, ratio, summarize


def test_components_from_root() -> None:
    assert fsworkload.components("/srv/app/a/b.php") == ["/srv", "/srv/app", "/srv/app/a",
                                                         "/srv/app/a/b.php"]


def test_build_counts_and_negative_names() -> None:
    w = fsworkload.build("/srv/app", ["a/b.php", "a/c.txt", "d.php"], ["a"])
    assert w.files == ("/srv/app/a/b.php", "/srv/app/a/c.txt", "/srv/app/d.php")
    assert w.php_files == ("/srv/app/a/b.php", "/srv/app/d.php")
    assert w.dirs == ("/srv/app", "/srv/app/a")
    assert w.calls_per_pass("walk") == 4 + 4 + 3
    assert all(n.endswith(fsworkload.MISSING_SUFFIX) for n in w.negative_names)
    assert w.calls_per_pass("find") == 1 and w.max_depth == 1


def test_sample_is_deterministic_and_bounded() -> None:
    items = [f"f{i}" for i in range(100)]
    s = fsworkload.sample(items, 10)
    assert len(s) == 10 and s == fsworkload.sample(items, 10) and s[0] == "f0"


def test_percentiles_and_summary() -> None:
    s = list(range(1000, 101000, 1000))  # 1..100 µs
    assert percentile(s, 50) == 50500
    st = summarize(s, wall_s=0.5)
    assert st.count == 100 and st.ops_per_s == 200 and st.max_us == 100
    assert abs(st.p99_us - 99.01) < 0.01
    assert sum(c for _, c in st.histogram) == 100


def test_histogram_buckets() -> None:
    assert log2_histogram([1, 2, 3, 4, 1000]) == [(1, 1), (2, 2), (4, 1), (512, 1)]


def test_ratio_none_on_zero() -> None:
    assert ratio(5, 0) is None and ratio(6, 2) == 3

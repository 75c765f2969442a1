"""`statstorm matrix`: a cell's summary and the pairwise comparisons, from the rounds only
(statistics from statstorm.model.stats). Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import combinations
from typing import Any

from statstorm.model import stats
from statstorm.results.matrix import (Cell, CellSummary, FailedBy, HugePages, MatrixResult,
                                      PssMb, RpsInterval)

PARAMS = ("server", "mpm", "handler", "opcache", "huge_code_pages", "storage", "php")


def _mb(kb: float) -> float:
    return round(kb / 1024.0, 1)


def summarize(cell: Cell) -> CellSummary:
    """rps (median of the rounds and its interval), p50/p99 of all requests (the rounds'
    histograms merged), failures, requests, memory and huge pages."""
    rounds = cell.rounds
    ci = stats.median_ci([r.rps for r in rounds])
    merged = stats.merged_percentiles([(r.percentiles, r.requests) for r in rounds], (50, 99))
    mem = [r.memory for r in rounds if r.memory.samples]
    pss, huge = None, None
    if mem:
        pss = PssMb(server=_mb(stats.median([m.server_steady_kb for m in mem])),
                    php=_mb(stats.median([m.php_steady_kb for m in mem])),
                    per_worker=_mb(stats.median([m.per_worker_kb for m in mem])),
                    server_peak=_mb(max(m.server_peak_kb for m in mem)),
                    php_peak=_mb(max(m.php_peak_kb for m in mem)),
                    workers=max(m.workers for m in mem))
        last = mem[-1]
        huge = HugePages(anon_huge_mb=_mb(last.anon_huge_kb), file_pmd_mb=_mb(last.file_pmd_kb),
                         workers_with_huge_pages=last.workers_with_huge_pages,
                         workers=last.workers, in_use=last.workers_with_huge_pages > 0)
    return CellSummary(
        rps=RpsInterval(median=round(ci.median, 2), ci_low=round(ci.ci_low, 2),
                        ci_high=round(ci.ci_high, 2), coverage=ci.coverage, rounds=ci.n,
                        samples=tuple(round(r.rps, 2) for r in rounds)),
        p50_ms=round(merged[0], 3) if merged else None,
        p99_ms=round(merged[1], 3) if merged else None,
        failed=sum(r.failed for r in rounds),
        failed_by=FailedBy(status=sum(r.bad_status for r in rounds),
                           length=sum(r.bad_length for r in rounds),
                           marker=sum(r.bad_marker for r in rounds),
                           socket=sum(r.socket_errors for r in rounds)),
        requests=sum(r.requests for r in rounds), pss_mb=pss, huge_pages=huge)


def differs_in(a: Cell, b: Cell) -> list[str]:
    return [p for p in PARAMS if getattr(a, p) != getattr(b, p)]


def comparisons(result: MatrixResult, alpha: float) -> list[dict[str, Any]]:
    """Every pair of cells with rounds: B's throughput against A's. Cells measured in the same
    rounds are compared round by round (model.stats.compare_paired: geometric mean of the
    per-round ratios, Wilcoxon signed-rank); otherwise as two samples (ratio of medians,
    Mann-Whitney)."""
    out = []
    cells = [c for c in result.cells if c.rounds]
    for a, b in combinations(cells, 2):
        by_a = {r.round: r.rps for r in a.rounds}
        by_b = {r.round: r.rps for r in b.rounds}
        ra, rb = list(by_a.values()), list(by_b.values())
        if not any(ra):
            continue
        shared = sorted(set(by_a) & set(by_b))
        paired = len(shared) >= 2 and all(by_a[k] > 0 and by_b[k] > 0 for k in shared)
        c = (stats.compare_paired([by_a[k] for k in shared], [by_b[k] for k in shared],
                                  alpha=alpha) if paired else stats.compare(ra, rb, alpha=alpha))
        out.append({"a": a.id, "b": b.id, "differs_in": differs_in(a, b),
                    "method": "paired by round" if paired else "two samples",
                    "ratio": _round(c.ratio, 4), "ci_low": _round(c.ci_low, 4),
                    "ci_high": _round(c.ci_high, 4), "p_value": _round(c.p_value, 5),
                    "alpha": alpha, "verdict": c.verdict, "rounds": [len(ra), len(rb)]})
    return out


def _round(v: float, digits: int) -> float | None:
    return None if math.isnan(v) else round(v, digits)


def refresh(result: MatrixResult, alpha: float) -> MatrixResult:
    """The result with every cell's summary and the comparisons recomputed from the rounds."""
    cells = tuple(replace(cell, summary=summarize(cell)) for cell in result.cells)
    with_cells = replace(result, cells=cells)
    return replace(with_cells, comparisons=tuple(comparisons(with_cells, alpha)))


def shown(comparison: dict[str, Any]) -> bool:
    """A comparison the table shows by default: the cells differ in one parameter at most
    (none: a cell and its test-knob twin)."""
    return len(comparison["differs_in"]) <= 1


def half_width(ratio: float | None, low: float | None, high: float | None) -> float:
    """An interval's relative half-width around its estimate (0.02: ±2 %); inf when there
    is no interval yet."""
    if not ratio or not low or not high or ratio <= 0 or low <= 0:
        return math.inf
    return max(high / ratio, ratio / low) - 1.0


@dataclass(frozen=True)
class Precision:
    widest: float  # the widest relative half-width (inf: an interval is missing)
    what: str  # the comparison ("A vs B") or cell it belongs to
    met: bool


def precision(result: MatrixResult, goal: float) -> Precision:
    """Whether every comparison the table shows has its 95 % interval within ±goal of its
    ratio (a matrix of one cell: that cell's median interval). The rule looks at the
    intervals' width only, never at the ratios or the verdicts, so stopping on it does not
    favour one answer."""
    widths = [(half_width(c["ratio"], c["ci_low"], c["ci_high"])
               if min(c["rounds"]) > 1 else math.inf, f"{c['a']} vs {c['b']}")
              for c in result.comparisons if shown(c)]
    if not widths:
        for cell in result.cells:
            rps = cell.summary.rps if cell.summary is not None else RpsInterval(None, None, None)
            widths.append((half_width(rps.median, rps.ci_low, rps.ci_high)
                           if rps.rounds > 1 else math.inf, cell.id))
    if not widths:
        return Precision(math.inf, "", False)
    widest, what = max(widths, key=lambda w: w[0])
    return Precision(widest, what, widest <= goal)

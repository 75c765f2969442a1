"""The report's sections, one builder per kind of result: traces, sweeps, fsbench, the demo,
the matrix, whatif and apply. Each takes loaded result files and returns `Section`s of
charts (report.charts) and tables. Pure functions of the files' data.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from collections.abc import Mapping, Sequence
from typing import Any

from statstorm.model import storage_delay
from statstorm.report import charts
from statstorm.report.charts import Chart, fmt
from statstorm.results.fsbench import FsbenchResult
from statstorm.results.matrix import MatrixResult
from statstorm.results.jsontypes import JsonValue
from statstorm.results.sweep import LevelResult, SweepResult
from statstorm.results.trace.summary import MountFigures, TraceSummary

CALL_TYPES = ("lstat", "stat", "fstat", "access", "open", "readlink", "getcwd")
TOP_ROWS = 10


@dataclass
class Table:
    caption: str
    headers: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    numeric: bool = True  # right-align every column after the first


@dataclass
class Section:
    id: str
    title: str
    intro: list[str] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    details: list[tuple[str, str]] = field(default_factory=list)  # (summary, preformatted)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


def label(name: str) -> str:
    """A result's short name in the page: its file name without the suffixes."""
    return re.sub(r"(\.sst(\.gz)?|\.json)$", "", name)


# -- traces -------------------------------------------------------------------------------------
def summary_of(s: TraceSummary | Mapping[str, JsonValue]) -> TraceSummary:
    """A trace summary, or its JSON as `trace show --json` gives it (an older or excerpted
    one may lack its totals, which the page does not show)."""
    return s if isinstance(s, TraceSummary) else TraceSummary.from_json({"totals": {}, **s})


def latency(m: MountFigures) -> tuple[str, str, str]:
    """A mount's p50, p99 and max latency (µs) as the tables show them."""
    lu = m.latency_us
    return (fmt(lu.p50), fmt(lu.p99), fmt(lu.max)) if lu is not None else (fmt(None),) * 3


def traces(items: Sequence[tuple[str, TraceSummary | Mapping[str, JsonValue]]]) -> list[Section]:
    """`items`: (label, trace summary) in the order given (before first)."""
    if not items:
        return []
    typed = [(name, summary_of(s)) for name, s in items]
    sec = Section("traces", "Metadata calls per request")
    for name, s in typed:
        net = s.trace.network
        sec.intro.append(
            f"{name}: {s.requests} request(s) from {s.source or '?'}, "
            f"{s.per_request.total or 0:,.1f} metadata calls and "
            f"{s.per_request.failed or 0:,.1f} failed per request"
            + (f", {net.per_request:,.1f} network round trips per request (volume "
               f"{net.volume or '?'})" if net is not None and net.per_request is not None
               else "")
            + (f"; {s.trace.dropped} events lost" if s.trace.dropped else "") + ".")
    by_op = [(n, {k: float(v.per_request) for k, v in s.by_operation.items()})
             for n, s in typed if s.by_operation]
    if by_op:
        sec.charts.append(charts.stacked(
            "chart-ops", "Metadata calls per request by PHP operation", by_op,
            "calls per request"))
    by_call = [(n, {c: float(s.per_request[c] or 0) for c in CALL_TYPES}) for n, s in typed]
    sec.charts.append(charts.stacked("chart-calls", "Metadata calls per request by call type",
                                     by_call, "calls per request"))
    for n, s in typed:
        mounts = [(f"{m.mount} ({m.fstype})", m.histogram_us)
                  for m in s.by_mount or () if m.histogram_us]
        if mounts:
            sec.charts.append(charts.histograms(
                f"chart-hist-{slug(n)}", f"{n}: syscall latency by mount", mounts))
        lat = [(f"{m.mount} ({m.fstype})", m.per_request, m.failed, *latency(m))
               for m in s.by_mount or ()]
        if lat:
            sec.tables.append(Table(f"{n}: calls by mount (latency in µs)",
                                    ("mount", "per request", "failed", "p50", "p99", "max"), lat))
    entries = [(n, s.failed_by_include_path_entry or ()) for n, s in typed]
    names = list(dict.fromkeys(e.entry for _, es in entries for e in es))
    if names:
        sec.charts.append(charts.grouped(
            "chart-include-path", "Failed lookups per request by include_path entry", names,
            [(n, [next((e.per_request for e in es if e.entry == x), 0.0) for x in names])
             for n, es in entries], "failed lookups per request"))
    else:
        sec.intro.append("No failed lookup came from an include_path entry.")
    for n, s in typed:
        if s.top_paths:
            sec.tables.append(Table(f"{n}: top paths", ("path", "calls", "failed"),
                                    [(p.path, p.calls, p.failed)
                                     for p in s.top_paths[:TOP_ROWS]]))
        if s.top_dirs:
            sec.tables.append(Table(f"{n}: top directories", ("directory", "calls"),
                                    [(d.dir, d.calls) for d in s.top_dirs[:TOP_ROWS]]))
    return [sec]


# -- sweep --------------------------------------------------------------------------------------
def _spread(vals: list[float]) -> tuple[float, float] | None:
    return (min(vals), max(vals)) if vals else None


def sweep(name: str, data: SweepResult) -> Section:
    levels = sorted(data.levels, key=lambda lv: lv.level)
    closed = data.model == "closed"
    x_label = "concurrency (connections)" if closed else "offered rate (requests/s)"
    xs = [lv.level for lv in levels]
    knee = data.knee
    marks = []
    if knee is not None and knee.knee is not None:
        marks.append((float(knee.knee), "knee"))
    if knee is not None and knee.collapse and knee.collapse_at is not None:
        marks.append((float(knee.collapse_at), "collapse"))
    sec = Section(f"sweep-{slug(name)}", f"HTTP sweep of {data.target or '?'} ({name})")
    sec.intro.append(f"{data.tool or '?'}, {data.model or '?'} model, "
                     f"{len(levels)} level(s), started {data.started or '?'}"
                     + (" (interrupted)" if data.interrupted else "") + ".")
    if knee is not None and knee.sentence:
        sec.intro.append(knee.sentence)
    sec.intro += [f"warning: {w}" for w in data.warnings]
    if not levels:
        sec.intro.append("No level finished.")
        return sec

    def runs(lv: LevelResult, key: str) -> list[float]:
        return [float(getattr(r.run, key)) for r in lv.repeats]

    rps_spread = [_spread([round(r.run.rps, 3) for r in lv.repeats]) or (lv.rps, lv.rps)
                  for lv in levels]
    sec.charts.append(charts.curves(
        f"chart-sweep-rps-{slug(name)}", f"{name}: throughput against {x_label.split(' (')[0]}",
        x_label, xs, [("requests/s (median of repeats; bars: their range)",
                       [float(lv.rps) for lv in levels], rps_spread)],
        "requests/s", marks))
    lat_series = []
    for key in ("p50", "p99"):
        lat_series.append((f"{key} ms (median; bars: range of repeats)",
                           [float(getattr(lv, key)) for lv in levels],
                           [_spread(runs(lv, key)) or (getattr(lv, key), getattr(lv, key))
                            for lv in levels]))
    sec.charts.append(charts.curves(
        f"chart-sweep-lat-{slug(name)}", f"{name}: latency against {x_label.split(' (')[0]}",
        x_label, xs, lat_series, "latency, ms (log scale)", marks, log_y=True))
    sec.tables.append(Table(f"{name}: levels", (x_label, "req/s", "± spread", "p50 ms",
                                                "p99 ms", "failed", "validation"),
                            [(fmt(x), fmt(lv.rps), fmt(lv.rps_spread), fmt(lv.p50),
                              fmt(lv.p99), lv.errors.total, lv.validation or "ok")
                             for x, lv in zip(xs, levels)]))
    return sec


# -- fsbench ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ratio:
    """One operation, state and PATH after the first against the first PATH: the ratio of
    time per call (the inverse ratio of throughput) and the p50 ratio beside it."""

    op: str
    state: str
    path_index: int
    time_ratio: float | None
    p50_ratio: float | None
    ops_per_s: float
    first_ops_per_s: float
    p50_us: float
    p99_us: float


def ratios(result: FsbenchResult) -> list[Ratio]:
    """Per operation, state and PATH after the first: the ratio of time per call (the inverse
    ratio of throughput) to the first PATH, and the p50 ratio beside it for contrast."""
    cells = {(c.op, c.state, c.path_index): c for c in result.cells}
    out = []
    for (op, state, i), c in cells.items():
        first = cells.get((op, state, 0))
        if i == 0 or first is None:
            continue
        a, b = first.stats, c.stats
        out.append(Ratio(op, state, i, (a.ops_per_s / b.ops_per_s) if b.ops_per_s else None,
                         (b.p50_us / a.p50_us) if a.p50_us else None, b.ops_per_s,
                         a.ops_per_s, b.p50_us, b.p99_us))
    return out


def fsbench_ratios(data: dict[str, Any]) -> list[dict[str, Any]]:
    """`ratios` of an fsbench file's JSON, each as a mapping (for readers of the JSON)."""
    return [asdict(r) for r in ratios(FsbenchResult.from_json(data))]


def _path_label(data: FsbenchResult, i: int) -> str:
    fstype = data.mount_facts(i)[1]
    delay = data.storage_delay_us(i)
    if delay:  # the lab's --storage-delay: the storage it stands for is that far away
        fstype = f"{fstype}, +{storage_delay.format_us(delay)} per metadata call"
    return f"PATH {i + 1}" + (f" ({fstype})" if fstype else "")


def fsbench(name: str, data: FsbenchResult) -> Section:
    sec = Section(f"fsbench-{slug(name)}", f"Storage: metadata latency per operation ({name})")
    sec.intro.append("PATHs: " + "; ".join(f"{_path_label(data, i)} {p}"
                                           for i, p in enumerate(data.paths))
                     + ". Ratios are time per call (the first PATH's throughput over this "
                       "PATH's), not p50: on network storage most calls hit the client's cache "
                       "and the slow tail is the cost.")
    rs = ratios(data)
    groups = list(dict.fromkeys(f"{r.op} {r.state}" for r in rs))
    others = sorted({r.path_index for r in rs})
    if rs:
        series = [(f"{_path_label(data, i)} / {_path_label(data, 0)}",
                   [next((r.time_ratio for r in rs if f"{r.op} {r.state}" == g
                          and r.path_index == i), None) for g in groups]) for i in others]
        sec.charts.append(charts.grouped(
            f"chart-fsbench-{slug(name)}", f"{name}: time per call relative to "
            f"{_path_label(data, 0)} (log scale; 1 = as fast)", groups, series,
            "x first PATH (time per call)", log=True, ref=1.0))
    rows = []
    for c in data.cells:
        r = next((x for x in rs if (x.op, x.state, x.path_index) ==
                  (c.op, c.state, c.path_index)), None)
        st = c.stats
        rows.append((f"{c.op} {c.state}", _path_label(data, c.path_index),
                     fmt(st.ops_per_s), fmt(st.p50_us), fmt(st.p99_us),
                     f"{r.time_ratio:.1f}x" if r and r.time_ratio else "",
                     f"{r.p50_ratio:.1f}x" if r and r.p50_ratio else "", c.enoent))
    sec.tables.append(Table(f"{name}: cells", ("operation", "PATH", "calls/s", "p50 µs", "p99 µs",
                                               "x first (time/call)", "p50 ratio", "ENOENT"), rows))
    sec.intro += [f"caveat: {c}" for c in data.caveats]
    return sec


# -- matrix -------------------------------------------------------------------------------------
def matrix(name: str, data: MatrixResult) -> Section:
    cells = data.cells
    sec = Section(f"matrix-{slug(name)}", f"Matrix: server architectures and settings ({name})")
    if data.app:
        sec.intro.append(f"app: {data.app}.")
    labels = [c.label for c in cells]
    rps = [c.summary.rps if c.summary is not None else None for c in cells]
    if cells:
        sec.charts.append(charts.grouped(
            f"chart-matrix-{slug(name)}", f"{name}: throughput per cell (median, bars: "
            "confidence interval)", labels,
            [("requests/s", [r.median if r else None for r in rps])], "requests/s",
            errors=[[(r.ci_low, r.ci_high) if r and r.ci_low is not None
                     and r.ci_high is not None else None for r in rps]]))
    rows = []
    for lab, c, r in zip(labels, cells, rps):
        s = c.summary
        pss = s.pss_mb if s is not None else None
        rows.append((lab, fmt(r.median if r else None),
                     f"{fmt(r.ci_low if r else None)}–{fmt(r.ci_high if r else None)}",
                     fmt(s.p50_ms if s else None), fmt(s.p99_ms if s else None),
                     s.failed if s else 0, s.requests if s else 0,
                     " / ".join(fmt(getattr(pss, k) if pss else None)
                                for k in ("server", "php", "per_worker"))))
    sec.tables.append(Table(f"{name}: cells", ("cell", "req/s", "CI", "p50 ms", "p99 ms",
                                               "failed", "requests", "PSS MB server / PHP / worker"),
                            rows))
    for comp in data.comparisons:  # JSON objects as written (model.matrix_summary)
        if isinstance(comp, dict):
            sec.intro.append(str(comp.get("sentence") or "; ".join(
                f"{k} {v}" for k, v in comp.items() if not isinstance(v, (dict, list)))))
        else:
            sec.intro.append(str(comp))
    return sec

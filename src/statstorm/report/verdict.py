"""What the results say: the headline sentence, check's findings by severity with their
predicted gain and what became of them, predicted against measured, and the sections of the
verbs that change things (demo, whatif, apply). Pure functions of the files' data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from statstorm.report import charts
from statstorm.report.charts import _fmt
from statstorm.report.sections import Section, Table, cell_label, fsbench_ratios, slug
from statstorm.results.demo import DemoResult, JsonObject, Phase

DemoData = DemoResult | JsonObject  # the demo as its class, or demo.json's content

SEVERITIES = ("critical", "warning", "info")
APPS = {"mediawiki": "MediaWiki", "synthetic": "the synthetic app", "wordpress": "WordPress"}
STORAGES = {"glusterfs": "GlusterFS", "nfs": "NFS", "local": "local disk"}


@dataclass
class Headline:
    what: str
    on: str
    verdict: str


@dataclass
class FindingRow:
    severity: str
    id: str
    title: str
    evidence: list[str]
    change: list[str]
    tradeoff: str
    predicted: str
    outcome: str
    docs: str = ""


@dataclass
class Outcome:
    """Predicted against measured: one row per metric."""

    rows: list[tuple[str, str, str, str, str]] = field(default_factory=list)  # metric, before,
    # predicted, measured after, source


def pct_change(a: float | None, b: float | None) -> str:
    if a in (None, 0) or b is None:
        return ""
    return f"{(b - a) / a:+.0%}"


def fewer(a: float | None, b: float | None) -> str:
    if not a or b is None:
        return ""
    return f"{(a - b) / a:.0%} fewer" if b <= a else f"{(b - a) / a:.0%} more"


def as_demo(d: DemoData) -> DemoResult:
    return d if isinstance(d, DemoResult) else DemoResult.from_json(d)


def ratio_rps(p: Phase | None) -> float | None:
    return p.ratio_rps if p is not None else None


def ratio_p99(p: Phase | None) -> float | None:
    return p.ratio_p99 if p is not None else None


# -- findings -----------------------------------------------------------------------------------
def gain_text(f: dict[str, Any]) -> str:
    g = f.get("predicted_gain")
    if not g:
        return f"– ({f.get('gain_note')})" if f.get("gain_note") else "–"
    text = f"{g.get('syscalls_per_request', 0):+,.1f} {g.get('metric', '')}"
    if "us_per_request" in g:
        text += f", {g['us_per_request']:+,.1f} µs per request"
    return text


def findings(checks: list[tuple[str, dict[str, Any]]],
             demo_data: DemoData | None) -> list[FindingRow]:
    """The first check's findings (the demo's before, when no check file is given), each with
    what a later check (or the demo's after) says of it."""
    demo = as_demo(demo_data) if demo_data is not None else None
    if checks:
        first_name, first = checks[0]
        later = checks[1:]
        rows = []
        for f in first.get("findings") or []:
            outcome = ""
            for name, chk in later:
                still = any(x.get("id") == f.get("id") for x in chk.get("findings") or [])
                outcome = f"{'still reported' if still else 'gone'} in {name}"
            if not outcome and demo is not None and demo.findings_after:
                still = any(s.endswith(f": {f.get('id')}") for s in demo.findings_after)
                outcome = "still reported after the fix" if still else "gone after the fix"
            rows.append(FindingRow(str(f.get("severity")), str(f.get("id")), str(f.get("title")),
                                   list(f.get("evidence") or []), list(f.get("change") or []),
                                   str(f.get("tradeoff", "")), gain_text(f), outcome,
                                   str(f.get("docs", ""))))
        return sorted(rows, key=lambda r: SEVERITIES.index(r.severity)
                      if r.severity in SEVERITIES else 9)
    if demo is not None:
        rows = []
        for s in demo.findings_before:
            sev, _, fid = s.partition(": ")
            rows.append(FindingRow(sev, fid, fid, [], [], "", "–",
                                   "still reported after the fix" if s in demo.findings_after
                                   else "gone after the fix"))
        return sorted(rows, key=lambda r: SEVERITIES.index(r.severity)
                      if r.severity in SEVERITIES else 9)
    return []


# -- predicted against measured -----------------------------------------------------------------
def outcome(demo_data: DemoData | None, whatifs: list[tuple[str, dict[str, Any]]],
            applies: list[tuple[str, dict[str, Any]]],
            trace_totals: list[tuple[str, float]]) -> Outcome:
    out = Outcome()
    if demo_data is not None:
        demo = as_demo(demo_data)
        calls, rt = demo.metadata_calls_per_request, demo.round_trips()
        out.rows.append(("metadata calls per request", _fmt(calls.before),
                         _fmt(calls.predicted), _fmt(calls.after),
                         "demo (whatif of the PHP settings; traces)"))
        out.rows.append(("network round trips per request", _fmt(rt.before),
                         _fmt(rt.predicted), _fmt(rt.after),
                         "demo (forecast of the mount and app changes; volume profile)"))
        for ratio, what in ((ratio_rps, "throughput, network / local"),
                            (ratio_p99, "p99 latency, network / local")):
            rb, ra = ratio(demo.before), ratio(demo.after)
            out.rows.append((what, f"{_fmt(rb)}x" if rb else "–", "–",
                             f"{_fmt(ra)}x" if ra else "–", "demo (medians of the rounds)"))
    for name, w in whatifs:
        cur = (w.get("current") or {}).get("per_request", {}).get("total")
        prop = (w.get("proposed") or {}).get("per_request", {}).get("total")
        measured = trace_totals[-1][1] if len(trace_totals) > 1 else None
        out.rows.append(("metadata calls per request", _fmt(cur), _fmt(prop), _fmt(measured),
                         f"whatif {name}" + (f"; measured in {trace_totals[-1][0]}"
                                             if measured is not None else "")))
    for name, a in applies:
        v = a.get("verify") or {}
        b, af = v.get("before") or {}, v.get("after") or {}
        for key, what in (("syscalls_per_request", "metadata calls per request"),
                          ("round_trips_per_request", "network round trips per request"),
                          ("rps", "throughput, requests/s"), ("p99_ms", "p99 latency, ms")):
            if b.get(key) is not None or af.get(key) is not None:
                out.rows.append((what, _fmt(b.get(key)), "–", _fmt(af.get(key)),
                                 f"apply --verify {name}"))
    return out


# -- headline -----------------------------------------------------------------------------------
def headline(kinds: dict[str, list[tuple[str, dict[str, Any]]]], host: str,
             trace_totals: list[tuple[str, float]], n_findings: dict[str, int]) -> Headline:
    on = f"host {host}" if host else "this machine"
    demos = kinds.get("demo")
    if demos:
        d = as_demo(demos[0][1])
        app = APPS.get(d.app, d.app)
        st = STORAGES.get(d.storage, d.storage)
        rb, ra = ratio_rps(d.before), ratio_rps(d.after)
        rt = d.round_trips()
        parts = []
        if rb:
            parts.append(f"{st} {rb:.2f}x local throughput before" +
                         (f", {ra:.2f}x after" if ra else " (no after measurement)"))
        if rt.before and rt.after is not None:
            parts.append(f"{fewer(rt.before, rt.after)} network round trips per request "
                         f"({_fmt(rt.before)} → {_fmt(rt.after)})")
        calls = d.metadata_calls_per_request
        if calls.before and calls.after is not None:
            parts.append(f"{fewer(calls.before, calls.after)} metadata calls per request")
        return Headline(f"{app} on local disk and on {st}, measured before and after "
                        "statstorm's fix", on, "; ".join(parts) + "." if parts
                        else "the demo did not finish a measurement.")
    if kinds.get("apply") and any((x[1].get("verify") for x in kinds["apply"])):
        name, a = next(x for x in kinds["apply"] if x[1].get("verify"))
        ch = (a["verify"].get("change") or {})
        worse = a["verify"].get("worse")
        return Headline(f"apply --verify on pool {(a.get('target') or {}).get('pool', '?')}", on,
                        f"throughput {ch.get('rps', 0):+.0%}, metadata calls per request "
                        f"{(ch.get('syscalls_per_request') or 0):+.0%}"
                        + (f"; rolled back: {worse}" if worse else "; kept") + ".")
    if kinds.get("matrix"):
        cells = [c for c in kinds["matrix"][0][1].get("cells") or [] if (c.get("rps") or {}).get("median")]
        if cells:
            best = max(cells, key=lambda c: c["rps"]["median"])
            worst = min(cells, key=lambda c: c["rps"]["median"])
            return Headline(f"{len(cells)} server and PHP configurations", on,
                            f"fastest {cell_label(best)} at {_fmt(best['rps']['median'])} req/s, "
                            f"{best['rps']['median'] / worst['rps']['median']:.1f}x the slowest "
                            f"({cell_label(worst)}).")
    if len(trace_totals) > 1:
        (a_name, ta), (b_name, tb) = trace_totals[0], trace_totals[-1]
        return Headline(f"traces {a_name} and {b_name}", on,
                        f"metadata calls per request {_fmt(ta)} → {_fmt(tb)} "
                        f"({pct_change(ta, tb)}).")
    if kinds.get("sweep"):
        name, s = kinds["sweep"][0]
        k = s.get("knee") or {}
        return Headline(f"HTTP sweep of {s.get('target', '?')}", on,
                        str(k.get("sentence") or f"{len(s.get('levels') or [])} level(s) measured."))
    if kinds.get("fsbench"):
        name, f = kinds["fsbench"][0]
        rs = [r for r in fsbench_ratios(f) if r["time_ratio"]]
        if rs:
            worst = max(rs, key=lambda r: r["time_ratio"])
            return Headline(f"metadata latency of {len(f.get('paths') or [])} storage paths", on,
                            f"{worst['op']} ({worst['state']}) takes {worst['time_ratio']:.1f}x the "
                            "first PATH's time per call on PATH "
                            f"{worst['path_index'] + 1} (p50 ratio {worst['p50_ratio'] or 0:.1f}x).")
    if n_findings:
        return Headline("check of the live PHP configuration", on, ", ".join(
            f"{n} {s}" for s, n in n_findings.items() if n) + " finding(s).")
    if trace_totals:
        return Headline(f"trace {trace_totals[0][0]}", on,
                        f"{_fmt(trace_totals[0][1])} metadata calls per request.")
    return Headline("statstorm results", on, "nothing measured to compare.")


# -- sections of the verbs that change things -------------------------------------------------
def demo_section(name: str, data: DemoData) -> Section:
    d = as_demo(data)
    sec = Section(f"demo-{slug(name)}", "Demo: before and after the fix")
    sec.intro.append("Labs: " + "; ".join(f"{role} {lab.name} ({lab.url})"
                                          for role, lab in d.labs.items()) + ".")
    phases = d.phases()
    storage = STORAGES.get(d.storage, d.storage)
    for key, what, unit in (("rps", "throughput", "requests/s"), ("p99_ms", "p99 latency", "ms")):
        series: list[tuple[str, list[float | None]]] = []
        errs: list[list[tuple[float, float] | None]] = []
        for role in ("local", "network"):
            sides = [p.side(role) for _, p in phases]
            series.append((f"{role} (median of rounds; bars: range)",
                           [s.rps if key == "rps" else s.p99_ms for s in sides]))
            ranges = [s.rps_range if key == "rps" else s.p99_range for s in sides]
            errs.append([(r[0], r[1]) if len(r) == 2 else None for r in ranges])
        if phases:
            sec.charts.append(charts.grouped(f"chart-demo-{key}", f"Demo: {what}, local disk "
                                             f"and {storage}", [n for n, _ in phases], series,
                                             unit, errors=errs))
    calls, rt = d.metadata_calls_per_request, d.round_trips()
    stages = ("before", "predicted", "after")
    sec.charts.append(charts.grouped(
        "chart-demo-calls", "Demo: per request, before, predicted and after",
        ["metadata calls", "network round trips"],
        [(s, [calls.stage(s), rt.stage(s)]) for s in stages], "per request"))
    rows = []
    for p, phase in phases:
        for role in ("local", "network"):
            for i, r in enumerate(phase.side(role).rounds, 1):
                rows.append((p, role, i, _fmt(r.rps), _fmt(r.p50_ms), _fmt(r.p99_ms), r.errors,
                             r.requests, "" if r.round_trips is None else r.round_trips))
    sec.tables.append(Table("Demo: every round", ("phase", "lab", "round", "req/s", "p50 ms",
                                                  "p99 ms", "failed", "requests", "round trips"),
                            rows))
    for role, settings in d.settings.items():
        if settings.changes:
            sec.details.append((f"changes made on the {role} lab", "\n".join(settings.changes)))
    if d.manual:
        sec.intro.append("Left to do by hand: " + "; ".join(d.manual) + ".")
    sec.intro += [f"note: {n}" for n in d.notes]
    return sec


def whatif_section(name: str, w: dict[str, Any]) -> Section:
    sec = Section(f"whatif-{slug(name)}", f"What-if: predicted effect of settings ({name})")
    changes = w.get("changes") or {}
    sec.intro.append("Proposed: " + (", ".join(f"{k}={v}" for k, v in changes.items())
                                     or "(no change)") + f"; latency profile {w.get('profile', '?')}.")
    keys = [k for k in ("lstat", "stat", "fstat", "access", "open", "readlink", "getcwd",
                        "total", "failed")
            if k in (w.get("current") or {}).get("per_request", {})]
    measured = (w.get("measured") or {}).get("per_request") or {}
    series = [("measured", [measured.get(k) for k in keys]),
              ("current (model)", [w["current"]["per_request"].get(k) for k in keys]),
              ("proposed (model)", [w["proposed"]["per_request"].get(k) for k in keys])]
    sec.charts.append(charts.grouped(f"chart-whatif-{slug(name)}", f"{name}: calls per request, "
                                     "measured, modelled now and under the proposal", keys,
                                     series, "calls per request"))
    cur_t = w["current"].get("metadata_time_us_per_request")
    prop_t = w["proposed"].get("metadata_time_us_per_request")
    if cur_t is not None:
        sec.intro.append(f"Metadata time per request: {_fmt(cur_t)} µs now, {_fmt(prop_t)} µs "
                         f"proposed ({pct_change(cur_t, prop_t)}).")
    fm = w.get("find_min")
    if fm:
        sec.intro.append(fm.get("note") or f"Smallest realpath_cache_size holding every worker's "
                         f"working set: {fm.get('ini')} ({fm.get('bytes')} bytes).")
    return sec


def apply_section(name: str, a: dict[str, Any]) -> Section:
    t = a.get("target") or {}
    sec = Section(f"apply-{slug(name)}", f"Apply on pool {t.get('pool', '?')}: "
                  f"{a.get('mode', '?')} ({name})")
    rows = [(c.get("finding", ""), c.get("kind", ""), c.get("line", ""), c.get("current") or "")
            for c in a.get("changes") or []]
    if rows:
        sec.tables.append(Table("changes", ("finding", "kind", "line", "was"), rows, numeric=False))
    if a.get("manual"):
        sec.intro.append("Left to do by hand: " + "; ".join(
            str(c.get("line", c)) for c in a["manual"]) + ".")
    v = a.get("verify")
    if v:
        b, af, ch = v.get("before") or {}, v.get("after") or {}, v.get("change") or {}
        keys = [k for k in ("rps", "p50_ms", "p99_ms", "syscalls_per_request",
                            "round_trips_per_request", "errors") if k in b or k in af]
        sec.tables.append(Table("verify: measured before and after", ("metric", "before", "after",
                                                                     "change"),
                                [(k, _fmt(b.get(k)), _fmt(af.get(k)),
                                  f"{ch[k]:+.1%}" if ch.get(k) is not None else "") for k in keys]))
        sec.intro.append(f"Verdict: {'worse, rolled back: ' + v['worse'] if v.get('worse') else 'kept'}.")
    if a.get("reason"):
        sec.intro.append(f"Rolled back: {a['reason']}.")
    for f in a.get("files") or []:
        if f.get("diff"):
            sec.details.append((f"diff of {f.get('path')}", f["diff"]))
    sec.intro += [f"note: {n}" for n in a.get("notes") or []]
    return sec

"""What the results say: the headline sentence, check's findings by severity with their
predicted gain and what became of them, predicted against measured, and the sections of the
verbs that change things (demo, whatif, apply). Pure functions of the files' data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statstorm.model import prediction_fit
from statstorm.model.storage_kinds import TABLE
from statstorm.report import charts
from statstorm.report.charts import fmt
from statstorm.report.sections import Section, Table, ratios, slug
from statstorm.results import check
from statstorm.results.apply_report import ApplyReport
from statstorm.results.apply_verify import Verify
from statstorm.results.check import CheckResult, Finding
from statstorm.results.demo import DemoResult, JsonObject, Phase
from statstorm.results.jsontypes import JsonValue
from statstorm.results.fsbench import FsbenchResult
from statstorm.results.matrix import MatrixResult
from statstorm.results.sweep import SweepResult
from statstorm.results.whatif import WhatifResult

DemoData = DemoResult | JsonObject  # the demo as its class, or demo.json's content

SEVERITIES = tuple(s.value for s in reversed(check.SEVERITIES))  # most severe first
APPS = {"mediawiki": "MediaWiki", "synthetic": "the synthetic app", "wordpress": "WordPress"}
STORAGES = {str(s.kind): s.title for s in TABLE}  # GlusterFS, NFS, local disk…


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
    notes: list[str] = field(default_factory=list)  # figures not predicted, and why


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
def gain_text(f: Finding) -> str:
    g = f.predicted_gain
    if not g:
        return f"– ({f.gain_note})" if f.gain_note else "–"
    text = f"{g['syscalls_per_request']:+,.1f} {g['metric']}"
    if "us_per_request" in g:
        text += f", {g['us_per_request']:+,.1f} µs per request"
    return text


def findings(checks: list[tuple[str, CheckResult]],
             demo_data: DemoData | None) -> list[FindingRow]:
    """The first check's findings (the demo's before, when no check file is given), each with
    what a later check (or the demo's after) says of it."""
    demo = as_demo(demo_data) if demo_data is not None else None
    if checks:
        first_name, first = checks[0]
        later = checks[1:]
        rows = []
        for f in first.findings:
            outcome = ""
            for name, chk in later:
                still = any(x.id == f.id for x in chk.findings)
                outcome = f"{'still reported' if still else 'gone'} in {name}"
            if not outcome and demo is not None and demo.findings_after:
                still = any(s.endswith(f": {f.id}") for s in demo.findings_after)
                outcome = "still reported after the fix" if still else "gone after the fix"
            rows.append(FindingRow(f.severity.value, f.id, f.title, list(f.evidence),
                                   list(f.change), f.tradeoff, gain_text(f), outcome, f.docs))
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
def _marked(shown: str, not_predicted: bool) -> str:
    """A predicted figure as the table shows it: marked when the closing notes say why it is
    not a prediction (model/prediction_fit.py)."""
    return f"{shown} ({prediction_fit.NOT_PREDICTED})" if not_predicted and shown != "–" else shown


def outcome(demo_data: DemoData | None, whatifs: list[tuple[str, WhatifResult]],
            verifies: list[tuple[str, Verify]],
            trace_totals: list[tuple[str, float]]) -> Outcome:
    out = Outcome()
    if demo_data is not None:
        demo = as_demo(demo_data)
        calls, rt = demo.metadata_calls_per_request, demo.round_trips()
        marks = [prediction_fit.NOT_PREDICTED in c
                 for c in prediction_fit.predicted_cells(calls, rt, demo.predicted)]
        out.rows.append(("metadata calls per request", fmt(calls.before),
                         _marked(fmt(calls.predicted), marks[0]), fmt(calls.after),
                         "demo (whatif of the PHP settings; traces)"))
        out.rows.append(("network round trips per request", fmt(rt.before),
                         _marked(fmt(rt.predicted), marks[1]), fmt(rt.after),
                         "demo (forecast of the mount and app changes; volume profile)"))
        out.notes += prediction_fit.closing_notes(calls, rt, demo.predicted)
        end = demo.final()
        for ratio, what in ((ratio_rps, "throughput, network / local"),
                            (ratio_p99, "p99 latency, network / local")):
            rb, ra = ratio(demo.before), ratio(demo.after)
            out.rows.append((what, f"{fmt(rb)}x" if rb else "–", "–",
                             f"{fmt(ra)}x" if ra else "–", "demo (medians of the rounds; "
                             "after apply --all)"))
            if end is not None and end.kept:
                if ratio is ratio_rps:
                    out.rows.append((f"network round trips per request, {end.label}",
                                     fmt(rt.before), "–", fmt(end.round_trips_per_request),
                                     "demo (the escalation's last kept change)"))
                rf = ratio(end.phase)
                out.rows.append((f"{what}, {end.label}", f"{fmt(rb)}x" if rb else "–", "–",
                                 f"{fmt(rf)}x" if rf else "–",
                                 "demo (the escalation's last kept change, medians)"))
    for name, w in whatifs:
        cur, prop = (side.per_request.get("total") for side in (w.current, w.proposed))
        measured = trace_totals[-1][1] if len(trace_totals) > 1 else None
        out.rows.append(("metadata calls per request", fmt(cur), fmt(prop), fmt(measured),
                         f"whatif {name}" + (f"; measured in {trace_totals[-1][0]}"
                                             if measured is not None else "")))
    for name, v in verifies:
        for (b, af), what in (((v.before.syscalls_per_request, v.after.syscalls_per_request),
                               "metadata calls per request"),
                              ((v.before.round_trips_per_request,
                                v.after.round_trips_per_request),
                               "network round trips per request"),
                              ((v.before.rps, v.after.rps), "throughput, requests/s"),
                              ((v.before.p99_ms, v.after.p99_ms), "p99 latency, ms")):
            if b is not None or af is not None:
                out.rows.append((what, fmt(b), "–", fmt(af), f"apply --verify {name}"))
    return out


# -- headline -----------------------------------------------------------------------------------
def headline(host: str, trace_totals: list[tuple[str, float]], n_findings: dict[str, int], *,
             demo: DemoData | None, applies: list[tuple[str, ApplyReport]],
             matrices: list[tuple[str, MatrixResult]], sweeps: list[tuple[str, SweepResult]],
             benches: list[tuple[str, FsbenchResult]]) -> Headline:
    on = f"host {host}" if host else "this machine"
    if demo is not None:
        d = as_demo(demo)
        app = APPS.get(d.app, d.app)
        st = STORAGES.get(d.storage, d.storage)
        rb, end = ratio_rps(d.before), d.final()
        rt = d.round_trips()
        parts = []
        if rb:
            parts.append(f"{st} {rb:.2f}x local throughput before" + final_text(d))
        rt_end = end.round_trips_per_request if end is not None else None
        at = f", {end.label}" if end is not None and end.kept else ""
        if rt_end is None:  # the final phase counted none: the figure after apply --all
            rt_end, at = rt.after, (", after apply --all" if at else "")
        if rt.before and rt_end is not None:
            parts.append(f"{fewer(rt.before, rt_end)} network round trips per request "
                         f"({fmt(rt.before)} → {fmt(rt_end)}{at})")
        calls = d.metadata_calls_per_request
        if calls.before and calls.after is not None:
            parts.append(f"{fewer(calls.before, calls.after)} metadata calls per request")
        return Headline(f"{app} on local disk and on {st}, measured before and after "
                        "statstorm's fix", on, "; ".join(parts) + "." if parts
                        else "the demo did not finish a measurement.")
    verified = [(a, a.verify) for _, a in applies if a.verify is not None]
    if verified:
        a, v = verified[0]
        ch, worse = v.change, v.worse
        return Headline(f"apply --verify on pool {a.pool or '?'}", on,
                        f"throughput {ch.rps or 0:+.0%}, metadata calls per request "
                        f"{(ch.syscalls_per_request or 0):+.0%}"
                        + (f"; rolled back: {worse}" if worse else "; kept") + ".")
    if matrices:
        cells = [(c.label, c.summary.rps.median) for c in matrices[0][1].cells
                 if c.summary is not None and c.summary.rps.median]
        if cells:
            (best, fast), (slowest, slow) = (max(cells, key=lambda c: c[1] or 0),
                                             min(cells, key=lambda c: c[1] or 0))
            return Headline(f"{len(cells)} server and PHP configurations", on,
                            f"fastest {best} at {fmt(fast)} req/s, "
                            f"{(fast or 0) / (slow or 1):.1f}x the slowest ({slowest}).")
    if len(trace_totals) > 1:
        (a_name, ta), (b_name, tb) = trace_totals[0], trace_totals[-1]
        return Headline(f"traces {a_name} and {b_name}", on,
                        f"metadata calls per request {fmt(ta)} → {fmt(tb)} "
                        f"({pct_change(ta, tb)}).")
    if sweeps:
        s = sweeps[0][1]
        return Headline(f"HTTP sweep of {s.target}", on,
                        (s.knee.sentence if s.knee is not None else "")
                        or f"{len(s.levels)} level(s) measured.")
    if benches:
        f = benches[0][1]
        rs = [r for r in ratios(f) if r.time_ratio]
        if rs:
            worst = max(rs, key=lambda r: r.time_ratio or 0)
            return Headline(f"metadata latency of {len(f.paths)} storage paths", on,
                            f"{worst.op} ({worst.state}) takes {worst.time_ratio or 0:.1f}x the "
                            "first PATH's time per call on PATH "
                            f"{worst.path_index + 1} (p50 ratio {worst.p50_ratio or 0:.1f}x).")
    if n_findings:
        return Headline("check of the live PHP configuration", on, ", ".join(
            f"{n} {s}" for s, n in n_findings.items() if n) + " finding(s).")
    if trace_totals:
        return Headline(f"trace {trace_totals[0][0]}", on,
                        f"{fmt(trace_totals[0][1])} metadata calls per request.")
    return Headline("statstorm results", on, "nothing measured to compare.")


def final_text(d: DemoResult) -> str:
    """The headline's figures after `before`: the ratio the run ended at and what got it there
    (apply --all, then the escalation's kept changes by name), the `after apply --all` one
    beside it when the escalation kept a change."""
    end, ra = d.final(), ratio_rps(d.after)
    if end is None or end.phase.ratio_rps is None or ra is None:
        return " (no after measurement)"
    p99 = end.phase.ratio_p99
    tail = f" (p99 {p99:.2f}x local)" if p99 else ""
    if not end.kept:
        tried = len(d.trials)
        return (f", {ra:.2f}x after apply --all{tail}"
                + (f"; the escalation kept none of the {tried} change(s) it tried" if tried
                   else ""))
    return (f", {end.phase.ratio_rps:.2f}x at the end{tail}, by {end.how} "
            f"({ra:.2f}x after apply --all alone)")


# -- sections of the verbs that change things -------------------------------------------------
def demo_section(name: str, data: DemoData) -> Section:
    d = as_demo(data)
    sec = Section(f"demo-{slug(name)}", "Demo: before and after the fix")
    sec.intro.append("Labs: " + "; ".join(f"{role} {lab.name} ({lab.url})"
                                          for role, lab in d.labs.items()) + ".")
    phases = d.phases() + [(f"with {t.finding}" + ("" if t.kept else " (rolled back)"), t.phase)
                           for t in d.trials]
    storage = STORAGES.get(d.storage, d.storage)
    escalation_part(d, sec)
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
                rows.append((p, role, i, fmt(r.rps), fmt(r.p50_ms), fmt(r.p99_ms), r.errors,
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


def escalation_part(d: DemoResult, sec: Section) -> None:
    """Where the run ended (`final`), and each change the escalation tried or skipped."""
    end = d.final()
    if end is not None and end.phase.ratio_rps is not None:
        figures = (f"{fmt(end.phase.ratio_rps)}x local throughput, p99 "
                   f"{fmt(end.phase.ratio_p99)}x local")
        sec.intro.append(f"Ended at {figures}, by {end.how} ({fmt(ratio_rps(d.after))}x after "
                         "apply --all alone)." if end.kept
                         else f"Ended after apply --all: {figures}.")
    rows = [(t.finding, f"{fmt(t.ratio_without)}x", f"{fmt(t.ratio_with)}x",
             f"{fmt(t.phase.ratio_p99)}x", "kept" if t.kept else "rolled back", t.why,
             t.price if t.kept else "") for t in d.trials]
    rows += [(x.finding, "–", "–", "–", "not tried", x.why, "") for x in d.skipped]
    if rows:
        sec.tables.append(Table("Demo: the escalation after apply --all, each change alone",
                                ("change", "ratio without", "ratio with", "p99 ratio with",
                                 "verdict", "why", "its price"), rows, numeric=False))


def whatif_section(name: str, w: WhatifResult) -> Section:
    sec = Section(f"whatif-{slug(name)}", f"What-if: predicted effect of settings ({name})")
    sec.intro.append("Proposed: " + (", ".join(f"{k}={v}" for k, v in w.changes)
                                     or "(no change)") + f"; latency profile {w.profile_source}.")
    keys = [k for k in ("lstat", "stat", "fstat", "access", "open", "readlink", "getcwd",
                        "total", "failed") if k in w.current.per_request]
    series = [("measured", [w.measured.get(k) for k in keys]),
              ("current (model)", [w.current.per_request.get(k) for k in keys]),
              ("proposed (model)", [w.proposed.per_request.get(k) for k in keys])]
    sec.charts.append(charts.grouped(f"chart-whatif-{slug(name)}", f"{name}: calls per request, "
                                     "measured, modelled now and under the proposal", keys,
                                     series, "calls per request"))
    cur_t = w.current.metadata_time_us_per_request
    prop_t = w.proposed.metadata_time_us_per_request
    if cur_t is not None:
        sec.intro.append(f"Metadata time per request: {fmt(cur_t)} µs now, {fmt(prop_t)} µs "
                         f"proposed ({pct_change(cur_t, prop_t)}).")
    fm = w.find_min
    if fm:
        sec.intro.append(fm.note or f"Smallest realpath_cache_size holding every worker's "
                         f"working set: {fm.ini} ({fm.bytes} bytes).")
    return sec


def apply_section(name: str, a: ApplyReport) -> Section:
    sec = Section(f"apply-{slug(name)}", f"Apply on pool {a.pool or '?'}: {a.mode} ({name})")
    rows = [(c.finding, c.kind, c.line, c.current) for c in a.changes]
    if rows:
        sec.tables.append(Table("changes", ("finding", "kind", "line", "was"), rows, numeric=False))
    if a.manual:
        sec.intro.append("Left to do by hand: " + "; ".join(a.manual) + ".")
    v = a.verify
    if v:
        b, af, ch = v.before.to_json(), v.after.to_json(), v.change.to_json()
        keys = [k for k in ("rps", "p50_ms", "p99_ms", "syscalls_per_request",
                            "round_trips_per_request", "errors") if k in b or k in af]
        sec.tables.append(Table("verify: measured before and after", ("metric", "before", "after",
                                                                     "change"),
                                [(k, fmt(_num(b[k])), fmt(_num(af[k])),
                                  f"{c:+.1%}" if isinstance(c := ch.get(k), float) else "")
                                 for k in keys]))
        sec.intro.append(f"Verdict: {'worse, rolled back: ' + v.worse if v.worse else 'kept'}.")
    if a.reason:
        sec.intro.append(f"Rolled back: {a.reason}.")
    sec.details += [(f"diff of {path}", diff) for path, diff in a.diffs]
    sec.intro += [f"note: {n}" for n in a.notes]
    return sec


def _num(v: JsonValue) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

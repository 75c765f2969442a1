"""The whole report as data: the headline, findings, predicted against measured, one section
per result, the environment and the commands — built from loaded result files only, then
rendered by report.html.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from statstorm.errors import UsageError
from statstorm.model.tracestats import include_entry, summarize_trace
from statstorm.report import environment as env_section
from statstorm.report import sections, verdict
from statstorm.report.environment import Typed
from statstorm.report.sections import Section, label
from statstorm.results.apply_report import ApplyReport
from statstorm.results.check import CheckResult
from statstorm.results.demo import DemoResult
from statstorm.results.tune import TuneResult
from statstorm.results.jsontypes import JsonObject
from statstorm.results.fsbench import FsbenchResult
from statstorm.results.matrix import MatrixResult
from statstorm.results.result_files import ResultFile
from statstorm.results.sweep import SweepResult
from statstorm.results.trace import Trace
from statstorm.results.trace.summary import EntryFailures, TraceSummary
from statstorm.results.whatif import WhatifResult


@dataclass
class Source:
    """One input file as the page lists it."""

    name: str
    kind: str
    schema: str
    command: str


@dataclass
class Page:
    title: str
    generated: str
    headline: verdict.Headline
    findings: list[verdict.FindingRow]
    outcome: verdict.Outcome
    sections: list[Section]
    environment: Section
    sources: list[Source] = field(default_factory=list)

    @property
    def charts(self) -> int:
        return sum(len(s.charts) for s in self.sections)

    def severity_counts(self) -> dict[str, int]:
        return {s: sum(1 for f in self.findings if f.severity == s) for s in verdict.SEVERITIES}


def failed_by_entry(trace: Trace, summary: TraceSummary) -> tuple[EntryFailures, ...]:
    """Failed lookups per include_path entry: the summary's (failures of include resolution),
    else every failed call under an entry of the recorded include_path (with OPcache on,
    PHP resolves includes through probes such as stream_resolve_include_path or the
    autoloader's file_exists, which the summary files under other operations)."""
    if summary.failed_by_include_path_entry:
        return summary.failed_by_include_path_entry
    inc = trace.head.setting("include_path")
    entries = [e for e in inc.split(":") if e.startswith("/")]
    if not entries:
        return ()
    counts: dict[str, int] = {}
    for sc in trace.syscalls:
        if sc.ret < 0 and sc.path:
            e = include_entry(sc.path, inc, "/")
            if e:
                counts[e] = counts.get(e, 0) + 1
    div = summary.requests or 1
    return tuple(EntryFailures(e, counts[e], round(counts[e] / div, 3))
                 for e in entries if e in counts)


def _labels(files: list[ResultFile]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for rf in files:
        name = label(rf.name)
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return out


def typed(rf: ResultFile) -> Typed:
    """The result a file holds, read by its class (a trace: its records)."""
    try:
        if rf.kind == "sweep":
            return SweepResult.from_json(rf.data)
        if rf.kind == "fsbench":
            return FsbenchResult.from_json(rf.data)
        if rf.kind == "matrix":
            return MatrixResult.from_json(rf.data, str(rf.path))
        if rf.kind == "whatif":
            return WhatifResult.from_json(rf.data)
        if rf.kind == "check":
            return CheckResult.from_json(rf.data)
        if rf.kind == "apply":
            return ApplyReport.from_json(rf.data)
        if rf.kind == "demo":
            return DemoResult.from_json(rf.data)
        if rf.kind == "tune":
            return TuneResult.from_json(rf.data).as_demo()
        if rf.kind == "trace-summary":
            return sections.summary_of(rf.data)
        return rf.trace
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"{rf.path}: a statstorm.{rf.kind} file that cannot be read "
                         f"({type(exc).__name__}: {exc}): cut short or edited; re-create it") \
            from None


def build(files: list[ResultFile], title: str = "", generated: str = "") -> Page:
    names = _labels(files)
    summaries: list[tuple[str, TraceSummary]] = []
    env_rows: list[tuple[str, str, JsonObject, Typed]] = []
    sweeps: list[tuple[str, SweepResult]] = []
    benches: list[tuple[str, FsbenchResult]] = []
    matrices: list[tuple[str, MatrixResult]] = []
    whatifs: list[tuple[str, WhatifResult]] = []
    checks: list[tuple[str, CheckResult]] = []
    applies: list[tuple[str, ApplyReport]] = []
    demos: list[tuple[str, DemoResult]] = []
    sources: list[Source] = []
    host = ""
    for rf, name in zip(files, names):
        data = rf.data
        result = typed(rf)
        if isinstance(result, SweepResult):
            sweeps.append((name, result))
        elif isinstance(result, FsbenchResult):
            benches.append((name, result))
        elif isinstance(result, MatrixResult):
            matrices.append((name, result))
        elif isinstance(result, WhatifResult):
            whatifs.append((name, result))
        elif isinstance(result, CheckResult):
            checks.append((name, result))
        elif isinstance(result, ApplyReport):
            applies.append((name, result))
        elif isinstance(result, DemoResult):
            demos.append((name, result))
        if rf.kind == "trace" and rf.trace is not None:
            summary = summarize_trace(rf.trace)
            summary = replace(summary, failed_by_include_path_entry=failed_by_entry(rf.trace,
                                                                                   summary))
            summaries.append((name, summary))
            host = host or rf.trace.head.host
            data = {**rf.trace.header, "_trailer": rf.trace.trailer}
            schema = f"statstorm-trace/{rf.version}"
        elif rf.kind == "trace-summary":
            if isinstance(result, TraceSummary):
                summaries.append((name, result))
            schema = str(rf.data.get("schema", "trace summary (no schema key)"))
        else:
            schema = str(rf.data.get("schema", f"statstorm.{rf.kind} (no schema key)"))
        env_rows.append((rf.kind, name, data, result))
        sources.append(Source(rf.name, rf.kind, schema,
                              env_section.command(rf.kind, rf.name, data, result)))

    demo = demos[0][1] if demos else None
    totals = [(n, float(s.per_request.total or 0.0)) for n, s in summaries]
    found = verdict.findings(checks, demo)
    counts = {s: sum(1 for f in found if f.severity == s) for s in verdict.SEVERITIES}
    secs: list[Section] = [verdict.demo_section(name, d) for name, d in demos]
    secs += sections.traces(summaries)
    secs += [verdict.whatif_section(name, w) for name, w in whatifs]
    secs += [verdict.apply_section(name, a) for name, a in applies]
    secs += [sections.sweep(name, s) for name, s in sweeps]
    secs += [sections.fsbench(name, f) for name, f in benches]
    secs += [sections.matrix(name, m) for name, m in matrices]
    head = verdict.headline(host, totals, counts, demo=demo, applies=applies, matrices=matrices,
                            sweeps=sweeps, benches=benches)
    verifies = [(name, a.verify) for name, a in applies if a.verify is not None]
    return Page(title=title or f"statstorm report: {head.what}", generated=generated,
                headline=head, findings=found,
                outcome=verdict.outcome(demo, whatifs, verifies, totals),
                sections=secs, environment=env_section.environment(env_rows), sources=sources)

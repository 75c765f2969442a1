"""A sweep level's measured runs folded into its result (median throughput, merged latency
spectra, server signals, the trace's figures), and the whole sweep's knee analysis."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from statistics import median
from typing import Protocol, Sequence

from statstorm.model import knee as knee_model
from statstorm.model import stats
from statstorm.results.trace.summary import TraceSummary
from statstorm.results.sweep import (ErrorCounts, LevelResult, LoadRun, RepeatResult,
                                     ServerSignals, SweepResult)


def aggregate(level: float, model: str, repeats: Sequence[RepeatResult], validation: str) -> LevelResult:
    runs = [r.run for r in repeats]
    srv = [r.server for r in repeats]
    errors = ErrorCounts()
    for r in runs:
        errors = errors + r.errors

    def med(values: Sequence[float]) -> float:
        return round(float(median(values)), 3)

    def opt_max(values: Sequence[int | None]) -> int | None:
        vals = [v for v in values if v is not None]
        return max(vals) if vals else None

    def opt_min(values: Sequence[int | None]) -> int | None:
        vals = [v for v in values if v is not None]
        return min(vals) if vals else None

    server = ServerSignals(
        seconds=round(sum(s.seconds for s in srv), 3),
        ctx_switches_per_s=med([s.ctx_switches_per_s for s in srv]),
        cpu_busy_pct=med([s.cpu_busy_pct for s in srv]),
        cpu_system_pct=med([s.cpu_system_pct for s in srv]),
        cpu_iowait_pct=med([s.cpu_iowait_pct for s in srv]),
        fpm_pool=next((s.fpm_pool for s in srv if s.fpm_pool), ""),
        fpm_active_max=opt_max([s.fpm_active_max for s in srv]),
        fpm_idle_min=opt_min([s.fpm_idle_min for s in srv]),
        fpm_total=opt_max([s.fpm_total for s in srv]),
        fpm_listen_queue_max=opt_max([s.fpm_listen_queue_max for s in srv]),
        fpm_max_children_reached=(sum(s.fpm_max_children_reached or 0 for s in srv)
                                  if any(s.fpm_max_children_reached is not None for s in srv) else None),
        fpm_samples=sum(s.fpm_samples for s in srv),
    )
    server = _with_trace_medians(server, srv)
    rps = [r.rps for r in runs]
    return LevelResult(
        concurrency=int(level) if model == "closed" else None,
        rate=level if model == "open" else None,
        repeats=tuple(repeats), rps=med(rps), rps_spread=round(knee_model.spread(rps), 3),
        **_merged_latency(runs), max=round(max(r.max for r in runs), 3),
        errors=errors, server=server, validation=validation,
    )


def _merged_latency(runs: Sequence[LoadRun]) -> dict[str, float]:
    """p50/p90/p99 of all the level's requests: the runs' spectra merged (model.stats)."""
    merged = stats.merged_percentiles([(r.percentiles, r.requests) for r in runs], (50, 90, 99))
    if merged is None or not all(r.percentiles for r in runs):  # no spectrum: runs' medians
        merged = [stats.median([getattr(r, k) for r in runs]) for k in ("p50", "p90", "p99")]
    return {k: round(v, 3) for k, v in zip(("p50", "p90", "p99"), merged)}


def _with_trace_medians(server: ServerSignals, srv: Sequence[ServerSignals]) -> ServerSignals:
    """`server` with the level's trace fields: medians over the traced repeats, the first
    repeat's file (unchanged when no repeat was traced)."""
    traced = [s for s in srv if s.file_syscalls_per_request is not None]
    if not traced:
        return server

    def med(values: Sequence[float | None]) -> float:
        return round(float(median([v or 0.0 for v in values])), 3)

    return replace(
        server,
        file_syscalls_per_s=med([s.file_syscalls_per_s for s in traced]),
        file_syscalls_per_request=med([s.file_syscalls_per_request for s in traced]),
        failed_per_request=med([s.failed_per_request for s in traced]),
        traced_requests=sum(s.traced_requests or 0 for s in traced),
        trace_dropped=sum(s.trace_dropped or 0 for s in traced),
        trace_file=traced[0].trace_file,
    )


class Traced(Protocol):
    """What sweep reads of a trace taken during a run (`statstorm trace`'s TraceRun)."""

    output: Path
    summary: TraceSummary
    warnings: list[str]


def with_trace(server: ServerSignals, trace: Traced, load_s: float) -> ServerSignals:
    """`server` with the file-syscall figures of the trace taken during the run."""
    summary = trace.summary
    total = summary.totals.total or 0
    return replace(
        server,
        file_syscalls_per_s=round(total / load_s, 1) if load_s > 0 else 0.0,
        file_syscalls_per_request=float(summary.per_request.total or 0),
        failed_per_request=float(summary.per_request.failed or 0),
        traced_requests=summary.requests,
        trace_dropped=summary.trace.dropped,
        trace_file=str(trace.output),
    )


def analyse(result: SweepResult) -> SweepResult:
    """`result` with its knee analysis."""
    unit = "users" if result.model == "closed" else "req/s offered"
    points = [knee_model.LevelPoint(lv.level, tuple(r.run.rps for r in lv.repeats), lv.server,
                                    lv.errors.total, sum(r.run.requests for r in lv.repeats))
              for lv in result.levels]
    return replace(result, knee=knee_model.analyse(points, unit=unit))

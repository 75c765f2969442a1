"""The summary of a trace: per-request counts by call type, failures, paths, mounts, operations.

A streaming builder (`SummaryBuilder`) so the tracer can summarise while it writes; `show`
feeds it a loaded trace. Pure code.
"""

from __future__ import annotations

import posixpath
from array import array
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any, Protocol

from statstorm.model import stats
from statstorm.results.trace.diff import Change, DiffSide, TraceDiff
from statstorm.results.jsontypes import JsonValue
from statstorm.results.trace.header import TraceHeader, TraceTrailer
from statstorm.results.trace.summary import (DirCalls, EntryFailures, FailedPath, MountFigures,
                                             MountLatency, OperationFigures, PathCalls, PerCall,
                                             Spread, SyscallTime, TraceSummary)
from statstorm.results.trace.vocabulary import (CALLS, SUMMARY_KEYS, CountRow, Operation,
                                                Request, RequestCounts, Syscall, Trace,
                                                TracerBackend)
from statstorm.results.trace.vocabulary import call_type as _call_type

TOP = 15


def percentile(sorted_vals: list[float] | list[int] | array[int], q: float) -> float:
    """Percentile `q` given as a fraction (0-1): statstorm.model.stats's one definition."""
    return stats.percentile(sorted_vals, q * 100.0)


def _counts() -> Counter[str]:
    return Counter()


def _bucket(lat_ns: int) -> str:
    """The log2 bucket (statstorm.model.stats) of a latency, named by its upper edge in µs:
    "<1" for anything under 1 µs, "<1048576" for anything from 2^19 µs up."""
    lower_us = stats.log2_bucket(lat_ns / 1000)
    edge = min(max(1, int(lower_us * 2)), 1 << 20)
    return f"<{edge}"


def include_entry(path: str, include_path: str, cwd: str) -> str:
    """The include_path entry a failed candidate `path` was built from ('' if none)."""
    for entry in include_path.split(":"):
        if not entry:
            continue
        base = entry if entry.startswith("/") else posixpath.normpath(
            posixpath.join(cwd or "/", entry))
        if path.startswith(base.rstrip("/") + "/"):
            return entry
    return ""


class SummaryBuilder:
    def __init__(self, header: Mapping[str, JsonValue]) -> None:
        self.head = TraceHeader.from_json(header)
        self.mounts: list[tuple[str, str]] = list(self.head.mounts)
        self.per_req: dict[int, Counter[str]] = defaultdict(_counts)
        self.requests: dict[int, Request] = {}
        self.totals: Counter[str] = Counter()
        self.extra: Counter[str] = Counter()
        self.paths: Counter[str] = Counter()
        self.failed_paths: Counter[str] = Counter()
        self.dirs: Counter[str] = Counter()
        self.by_kind: dict[str, Counter[str]] = defaultdict(_counts)
        self.ops_by_kind: Counter[str] = Counter()
        self.mount_counts: dict[int, Counter[str]] = defaultdict(_counts)
        self.mount_lat: dict[int, array[int]] = defaultdict(lambda: array("q"))
        self.mount_hist: dict[int, Counter[str]] = defaultdict(_counts)
        self._pending_failed: dict[int, list[str]] = defaultdict(list)
        self.failed_by_entry: Counter[str] = Counter()
        self.counts: list[CountRow] = []
        self.unattributed = 0
        self.req_time: Counter[int] = Counter()  # request → summed syscall latency (ns)
        self.call_time: Counter[str] = Counter()  # call type → summed latency (ns)

    def syscall(self, s: Syscall) -> None:
        if s.call not in CALLS:
            self.extra[s.call] += 1
            return
        failed = s.ret < 0
        c = self.per_req[s.req]
        c[s.call] += 1
        c["total"] += 1
        if failed:
            c["failed"] += 1
        if s.req < 0:
            self.unattributed += 1
        self.totals[s.call] += 1
        self.totals["total"] += 1
        if failed:
            self.totals["failed"] += 1
        if s.path and s.call != "getcwd":
            self.paths[s.path] += 1
            self.dirs[posixpath.dirname(s.path)] += 1
            if failed:
                self.failed_paths[s.path] += 1
        k = self.by_kind[s.kind]
        k[s.call] += 1
        k["total"] += 1
        if failed:
            k["failed"] += 1
            if s.kind == "include_resolve" and s.op >= 0:
                self._pending_failed[s.op].append(s.path)
        m = self.mount_counts[s.mount]
        m[s.call] += 1
        m["total"] += 1
        if failed:
            m["failed"] += 1
        if s.lat_ns:
            self.req_time[s.req] += s.lat_ns
            self.call_time[s.call] += s.lat_ns
            self.mount_lat[s.mount].append(s.lat_ns)
            self.mount_hist[s.mount][_bucket(s.lat_ns)] += 1

    def request(self, r: Request) -> None:
        self.requests[r.id] = r

    def request_counts(self, rc: RequestCounts) -> None:
        """A request's calls counted in the kernel (no paths, mounts or operations)."""
        c = self.per_req[rc.req]
        for call, (n, failed, lat_ns) in rc.calls.items():
            if call not in CALLS:
                self.extra[call] += n
                continue
            if rc.req < 0:
                self.unattributed += n
            for counter in (c, self.totals):
                counter[call] += n
                counter["total"] += n
                counter["failed"] += failed
            self.req_time[rc.req] += lat_ns
            self.call_time[call] += lat_ns

    def operation(self, o: Operation) -> None:
        self.ops_by_kind[o.kind] += 1
        failed = self._pending_failed.pop(o.id, None)
        if failed:
            inc = str(o.args.get("include_path", ""))
            cwd = str(o.args.get("cwd", ""))
            for path in failed:
                self.failed_by_entry[include_entry(path, inc, cwd) or "(not from include_path)"] += 1

    def count(self, c: CountRow) -> None:
        self.counts.append(c)

    # -- result --------------------------------------------------------------------------
    def _counted_requests(self) -> list[int]:
        done = [i for i, r in self.requests.items() if r.end_ns >= 0 and i in self.per_req]
        if done or self.head.source == TracerBackend.BPFTRACE:
            return done
        return [i for i in self.requests if i in self.per_req]

    def build(self, trailer: Mapping[str, JsonValue] | None = None) -> TraceSummary:
        """The summary of what was fed, with the trace's trailer."""
        tail = TraceTrailer.from_json(trailer)
        if self.counts:
            return self._table(tail)
        ids = self._counted_requests()
        n = len(ids)
        dist: dict[str, Spread] = {}
        per_request: dict[str, float] = {}
        req_totals: Counter[str] = Counter()
        for key in SUMMARY_KEYS:
            vals = sorted(self.per_req[i][key] for i in ids)
            req_totals[key] = sum(vals)
            mean = sum(vals) / n if n else 0.0
            per_request[key] = round(mean, 3)
            dist[key] = Spread(mean=round(mean, 3), p50=percentile(vals, 0.5),
                               p95=percentile(vals, 0.95),
                               min=float(vals[0]) if vals else 0.0,
                               max=float(vals[-1]) if vals else 0.0)
        totals = PerCall(**{k: self.totals[k] for k in SUMMARY_KEYS})
        div = n or 1
        times = sorted(self.req_time[i] / 1000 for i in ids)
        t_total, t_failed = self.totals["total"], self.totals["failed"]
        return TraceSummary(
            source=self.head.source, detail=self.head.detail, requests=n,
            per_request=PerCall(**per_request), per_request_dist=dist,
            syscall_time_us=SyscallTime(
                per_request=round(sum(times) / n, 1) if n else 0.0,
                p50=round(percentile(times, 0.5), 1), p95=round(percentile(times, 0.95), 1),
                by_call={k: round(self.call_time[k] / div / 1000, 1) for k in CALLS
                         if self.call_time[k]}),
            totals=totals,
            in_requests=PerCall(**{k: req_totals[k] for k in SUMMARY_KEYS}),
            outside_requests=self.unattributed,
            other_calls=dict(self.extra),
            failed_share=round(t_failed / t_total, 4) if t_total else 0.0,
            top_paths=tuple(PathCalls(p, c, self.failed_paths[p])
                            for p, c in self.paths.most_common(TOP)),
            top_failed_paths=tuple(FailedPath(p, c)
                                   for p, c in self.failed_paths.most_common(TOP)),
            top_dirs=tuple(DirCalls(d, c) for d, c in self.dirs.most_common(TOP)),
            failed_by_include_path_entry=tuple(
                EntryFailures(e, c, round(c / div, 3))
                for e, c in self.failed_by_entry.most_common()),
            by_mount=self._mounts(div),
            by_operation={
                kind: OperationFigures(PerCall(**{k: c[k] for k in SUMMARY_KEYS}),
                                       per_request=round(c["total"] / div, 3),
                                       operations=self.ops_by_kind.get(kind, 0))
                for kind, c in sorted(self.by_kind.items(), key=lambda kv: -kv[1]["total"])},
            settings=self.head.settings, targets=self.head.targets, trace=tail)

    def _mounts(self, div: int) -> tuple[MountFigures, ...]:
        out = []
        for idx, c in sorted(self.mount_counts.items(), key=lambda kv: -kv[1]["total"]):
            mp, fstype = self.mounts[idx] if 0 <= idx < len(self.mounts) else ("(no path)", "-")
            lat = sorted(self.mount_lat.get(idx, array("q")))
            latency, histogram = None, None
            if lat:
                latency = MountLatency(
                    mean=round(sum(lat) / len(lat) / 1000, 2),
                    p50=round(percentile(lat, 0.5) / 1000, 2),
                    p95=round(percentile(lat, 0.95) / 1000, 2),
                    p99=round(percentile(lat, 0.99) / 1000, 2),
                    max=round(lat[-1] / 1000, 2))
                hist = self.mount_hist[idx]
                histogram = {b: hist[b] for b in sorted(hist, key=lambda b: int(b[1:]))}
            out.append(MountFigures(mount=mp, fstype=fstype, calls=c["total"],
                                    failed=c["failed"], per_request=round(c["total"] / div, 3),
                                    by_call={k: c[k] for k in CALLS if c[k]},
                                    latency_us=latency, histogram_us=histogram))
        return tuple(out)

    def _table(self, trailer: TraceTrailer) -> TraceSummary:
        """A summary from an `strace -c` table: totals only; per request if told how many."""
        totals: Counter[str] = Counter()
        seconds: dict[str, float] = {}
        notes = []
        other: dict[str, int] = {}
        for row in self.counts:
            call = _call_type(row.syscall)
            if row.syscall in ("newfstatat", "fstatat64", "statx"):
                call = "stat"
                notes.append(f"{row.syscall} counted as stat: an strace -c table does not "
                             "split it into stat, lstat and fstat")
            if call is None or call not in CALLS:
                other[row.syscall] = row.calls
                continue
            totals[call] += row.calls
            totals["total"] += row.calls
            totals["failed"] += row.errors
            seconds[call] = seconds.get(call, 0.0) + row.seconds
        hint = self.head.requests_hint
        n = hint or 1
        return TraceSummary(
            source=self.head.source, requests=n,
            per_request=PerCall(**{k: round(totals[k] / n, 3) for k in SUMMARY_KEYS}),
            totals=PerCall(**{k: totals[k] for k in SUMMARY_KEYS}),
            failed_share=round(totals["failed"] / totals["total"], 4) if totals["total"]
            else 0.0,
            seconds={k: round(v, 6) for k, v in seconds.items()},
            other_calls=other,
            notes=tuple(sorted(set(notes)) + ([] if hint else [
                "no --requests given: per_request is the whole table (1 request)"])),
            settings=self.head.settings, targets=self.head.targets, trace=trailer)


def summarize_trace(trace: Trace) -> TraceSummary:
    """Summary of a loaded `Trace`."""
    b = SummaryBuilder(trace.header)
    trace.feed(b)
    return b.build(trace.trailer)


def summarize(trace: Trace) -> dict[str, Any]:
    """Summary of a loaded `Trace` as JSON (`summarize_trace(trace).to_json()`), for callers
    not yet typed."""
    return summarize_trace(trace).to_json()


class _Sink(Protocol):
    def syscall(self, s: Syscall) -> None: ...
    def request(self, r: Request) -> None: ...
    def operation(self, o: Operation) -> None: ...
    def request_counts(self, rc: RequestCounts) -> None: ...


class Tee:
    """Hands each record to two sinks: the trace writer and the summary, as it comes."""

    def __init__(self, first: _Sink, second: _Sink) -> None:
        self.first, self.second = first, second

    def syscall(self, s: Syscall) -> None:
        self.first.syscall(s)
        self.second.syscall(s)

    def request(self, r: Request) -> None:
        self.first.request(r)
        self.second.request(r)

    def operation(self, o: Operation) -> None:
        self.first.operation(o)
        self.second.operation(o)

    def request_counts(self, rc: RequestCounts) -> None:
        self.first.request_counts(rc)
        self.second.request_counts(rc)


def diff(a: TraceSummary, b: TraceSummary) -> TraceDiff:
    """Two summaries per request, call type by call type (`statstorm trace diff`); a figure
    either side does not know (None) counts as 0 here."""
    change = {}
    for key in SUMMARY_KEYS:
        va, vb = a.per_request[key], b.per_request[key]
        fa, fb = va or 0, vb or 0
        change[key] = Change(a=va, b=vb, delta=round(fb - fa, 3),
                             ratio=round(fb / fa, 3) if fa else None)
    ta = a.syscall_time_us.per_request if a.syscall_time_us else None
    tb = b.syscall_time_us.per_request if b.syscall_time_us else None
    # both traces timed their calls (an `strace -c` import does not per request)
    time = Change(a=ta, b=tb, delta=round(tb - ta, 1), ratio=round(tb / ta, 3)) \
        if ta and tb else None
    return TraceDiff(a=DiffSide(a.requests, a.per_request), b=DiffSide(b.requests, b.per_request),
                     per_request=change, syscall_time_us=time)

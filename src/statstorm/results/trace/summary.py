"""The summary of a trace as a typed result: calls per request by call type, their spread and
time, totals, paths, include_path entries, mounts and PHP operations, and the trailer.

`model/tracestats.py` builds one (`SummaryBuilder.build`); `trace`, `trace show` and `trace
import` print its `to_json()` (schema statstorm.trace-summary/1), which `from_json` reads
back. Two shapes share the class: a trace's events or kernel counts (`detail` set), and an
`strace -c` table (`seconds` set: totals only, no paths, mounts or operations). A field that
is None is absent from the JSON; the keys come in the order the summary has always had.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import ClassVar, Final

from statstorm.results import jsonlenient as lenient
from statstorm.results.jsontypes import JsonObject, JsonValue
from statstorm.results.trace.header import TraceTrailer
from statstorm.results.trace.vocabulary import SUMMARY_KEYS

SCHEMA: Final = "statstorm.trace-summary/1"


def _num(v: JsonValue) -> float:
    """A JSON number as it was read (an int stays an int: its JSON text is unchanged)."""
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def _count(v: JsonValue) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else int(_num(v))


def _opt_num(v: JsonValue) -> float | None:
    return None if v is None else _num(v)


def _objs(v: JsonValue) -> list[JsonObject]:
    return [o for o in v if isinstance(o, dict)] if isinstance(v, list) else []


def _obj(v: JsonValue) -> JsonObject:
    return v if isinstance(v, dict) else {}


# A summary is read tolerantly (a value of another kind reads as missing): results.jsonlenient

def _opt_texts(d: Mapping[str, JsonValue], key: str) -> tuple[str, ...] | None:
    """The list under `key` as text; None when it is missing or of another kind."""
    v = d.get(key)
    return tuple(str(x) for x in v) if isinstance(v, list) else None


def _opt_count_at(d: Mapping[str, JsonValue], key: str) -> int | None:
    v = d.get(key)
    return None if v is None else _count(v)


@dataclass(frozen=True)
class PerCall:
    """One figure per call type, plus `total` and `failed` (SUMMARY_KEYS, in that order):
    calls per request, or total calls. None: unknown (an excerpt of an `strace -c` table)."""

    lstat: float | None = 0
    stat: float | None = 0
    fstat: float | None = 0
    access: float | None = 0
    open: float | None = 0
    readlink: float | None = 0
    getcwd: float | None = 0
    total: float | None = 0
    failed: float | None = 0

    def __getitem__(self, key: str) -> float | None:
        if key not in SUMMARY_KEYS:
            raise KeyError(key)
        v: float | None = getattr(self, key)
        return v

    def items(self) -> Iterator[tuple[str, float | None]]:
        return ((k, self[k]) for k in SUMMARY_KEYS)

    def to_json(self) -> JsonObject:
        return dict(self.items())

    def unknown(self, keys: Iterable[str]) -> PerCall:
        """These figures marked unknown (None)."""
        return replace(self, **{k: None for k in keys})

    def known(self) -> PerCall:
        """Unknown figures (and zeros) as 0, for arithmetic (`trace diff`)."""
        return PerCall(**{k: v or 0 for k, v in self.items()})

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> PerCall:
        return cls(**{k: _opt_num(d.get(k, 0)) for k in SUMMARY_KEYS})


@dataclass(frozen=True)
class Spread:
    """One call type's calls per request over the requests: mean, median, p95, range."""

    mean: float
    p50: float
    p95: float
    min: float
    max: float

    def to_json(self) -> JsonObject:
        return {"mean": self.mean, "p50": self.p50, "p95": self.p95, "min": self.min,
                "max": self.max}

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> Spread:
        return cls(*(_num(d.get(k)) for k in ("mean", "p50", "p95", "min", "max")))


@dataclass(frozen=True)
class SyscallTime:
    """Time spent in the traced calls (µs): per request (mean, p50, p95) and by call type."""

    per_request: float
    p50: float
    p95: float
    by_call: dict[str, float]

    def to_json(self) -> JsonObject:
        return {"per_request": self.per_request, "p50": self.p50, "p95": self.p95,
                "by_call": dict(self.by_call)}

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> SyscallTime:
        return cls(_num(d["per_request"]), _num(d["p50"]), _num(d["p95"]),
                   {str(k): _num(v) for k, v in _obj(d["by_call"]).items()})


@dataclass(frozen=True)
class PathCalls:
    path: str
    calls: int
    failed: int

    def to_json(self) -> JsonObject:
        return {"path": self.path, "calls": self.calls, "failed": self.failed}


@dataclass(frozen=True)
class FailedPath:
    path: str
    calls: int

    def to_json(self) -> JsonObject:
        return {"path": self.path, "calls": self.calls}


@dataclass(frozen=True)
class DirCalls:
    dir: str
    calls: int

    def to_json(self) -> JsonObject:
        return {"dir": self.dir, "calls": self.calls}


@dataclass(frozen=True)
class EntryFailures:
    """Failed include lookups built from one include_path entry."""

    entry: str
    failed: int
    per_request: float

    def to_json(self) -> JsonObject:
        return {"entry": self.entry, "failed": self.failed, "per_request": self.per_request}


@dataclass(frozen=True)
class MountLatency:
    """Latency of the calls on one mount (µs)."""

    mean: float
    p50: float
    p95: float
    p99: float
    max: float

    def to_json(self) -> JsonObject:
        return {"mean": self.mean, "p50": self.p50, "p95": self.p95, "p99": self.p99,
                "max": self.max}


@dataclass(frozen=True)
class MountFigures:
    """The calls on one mount; latency and its log2 histogram when the calls were timed."""

    mount: str
    fstype: str
    calls: int
    failed: int
    per_request: float
    by_call: dict[str, int]
    latency_us: MountLatency | None = None
    histogram_us: dict[str, int] | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {"mount": self.mount, "fstype": self.fstype, "calls": self.calls,
                           "failed": self.failed, "per_request": self.per_request,
                           "by_call": dict(self.by_call)}
        if self.latency_us is not None:
            out["latency_us"] = self.latency_us.to_json()
        if self.histogram_us is not None:
            out["histogram_us"] = dict(self.histogram_us)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> MountFigures:
        lat = lenient.obj_or_none(d, "latency_us")
        hist = lenient.obj_or_none(d, "histogram_us")
        return cls(mount=str(d["mount"]), fstype=str(d["fstype"]),
                   calls=_count(d["calls"]), failed=_count(d["failed"]),
                   per_request=_num(d["per_request"]),
                   by_call={str(k): _count(v) for k, v in _obj(d["by_call"]).items()},
                   latency_us=MountLatency(*(_num(lat.get(k)) for k in (
                       "mean", "p50", "p95", "p99", "max"))) if lat is not None else None,
                   histogram_us={str(k): _count(v) for k, v in hist.items()}
                   if hist is not None else None)


@dataclass(frozen=True)
class OperationFigures:
    """The calls of one kind of PHP operation: totals by call type, per request, and how many
    operations of that kind ran."""

    calls: PerCall
    per_request: float
    operations: int

    def to_json(self) -> JsonObject:
        return {**self.calls.to_json(), "per_request": self.per_request,
                "operations": self.operations}

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> OperationFigures:
        return cls(PerCall.from_json(d), _num(d["per_request"]), _count(d["operations"]))


# The keys of each shape, in the order they have always been written.
_EVENT_KEYS = ("source", "detail", "requests", "per_request", "per_request_dist",
               "syscall_time_us", "totals", "in_requests", "outside_requests", "other_calls",
               "failed_share", "top_paths", "top_failed_paths", "top_dirs",
               "failed_by_include_path_entry", "by_mount", "by_operation", "settings",
               "targets", "trace", "unknown", "notes")
_TABLE_KEYS = ("source", "requests", "per_request", "totals", "failed_share", "seconds",
               "other_calls", "notes", "settings", "targets", "trace", "unknown")
# written in both shapes, even when None (an unknown failed_share)
_ALWAYS = frozenset(("source", "requests", "per_request", "totals", "failed_share",
                     "other_calls", "settings", "targets", "trace"))


@dataclass(frozen=True)
class TraceSummary:
    """The summary of one trace (see the module's docstring for its two shapes)."""

    # what report's registry (results/result_files.py KINDS) knows of its files
    KIND: ClassVar[str] = "trace-summary"
    VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    REQUIRED: ClassVar[tuple[str, ...]] = ("per_request", "totals")
    LEGACY: ClassVar[tuple[str, ...]] = ("per_request", "totals", "source")

    source: str  # a TracerBackend's value ('' when the header did not say)
    requests: int
    per_request: PerCall
    totals: PerCall
    failed_share: float | None  # None: unknown (an excerpt of an `strace -c` table)
    other_calls: dict[str, int]
    settings: JsonObject
    targets: JsonObject
    trace: TraceTrailer
    # a trace's events or kernel counts
    detail: str | None = None
    per_request_dist: dict[str, Spread] | None = None
    syscall_time_us: SyscallTime | None = None
    in_requests: PerCall | None = None
    outside_requests: int | None = None
    top_paths: tuple[PathCalls, ...] | None = None
    top_failed_paths: tuple[FailedPath, ...] | None = None
    top_dirs: tuple[DirCalls, ...] | None = None
    failed_by_include_path_entry: tuple[EntryFailures, ...] | None = None
    by_mount: tuple[MountFigures, ...] | None = None
    by_operation: dict[str, OperationFigures] | None = None
    # an `strace -c` table: seconds by call type
    seconds: dict[str, float] | None = None
    # what the summary cannot tell: call types unknown (an excerpt), notes for the reader
    unknown: tuple[str, ...] | None = None
    notes: tuple[str, ...] | None = None

    def noted(self, note: str) -> TraceSummary:
        """The summary with one more note for its reader."""
        return replace(self, notes=(*(self.notes or ()), note))

    @property
    def is_table(self) -> bool:
        """A summary of an `strace -c` table (totals only)."""
        return self.seconds is not None

    def _field_json(self, key: str) -> JsonValue:
        if key in ("per_request", "totals", "in_requests"):
            calls: PerCall | None = getattr(self, key)
            return None if calls is None else calls.to_json()
        if key == "per_request_dist":
            return None if self.per_request_dist is None else {
                k: v.to_json() for k, v in self.per_request_dist.items()}
        if key == "syscall_time_us":
            return None if self.syscall_time_us is None else self.syscall_time_us.to_json()
        if key in ("top_paths", "top_failed_paths", "top_dirs", "failed_by_include_path_entry",
                   "by_mount"):
            rows: tuple[PathCalls | FailedPath | DirCalls | EntryFailures | MountFigures,
                        ...] | None = getattr(self, key)
            return None if rows is None else [r.to_json() for r in rows]
        if key == "by_operation":
            return None if self.by_operation is None else {
                k: v.to_json() for k, v in self.by_operation.items()}
        if key == "trace":
            return self.trace.to_json()
        if key in ("other_calls", "seconds", "settings", "targets"):
            m: Mapping[str, JsonValue] | None = getattr(self, key)
            return None if m is None else dict(m)
        if key in ("unknown", "notes"):
            texts: tuple[str, ...] | None = getattr(self, key)
            return None if texts is None else list(texts)
        v: JsonValue = getattr(self, key)
        return v

    def to_json(self) -> JsonObject:
        """The summary as it has always been written (without its "schema")."""
        out: JsonObject = {}
        for key in (_TABLE_KEYS if self.is_table else _EVENT_KEYS):
            v = self._field_json(key)
            if v is not None or key in _ALWAYS:
                out[key] = v
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> TraceSummary:
        """A summary as `to_json` (or `trace show --json`) wrote it; "schema" and "file" are
        the CLI's and are not kept."""
        dist, st, ops, inr, secs = (lenient.obj_or_none(d, k) for k in (
            "per_request_dist", "syscall_time_us", "by_operation", "in_requests", "seconds"))

        def rows(key: str) -> list[JsonObject] | None:
            return _objs(d.get(key)) if key in d else None

        tp, tf, td, fe, bm = (rows(k) for k in ("top_paths", "top_failed_paths", "top_dirs",
                                                "failed_by_include_path_entry", "by_mount"))
        return cls(
            # a summary file of an older statstorm may lack all but per_request and totals
            source=str(d["source"]) if "source" in d else "",
            requests=_opt_count_at(d, "requests") or 0,
            per_request=PerCall.from_json(_obj(d["per_request"])),
            totals=PerCall.from_json(_obj(d["totals"])),
            failed_share=_opt_num(d["failed_share"]) if "failed_share" in d else None,
            other_calls={str(k): _count(v)
                         for k, v in lenient.obj_or_empty(d, "other_calls").items()},
            settings=lenient.obj_or_empty(d, "settings"),
            targets=lenient.obj_or_empty(d, "targets"),
            trace=TraceTrailer.from_json(lenient.obj_or_empty(d, "trace")),
            detail=str(d["detail"]) if "detail" in d else None,
            per_request_dist={str(k): Spread.from_json(_obj(v)) for k, v in dist.items()}
            if dist is not None else None,
            syscall_time_us=SyscallTime.from_json(st) if st is not None else None,
            in_requests=PerCall.from_json(inr) if inr is not None else None,
            outside_requests=_opt_count_at(d, "outside_requests"),
            top_paths=None if tp is None else tuple(
                PathCalls(str(o["path"]), _count(o["calls"]), _count(o["failed"]))
                for o in tp),
            top_failed_paths=None if tf is None else tuple(
                FailedPath(str(o["path"]), _count(o["calls"])) for o in tf),
            top_dirs=None if td is None else tuple(
                DirCalls(str(o["dir"]), _count(o["calls"])) for o in td),
            failed_by_include_path_entry=None if fe is None else tuple(
                EntryFailures(str(o["entry"]), _count(o["failed"]),
                              _num(o["per_request"])) for o in fe),
            by_mount=None if bm is None else tuple(MountFigures.from_json(o) for o in bm),
            by_operation={str(k): OperationFigures.from_json(_obj(v)) for k, v in ops.items()}
            if ops is not None else None,
            seconds={str(k): _num(v) for k, v in secs.items()} if secs is not None else None,
            unknown=_opt_texts(d, "unknown"), notes=_opt_texts(d, "notes"))

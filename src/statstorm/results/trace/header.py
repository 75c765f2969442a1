"""A trace file's header and trailer read as typed records: what the tracer says of its run
(backend, detail, targets, settings, mounts, sampling, the PHP version traced) and of its end (how it stopped, what it
lost, the sample, the network round trips).

The header and trailer stay JSON objects in the file and in `Trace` (their writers add keys
as they learn them); `TraceHeader.from_json` and `TraceTrailer.from_json` are the one place
they are read by key. A trailer keeps the object it was read from (`to_json` gives it back
as written, keys in the writer's order).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from statstorm.results.jsonlenient import obj_or_empty
from statstorm.results.jsontypes import JsonObject, JsonValue


# A trace's header and trailer are read tolerantly (a value of another kind reads as missing:
# traces written by older versions and by other tools), so these readers do not raise.

def _as_int(v: object, default: int = 0) -> int:
    if not isinstance(v, (int, float, str)) or isinstance(v, bool) or v == "":
        return default
    try:
        return int(v)
    except (ValueError, OverflowError):  # "abc", NaN, Infinity
        return default


def _int(d: Mapping[str, JsonValue], key: str, default: int = 0) -> int:
    return _as_int(d.get(key), default)


def _opt_int(d: Mapping[str, JsonValue], key: str) -> int | None:
    v = d.get(key)
    return None if v is None else _as_int(v)


def _opt_float(d: Mapping[str, JsonValue], key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _opt_str(d: Mapping[str, JsonValue], key: str) -> str | None:
    v = d.get(key)
    return None if v is None else str(v)


def _text(d: Mapping[str, JsonValue], key: str, default: str = "") -> str:
    """The value under `key` as text; `default` when it is missing or falsy."""
    return str(d.get(key) or default)


def _truthy_int(d: Mapping[str, JsonValue], key: str) -> int | None:
    v = d.get(key)
    return _as_int(v) if v else None


def _seq(d: Mapping[str, JsonValue],
         key: str) -> list[JsonValue] | tuple[JsonValue, ...] | None:
    """The list under `key` (a header made in Python may hold tuples); None if it is none."""
    v = d.get(key)
    return v if isinstance(v, (list, tuple)) else None


@dataclass(frozen=True)
class CountedCalls:
    """One call type over a sampled trace's counted requests."""

    calls: int
    failed: int
    latency_ns: int


@dataclass(frozen=True)
class SamplingStatement:
    """What a sampled trace says of its sample (the trailer's "sampling")."""

    one_in: int
    recorded_requests: int
    counted_requests: int
    scale: float
    counted_calls_per_request: float
    calls_per_request_error: float
    counted_calls: dict[str, CountedCalls] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        return {
            "one_in": self.one_in, "recorded_requests": self.recorded_requests,
            "counted_requests": self.counted_requests, "scale": self.scale,
            "counted_calls_per_request": self.counted_calls_per_request,
            "calls_per_request_error": self.calls_per_request_error,
            "counted_calls": {c: {"calls": v.calls, "failed": v.failed,
                                  "latency_ns": v.latency_ns}
                              for c, v in self.counted_calls.items()},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> SamplingStatement:
        counted = {str(c): CountedCalls(_int(o, "calls"), _int(o, "failed"), _int(o, "latency_ns"))
                   for c, o in obj_or_empty(d, "counted_calls").items() if isinstance(o, dict)}
        return cls(one_in=_int(d, "one_in", 1),
                   recorded_requests=_int(d, "recorded_requests"),
                   counted_requests=_int(d, "counted_requests"),
                   scale=_opt_float(d, "scale") or 1.0,
                   counted_calls_per_request=_opt_float(d, "counted_calls_per_request") or 0.0,
                   calls_per_request_error=_opt_float(d, "calls_per_request_error") or 0.0,
                   counted_calls=counted)


@dataclass(frozen=True)
class NetworkCount:
    """The network round trips the storage under the traced code served during the trace (the
    trailer's "network"): from a GlusterFS volume's profile or NFS's counters of a mount."""

    round_trips: int
    per_request: float | None
    volume: str | None = None  # GlusterFS
    mount: str | None = None  # NFS
    server: str | None = None  # OpenAFS: the file server whose RPC counts were read

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> NetworkCount:
        return cls(round_trips=_int(d, "round_trips"), per_request=_opt_float(d, "per_request"),
                   volume=_opt_str(d, "volume"), mount=_opt_str(d, "mount"),
                   server=_opt_str(d, "server"))


@dataclass(frozen=True)
class TraceTrailer:
    """The trailer of a trace: how the tracer stopped and what it says of its run (the keys
    its readers use typed; the rest, which depend on the backend, in `raw`)."""

    raw: JsonObject = field(default_factory=dict, repr=False)
    stopped: str | None = None  # what ended it: "duration", "requests", "interrupted", "end"…
    dropped: int = 0  # events the tracer lost
    completed_requests: int | None = None
    t0_wall_ns: int | None = None  # wall clock of the events' time 0
    sampling: SamplingStatement | None = None
    network: NetworkCount | None = None

    def to_json(self) -> JsonObject:
        return dict(self.raw)

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue] | None) -> TraceTrailer:
        raw = dict(d or {})
        samp, net = obj_or_empty(raw, "sampling"), raw.get("network")
        return cls(raw=raw, stopped=_opt_str(raw, "stopped"), dropped=_int(raw, "dropped"),
                   completed_requests=_opt_int(raw, "completed_requests"),
                   t0_wall_ns=_opt_int(raw, "t0_wall_ns"),
                   sampling=SamplingStatement.from_json(samp) if samp else None,
                   network=NetworkCount.from_json(net) if isinstance(net, dict) else None)


_MAJOR_MINOR = re.compile(r"(\d+)\.(\d+)")


@dataclass(frozen=True)
class PhpIdentity:
    """The PHP a trace traced (the header's "php"): its version as major.minor ("8.4"), the
    full version string when known ("8.4.11"), and where the version was taken from (a
    lab's state, the traced binary, the tracer's layout of its build). A trace written
    before traces said, or of a target whose PHP could not be told, reads as unknown ('')."""

    version: str = ""
    full: str = ""
    source: str = ""  # "lab" | "binary" | "layout" ('' when unknown)

    @property
    def known(self) -> bool:
        return bool(self.version)

    def to_json(self) -> JsonObject:
        return {"version": self.version, "full": self.full, "from": self.source}

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> PhpIdentity:
        full = _text(d, "full")
        m = _MAJOR_MINOR.match(_text(d, "version")) or _MAJOR_MINOR.match(full)
        version = f"{int(m.group(1))}.{int(m.group(2))}" if m else ""
        return cls(version=version, full=full if version else "",
                   source=_text(d, "from") if version else "")


@dataclass(frozen=True)
class TraceHeader:
    """The header of a trace, typed for its readers (the file keeps the JSON object)."""

    source: str = ""
    detail: str = "events"
    created: str = ""
    host: str = ""
    targets: JsonObject = field(default_factory=dict)
    settings: JsonObject = field(default_factory=dict)
    mounts: tuple[tuple[str, str], ...] = ()
    sample_one_in: int = 1  # "sampling": {"one_in": N}; 1: every request recorded
    requests_hint: int | None = None  # an import's --requests
    # an `strace -c` table's import: whole, or an excerpt whose unreadable rows are these
    import_complete: bool = True
    import_unreadable: tuple[str, ...] = ()
    run_id: str = ""  # the run the trace belongs to (a demo's traces); '' when none
    php: PhpIdentity = field(default_factory=PhpIdentity)  # the PHP traced

    @property
    def target_pool(self) -> str:
        return _text(self.targets, "pool")

    @property
    def target_mode(self) -> str:
        return _text(self.targets, "mode")

    @property
    def target_pids(self) -> tuple[int, ...]:
        pids = _seq(self.targets, "pids")
        return () if pids is None else tuple(_as_int(p) for p in pids)

    @property
    def target_cmd(self) -> list[str]:
        cmd = _seq(self.targets, "cmd")
        return [] if cmd is None else [str(a) for a in cmd]

    def setting(self, name: str) -> str:
        """A recorded PHP setting as text ('' when the trace did not record it)."""
        v = self.settings.get(name)
        return "" if v is None else str(v)

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> TraceHeader:
        mounts = _seq(d, "mounts") or ()
        imp = obj_or_empty(d, "import")
        return cls(source=_text(d, "source"), detail=_text(d, "detail", "events"),
                   created=_text(d, "created"), host=_text(d, "host"),
                   targets=obj_or_empty(d, "targets"),
                   settings=obj_or_empty(d, "settings"),
                   mounts=tuple((str(m[0]), str(m[1])) for m in mounts
                                if isinstance(m, (list, tuple)) and len(m) >= 2),
                   sample_one_in=_int(obj_or_empty(d, "sampling"), "one_in", 1) or 1,
                   requests_hint=_truthy_int(d, "requests_hint"),
                   import_complete="complete" not in imp or bool(imp["complete"]),
                   import_unreadable=tuple(str(n) for n in _seq(imp, "unreadable") or ()),
                   run_id=_text(d, "run_id"),
                   php=PhpIdentity.from_json(obj_or_empty(d, "php")))


class Framed:
    """A trace's header and trailer, as JSON and typed: what a whole trace in memory
    (vocabulary.Trace) and its raw records (raw.TraceRecords) both carry."""

    header: dict[str, Any]
    trailer: dict[str, Any]

    @property
    def mounts(self) -> list[tuple[str, str]]:
        return list(self.head.mounts)

    @property
    def head(self) -> TraceHeader:
        """The header, typed."""
        return TraceHeader.from_json(self.header)

    @property
    def tail(self) -> TraceTrailer:
        """The trailer, typed."""
        return TraceTrailer.from_json(self.trailer)

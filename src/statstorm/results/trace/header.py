"""A trace file's header and trailer read as typed records: what the tracer says of its run
(backend, detail, targets, settings, mounts, sampling) and of its end (how it stopped, what it
lost, the sample, the network round trips).

The header and trailer stay JSON objects in the file and in `Trace` (their writers add keys
as they learn them); `TraceHeader.from_json` and `TraceTrailer.from_json` are the one place
they are read by key. A trailer keeps the object it was read from (`to_json` gives it back
as written, keys in the writer's order).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from statstorm.results.jsontypes import JsonObject, JsonValue


def _obj(v: JsonValue) -> JsonObject:
    return v if isinstance(v, dict) else {}


def _int(v: JsonValue, default: int = 0) -> int:
    return int(v) if isinstance(v, (int, float, str)) and not isinstance(v, bool) and v != "" \
        else default


def _opt_int(v: JsonValue) -> int | None:
    return None if v is None else _int(v)


def _opt_float(v: JsonValue) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _opt_str(v: JsonValue) -> str | None:
    return None if v is None else str(v)


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
        counted = {str(c): CountedCalls(_int(o.get("calls")), _int(o.get("failed")),
                                        _int(o.get("latency_ns")))
                   for c, o in _obj(d.get("counted_calls")).items() if isinstance(o, dict)}
        return cls(one_in=_int(d.get("one_in"), 1),
                   recorded_requests=_int(d.get("recorded_requests")),
                   counted_requests=_int(d.get("counted_requests")),
                   scale=_opt_float(d.get("scale")) or 1.0,
                   counted_calls_per_request=_opt_float(d.get("counted_calls_per_request")) or 0.0,
                   calls_per_request_error=_opt_float(d.get("calls_per_request_error")) or 0.0,
                   counted_calls=counted)


@dataclass(frozen=True)
class NetworkCount:
    """The network round trips the storage under the traced code served during the trace (the
    trailer's "network"): from a GlusterFS volume's profile or NFS's counters of a mount."""

    round_trips: int
    per_request: float | None
    volume: str | None = None  # GlusterFS
    mount: str | None = None  # NFS

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> NetworkCount:
        return cls(round_trips=_int(d.get("round_trips")),
                   per_request=_opt_float(d.get("per_request")),
                   volume=_opt_str(d.get("volume")), mount=_opt_str(d.get("mount")))


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
        samp, net = raw.get("sampling"), raw.get("network")
        return cls(raw=raw, stopped=_opt_str(raw.get("stopped")), dropped=_int(raw.get("dropped")),
                   completed_requests=_opt_int(raw.get("completed_requests")),
                   t0_wall_ns=_opt_int(raw.get("t0_wall_ns")),
                   sampling=SamplingStatement.from_json(samp) if isinstance(samp, dict) and samp
                   else None,
                   network=NetworkCount.from_json(net) if isinstance(net, dict) else None)


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

    @property
    def target_pool(self) -> str:
        return str(self.targets.get("pool") or "")

    @property
    def target_mode(self) -> str:
        return str(self.targets.get("mode") or "")

    @property
    def target_pids(self) -> tuple[int, ...]:
        pids = self.targets.get("pids")
        return tuple(_int(p) for p in pids) if isinstance(pids, (list, tuple)) else ()

    @property
    def target_cmd(self) -> list[str]:
        cmd = self.targets.get("cmd")
        return [str(a) for a in cmd] if isinstance(cmd, (list, tuple)) else []

    def setting(self, name: str) -> str:
        """A recorded PHP setting as text ('' when the trace did not record it)."""
        v = self.settings.get(name)
        return "" if v is None else str(v)

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> TraceHeader:
        mounts = d.get("mounts")
        samp = _obj(d.get("sampling"))
        hint = d.get("requests_hint")
        imp = _obj(d.get("import"))
        unreadable = imp.get("unreadable")
        return cls(source=str(d.get("source") or ""), detail=str(d.get("detail") or "events"),
                   created=str(d.get("created") or ""), host=str(d.get("host") or ""),
                   targets=_obj(d.get("targets")), settings=_obj(d.get("settings")),
                   mounts=tuple((str(m[0]), str(m[1])) for m in mounts
                                if isinstance(m, (list, tuple)) and len(m) >= 2)
                   if isinstance(mounts, (list, tuple)) else (),
                   sample_one_in=_int(samp.get("one_in"), 1) or 1,
                   requests_hint=_int(hint) if hint else None,
                   import_complete=bool(imp.get("complete", True)),
                   import_unreadable=tuple(str(n) for n in unreadable)
                   if isinstance(unreadable, list) else ())

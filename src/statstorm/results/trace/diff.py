"""Two trace summaries compared per request, call type by call type (`statstorm trace diff`,
schema statstorm.trace-diff/1), as a typed result. A call type either side does not know (an
excerpt of an `strace -c` table) is not compared: its delta and ratio are None and it is
listed in `not_compared`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from statstorm.results.jsontypes import JsonObject, JsonValue
from statstorm.results.trace.summary import PerCall

SCHEMA = "statstorm.trace-diff/1"


def _opt_num(v: JsonValue) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _obj(v: JsonValue) -> JsonObject:
    return v if isinstance(v, dict) else {}


@dataclass(frozen=True)
class Change:
    """One figure before (a) and after (b): delta and ratio (None: not compared, or a is 0)."""

    a: float | None
    b: float | None
    delta: float | None
    ratio: float | None

    def to_json(self) -> JsonObject:
        return {"a": self.a, "b": self.b, "delta": self.delta, "ratio": self.ratio}

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> Change:
        return cls(*(_opt_num(d.get(k)) for k in ("a", "b", "delta", "ratio")))


@dataclass(frozen=True)
class DiffSide:
    requests: int
    per_request: PerCall

    def to_json(self) -> JsonObject:
        return {"requests": self.requests, "per_request": self.per_request.to_json()}

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> DiffSide:
        n = _opt_num(d["requests"])
        return cls(int(n or 0), PerCall.from_json(_obj(d["per_request"])))


@dataclass(frozen=True)
class TraceDiff:
    a: DiffSide
    b: DiffSide
    per_request: dict[str, Change]  # by SUMMARY_KEYS
    syscall_time_us: Change | None = None  # when both traces timed their calls
    not_compared: tuple[str, ...] | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {"a": self.a.to_json(), "b": self.b.to_json(),
                           "per_request": {k: c.to_json() for k, c in self.per_request.items()}}
        if self.syscall_time_us is not None:
            out["syscall_time_us"] = self.syscall_time_us.to_json()
        if self.not_compared is not None:
            out["not_compared"] = list(self.not_compared)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, JsonValue]) -> TraceDiff:
        st, nc = d.get("syscall_time_us"), d.get("not_compared")
        return cls(a=DiffSide.from_json(_obj(d["a"])), b=DiffSide.from_json(_obj(d["b"])),
                   per_request={str(k): Change.from_json(_obj(v))
                                for k, v in _obj(d["per_request"]).items()},
                   syscall_time_us=Change.from_json(st) if isinstance(st, dict) else None,
                   not_compared=tuple(str(x) for x in nc) if isinstance(nc, list) else None)

"""A pool's trace as `check` knows it: the record every finished `statstorm trace` of a pool,
a lab or the system Apache's PHP leaves in the state root (`<state root>/traces/`, kept by
adapters/tracing/last_trace.py), and the trace check judged a pool by (`CheckedPool.trace`).

It names the trace file, when the trace ended and the figure check must never lose: the
share of the requests' time spent in metadata calls on network storage. `check` without
`--trace` reads the pool's record and uses its trace as evidence; an apply backup set newer
than `ended` makes it stale (model/rules_evidence.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from statstorm.results import jsonread as jr
from statstorm.results.jsontypes import JsonObject, JsonValue

SCHEMA = "statstorm.last-trace/1"


@dataclass(frozen=True)
class LastTrace:
    """One trace of one pool: where it is, when it ended and what it measured."""

    pool: str  # the pool as trace and check name it (php-fpm pool, lab's pool, "apache")
    path: str  # the trace file, absolute
    ended: str  # ISO 8601 UTC, when the trace ended (a file given to check: when it began)
    network_time_share: float | None  # of the finished requests' time; None: not timed
    network_ms_per_request: float = 0.0
    requests: int = 0
    detail: str = "events"  # events | counts (a counts trace times no call on a mount)
    lab: str = ""  # the lab, for a lab's pool

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "pool": self.pool, "lab": self.lab, "path": self.path,
                "ended": self.ended, "network_time_share": self.network_time_share,
                "network_ms_per_request": self.network_ms_per_request,
                "requests": self.requests, "detail": self.detail}

    @classmethod
    def from_json(cls, data: JsonValue) -> LastTrace:
        """ValueError (or KeyError, TypeError) when it is not a record of this schema."""
        d = jr.obj(data, "last trace")
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} record")
        return cls(pool=jr.str_(d, "pool"), path=jr.str_(d, "path"), ended=jr.str_(d, "ended"),
                   network_time_share=jr.opt_num(d, "network_time_share"),
                   network_ms_per_request=jr.num(d, "network_ms_per_request"),
                   requests=jr.int_(d, "requests"), detail=jr.str_(d, "detail", "events"),
                   lab=jr.str_(d, "lab"))


__all__ = ["SCHEMA", "LastTrace"]

"""What `statstorm opcache reset` did: OPcache's figures in the pool before and after
`opcache_reset()`, as one worker reported them (`opcache_get_status(false)`). OPcache's
shared memory belongs to the php-fpm master, so every worker of the pool (and of the other
pools of that master) sees the same figures."""

from __future__ import annotations

from dataclasses import dataclass

from statstorm.results import jsonlenient as lenient
from statstorm.results.jsontypes import JsonObject, JsonValue

KIND = "opcache-reset"
VERSION = 1
SCHEMA = f"statstorm.{KIND}/{VERSION}"


def _int(v: JsonValue) -> int:
    """A JSON number as an int (0 for anything else: a worker's answer is read tolerantly)."""
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0


@dataclass(frozen=True)
class OpcacheFigures:
    """One worker's `opcache_get_status(false)`: the figures a reset changes."""

    pid: int  # the worker that answered
    enabled: bool  # opcache_enabled (False also when the status is false: OPcache off)
    cached_scripts: int  # opcache_statistics.num_cached_scripts
    cached_keys: int  # opcache_statistics.num_cached_keys
    used_memory: int  # memory_usage.used_memory, bytes
    free_memory: int
    wasted_memory: int
    restart_pending: bool  # a reset asked for and not yet done (a worker was busy)
    hits: int  # opcache_statistics.hits since the last reset

    @classmethod
    def from_status(cls, pid: int, status: JsonObject | None) -> OpcacheFigures:
        """From the status as PHP gave it (None or {}: OPcache is off in the pool)."""
        st = status or {}
        mem, stats = lenient.obj_or_empty(st, "memory_usage"), lenient.obj_or_empty(
            st, "opcache_statistics")
        return cls(pid, bool(st.get("opcache_enabled")), _int(stats.get("num_cached_scripts")),
                   _int(stats.get("num_cached_keys")), _int(mem.get("used_memory")),
                   _int(mem.get("free_memory")), _int(mem.get("wasted_memory")),
                   bool(st.get("restart_pending")), _int(stats.get("hits")))

    def to_json(self) -> JsonObject:
        return {"pid": self.pid, "enabled": self.enabled,
                "cached_scripts": self.cached_scripts, "cached_keys": self.cached_keys,
                "used_memory": self.used_memory, "free_memory": self.free_memory,
                "wasted_memory": self.wasted_memory, "restart_pending": self.restart_pending,
                "hits": self.hits}

    @classmethod
    def from_json(cls, data: JsonObject) -> OpcacheFigures:
        return cls(_int(data.get("pid")), bool(data.get("enabled")),
                   _int(data.get("cached_scripts")), _int(data.get("cached_keys")),
                   _int(data.get("used_memory")), _int(data.get("free_memory")),
                   _int(data.get("wasted_memory")), bool(data.get("restart_pending")),
                   _int(data.get("hits")))


@dataclass(frozen=True)
class OpcacheReset:
    """One `statstorm opcache reset`: the pool, where it was asked, and OPcache before and
    after."""

    target: str  # how the target is named: `pool www`
    pool: str
    lab: str  # the lab it belongs to ('' for a pool found running)
    listen: str  # the FastCGI address the reset went to
    reset: bool  # what opcache_reset() returned
    before: OpcacheFigures
    after: OpcacheFigures

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "kind": KIND, "target": self.target, "pool": self.pool,
                "lab": self.lab, "listen": self.listen, "reset": self.reset,
                "before": self.before.to_json(), "after": self.after.to_json()}

    @classmethod
    def from_json(cls, data: JsonObject) -> OpcacheReset:
        return cls(str(data.get("target", "")), str(data.get("pool", "")),
                   str(data.get("lab", "")), str(data.get("listen", "")),
                   bool(data.get("reset")),
                   OpcacheFigures.from_json(lenient.obj_or_empty(data, "before")),
                   OpcacheFigures.from_json(lenient.obj_or_empty(data, "after")))

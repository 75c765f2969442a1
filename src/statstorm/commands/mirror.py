"""`statstorm mirror sync`: the deploy side of `code-local-mirror` — copy a pool's network
tree into its local mirror again, as a new generation switched in with one rename
(adapters/storage/code_mirror.py says why not in place)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from statstorm.adapters.storage import code_mirror
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.results.jsontypes import JsonObject
from statstorm.results.mirror import MirrorSync

SCHEMA = "statstorm.mirror-sync/1"


@dataclass(frozen=True)
class SyncOptions:
    pool: str


@dataclass(frozen=True)
class SyncResult:
    pool: str
    synced: tuple[MirrorSync, ...]

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "pool": self.pool, "synced": [s.to_json() for s in self.synced]}


def run(env: Env, opts: SyncOptions, ready: threading.Event | None = None) -> SyncResult:
    """Sync every mirror of the pool; `ready` is set once they are found (the copy starts)."""
    if not opts.pool or "/" in opts.pool or opts.pool.startswith("."):
        raise UsageError("--pool names a php-fpm pool (as `statstorm apply --pool` took it)")
    done = []
    for s in code_mirror.sync(opts.pool, ready):
        env.log(f"mirror: {s.marker.source} → {s.path}/{s.marker.tree} ({s.marker.files} "
                f"entries, {s.marker.bytes / 1048576:.1f} MiB) in {s.seconds:g} s")
        done.append(s)
    return SyncResult(opts.pool, tuple(done))


__all__ = ["SyncOptions", "SyncResult", "run"]

"""`statstorm mirror sync`: the deploy side of `code-local-mirror` — copy a pool's network
tree into its local mirror again, as a new generation switched in with one rename
(adapters/storage/code_mirror.py says why not in place), then reload the pool gracefully so
no worker keeps serving the generation before, and remove that generation.

Why a reload: each php-fpm worker caches what `current/...` resolved to for
realpath_cache_ttl (600 s after `apply --all`), and OPcache keys its entries by the path as
given, so workers keep serving the old generation after the switch. An `opcache_reset()` does
clean every worker's realpath cache too (each worker cleans its own once it sees OPcache's
restart), but only while OPcache is on, and only once no request holds OPcache's lock (under
load the restart waits); a graceful reload gives new workers with empty caches in any case,
the way apply reloads a pool (adapters/apply/pool_config.py: the master followed to the one
serving after; a handover when process_control_timeout = 0 would end requests)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from statstorm.adapters.apply import apply_target, pool_config
from statstorm.adapters.labs import state as labs
from statstorm.adapters.storage import code_mirror
from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.results.jsontypes import JsonObject
from statstorm.results.mirror import MirrorSync

SCHEMA = "statstorm.mirror-sync/2"
# what a sync without the reload leaves, in one line (the CLI's note and the result's)
STALE_WINDOW = ("the pool was not reloaded: its workers may serve the generation before for "
                "up to realpath_cache_ttl (600 s after `apply --all`), and with "
                "opcache.validate_timestamps = 0 until php-fpm reloads; that generation is kept "
                "until the next sync")


@dataclass(frozen=True)
class SyncOptions:
    pool: str = ""
    reload: bool = True  # reload the pool after the switch (--no-reload: do not)
    lab: str = ""  # a lab's mirror (made in its own directory) instead of a pool's


@dataclass(frozen=True)
class SyncResult:
    """The mirrors synced; whether the pool was reloaded (`reloaded`, or `note` says what a
    reader must know: the staleness window, a master not seen to settle); the generations
    removed after the reload, and the ones kept with why."""

    pool: str
    synced: tuple[MirrorSync, ...]
    reloaded: bool = False
    note: str = ""
    removed: tuple[str, ...] = ()
    kept: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (path, why)

    def to_json(self) -> JsonObject:
        return {"schema": SCHEMA, "pool": self.pool, "synced": [s.to_json() for s in self.synced],
                "reloaded": self.reloaded, "note": self.note or None,
                "removed": list(self.removed),
                "kept": [{"path": p, "why": why} for p, why in self.kept]}


def run(env: Env, opts: SyncOptions, ready: threading.Event | None = None) -> SyncResult:
    """Sync every mirror of the pool, then reload the pool (unless `opts.reload` is False)
    and remove the generations served before; `ready` is set once they are found (the copy
    starts)."""
    if bool(opts.pool) == bool(opts.lab):
        raise UsageError("name the mirror's pool (--pool NAME) or its lab (--lab NAME)")
    if opts.pool and ("/" in opts.pool or opts.pool.startswith(".")):
        raise UsageError("--pool names a php-fpm pool (as `statstorm apply --pool` took it)")
    pool, under = opts.pool, None
    if opts.lab:  # a lab's mirror lives in the lab's own directory
        pool, under = labs.require_up(env, opts.lab, pool=True).pool, labs.mirror_root(env, opts.lab)
    code_mirror.require(pool, under, f"--lab {opts.lab}" if opts.lab else "")
    # the pool's master and files, before anything is copied (a pool not running: one line)
    target = apply_target.resolve(env, lab=opts.lab or None, pool=None if opts.lab else pool) \
        if opts.reload else None
    done = []
    for s in code_mirror.sync(pool, ready, under):
        env.log(f"mirror: {s.marker.source} → {s.path}/{s.marker.tree} ({s.marker.files} "
                f"entries, {s.marker.bytes / 1048576:.1f} MiB) in {s.seconds:g} s")
        done.append(s)
    if target is None:
        env.log(f"mirror: {STALE_WINDOW}")
        return SyncResult(pool, tuple(done), note=STALE_WINDOW)
    try:
        lost = pool_config.reload(env, target, [], fpm=True)
    except pool_config.ApplyFailed as exc:
        raise ComponentError(f"the mirror is synced but {exc}: reload php-fpm by hand (until "
                             "then workers may serve the generation before)") from None
    if lost:
        note = (f"php-fpm's new master was not seen to settle ({lost}): the generation before "
                "is kept until the next sync")
        env.log(f"mirror: {note}")
        return SyncResult(pool, tuple(done), True, note,
                          kept=tuple((str(Path(s.path) / s.previous), "the reload was not "
                                      "followed") for s in done if s.previous))
    removed, kept = [], []
    for s in done:
        if not s.previous or s.previous == s.marker.tree:
            continue
        old = Path(s.path) / s.previous
        held = code_mirror.remove_generation(Path(s.path), s.previous, under)
        if held:
            why = f"process(es) {', '.join(map(str, held[:5]))} still hold files in it"
            env.log(f"mirror: {old} kept until the next sync: {why}")
            kept.append((str(old), why))
        elif not old.exists():
            removed.append(str(old))
        else:
            why = "it could not be removed: remove it by hand"
            env.log(f"mirror: {old}: {why}")
            kept.append((str(old), why))
    return SyncResult(pool, tuple(done), True, "", tuple(removed), tuple(kept))


__all__ = ["STALE_WINDOW", "SyncOptions", "SyncResult", "run"]

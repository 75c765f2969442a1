"""The PHP pools a long-running verb follows (`statstorm exporter`): which run now, found again
cheaply from the process titles in /proc, and fully (the tracer's target, check's target, the
listen address, the storage under the code and its round-trip counter) only when that set
changes: a pool started or stopped, or its master restarted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from statstorm.adapters.host import procs
from statstorm.adapters.labs import state as labs
from statstorm.adapters.php import php_targets, pool_facts
from statstorm.adapters.storage import mounts, round_trips
from statstorm.adapters.tracing import trace_targets
from statstorm.env import Env
from statstorm.errors import StatstormError, UsageError


@dataclass
class Watched:
    """One pool the exporter follows: what the tracer attaches to, what check gathers from."""
    name: str
    target: trace_targets.Target
    facts_target: pool_facts.PoolTarget
    masters: tuple[int, ...]
    listen: str = ""
    window: round_trips.Window | None = None
    mount: tuple[str, str] = ("", "")  # (mount point, fstype) of the code


def _masters(name: str) -> tuple[int, ...]:
    return tuple(sorted({procs.ppid(w) for w in php_targets.pool_workers(name)} - {0}))


class Pools:
    """Which pools run now, found again cheaply (titles in /proc) and fully (settings, server,
    storage) only when that changes."""

    def __init__(self, env: Env, *, lab: str | None = None, pools: tuple[str, ...] = ()) -> None:
        self.env, self.lab, self.names = env, lab, pools
        self.watched: dict[str, Watched] = {}

    def _names(self) -> list[str]:
        if self.lab:
            try:
                return [labs.require_up(self.env, self.lab, pool=True).pool]
            except UsageError:  # the lab went down: its pool is gone
                return []
        return list(self.names) or php_targets.running_pools()

    def key(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """The pools running now, each with its masters (a restarted master is a change)."""
        out = []
        for name in self._names():
            m = _masters(name)
            if m:
                out.append((name, m))
        return tuple(out)

    def current_key(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return tuple((w.name, w.masters) for w in self.watched.values())

    def resolve(self) -> list[str]:
        """Find the pools again, fully; the names of the pools that went away."""
        found: dict[str, Watched] = {}
        for name, masters in self.key():
            try:
                found[name] = self._watch(name, masters, self.watched.get(name))
            except UsageError as exc:  # it went between the scan and now
                self.env.debug(f"pool {name}: {exc}")
        gone = [n for n in self.watched if n not in found]
        self.watched = found
        return gone

    def _watch(self, name: str, masters: tuple[int, ...], was: Watched | None) -> Watched:
        env = self.env
        if self.lab:
            target = trace_targets.resolve(env, lab=self.lab)
            facts_target = pool_facts.lab_target(env, self.lab)
        else:
            target = trace_targets.resolve(env, pool=name)
            facts_target = pool_facts.PoolTarget(php_targets.find_pool(name))
        w = Watched(name, target, facts_target, masters or tuple(target.parents))
        try:
            w.listen = pool_facts.directives_of(env, facts_target).get("listen", "")
        except StatstormError as exc:
            env.debug(f"pool {name}: listen address unknown ({exc})")
        if target.code:
            entry = mounts.find_mount(mounts.current(), os.path.realpath(target.code))
            if entry is not None:
                w.mount = (entry.mount_point, entry.fstype)
            if was is not None and was.target.code == target.code and was.window is not None:
                w.window = was.window  # the same storage: its counter goes on, not from 0
            else:
                w.window = round_trips.window_for(env, target.code)
                if w.window is not None:
                    w.window.open()
        return w

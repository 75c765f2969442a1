"""How many of a trace's file calls reach network storage under a mount's metadata caches:
a small model of the kernel's FUSE/NFS attribute, entry and negative caches, for the
round-trip forecast of `statstorm demo` (the measured round trips scaled by it). Pure code.

A path-based call (stat, lstat, access, readlink, open) on a network mount is answered by
the kernel when the same path was looked up within the timeout that applies to it
(attribute/entry timeout for a path that exists, the negative timeout for one that does
not); otherwise it goes to the storage. An open always reaches the FUSE client (it has to
hand out a file handle), and a data file's open also reads its data there. The trace is run
twice and only the second pass counted: the steady state of a server that serves the same
pages again and again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

PATH_CALLS = frozenset(("stat", "lstat", "access", "readlink", "open"))


@dataclass(frozen=True)
class MountCaches:
    attribute_s: float = 1.0  # GlusterFS FUSE defaults
    entry_s: float = 1.0
    negative_s: float = 0.0


@dataclass(frozen=True)
class Forecast:
    requests: int
    calls_per_request: float  # metadata calls on network mounts
    reaching_per_request: float  # of them, the ones the caches do not answer
    data_opens_per_request: float  # opens of non-PHP files on network mounts (all reach it)


def forecast(syscalls: Iterable[Any], network_mounts: set[int], requests: int,
             caches: MountCaches, *, app_cache: bool = False) -> Forecast:
    """`syscalls`: the trace's Syscall records (time order); `app_cache`: the app keeps its
    data files in an object cache, so it opens them no more."""
    calls = [s for s in syscalls if s.mount in network_mounts and s.call in PATH_CALLS
             and s.req >= 0]
    if not calls or requests <= 0:
        return Forecast(max(requests, 0), 0.0, 0.0, 0.0)
    # the second pass starts one request's gap after the first ends
    width = calls[-1].ts_ns - calls[0].ts_ns
    span = width + max(width // max(requests - 1, 1), 1)
    seen: dict[str, tuple[int, bool]] = {}
    reaching = data = total = 0
    for rnd in (0, 1):
        for s in calls:
            data_open = s.call == "open" and s.ret >= 0 and not s.path.endswith(".php")
            if app_cache and data_open:
                continue
            now = s.ts_ns + rnd * span
            hit = False
            if s.path in seen:
                t, ok = seen[s.path]
                ttl = min(caches.attribute_s, caches.entry_s) if ok else caches.negative_s
                hit = now - t < ttl * 1e9
            if not hit:
                seen[s.path] = (now, s.ret >= 0)
            if rnd == 0:
                continue
            total += 1
            if s.call == "open" or not hit:
                reaching += 1
            if data_open:
                data += 1
    return Forecast(requests, round(total / requests, 2), round(reaching / requests, 2),
                    round(data / requests, 2))

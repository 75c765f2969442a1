"""Walks through symlinks on a FUSE mount: each one reads the symlink from the client (a
READLINK round trip), whatever the mount's timeouts, since the kernel caches a FUSE
symlink's target only when the client asked for FUSE_CACHE_SYMLINKS at FUSE_INIT
(fs/fuse/dir.c `fuse_get_link`), which the GlusterFS client does not. Which paths are
symlinks, and how many a call's walk reads, for model/network_forecast.py. Pure."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from statstorm.results.trace.vocabulary import CALLS

LSTAT = CALLS.index("lstat")
READLINK = CALLS.index("readlink")
Symlinks = dict[int, frozenset[str]]  # FUSE mount → the paths on it that are symlinks


def walks(path: str, ci: int, links: frozenset[str]) -> int:
    """The symlinks a call's walk of `path` reads: each directory of it that is a symlink,
    and the path itself unless the call is lstat (which does not follow it)."""
    if not links:
        return 0
    n = sum(1 for i in range(1, len(path)) if path[i] == "/" and path[:i] in links)
    return n + (ci != LSTAT and path.rstrip("/") in links)


def symlinks_of_calls(calls: Iterable[tuple[int, int, str, bool]],
                      fuse: set[int]) -> Symlinks:
    """The symlinks a trace shows on FUSE mounts: the paths a readlink call read
    ((mount, call index, path, found) per call)."""
    out: dict[int, set[str]] = {}
    for m, ci, path, ok in calls:
        if ok and ci == READLINK and m in fuse:
            out.setdefault(m, set()).add(path.rstrip("/"))
    return {m: frozenset(v) for m, v in out.items()}


def walks_per_call(calls: Iterable[Sequence[Any]]) -> list[tuple[int, int, bool, float]]:
    """The symlinks read per call of each (mount, call index, failed) of the trace, for the
    keys that read any: (mount, call index, failed, walks per call)."""
    n: dict[tuple[int, int, bool], int] = {}
    w: dict[tuple[int, int, bool], int] = {}
    for c in calls:
        key = (c[1], c[2], not c[4])
        n[key] = n.get(key, 0) + 1
        if len(c) > 6 and c[6]:
            w[key] = w.get(key, 0) + c[6]
    return [(k[0], k[1], k[2], round(v / n[k], 6)) for k, v in sorted(w.items())]


__all__ = ["Symlinks", "walks", "symlinks_of_calls", "walks_per_call"]

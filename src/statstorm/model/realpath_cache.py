"""PHP's per-process realpath cache and path resolution (`tsrm_realpath_r`), as pure code.

Semantics (see docs/whatif.md): one entry per path component, keyed by the path *as written*
(symlinks, `./` and `../` spellings make their own entries); each entry costs 48 bytes + key
length + 1 (+ resolved length + 1 when the two differ) against `realpath_cache_size`; a full
cache adds nothing (no eviction); entries expire `realpath_cache_ttl` seconds after insertion
(0: never), lazily, when a lookup walks their hash chain (1024 chains, FNV-1 hash, new entries
at the head). Resolution works from the leaf up: a cache lookup of each as-written prefix, an
`lstat` of each uncached one, a `readlink` for each symlink, stopping at the first cached
prefix. Negative results are never cached.

The file system comes from a `FsView`: what the trace showed to exist, to be missing, or to be
a symlink. No I/O happens here.
"""

from __future__ import annotations

from typing import Any, Callable

from statstorm.model.fs_view import DIR, FILE, LINK, LINK_MAX, MISSING, FsView

BUCKET_BYTES = 48  # sizeof(realpath_cache_bucket) on 64-bit Linux since PHP 7.2
CHAINS = 1024

# Resolution modes (zend_virtual_cwd.h)
EXPAND = 0  # lexical only: no syscalls, no cache
FILEPATH = 1  # a missing leaf does not stop the walk; its parents are resolved and cached
REALPATH = 2  # a missing leaf stops after one lstat

Emit = Callable[[str, str, bool], None]  # (call, path, failed)


def fnv_key(path: str) -> int:
    """realpath_cache_key: FNV-1 over the bytes, with C's signed char for bytes >= 0x80."""
    h = 2166136261
    mask = (1 << 64) - 1
    for b in path.encode("utf-8", "surrogateescape"):
        h = (h * 16777619) & mask
        h ^= b if b < 0x80 else (b - 256) & mask
    return h


class RealpathCache:
    """One process's realpath cache."""

    __slots__ = ("limit", "ttl", "used", "entries", "chains", "_min_expires", "_keys")

    def __init__(self, limit: int, ttl: int) -> None:
        self.limit = limit
        self.ttl = ttl
        self.used = 0
        # key → (resolved, is_dir, expires, bytes)
        self.entries: dict[str, tuple[str, bool, int, int]] = {}
        self.chains: dict[int, list[str]] = {}
        self._min_expires = 1 << 62
        self._keys: dict[str, int] = {}

    def _chain(self, path: str) -> int:
        n = self._keys.get(path)
        if n is None:
            n = fnv_key(path) % CHAINS
            self._keys[path] = n
        return n

    def find(self, path: str, now: int) -> tuple[str, bool] | None:
        if self.ttl and now > self._min_expires:
            return self._find_walk(path, now)
        e = self.entries.get(path)
        return (e[0], e[1]) if e is not None else None

    def _find_walk(self, path: str, now: int) -> tuple[str, bool] | None:
        """The chain walk of realpath_cache_find: expired entries passed are removed."""
        chain = self.chains.get(self._chain(path))
        if not chain:
            return None
        i = 0
        while i < len(chain):
            key = chain[i]
            e = self.entries[key]
            if e[2] < now:
                del chain[i]
                del self.entries[key]
                self.used -= e[3]
                continue
            if key == path:
                return (e[0], e[1])
            i += 1
        return None

    def add(self, path: str, resolved: str, is_dir: bool, now: int) -> None:
        size = BUCKET_BYTES + (len(path) if path.isascii() else
                               len(path.encode("utf-8", "surrogateescape"))) + 1
        if resolved != path:
            size += (len(resolved) if resolved.isascii() else
                     len(resolved.encode("utf-8", "surrogateescape"))) + 1
        if self.used + size > self.limit:
            return
        expires = now + self.ttl
        self.entries[path] = (resolved, is_dir, expires, size)
        self.chains.setdefault(self._chain(path), []).insert(0, path)
        self.used += size
        if expires < self._min_expires:
            self._min_expires = expires

    def clear(self) -> None:
        self.entries.clear()
        self.chains.clear()
        self.used = 0
        self._min_expires = 1 << 62

    def delete(self, path: str) -> None:
        e = self.entries.pop(path, None)
        if e is not None:
            self.chains[self._chain(path)].remove(path)
            self.used -= e[3]


class Resolver:
    """tsrm_realpath_r over a FsView and a RealpathCache; syscalls go to `emit`."""

    def __init__(self, fs: FsView, cache: RealpathCache, emit: Emit) -> None:
        self.fs = fs
        self.cache = cache
        self.emit = emit
        self.now = 0

    def resolve(self, path: str, cwd: str, mode: int = REALPATH) -> str | None:
        """virtual_file_ex (+ the getcwd of tsrm_realpath/expand_filepath for relative paths)."""
        if not path:
            return None
        if not path.startswith("/"):
            self.emit("getcwd", cwd, False)
            path = (cwd.rstrip("/") + "/" + path) if cwd else path
            if not path.startswith("/"):
                return None
        res = self._r(path, mode, False, [0])
        return res[0] if res is not None else None

    def _r(self, path: str, mode: int, is_dir: bool, ll: list[int]) -> tuple[Any, ...] | None:
        """(resolved, is_dir, ...) of `path`, or None. (A cache hit returns the cache's own
        entry, whose first two items are those.)"""
        cache = self.cache
        while True:
            if path == "/" or not path:
                return ("/", True)
            i = path.rfind("/")
            comp = path[i + 1:]
            parent = path[:i]
            if comp == "" or comp == ".":
                path = parent or "/"
                is_dir = True
                continue
            if comp == "..":
                if not parent:
                    return ("/", True)
                res = self._r(parent, mode, True, ll)
                if res is None:
                    return None
                r = res[0]
                if r == "/":
                    return ("/", True)
                return (r[:r.rfind("/")] or "/", True)
            save = mode != EXPAND
            enabled = cache.limit > 0
            if save and enabled:
                # cache.find, inlined: the entry itself unless expired entries must go
                if cache.ttl and self.now > cache._min_expires:
                    hit: tuple[Any, ...] | None = cache._find_walk(path, self.now)
                else:
                    hit = cache.entries.get(path)
                if hit is not None:
                    if is_dir and not hit[1]:
                        return None
                    return hit
            kind = FILE
            if save:
                kind = self.fs.kind(path)
                self.emit("lstat", path, kind == MISSING)
                if kind == MISSING:
                    if mode == REALPATH:
                        return None
                    save = False
            if save and kind == LINK:
                ll[0] += 1
                target = self.fs.links.get(path)
                self.emit("readlink", path, target is None)
                if ll[0] > LINK_MAX or target is None:
                    return None
                if target.startswith("/"):
                    res = self._r(target, mode, is_dir, ll)
                else:
                    res = self._r(parent + "/" + target, mode, is_dir, ll)
                if res is None:
                    return None
                resolved, directory = res[0], res[1]
            else:
                directory = False
                if save:
                    directory = kind == DIR
                    if is_dir and not directory:
                        return None
                if not parent:
                    resolved = path
                else:
                    pres = self._r(parent, FILEPATH if save else mode, True, ll)
                    if pres is None:
                        return None
                    base = pres[0]
                    resolved = (base if base != "/" else "") + "/" + comp
            if save and enabled:
                cache.add(path, resolved, directory, self.now)
            return (resolved, directory)

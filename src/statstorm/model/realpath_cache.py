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

import posixpath
from typing import Any, Callable

BUCKET_BYTES = 48  # sizeof(realpath_cache_bucket) on 64-bit Linux since PHP 7.2
CHAINS = 1024
LINK_MAX = 32

# Resolution modes (zend_virtual_cwd.h)
EXPAND = 0  # lexical only: no syscalls, no cache
FILEPATH = 1  # a missing leaf does not stop the walk; its parents are resolved and cached
REALPATH = 2  # a missing leaf stops after one lstat

MISSING, FILE, DIR, LINK = 0, 1, 2, 3

Emit = Callable[[str, str, bool], None]  # (call, path, failed)


def fnv_key(path: str) -> int:
    """realpath_cache_key: FNV-1 over the bytes, with C's signed char for bytes >= 0x80."""
    h = 2166136261
    mask = (1 << 64) - 1
    for b in path.encode("utf-8", "surrogateescape"):
        h = (h * 16777619) & mask
        h ^= b if b < 0x80 else (b - 256) & mask
    return h


class FsView:
    """The traced file system as the trace saw it: path → type, and symlink targets.

    Paths are looked up as written first, then physically (known symlinks followed, `.` and
    `..` applied); a directory that is a prefix of a known path exists; anything else is
    missing."""

    def __init__(self) -> None:
        self.types: dict[str, int] = {}
        self.links: dict[str, str] = {}  # symlink → target (relative or absolute, as read)
        self._canon_types: dict[str, int] = {}
        self._dirs: set[str] = set()
        self._memo: dict[str, int] = {}
        self._exists: dict[str, bool] = {}  # exists() of paths not in `changing`
        self._alias: dict[str, list[tuple[int, bool]] | None] = {}  # path → its physical's
        # paths seen both present and missing (created, renamed or removed while traced):
        # path → [(ns, exists)], in time order; `now_ns` picks the observation to use
        self.changing: dict[str, list[tuple[int, bool]]] = {}
        self._seen: dict[str, list[tuple[int, bool]]] = {}
        self.now_ns = 0
        # physical path → the times (ns) before which it was created while traced (the last
        # look that found it missing, or the start of an include that compiled it again)
        self.created: dict[str, list[int]] = {}
        # Guesses: directories known only as a `chdir()` target (a link or not: unknown);
        # the paths whose kind() is taken, not seen (`_guess`, built as kind() answers);
        # those a replay asked about (`guessed`: the caller empties it before a replay)
        self.unsure_dirs: set[str] = set()
        self._physical: set[str] = set()  # directories a getcwd showed, and their parents
        self._guess: set[str] = set()
        self.guessed: set[str] = set()

    def observe(self, path: str, kind: int, ts_ns: int = 0) -> None:
        """Record that `path` (absolute, as written) is MISSING, FILE, DIR or LINK.
        (`replay.build_fs` inlines this for the calls of a trace: keep the two alike.)"""
        if not path.startswith("/"):
            return
        self._seen.setdefault(path, []).append((ts_ns, kind != MISSING))
        old = self.types.get(path)
        if old is not None and (old == LINK or (old == DIR and kind == FILE)):
            return
        self.types[path] = kind
        self._memo.clear()
        self._exists.clear()
        self._alias.clear()

    def observe_link(self, path: str, target: str) -> None:
        self.types[path] = LINK
        self.links[path] = target
        self._memo.clear()
        self._exists.clear()
        self._alias.clear()

    def finish(self) -> None:
        """Index what was observed (call after the last observe)."""
        self._canon_types.clear()
        self._dirs.clear()
        self._memo.clear()
        self._exists.clear()
        self._alias.clear()
        self._guess.clear()
        self._physical.clear()
        for p, k in self.types.items():
            if k == DIR and p not in self.unsure_dirs:  # a getcwd's path: no link in it
                while p not in self._physical and p != "/":
                    self._physical.add(p)
                    p = posixpath.dirname(p)
        # the observations of every spelling of a physical path together (through symlinks,
        # `.` and `..`): a file made under one name is seen missing under another
        seen: dict[str, list[tuple[int, bool]]] = {}
        names: dict[str, list[str]] = {}
        for p, h in self._seen.items():
            phys = self.canon(p) or p
            seen.setdefault(phys, []).extend(h)
            names.setdefault(phys, []).append(p)
        self._seen.clear()
        self.changing = {}
        for phys, h in seen.items():
            if len({e for _, e in h}) < 2:
                continue
            h.sort()
            for p in names[phys] + [phys]:
                self.changing[p] = h
            made = [h[i - 1][0] for i in range(1, len(h)) if h[i][1] and not h[i - 1][1]]
            if made:
                self.created.setdefault(phys, []).extend(made)
        for path, times in self.created.items():
            self.created[path] = sorted(set(times))
        for p, k in self.types.items():
            if k == LINK:
                continue
            c = self.canon(p)
            if c is None:
                continue
            if k != MISSING or c not in self._canon_types:
                self._canon_types[c] = k
            if k != MISSING:
                d = posixpath.dirname(c)
                if d in self._canon_types and self._canon_types[d] == FILE:
                    self._canon_types[d] = DIR
                while d not in self._dirs and d != "/":
                    self._dirs.add(d)
                    d = posixpath.dirname(d)

    def canon(self, path: str, depth: int = 0) -> str | None:
        """The physical path, following known symlinks (None: a loop)."""
        if depth > LINK_MAX:
            return None
        parts = [p for p in path.split("/") if p]
        out = "/"
        for i, comp in enumerate(parts):
            if comp == ".":
                continue
            if comp == "..":
                out = posixpath.dirname(out)
                continue
            cand = out.rstrip("/") + "/" + comp
            target = self.links.get(cand)
            if target is not None:
                base = target if target.startswith("/") else out.rstrip("/") + "/" + target
                resolved = self.canon(base, depth + 1)
                if resolved is None:
                    return None
                cand = resolved
            out = cand
        return out

    def _at_now(self, hist: list[tuple[int, bool]]) -> bool:
        """Whether a changing path exists at `now_ns`: what the next look at it saw (the
        operation's own call, or a later one), else the last look before."""
        for ts, exists in hist:
            if ts >= self.now_ns:
                return exists
        return hist[-1][1]

    def _history(self, path: str) -> list[tuple[int, bool]] | None:
        """The observations of a changing path, or of the physical path it names."""
        hist = self.changing.get(path)
        if hist is not None or not self.changing:
            return hist
        if path in self._alias:
            return self._alias[path]
        c = self.canon(path)
        hist = self._alias[path] = self.changing.get(c) if c is not None and c != path else None
        return hist

    def kind(self, path: str) -> int:
        """What an lstat of `path` finds. A kind no call of the trace showed (a path under an
        existing directory taken for missing, a directory that may be a symlink) is a
        guess: the path goes into `guessed`."""
        hist = self._history(path)
        if hist is not None:
            return FILE if self._at_now(hist) else MISSING
        k = self.types.get(path)
        if k is not None and k != FILE:
            if k == DIR and path in self.unsure_dirs:
                self.guessed.add(path)
            return k
        m = self._memo.get(path)
        if m is not None:
            if path in self._guess:
                self.guessed.add(path)
            return m
        res = MISSING
        c: str | None = None
        par = posixpath.dirname(path)
        base = self.canon(par) if par != path else "/"
        if base is not None:
            leaf = posixpath.basename(path)
            if leaf in ("", "."):
                c = base
            elif leaf == "..":
                c = posixpath.dirname(base)
            else:
                c = base.rstrip("/") + "/" + leaf
                if c in self.links:
                    res = LINK
            if res != LINK and c is not None:
                if c == "/" or c in self._dirs:
                    res = DIR
                else:
                    res = self._canon_types.get(c, MISSING)
        if c is not None and res != LINK and self._guessed_kind(c, base, res):
            self._guess.add(path)
            self.guessed.add(path)
        self._memo[path] = res
        return res

    def _guessed_kind(self, c: str, parent: str | None, res: int) -> bool:
        """Whether the kind of physical path `c` is taken rather than seen: missing under a
        directory that exists, with no call on it; or a directory known only as the parent
        of other paths or as a `chdir()` target, which may be a symlink (no lstat of it, no
        getcwd inside it)."""
        if c in self._canon_types:
            return c in self.unsure_dirs
        if res == MISSING:
            return parent is not None and (parent == "/" or parent in self._dirs or
                                           self._canon_types.get(parent, MISSING) != MISSING)
        return res == DIR and c != "/" and c not in self._physical

    def exists(self, path: str) -> bool:
        """Does stat()/access()/open() of `path` (following links) succeed?"""
        hist = self._history(path)
        if hist is not None:
            return self._at_now(hist)
        e = self._exists.get(path)
        if e is not None:
            if path in self._guess:
                self.guessed.add(path)
            return e
        k = self.kind(path)
        if k == LINK:
            c = self.canon(path)
            e = c is not None and (c == "/" or c in self._dirs
                                   or self._canon_types.get(c, MISSING) != MISSING)
        else:
            e = k != MISSING
        self._exists[path] = e
        return e


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

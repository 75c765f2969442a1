"""The file system as a trace saw it (`FsView`), for the replay's realpath cache and engine.

Paths the trace showed to exist, to be missing, to be a symlink (and its target), or to
change while traced; what an `lstat` or a `stat` of any path finds at a given moment; and
which answers are guesses rather than observations (`guessed`, for model.replay_limits). No
I/O happens here.
"""

from __future__ import annotations

import posixpath

MISSING, FILE, DIR, LINK = 0, 1, 2, 3
LINK_MAX = 32  # symlinks followed in one resolution (MAXSYMLINKS)


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

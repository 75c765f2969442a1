"""The file system the replay's engine sees (`FsView`), built from the trace itself: every
path a call found or did not find, every symlink read, with each symlink's target taken from
the next `lstat` of the same resolution. Read from the trace's raw records
(`results.trace.raw`).
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from typing import Any

from statstorm.model.fs_view import DIR, FILE, LINK, MISSING, FsView
from statstorm.results.trace.raw import (O_ARGS, O_START, R_SCRIPT, S_CALL, S_KIND, S_OP, S_PATH,
                                         S_PID, S_RET, S_TS, TraceRecords)

ENOENT, ENOTDIR = -2, -20
_OBSERVED = frozenset(("lstat", "stat", "access", "open"))


def _observation(s: list[Any], cwd_whole: bool) -> tuple[int, bool] | None:
    """What a syscall says of its path at its time: there (True) or missing (False); a
    successful getcwd (whole, not cut by the tracer) says the directory exists throughout."""
    call = s[S_CALL]
    if call in _OBSERVED:
        ret = s[S_RET]
        if ret >= 0:
            return (s[S_TS], True)
        if ret == ENOENT or ret == ENOTDIR:
            return (s[S_TS], False)
        return None
    if call == "getcwd" and s[S_RET] > 0 and cwd_whole:
        return (0, True)
    return None


def cut_cwds(t: TraceRecords) -> set[str]:
    """The paths of getcwd calls that the tracer cut (shorter than the length the call
    returned, its NUL included): such a path, and an operation's cwd taken from it, names
    no directory."""
    pget = t.paths.get
    out: set[str] = set()
    for s in t.syscalls:
        if s[S_CALL] == "getcwd" and s[S_RET] > 0:
            path = pget(s[S_PATH], "")
            if len(path.encode("utf-8", "surrogateescape")) + 1 < s[S_RET]:
                out.add(path)
    return out


def _observe_each_call(fs: FsView, t: TraceRecords, enoent: set[str],
                       cut: set[str] | frozenset[str] = frozenset()) -> bool:
    """FsView.observe of each call that found or missed a path, in order (inlined: half a
    million calls in a big trace); whether there are readlink calls. The paths that a
    call found missing with ENOENT are added to `enoent`."""
    pget = t.paths.get
    seen = fs._seen
    types = fs.types
    links = False
    for s in t.syscalls:
        call = s[S_CALL]
        if call in _OBSERVED:
            ret = s[S_RET]
            if ret >= 0:
                kind = FILE
            elif ret == ENOENT or ret == ENOTDIR:
                kind = MISSING
                if ret == ENOENT:
                    enoent.add(pget(s[S_PATH], ""))
            else:
                continue
            ts = s[S_TS]
        elif call == "getcwd" and s[S_RET] > 0 and pget(s[S_PATH], "") not in cut:
            kind = DIR
            ts = 0
        else:
            if call == "readlink":
                links = True
            continue
        path = pget(s[S_PATH], "")
        if not path.startswith("/"):
            continue
        h = seen.get(path)
        if h is None:
            seen[path] = [(ts, kind != MISSING)]
        else:
            h.append((ts, kind != MISSING))
        old = types.get(path)
        if old is not None and (old == LINK or (old == DIR and kind == FILE)):
            continue
        types[path] = kind
    return links


def _observe_calls(fs: FsView, t: TraceRecords, enoent: set[str],
                   cut: set[str] | frozenset[str] = frozenset()) -> bool:
    """What _observe_each_call does, for a trace whose paths each have one id, quicker: a
    call that repeats what its path last showed changes nothing, and the history of
    observations (`FsView._seen`) matters only for paths seen both present and missing, so
    those alone get it, in a second pass."""
    pget = t.paths.get
    types = fs.types
    last: dict[int, int] = {}  # path id → its type so far (-1: not absolute: ignored)
    first: dict[int, bool] = {}  # path id → whether its first call found it
    mixed: set[int] = set()  # path ids seen both present and missing
    missing: set[int] = set()  # path ids a call found missing with ENOENT
    cut_ids = {i for i, path in t.paths.items() if path in cut} if cut else set()
    links = False
    for s in t.syscalls:
        call = s[S_CALL]
        if call in _OBSERVED:
            ret = s[S_RET]
            if ret >= 0:
                kind = FILE
            elif ret == ENOENT or ret == ENOTDIR:
                kind = MISSING
                if ret == ENOENT:
                    missing.add(s[S_PATH])
            else:
                continue
        elif call == "getcwd" and s[S_RET] > 0 and s[S_PATH] not in cut_ids:
            kind = DIR
        else:
            if call == "readlink":
                links = True
            continue
        i = s[S_PATH]
        prev = last.get(i)
        if prev == kind or prev == -1:
            continue
        if prev is None:
            path = pget(i, "")
            if not path.startswith("/"):
                last[i] = -1
                continue
            first[i] = kind != MISSING
            types[path] = kind
            last[i] = kind
            continue
        if (kind != MISSING) != first[i]:
            mixed.add(i)
        if prev == DIR and kind == FILE:
            continue  # a directory stays one (FsView.observe)
        types[pget(i, "")] = kind
        last[i] = kind
    if mixed:
        seen = fs._seen
        for s in t.syscalls:
            i = s[S_PATH]
            if i not in mixed:
                continue
            obs = _observation(s, i not in cut_ids)
            if obs is not None:
                seen.setdefault(pget(i, ""), []).append(obs)
    enoent.update(pget(i, "") for i in missing)
    return links


def _observe_target(fs: FsView, link: str, parent: str, target: str) -> None:
    """The link's target, relative to its directory when it lies under it."""
    if target.startswith(parent.rstrip("/") + "/"):
        target = target[len(parent.rstrip("/")) + 1:]
    fs.observe_link(link, target)


def _chdir_links(fs: FsView, t: TraceRecords, cut: set[str]) -> None:
    """A directory the trace only changed into: when the next getcwd of the process reports
    another path (the kernel's cwd follows symlinks) and the directory's parent is no link
    the trace knows, the directory is a symlink to that path."""
    pget = t.paths.get
    pending: dict[int, str] = {}
    for s in t.syscalls:
        call = s[S_CALL]
        if call == "chdir":
            path = pget(s[S_PATH], "")
            if s[S_RET] == 0 and path.startswith("/"):
                pending[s[S_PID]] = path = posixpath.normpath(path)
                if path not in fs.types:  # it exists (a link or a directory: unknown yet)
                    fs.observe(path, DIR)
                    fs.unsure_dirs.add(path)
            continue
        if call != "getcwd" or s[S_PID] not in pending:
            continue
        path = pending.pop(s[S_PID])
        now = pget(s[S_PATH], "")
        if s[S_RET] <= 0 or not now.startswith("/") or now in cut:
            continue
        if now == path:
            fs.unsure_dirs.discard(path)  # the kernel's cwd is that very path: no link
            continue
        if path in fs.links:
            continue
        parent = posixpath.dirname(path)
        if fs.canon(parent) == parent and fs.types.get(path) == DIR:
            _observe_target(fs, path, parent, now)
            fs.unsure_dirs.discard(path)


def _spelling_histories(fs: FsView, t: TraceRecords, cut: set[str]) -> None:
    """The observations (`FsView._seen`) of paths seen only present under one spelling and
    only missing under another of the same physical path (through a symlink, `.` or `..`):
    a file created through `current/` and opened by its real path. FsView.finish puts the
    spellings of a physical path together."""
    types = fs.types
    if not fs.links and not any("/." in p for p in types):
        return
    spellings: dict[str, list[str]] = {}
    for p in types:
        c = fs.canon(p)
        if c is not None:
            spellings.setdefault(c, []).append(p)
    need: set[str] = set()
    for names in spellings.values():
        if len(names) < 2:
            continue
        states: set[bool] = set()
        for p in names:
            states.update((True, False) if p in fs._seen else (types[p] != MISSING,))
        if len(states) > 1:
            need.update(p for p in names if p not in fs._seen)
    if not need:
        return
    pget = t.paths.get
    for s in t.syscalls:
        obs = _observation(s, True)
        if obs is None:
            continue
        path = pget(s[S_PATH], "")
        if path in need and path not in cut:
            fs._seen.setdefault(path, []).append(obs)


def recompiled(t: TraceRecords) -> dict[str, int]:
    """For a trace recorded with OPcache on (keys by name): each script that plain includes
    by one absolute name compiled (opened) twice in one process → a time before the
    first. OPcache would have answered the second from that key had it cached the script:
    it was too new (file_update_protection), made while traced (a file renamed into place
    is not seen missing before)."""
    pget = t.paths.get
    ops = t.operations
    first: dict[tuple[int, str], int] = {}
    out: dict[str, int] = {}
    for s in t.syscalls:
        if s[S_CALL] != "open" or s[S_RET] < 0 or s[S_KIND] != "include":
            continue
        o = ops.get(s[S_OP])
        if o is None or o[O_ARGS].get("type") not in ("include", "require"):
            continue
        path = pget(s[S_PATH], "")
        v = o[O_ARGS].get("name", "")
        name = pget(v, "") if isinstance(v, int) else str(v)
        if not name.startswith("/"):
            continue  # (an absolute name, through a symlink or not, is its own key)
        key = (s[S_PID], name)
        if key in first:
            out.setdefault(path, first[key])
        else:
            first[key] = o[O_START] - 1
    return out


def from_records(t: TraceRecords, named: list[str], cut: set[str] | None = None) -> FsView:
    """The file system as the trace `t` saw it; `named`: the names its includes and
    resolutions used (a script an include named exists unless a call found it missing);
    `cut`: the getcwd paths the tracer cut (`cut_cwds`)."""
    fs = FsView()
    if cut is None:
        cut = cut_cwds(t)
    pget = t.paths.get
    enoent: set[str] = set()
    if len(set(t.paths.values())) == len(t.paths):
        links = _observe_calls(fs, t, enoent, cut)
    else:  # one path under two ids (not from TraceWriter): each call observed in turn
        links = _observe_each_call(fs, t, enoent, cut)
    # A path that exists and has a child a call found missing with ENOENT (not ENOTDIR) is
    # a directory, though no call showed what it is (an lstat's result has no type).
    types = fs.types
    for path in enoent:
        parent = posixpath.dirname(path)
        if types.get(parent) == FILE:
            types[parent] = DIR
    if links:
        # symlinks: readlink(P) ok, then a later lstat of the process under the target:
        # the resolved path of a path walked through the link just before (the target's
        # directory cached), or else the same operation's next lstat, the target itself
        by_pid: dict[int, list[tuple[str, str, int, int]]] = defaultdict(list)
        for s in t.syscalls:
            call = s[S_CALL]
            if call == "readlink" or call == "lstat" or call == "open":
                path = pget(s[S_PATH], "")
                if path.startswith("/"):
                    by_pid[s[S_PID]].append((call, path, s[S_RET], s[S_OP]))
        for calls in by_pid.values():
            for i, (call, path, ret, op) in enumerate(calls):
                if call != "readlink" or ret < 0:
                    continue
                parent = posixpath.dirname(path)
                nxt = calls[i + 1] if i + 1 < len(calls) else None
                if nxt is not None and nxt[0] == "lstat" and nxt[3] == op and op >= 0:
                    # the resolution goes on with the target (not cached): its lstat
                    _observe_target(fs, path, parent, nxt[1])
                    continue
                if path in fs.links:
                    continue  # known: the guesses below never replace a target seen
                rests = sorted({c[1][len(path):] for c in calls[max(0, i - 64):i]
                                if c[1].startswith(path + "/")}, key=len, reverse=True)
                # the same operation's calls first (its open is of the resolved path); a
                # walk of the link itself under another spelling is not its target
                after = sorted(calls[i + 1:i + 9], key=lambda c: c[3] != op)
                norm = posixpath.normpath(path)
                found = next((c[1][:-len(r)] for c in after for r in rests
                              if len(c[1]) > len(r) and c[1].endswith(r)
                              and posixpath.normpath(c[1][:-len(r)]) != norm), None)
                if found is None:
                    found = next((c[1] for c in calls[i + 1:i + 9]
                                  if c[0] == "lstat"), None)
                    if found is not None and calls[i + 1:i + 9][0][3] != op:
                        found = None
                if found is not None:
                    _observe_target(fs, path, parent, found)
    _chdir_links(fs, t, cut)
    _spelling_histories(fs, t, cut)
    # A script an include named (absolutely) exists unless a call found it missing: with
    # OPcache answering from its key the trace has no call on it at all.
    for names in (named, [r[R_SCRIPT] for r in t.requests.values()]):  # primary scripts too
        for name in names:
            if name not in types and name.startswith("/"):
                fs.observe(name, FILE)
    fs.finish()
    return fs

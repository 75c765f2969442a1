"""The trace's PHP operations that the replay models: the includes and their resolution,
`file_exists`-style probes, path resolutions, stat-cache clears and `.user.ini` scans. One
pass over the operations (`scan`) finds those that become logical events and what they name;
`dropped` gives the operations whose recorded syscalls the engine makes again, and
`fallback_dir` the directory an include's resolution tries last.
"""

from __future__ import annotations

import itertools
import posixpath
from dataclasses import dataclass
from typing import Any, Callable

from statstorm.model.php_engine import OVERRIDE_FUNCS
from statstorm.model.engine_events import E_INCLUDE, E_PASS, E_PROBE, PROBE_ONCE
from statstorm.results.trace.raw import (O_ARGS, O_ID, O_KIND, O_REQ, O_START, R_SCRIPT, S_CALL,
                                         S_OP, S_PATH, S_PID, S_RET, S_TS, TraceRecords)

MODELED_KINDS = ("include", "include_resolve", "file_probe", "stat_cache_clear", "user_ini",
                 "ini_set")
_MODELED = frozenset(MODELED_KINDS)


@dataclass
class OpScan:
    """What one pass over a trace's operations finds."""

    roots: list[list[Any]]  # the operations that become logical events, in start order
    children: dict[int, list[int]]  # operation → its children's ids
    resolve_of: dict[int, list[Any]]  # include → its first include_resolve child
    named: list[str]  # the names includes and resolutions used, first uses in order
    scripts: set[str]  # the names includes used
    first_include: dict[int, int]  # request → start of its first include


def scan(t: TraceRecords) -> OpScan:
    """One pass over the trace's operations (see OpScan)."""
    ops = t.operations
    pget = t.paths.get
    children: dict[int, list[int]] = {}
    resolve_of: dict[int, list[Any]] = {}
    roots: list[list[Any]] = []
    named_raw: dict[Any, bool] = {}  # raw name argument → used by an include
    named_odd: list[tuple[Any, bool]] = []  # unhashable ones (never from a trace file)
    first_include: dict[int, int] = {}
    big = 1 << 62
    for o in ops.values():
        _, oid, req, _, start, _, kind, parent, a = o
        if parent < 0:
            if kind == "file_probe":  # the commonest operation: a root, and nothing else
                roots.append(o)
                continue
        else:
            ch = children.get(parent)
            if ch is None:
                children[parent] = [oid]
            else:
                ch.append(oid)
            if kind == "include_resolve" and parent not in resolve_of:
                resolve_of[parent] = o
        if kind == "include" or kind == "include_resolve":
            v = a.get("name", "")
            inc = kind == "include"
            try:
                if inc:
                    named_raw[v] = True
                elif v not in named_raw:
                    named_raw[v] = False
            except TypeError:
                named_odd.append((v, inc))
            if inc and start < first_include.get(req, big):
                first_include[req] = start
        if (parent < 0 or parent not in ops) and (
                kind in _MODELED or (kind in ("realpath", "main_script") and "path" in a)):
            roots.append(o)
    if roots and min(ops) >= 0 and max(ops) < 1 << 40:
        # (start, id) as one int: sorting ints is much quicker than sorting tuples
        keyed = sorted([(o[O_START] << 40) + o[O_ID] for o in roots])
        mask = (1 << 40) - 1
        roots = [ops[k & mask] for k in keyed]
    else:
        roots.sort(key=lambda o: (o[O_START], o[O_ID]))
    named: list[str] = []
    scripts: set[str] = set()
    for v, inc in itertools.chain(named_raw.items(), named_odd):
        name = pget(v, "") if isinstance(v, int) else str(v)
        named.append(name)
        if inc:
            scripts.add(name)
    return OpScan(roots, children, resolve_of, named, scripts, first_include)


def dropped(roots: list[list[Any]], children: dict[int, list[int]]) -> set[int]:
    """The operations whose syscalls the engine makes again: the roots and all below them."""
    out = {o[O_ID] for o in roots}
    stack = [c for r in out.intersection(children) for c in children[r]]
    while stack:
        i = stack.pop()
        if i in out:
            continue
        out.add(i)
        stack.extend(children.get(i, ()))
    return out


_ENTRIES: dict[str, int] = {}
_DIRS: dict[str, str] = {}


def fallback_dir(last: str | None, ncands: int, name: str, include_path: str,
                 script: str) -> str:
    """The including script's directory, php_resolve_path's last try (`last`: the last of
    the resolution's `ncands` candidate paths, if recorded)."""
    if last is not None:
        n = _ENTRIES.get(include_path)
        if n is None:
            n = _ENTRIES[include_path] = len([e for e in include_path.removesuffix(":")
                                              .split(":") if "://" not in e])
        if ncands == n + 1 and last.endswith("/" + name):
            return last[: -len(name) - 1]
    d = _DIRS.get(script)
    if d is None:
        d = _DIRS[script] = posixpath.dirname(script) if script else ""
    return d


CUT_AT = 199  # the tracers cut longer strings: bpftrace at 199 bytes, the eBPF tracer at 255


def uncut(value: str, whole: str, rebuilt: dict[str, str] | None = None) -> str:
    """`whole` where `value` is that string cut by the tracer (an include_path longer than
    the tracer's longest string); else the value `rebuilt` from the resolutions' candidates
    (`uncut_include_paths`), or `value`."""
    if len(value) >= CUT_AT and len(whole) > len(value) and whole.startswith(value):
        return whole
    if rebuilt and value in rebuilt:
        return rebuilt[value]
    return value


def uncut_include_paths(t: TraceRecords, recorded: str) -> dict[str, str]:
    """Each include_path the tracer cut (one the script set itself, not the recorded one's
    prefix) → its entries as the resolutions of relative names tried them: a failed one
    (its last call a failed lstat) tries every entry and then the script's directory, one
    candidate each. An entry no resolution shows is left out (a cut entry is no directory)."""
    pget = t.paths.get
    cut: dict[str, list[tuple[int, list[str]]]] = {}
    for o in t.operations.values():
        a = o[O_ARGS]
        if o[O_KIND] != "include_resolve" or "include_path" not in a:
            continue
        v = a["include_path"]
        value = pget(v, "") if isinstance(v, int) else str(v)
        if len(value) < CUT_AT or recorded.startswith(value):
            continue
        tried = cut.setdefault(value, [])
        v = a.get("name", "")
        name = pget(v, "") if isinstance(v, int) else str(v)
        cands = a.get("candidates") or []
        if not name or name.startswith(("/", "./", "../")) or not isinstance(cands, list):
            continue
        paths = [pget(c, "") if isinstance(c, int) else str(c) for c in cands]
        if paths and all(p.endswith("/" + name) for p in paths):
            tried.append((o[O_ID], [p[:-len(name) - 1] for p in paths]))
    if not cut:
        return {}
    last: dict[int, tuple[str, int]] = {}  # operation → its last call and result
    for sc in t.syscalls:
        if sc[S_OP] >= 0:
            last[sc[S_OP]] = (sc[S_CALL], sc[S_RET])
    out: dict[str, str] = {}
    for value, lists in cut.items():
        known = value.split(":")[:-1]  # the last entry may be cut
        best, whole = known, False
        for oid, entries in lists:
            if last.get(oid, ("", 0))[0] == "lstat" and last[oid][1] < 0:
                entries, done = entries[:-1], True  # the script's directory was tried last
            else:  # found: in an entry, or in the script's directory
                done = False
                req = t.requests.get(t.operations[oid][O_REQ])
                if req is not None and entries[-1] == posixpath.dirname(req[R_SCRIPT]):
                    entries = entries[:-1]
            if entries[:len(known)] == known and (done, len(entries)) > (whole, len(best)):
                best, whole = entries, done
        out[value] = ":".join(best)
    return out


class Chdirs:
    """Each process's successful chdir calls in time order, applied to its cwd as the
    operations are walked in start order: an operation uses the cwd in force when it began
    (an include records its cwd; a probe or a relative path does not)."""

    def __init__(self, t: TraceRecords, canon: Callable[[str], str | None],
                 cut: set[str] | frozenset[str] = frozenset()) -> None:
        self.canon = canon  # the physical path (the kernel's cwd follows symlinks)
        pget = t.paths.get
        # pid → [(ts, directory as named, the cwd a getcwd reported next, if any)]
        self.by_pid: dict[int, list[tuple[int, str, str]]] = {}
        pending: dict[int, int] = {}  # pid → index of its last chdir without a getcwd yet
        for s in t.syscalls:
            call = s[S_CALL]
            if call == "chdir" and s[S_RET] == 0:
                calls = self.by_pid.setdefault(s[S_PID], [])
                calls.append((s[S_TS], pget(s[S_PATH], ""), ""))
                pending[s[S_PID]] = len(calls) - 1
            elif call == "getcwd" and s[S_RET] > 0 and s[S_PID] in pending:
                calls = self.by_pid[s[S_PID]]
                i = pending.pop(s[S_PID])
                reported = pget(s[S_PATH], "")
                if reported not in cut:  # (a path the tracer cut tells nothing)
                    calls[i] = (calls[i][0], calls[i][1], reported)
        self.pos: dict[int, int] = {}
        self._physical: dict[str, str] = {}

    def advance(self, pid: int, start: int, cwd: dict[int, str]) -> None:
        """Apply `pid`'s chdir calls made before `start` to `cwd[pid]`."""
        calls = self.by_pid.get(pid)
        if not calls:
            return
        i = self.pos.get(pid, 0)
        while i < len(calls) and calls[i][0] <= start:
            _, path, reported = calls[i]
            if not path.startswith("/"):
                path = posixpath.join(cwd.get(pid, "/"), path)
            if reported:  # the kernel's own answer (through symlinks)
                self._physical[path] = reported
            cwd[pid] = self.physical(path)
            i += 1
        self.pos[pid] = i

    def before(self, calls: list[tuple[int, int, int, str, bool]], first: dict[int, str]
               ) -> list[tuple[int, int, int, str, str]]:
        """Each (pid, ts, req, path, succeeded) chdir call as (pid, ts, req, path, the cwd in
        force before it); `first`: each process's cwd before its first chdir."""
        cur = dict(first)
        out = []
        for pid, ts, req, path, ok in calls:
            before = cur.get(pid, "/")
            out.append((pid, ts, req, path, before))
            if ok:
                cur[pid] = self.physical(path if path.startswith("/") else
                                         posixpath.join(before, path))
        return out

    def physical(self, path: str) -> str:
        """The cwd the kernel reports for a chdir to `path` (symlinks followed): the trace
        records a directory as the script named it."""
        p = self._physical.get(path)
        if p is None:
            p = self._physical[path] = self.canon(path) or posixpath.normpath(path)
        return p


def cli_opcache_calls(t: TraceRecords, opcache: bool, lock_file_open: bool = True
                      ) -> tuple[set[tuple[int, int, str]], str, str]:
    """OPcache's own calls in a PHP CLI run, made only when it is enabled: the open of its
    lock file (`/tmp/.ZendSem.XXXXXX`, at start-up; not in PHP 8.3+, `lock_file_open`
    False: a memfd) and one more fstat of the primary script (its timestamp). For a trace
    recorded with OPcache on: the (ts, pid, call) of those recorded calls (the engine makes
    them), the lock file's path and the script's."""
    pget = t.paths.get
    sem = script = ""
    skip: set[tuple[int, int, str]] = set()
    if not opcache:
        return skip, sem, script
    for s in t.syscalls:
        call = s[S_CALL]
        if call == "open" and not sem and s[S_RET] >= 0 and "/.ZendSem." in pget(s[S_PATH], ""):
            sem = pget(s[S_PATH], "")
            skip.add((s[S_TS], s[S_PID], call))
        elif call == "fstat" and (sem or not lock_file_open) and not script and s[S_OP] < 0:
            path = pget(s[S_PATH], "")
            if path.endswith(".php"):
                script = path
                skip.add((s[S_TS], s[S_PID], call))
    return skip, sem, script


def opcache_events(tl: list[tuple[int, Any]], includes: bool, override: bool
                   ) -> list[tuple[int, Any]]:
    """A process's timeline recorded with OPcache on, as the engine takes it: without
    OPcache's own getcwd for its keys (the engine makes it), and with enable_file_override
    (`override`) its probes' resolutions marked."""
    tl = drop_opcache_cwd(tl, includes, override)
    if override:
        mark_probe_resolutions(tl)
    return tl


def drop_opcache_cwd(tl: list[tuple[int, Any]], includes: bool, probes: bool
                     ) -> list[tuple[int, Any]]:
    """A process's timeline without OPcache's getcwd for its first relative key in a
    request (the engine makes that call itself): a getcwd pass-through in no operation
    (marked by its sixth item) right before a relative include (`includes`: the trace made
    keys by the names as written, revalidate_path off) or a relative probe that
    enable_file_override answers from a key (`probes`, whatever revalidate_path is)."""
    def keyed(ev: Any) -> bool:
        if ev[0] == E_INCLUDE:
            return includes and not ev[2].startswith("/")
        return probes and ev[0] == E_PROBE and ev[3] in OVERRIDE_FUNCS \
            and not ev[2].startswith("/")
    gone = {i - 1 for i, x in enumerate(tl) if i and len(tl[i - 1][1]) == 6
            and tl[i - 1][1][0] == E_PASS and tl[i - 1][1][5] is True and keyed(x[1])}
    return [x for i, x in enumerate(tl) if i not in gone] if gone else tl


def mark_probe_resolutions(tl: list[tuple[int, Any]]) -> None:
    """Mark, in place, the *_once resolutions that are enable_file_override's: a probe
    OPcache answered from its key resolves the name, then revalidates the script (the
    stat right after). The tracer takes the resolution for a *_once; marked PROBE_ONCE,
    the engine makes it only when the proposed settings revalidate."""
    for i in range(len(tl) - 1):
        ev, nxt = tl[i][1], tl[i + 1][1]
        if ev[0] == E_INCLUDE and ev[3] is True and nxt[0] == E_PASS and len(nxt) == 6 \
                and nxt[5] == "revalidate":
            tl[i] = (tl[i][0], ev[:3] + (PROBE_ONCE,) + ev[4:])


def compile_fstats(t: TraceRecords, dropped: set[int] | frozenset[int]) -> set[tuple[int, int]]:
    """(ts, pid) of the compile's `fstat` of an included file recorded outside its include
    operation: the engine makes it with the include's `open`. PHP 7.4 and 8.4 (their
    tracer layouts) end a `*_once` include's operation at its stream open, so the fstat of
    `zend_stream_fixup` that follows in `zend_compile_file` is the process's next call, on
    the same path, in no operation; in 8.2 it lies inside the operation (and is dropped
    with it)."""
    ops = t.operations
    pget = t.paths.get
    opened: dict[int, Any] = {}  # pid → the path its last call opened in a dropped include
    out: set[tuple[int, int]] = set()
    for s in t.syscalls:
        pid, op, call, path_id = s[S_PID], s[S_OP], s[S_CALL], s[S_PATH]
        last = opened.pop(pid, None) if opened else None
        if last is not None and call == "fstat" and op < 0 and path_id == last:
            out.add((s[S_TS], pid))
            continue
        if call == "open" and op in dropped and s[S_RET] >= 0:
            o = ops.get(op)
            if o is not None and o[O_KIND] == "include" and pget(path_id, ""):
                opened[pid] = path_id
    return out

"""Turn the tracer's raw event stream into requests, PHP operations and attributed syscalls.

Pure code: the caller feeds events in timestamp order (see `model/events.py`) and receives records
through a sink. Per process it keeps the current request, a stack of open PHP operations,
the working directory (to make relative paths absolute) and an fd → path table (so `fstat`
names its file).

Which operation a syscall belongs to:
- inside a probed PHP function: that function's operation (innermost wins), where
  `php_resolve_path` → include_resolve, `compile_filename`/`zend_stream_open` → include,
  `php_stat` → file_probe (file_exists, is_file, ...), `php_parse_user_ini_file` → user_ini,
  a top-level `tsrm_realpath` → realpath (main_script before the script runs);
- a `stat()` of a file inside an include or outside any function once the script runs:
  opcache_revalidate (the only plain `stat` PHP makes there is OPcache's timestamp check);
- in a command (`--cmd`), anything before php_request_startup (module start-up, ini files,
  shared libraries): startup;
- outside any function before `php_execute_script` (FPM's fix_pathinfo realpath, .user.ini,
  the primary script's open): main_script; the chdir/getcwd pair around the script too;
- anything else: other.

The compiled tracer reads the includes that open nothing (OPcache's cached `*_once` scripts)
from PHP's included-files table instead of probing them: a `zend_stream_open` entry with the
number 1 is such a table entry, recorded before the event that found it. The entry of a file
that a probed open of the same request opened is that open's own, not another include; the
primary script's entry, first in the table, is its open before the script ran (main_script),
as OPcache answers that open from its cache too.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Callable, Protocol

from statstorm.results.trace.vocabulary import Operation, Request, Syscall, call_type, decode_path

AT_FDCWD = -100

FILE_PROBE_FUNCS = {
    0: "fileperms", 1: "fileinode", 2: "filesize", 3: "fileowner", 4: "filegroup",
    5: "fileatime", 6: "filemtime", 7: "filectime", 8: "filetype", 9: "is_writable",
    10: "is_readable", 11: "is_executable", 12: "is_file", 13: "is_dir", 14: "is_link",
    15: "file_exists", 16: "lstat", 17: "stat", 18: "lstat",
}
INCLUDE_TYPES = {1: "eval", 2: "include", 4: "include_once", 8: "require", 16: "require_once"}
# uprobe tag → operation kind
TAG_KIND = {"resolve": "include_resolve", "compile": "include", "sopen": "include",
            "stat": "file_probe", "uini": "user_ini", "realpath": "realpath",
            "clear": "stat_cache_clear"}
# an ini change made by the script (ZEND_INI_STAGE_RUNTIME, zend_ini.h)
INI_STAGE_RUNTIME = 16
# expand_filepath's realpath modes (zend_virtual_cwd.h)
EXPAND_MODES = {0: "expand", 1: "filepath", 2: "realpath"}


class Sink(Protocol):
    def syscall(self, s: Syscall) -> None: ...
    def request(self, r: Request) -> None: ...
    def operation(self, o: Operation) -> None: ...


@dataclass
class _Frame:
    tag: str
    op: Operation | None  # None: a nested call folded into its parent operation


@dataclass
class _Proc:
    pid: int
    cwd: str
    req: Request | None = None
    ended: bool = False  # php_request_shutdown returned for `req`
    started: bool = False  # php_request_startup began (USDT request__startup)
    executing: bool = False
    included: bool = False
    stack: list[_Frame] = field(default_factory=list)
    fds: dict[int, str] = field(default_factory=dict)
    pending: str = ""  # the first string of the last O event, until its P arrives
    # the files the script's probed zend_stream_open calls opened (their table entries)
    opened: set[str] = field(default_factory=set)
    sopen: str | None = None  # the probed open in progress, until an open() in it succeeds


class Attributor:
    """Consumes raw events (already split into fields) and emits trace records."""

    def __init__(self, sink: Sink, mounts: list[tuple[str, str]], *,
                 cwd_of: Callable[[int], str], single_request: bool = False,
                 strlen: int = 200) -> None:
        self.sink = sink
        self._cut_at = strlen - 1  # a path this long was cut by the tracer
        self._mounts = sorted(((m, i) for i, (m, _) in enumerate(mounts)),
                              key=lambda x: len(x[0]), reverse=True)
        self._cwd_of = cwd_of
        self._single = single_request
        self._procs: dict[int, _Proc] = {}
        self._next_req = 0
        self._next_op = 0
        self.t0: int | None = None
        self.last_ns = 0
        self.completed = 0  # requests that reached php_request_shutdown
        self.truncated_paths = 0
        self.forks = 0
        self.exits = 0
        self.pids_seen: set[int] = set()
        if single_request:
            self._single_req = Request(self._new_req_id(), 0, 0)

    # -- helpers -------------------------------------------------------------------------
    def _new_req_id(self) -> int:
        self._next_req += 1
        return self._next_req - 1

    def _rel(self, ts: int) -> int:
        if self.t0 is None:
            self.t0 = ts
        rel = ts - self.t0
        self.last_ns = max(self.last_ns, rel)
        return rel

    def _proc(self, pid: int) -> _Proc:
        p = self._procs.get(pid)
        if p is None:
            p = _Proc(pid, self._cwd_of(pid))
            self._procs[pid] = p
            self.pids_seen.add(pid)
        return p

    def mount_of(self, path: str) -> int:
        for mp, idx in self._mounts:
            if path == mp or path.startswith(mp.rstrip("/") + "/"):
                return idx
        return -1

    def _absolute(self, p: _Proc, path: str, dfd: int) -> str:
        if not path or path.startswith("/"):
            return path
        if dfd == AT_FDCWD or dfd < 0:
            base = p.cwd
        else:
            base = p.fds.get(dfd, "")
            if not base:
                return path
        return posixpath.normpath(posixpath.join(base, path)) if base else path

    def _req_id(self, p: _Proc) -> int:
        if self._single:
            return self._single_req.id
        return p.req.id if p.req else -1

    def _script_of(self, p: _Proc) -> str | None:
        req = self._single_req if self._single else p.req
        return req.script if req is not None else None

    def _finish_request(self, p: _Proc) -> None:
        if p.req is None:
            return
        if not p.ended:
            p.req.end_ns = -1
        self.sink.request(p.req)
        p.req = None
        p.ended = False

    # -- events --------------------------------------------------------------------------
    def on_fork(self, parent: int, child: int) -> None:
        self.forks += 1
        par = self._procs.get(parent)
        c = self._proc(child)
        if par is not None:
            c.cwd = par.cwd
            c.fds = dict(par.fds)

    def on_exit(self, pid: int) -> None:
        self.exits += 1
        p = self._procs.pop(pid, None)
        if p is not None:
            self._finish_request(p)

    def on_accept(self, pid: int, ts: int) -> None:
        rel = self._rel(ts)
        if self._single:
            return
        p = self._proc(pid)
        self._finish_request(p)
        p.req = Request(self._new_req_id(), pid, rel)
        p.started = p.executing = p.included = False
        p.stack.clear()
        p.opened.clear()

    def on_startup(self, pid: int, ts: int, script: str) -> None:
        rel = self._rel(ts)
        p = self._proc(pid)
        if not self._single and p.req is not None and p.ended:
            # Another request on the same connection (HTTP keep-alive into Apache's mod_php
            # children): it starts here. What the server did between the two (reading the
            # request, its directory walk) stays with the one before.
            self._finish_request(p)
            p.req = Request(self._new_req_id(), pid, rel)
            p.executing = p.included = False
            p.stack.clear()
            p.opened.clear()
        p.started = True
        req = self._single_req if self._single else p.req
        if req is not None and not req.script:
            req.script = script

    def on_uri(self, pid: int, uri: str) -> None:
        p = self._proc(pid)
        req = self._single_req if self._single else p.req
        if req is not None and not req.uri and uri != "-":
            req.uri = uri

    def on_execute(self, pid: int, ts: int) -> None:
        self._rel(ts)
        self._proc(pid).executing = True

    def on_shutdown(self, pid: int, ts: int) -> None:
        rel = self._rel(ts)
        p = self._proc(pid)
        if self._single:
            self.completed += 1
            self._single_req.end_ns = rel
            return
        if p.req is not None and not p.ended:
            p.ended = True
            p.req.end_ns = rel
            self.completed += 1

    def on_enter(self, pid: int, ts: int, tag: str, num: int, s1: str) -> None:
        rel = self._rel(ts)
        p = self._proc(pid)
        parent = next((f.op for f in reversed(p.stack) if f.op is not None), None)
        op: Operation | None = None
        if tag == "realpath":
            if parent is not None:
                if parent.kind == "include_resolve":
                    parent.args.setdefault("candidates", []).append(s1)
            else:
                kind = "realpath" if p.executing else "main_script"
                op = Operation(-1, self._req_id(p), pid, rel, rel, kind, -1, {"path": s1})
        elif tag == "sopen" and num == 1 and s1 in p.opened:
            p.opened.discard(s1)  # the table entry of a file a probed open opened
        elif tag == "sopen" and num == 1 and not p.included and parent is None and (
                s1 == self._script_of(p)):
            op = Operation(-1, self._req_id(p), pid, rel, rel, "main_script", -1,
                           {"name": s1, "type": "main"})
        elif tag == "sopen" and parent is not None and parent.kind in (
                "include", "include_resolve"):
            op = None
        elif tag == "ini":
            # include_path's handler: only a script's own include_path matters (whatif keeps
            # it where a proposed include_path would otherwise replace it), not its restore
            # when the request ends
            if s1 == "include_path" and p.executing and num == INI_STAGE_RUNTIME:
                op = Operation(-1, self._req_id(p), pid, rel, rel, "ini_set",
                               parent.id if parent else -1, {"setting": s1, "stage": num})
        elif tag == "expand":
            # expand_filepath: a path resolution of its own only at the top level (the
            # primary script's entry in the included-files table, fopen); inside another
            # operation (open_basedir checks, an include's open) it is part of that one.
            if parent is None:
                kind = "realpath" if p.executing else "main_script"
                op = Operation(-1, self._req_id(p), pid, rel, rel, kind, -1,
                               {"path": s1, "mode": EXPAND_MODES.get(num, str(num))})
        else:
            kind = TAG_KIND[tag]
            args: dict[str, object] = {"name": s1}
            if tag == "resolve":
                args["cwd"] = p.cwd
            elif tag == "compile":
                args["type"] = INCLUDE_TYPES.get(num, str(num))
            elif tag == "sopen":
                args["type"] = "once" if p.executing else "main"
                if not p.executing:
                    kind = "main_script"
            elif tag == "stat":
                args["func"] = FILE_PROBE_FUNCS.get(num, str(num))
            elif tag == "clear":
                args["realpath"] = bool(num)
            op = Operation(-1, self._req_id(p), pid, rel, rel, kind,
                           parent.id if parent else -1, args)
        if op is not None:
            op.id = self._next_op
            self._next_op += 1
            if op.kind == "include":
                p.included = True
        if tag == "sopen" and num != 1:
            p.sopen = s1
        p.stack.append(_Frame(tag, op))

    def on_second(self, pid: int, s2: str) -> None:
        p = self._procs.get(pid)
        if p is None or not p.stack:
            return
        op = p.stack[-1].op
        if op is None:
            return
        if op.kind == "include_resolve":
            op.args["include_path"] = s2
        elif op.kind == "user_ini":
            op.args["filename"] = s2

    def on_return(self, pid: int, ts: int, tag: str) -> None:
        rel = self._rel(ts)
        p = self._procs.get(pid)
        if p is None:
            return
        if tag == "sopen":
            p.sopen = None
        # Pop to the matching frame: a lost event must not leave the stack skewed.
        while p.stack:
            frame = p.stack.pop()
            if frame.op is not None:
                frame.op.end_ns = rel
                self.sink.operation(frame.op)
            if frame.tag == tag:
                break

    def on_syscall(self, pid: int, ts: int, lat: int, name: str, flags: int, dfd: int,
                   ret: int, raw_path: bytes) -> None:
        rel = self._rel(ts)
        p = self._proc(pid)
        path = decode_path(raw_path)
        if len(raw_path) >= self._cut_at:
            self.truncated_paths += 1
        call = call_type(name, flags, path)
        if call is None:
            return
        if call == "fstat" and not path:
            path = p.fds.get(dfd, "")
        elif call == "getcwd":
            if ret > 0 and path:
                p.cwd = path
        else:
            path = self._absolute(p, path, dfd)
        if call == "open" and ret >= 0:
            p.fds[ret] = path
            if p.sopen is not None and p.stack and p.stack[-1].tag == "sopen":
                # its entry: the name it was given, or the path it opened (a name found
                # relative to the working directory)
                p.opened.update((p.sopen, path))
                p.sopen = None
        elif call == "chdir" and ret == 0:
            if name == "fchdir":
                path = p.fds.get(dfd, "")
            if path:
                p.cwd = path
        op = next((f.op for f in reversed(p.stack) if f.op is not None), None)
        kind = self._kind(p, call, op)
        self.sink.syscall(Syscall(rel, pid, call, name, path, ret, lat, self._req_id(p),
                                  op.id if op else -1, self.mount_of(path) if path else -1,
                                  kind))

    def _kind(self, p: _Proc, call: str, op: Operation | None) -> str:
        if call == "stat" and p.executing and (op is None or op.kind == "include"):
            return "opcache_revalidate"
        if op is not None:
            return op.kind
        if self._single and not p.started:
            return "startup"
        if not p.executing:
            return "main_script"
        if call in ("getcwd", "chdir") and not p.included:
            return "main_script"
        return "other"

    def finish(self) -> None:
        """End of trace: close open operations and write every request still open."""
        for p in list(self._procs.values()):
            while p.stack:
                frame = p.stack.pop()
                if frame.op is not None:
                    frame.op.end_ns = self.last_ns
                    self.sink.operation(frame.op)
            self._finish_request(p)
        if self._single:
            # The command is the request, PHP or not: without php_request_shutdown (another
            # program, or a PHP without the probe's symbol) it ends with the last event.
            if self._single_req.end_ns < 0:
                self._single_req.end_ns = self.last_ns
                self.completed = 1
            self.sink.request(self._single_req)

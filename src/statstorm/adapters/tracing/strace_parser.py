"""strace logs parsed into syscalls and requests.

A log may come from any mix of `-f` (`1234 ` or `[pid  1234] ` prefixes), `-t`/`-tt`/`-ttt`/`-r`,
`-T`, `-y`/`-yy` and `-x`/`-xx`; `<unfinished ...>` lines are joined with their `<... resumed>`
line per PID. Only the traced call types (SYSCALL_CALL and FLAGGED_STAT in
results/trace/vocabulary.py) are kept; accept/accept4 split the log into requests, and
clone/close/dup keep the per-PID cwd and fd→path tables used to make relative paths absolute
and to name what fstat looked at. The syntax of a line is adapters.strace_syntax.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from statstorm.adapters.tracing.strace_summary import FIX, SummaryTable, read_row, table_header
from statstorm.adapters.tracing.strace_syntax import (AT_FDCWD, ATTACHED, CALL, DECORATED, LATENCY,
                                              PREFIX, RESULT, RESUMED, UNFINISHED, at_flags,
                                              errno_value, fd_arg, frac_ns, join_path, number,
                                              quoted, split_args)
from statstorm.errors import UsageError
from statstorm.results.trace.vocabulary import (FLAGGED_STAT, SYSCALL_CALL, Request, Syscall,
                                                call_type, decode_path)

_AT_NAMES = frozenset({"faccessat", "faccessat2", "openat", "openat2", "readlinkat"})
_FD_NAMES = frozenset({"fstat", "fstat64", "oldfstat", "fchdir"})
_FORKS = frozenset({"clone", "clone2", "clone3", "fork", "vfork"})
_DUPS = frozenset({"dup", "dup2", "dup3", "fcntl", "fcntl64"})
_ACCEPTS = frozenset({"accept", "accept4"})
_PARSED = frozenset(SYSCALL_CALL) | frozenset(FLAGGED_STAT) | _FORKS | _DUPS | _ACCEPTS \
    | {"close"}
_DAY_NS = 86400 * 10**9
_EARLY_GIVE_UP = 64  # non-empty lines without one syscall line: not a log, stop reading


@dataclass
class ParsedLog:
    """What parse_log made of a log; `skipped` counts syscalls of other types (mmap, read...),
    `skipped_bad` lines that are not strace output, `unmatched_unfinished` halves of
    unfinished/resumed pairs whose other half is missing."""

    syscalls: list[Syscall] = field(default_factory=list)
    requests: dict[int, Request] = field(default_factory=dict)
    flags_seen: set[str] = field(default_factory=set)
    lines: int = 0
    skipped: int = 0
    skipped_bad: int = 0
    unmatched_unfinished: int = 0
    summary_tables: int = 0


@dataclass
class _Proc:
    cwd: str | None = None
    fds: dict[int, str] = field(default_factory=dict)
    req: int = -1
    last_ns: int = 0  # the time on its last line
    done_ns: int = 0  # when its last finished call returned (-T)
    pending: tuple[bytes, bytes, int] | None = None  # name, argument text, entry ts


class _LogParser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.out = ParsedLog()
        self.procs: dict[int, _Proc] = {}
        self.children: set[int] = set()
        self.main_pid: int | None = None
        self.first_ns: int | None = None
        self.clock_day = 0
        self.clock_last = 0
        self.relative_ns = 0
        self.nonempty = 0
        self.good = 0
        self.table_lines = 0
        self.first_bad = 0
        self.fragment: tuple[int, bytes] | None = None  # a line cut by "Process N attached"
        self.table: SummaryTable | None = None

    # ---- lines -------------------------------------------------------------------------
    def feed(self, lineno: int, line: bytes) -> None:
        self.out.lines = lineno
        line = line.rstrip(b"\r\n")
        if self.fragment is not None:
            if line.lstrip().startswith(UNFINISHED):
                line = self.fragment[1] + b" " + line.lstrip()
            self.fragment = None
        if not line.strip():
            self.table = None
            return
        self.nonempty += 1
        if self.table is not None or b"calls" in line or b"---" in line:
            if self._table_line(line):
                self.table_lines += 1
                return
        m = ATTACHED.search(line)
        if m:
            self.children.add(int(m.group(1)))
            self.good += 1
            head = line[:m.start()]
            if head.strip():
                self.fragment = (lineno, head)
            return
        self._event(lineno, line)
        if self.good + self.table_lines == 0 and self.nonempty >= _EARLY_GIVE_UP:
            raise self._not_strace()

    def _table_line(self, line: bytes) -> bool:
        text = line.decode("utf-8", "replace")
        if self.table is None:
            self.table = table_header(text)
            if self.table is None:
                return False
            self.out.summary_tables += 1
            self.out.flags_seen.add("-C")
            return True
        if re.fullmatch(r"\s*-{3,}[\s-]*", text) or read_row(self.table, text) is not None:
            return True
        self.table = None
        return False

    def _bad(self, lineno: int) -> None:
        self.out.skipped_bad += 1
        if not self.first_bad:
            self.first_bad = lineno

    def _not_strace(self) -> UsageError:
        return UsageError(f"{self.source}:{self.first_bad or 1}: not strace output; {FIX}")

    def _event(self, lineno: int, line: bytes) -> None:
        m = PREFIX.match(line)
        assert m is not None  # every group is optional
        body = line[m.end():]
        if not (body.startswith((b"---", b"+++", b"<...", b"strace: ")) or CALL.match(body)):
            self._bad(lineno)
            return
        pid = self._pid(m)
        ts = self._timestamp(m)
        proc = self._proc(pid)
        if ts is not None:
            if ts < proc.last_ns:
                raise UsageError(f"{self.source}:{lineno}: the time goes back by "
                                 f"{(proc.last_ns - ts) / 1e6:,.3f} ms for PID {pid}: lines out"
                                 " of order or logs put together; give one log as strace wrote it")
            proc.last_ns = ts
        self.good += 1
        if body.startswith((b"---", b"strace: ")):
            return
        if body.startswith(b"+++"):
            if proc.pending is not None:
                self.out.unmatched_unfinished += 1
                proc.pending = None
            return
        now = 0 if ts is None else ts
        if body.startswith(b"<..."):
            r = RESUMED.match(body)
            if r is None:
                self._bad(lineno)
                return
            name = r.group(1)
            if proc.pending is None and pid != 0 and self.main_pid is None \
                    and self.procs.get(0, _Proc()).pending is not None:
                self._adopt_main(pid)
                proc = self.procs[pid]
            pending = proc.pending
            if pending is None or pending[0] != name:
                self.out.unmatched_unfinished += 1
                return
            proc.pending = None
            self._complete(lineno, pid, proc, name.decode(), pending[1] + body[r.end():],
                           pending[2], now)
            return
        c = CALL.match(body)
        assert c is not None
        rest = body[c.end():]
        stripped = rest.rstrip()
        if stripped.endswith(UNFINISHED):
            if proc.pending is not None:
                self.out.unmatched_unfinished += 1
            proc.pending = (c.group(1), stripped[:-len(UNFINISHED)], now)
            return
        if stripped.endswith(b"<detached ...>"):
            return
        self._complete(lineno, pid, proc, c.group(1).decode(), rest, now, now)

    def _pid(self, m: re.Match[bytes]) -> int:
        raw = m.group("bpid") or m.group("pid")
        if raw is None:
            return self.main_pid or 0
        pid = int(raw)
        self.out.flags_seen.add("-f")
        if pid not in self.procs and m.group("bpid") and 0 in self.procs \
                and pid not in self.children and self.main_pid is None:
            self._adopt_main(pid)
        return pid

    def _adopt_main(self, pid: int) -> None:
        """Lines without a `[pid N]` prefix (strace writing to stderr with one process left)
        belong to the first process; it shows its PID once a second process exists."""
        self.main_pid = pid
        self.procs[pid] = self.procs.pop(0, _Proc())
        for s in self.out.syscalls:
            if s.pid == 0:
                s.pid = pid
        for r in self.out.requests.values():
            if r.pid == 0:
                r.pid = pid

    def _timestamp(self, m: re.Match[bytes]) -> int | None:
        clock, num = m.group("clock"), m.group("num")
        if clock is not None:
            hh, mm, ss = clock.split(b":")
            sec, _, frac = ss.partition(b".")
            self.out.flags_seen.add("-tt" if frac else "-t")
            value = (int(hh) * 3600 + int(mm) * 60 + int(sec)) * 10**9 + frac_ns(frac)
            if value + self.clock_day < self.clock_last - _DAY_NS // 2:
                self.clock_day += _DAY_NS  # the log ran past midnight
            value += self.clock_day
            self.clock_last = value
        elif num is not None:
            sec, _, frac = num.partition(b".")
            value = int(sec) * 10**9 + frac_ns(frac)
            if int(sec) >= 10**6:
                self.out.flags_seen.add("-ttt")
            else:
                self.out.flags_seen.add("-r")
                self.relative_ns += value
                value = self.relative_ns
        else:
            return None
        if self.first_ns is None:
            self.first_ns = value
        return value - self.first_ns

    def _proc(self, pid: int) -> _Proc:
        proc = self.procs.get(pid)
        if proc is None:
            proc = self.procs[pid] = _Proc()
        return proc

    # ---- one whole syscall -------------------------------------------------------------
    def _complete(self, lineno: int, pid: int, proc: _Proc, name: str, text: bytes,
                  ts: int, end_ts: int) -> None:
        if name not in _PARSED:
            self.out.skipped += 1
            return
        args, end = split_args(text)
        res = RESULT.match(text, end) if end >= 0 else None
        if res is None:
            self.good -= 1
            self._bad(lineno)
            return
        lat_m = LATENCY.search(text, end)
        lat = 0
        if lat_m:
            self.out.flags_seen.add("-T")
            lat = int(lat_m.group(1)) * 10**9 + frac_ns(lat_m.group(2))
        proc.done_ns = max(proc.done_ns, ts + lat if lat else end_ts)
        raw_ret, ret_deco, err = res.groups()
        value = 0 if raw_ret == b"?" else number(raw_ret)
        if value is None:  # a result no register holds: a damaged line
            self.good -= 1
            self._bad(lineno)
            return
        ret = -errno_value(err.decode()) if value == -1 and err else value
        if ret_deco is not None or DECORATED.search(text, 0, end):
            self.out.flags_seen.add("-y")
        call: str | None = None
        path = ""
        if name in FLAGGED_STAT:
            call, path = self._flagged(proc, name, args)
        elif name in SYSCALL_CALL:
            call = SYSCALL_CALL[name]
            path = self._path(proc, name, args)
        if call is None:
            self.out.skipped += 1
            self._side_effect(pid, proc, name, args, ret, ts + lat if lat else end_ts, ts)
            return
        if ret >= 0:
            if call == "open":
                deco = fd_arg(b"%d<%s>" % (ret, ret_deco)) if ret_deco else (None, None)
                proc.fds[ret] = path if path.startswith("/") or not deco[1] else deco[1]
            elif call == "getcwd" and path.startswith("/"):
                proc.cwd = path
            elif call == "chdir":
                proc.cwd = path if path.startswith("/") else None
        if b"\\x" in text[:end] and call != "getcwd":
            self.out.flags_seen.add("-x")
        self.out.syscalls.append(Syscall(ts_ns=ts, pid=pid, call=call, syscall=name,
                                         path=path, ret=ret, lat_ns=lat, req=proc.req))

    def _at(self, proc: _Proc, dirfd_arg: bytes, raw: bytes | None) -> str:
        """A path argument of an *at() call, made absolute from its dirfd when possible."""
        path = decode_path(raw) if raw is not None else ""
        num, deco = fd_arg(dirfd_arg)
        if num == AT_FDCWD:
            if deco:
                proc.cwd = deco
            return join_path(deco or proc.cwd, path)
        return join_path(deco or (proc.fds.get(num) if num is not None else None), path)

    def _fd_path(self, proc: _Proc, arg: bytes) -> str:
        num, deco = fd_arg(arg)
        if deco:
            return deco
        if num == AT_FDCWD:
            return proc.cwd or ""
        return proc.fds.get(num, "") if num is not None else ""

    def _flagged(self, proc: _Proc, name: str, args: list[bytes]) -> tuple[str | None, str]:
        at = 2 if name == "statx" else 3  # the flags argument (absent on a damaged line)
        flag_arg = args[at] if len(args) > at else b"0"
        raw = quoted(args[1]) if len(args) > 1 else None
        flags = at_flags(flag_arg)
        call = call_type(name, flags, decode_path(raw) if raw else "")
        if call == "fstat":
            return call, self._fd_path(proc, args[0])
        return call, self._at(proc, args[0], raw)

    def _path(self, proc: _Proc, name: str, args: list[bytes]) -> str:
        if name in _FD_NAMES:
            return self._fd_path(proc, args[0])
        if name == "getcwd":
            raw = quoted(args[0])
            return decode_path(raw) if raw is not None else ""
        if name in _AT_NAMES:
            return self._at(proc, args[0], quoted(args[1]) if len(args) > 1 else None)
        raw = quoted(args[0])
        return join_path(proc.cwd, decode_path(raw)) if raw is not None else ""

    def _side_effect(self, pid: int, proc: _Proc, name: str, args: list[bytes], ret: int,
                     returned_ns: int, entry_ns: int) -> None:
        if ret < 0:
            return
        if name in _ACCEPTS:
            if proc.req >= 0:
                last = self.out.requests[proc.req]
                last.end_ns = max(entry_ns, last.start_ns)  # -T rounding: never before it began
            rid = len(self.out.requests)
            self.out.requests[rid] = Request(rid, pid, returned_ns)
            proc.req = rid
        elif name in _FORKS and ret > 0:
            self.children.add(ret)
            child = self._proc(ret)
            if child.cwd is None:
                child.cwd = proc.cwd
            for fd, p in proc.fds.items():
                child.fds.setdefault(fd, p)
        elif name == "close":
            num, _ = fd_arg(args[0])
            if num is not None:
                proc.fds.pop(num, None)
        elif name in _DUPS and args:
            num, deco = fd_arg(args[0])
            src = deco or (proc.fds.get(num) if num is not None else None)
            if name.startswith("fcntl") and not (len(args) > 1 and b"DUPFD" in args[1]):
                return
            if src:
                proc.fds[ret] = src

    def finish(self) -> ParsedLog:
        if self.fragment is not None:
            self._bad(self.fragment[0])
        out = self.out
        if self.nonempty == 0:
            raise UsageError(f"{self.source}: empty, not strace output; {FIX}")
        calls = self.good
        if calls <= 0 or out.skipped_bad * 2 > self.nonempty:
            raise self._not_strace()
        for proc in self.procs.values():
            if proc.pending is not None:
                out.unmatched_unfinished += 1
        timed = self.first_ns is not None
        if out.requests:
            for proc in self.procs.values():
                if proc.req >= 0:
                    out.requests[proc.req].end_ns = max(proc.last_ns, proc.done_ns) \
                        if timed else -1
            if not timed:
                for r in out.requests.values():
                    r.end_ns = -1
        else:
            first = out.syscalls[0].pid if out.syscalls else self.main_pid or 0
            end = max((max(p.last_ns, p.done_ns) for p in self.procs.values()), default=0)
            out.requests[0] = Request(0, first, 0, end if timed else -1)
            for s in out.syscalls:
                s.req = 0
        return out


def parse_log(lines: Iterable[bytes], *, source: str) -> ParsedLog:
    """Parse an strace log given as raw byte lines; `source` names the file in errors."""
    parser = _LogParser(source)
    for lineno, line in enumerate(lines, 1):
        parser.feed(lineno, line)
    return parser.finish()

"""Import existing strace output: a syscall log, or the table `strace -c` prints.

A log may come from any mix of `-f` (`1234 ` or `[pid  1234] ` prefixes), `-t`/`-tt`/`-ttt`/`-r`,
`-T`, `-y`/`-yy` and `-x`/`-xx`; `<unfinished ...>` lines are joined with their `<... resumed>`
line per PID. Only the traced call types (SYSCALL_CALL and FLAGGED_STAT in results/trace.py)
are kept; accept/accept4 split the log into requests, and clone/close/dup keep the per-PID cwd
and fd→path tables used to make relative paths absolute and to name what fstat looked at.
"""

from __future__ import annotations

import errno
import re
import socket
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Literal

from statstorm.adapters.strace_summary import (FIX, SummaryTable, parse_summaries,
                                               parse_summary, summary_row, table_header)
from statstorm.errors import UsageError
from statstorm.results.trace import (AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW, FLAGGED_STAT,
                                     SYSCALL_CALL, Request, Syscall, Trace, call_type,
                                     decode_path, new_header)

__all__ = ["ParsedLog", "detect", "import_file", "parse_log", "parse_summaries",
           "parse_summary"]

AT_FDCWD = -100
_AT_FLAGS = {b"AT_SYMLINK_NOFOLLOW": AT_SYMLINK_NOFOLLOW, b"AT_EMPTY_PATH": AT_EMPTY_PATH,
             b"AT_REMOVEDIR": 0x200, b"AT_SYMLINK_FOLLOW": 0x400, b"AT_NO_AUTOMOUNT": 0x800}
# Kernel-internal errno values strace prints by name; the errno module does not know them.
_KERNEL_ERRNO = {"ERESTARTSYS": 512, "ERESTARTNOINTR": 513, "ERESTARTNOHAND": 514,
                 "ENOIOCTLCMD": 515, "ERESTART_RESTARTBLOCK": 516}
_AT_NAMES = frozenset({"faccessat", "faccessat2", "openat", "openat2", "readlinkat"})
_FD_NAMES = frozenset({"fstat", "fstat64", "oldfstat", "fchdir"})
_FORKS = frozenset({"clone", "clone2", "clone3", "fork", "vfork"})
_DUPS = frozenset({"dup", "dup2", "dup3", "fcntl", "fcntl64"})
_ACCEPTS = frozenset({"accept", "accept4"})
_PARSED = frozenset(SYSCALL_CALL) | frozenset(FLAGGED_STAT) | _FORKS | _DUPS | _ACCEPTS \
    | {"close"}

_PREFIX = re.compile(rb"""\s*
    (?:\[pid\s+(?P<bpid>\d+)\]\s+ | (?P<pid>\d+)\s+)?
    (?:(?P<clock>\d\d:\d\d:\d\d(?:\.\d+)?)\s+ | (?P<num>\d+\.\d+)\s+)?""", re.X)
_CALL = re.compile(rb"([a-z_][a-z0-9_]*)\(")
_RESUMED = re.compile(rb"<\.\.\. ([a-z_][a-z0-9_]*) resumed>")
_ATTACHED = re.compile(rb"strace: Process (\d+) attached")
_UNFINISHED = b"<unfinished ...>"
_LATENCY = re.compile(rb"\s<(\d+)\.(\d+)>\s*$")
_RESULT = re.compile(rb"\s*=\s*(-?\d+|0x[0-9a-fA-F]+|\?)(?:<((?:[^>\\]|\\.)*)>)?"
                     rb"(?:\s+(E[A-Z0-9_]+))?")
_DECORATED = re.compile(rb"(?:\d|AT_FDCWD)<")
_FD_ARG = re.compile(rb"(AT_FDCWD|-?\d+)(?:<(.*)>)?$", re.S)
_ESCAPES = {ord("n"): 10, ord("t"): 9, ord("r"): 13, ord("v"): 11, ord("f"): 12, ord("a"): 7,
            ord("b"): 8, ord("e"): 27}
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


def _unescape(s: bytes) -> bytes:
    """Undo strace's C escapes: \\" \\\\ \\n \\t \\NNN (octal) \\xHH."""
    if b"\\" not in s:
        return s
    out = bytearray()
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c != 0x5C or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        d = s[i + 1]
        if 0x30 <= d <= 0x37:
            k = i + 1
            while k < n and k < i + 4 and 0x30 <= s[k] <= 0x37:
                k += 1
            out.append(int(s[i + 1:k], 8) & 0xFF)
            i = k
        elif d == 0x78 and re.fullmatch(rb"[0-9a-fA-F]{2}", s[i + 2:i + 4]):
            out.append(int(s[i + 2:i + 4], 16))
            i += 4
        else:
            out.append(_ESCAPES.get(d, d))
            i += 2
    return bytes(out)


def _string(arg: bytes) -> bytes | None:
    """The bytes of a quoted argument (a trailing `...` marks truncation), or None."""
    if not arg.startswith(b'"'):
        return None
    i, n = 1, len(arg)
    while i < n and arg[i] != 0x22:
        i += 2 if arg[i] == 0x5C else 1
    return _unescape(arg[1:i])


def _split_args(s: bytes) -> tuple[list[bytes], int]:
    """Split the text after `name(` into top-level arguments; also return the index after the
    closing parenthesis (-1 if there is none). Strings, brackets, `/* */` comments and `-y`
    decorations (`3</path>`, `4<TCP:[a->b]>`) may hold commas and parentheses."""
    args: list[bytes] = []
    depth, start, i, n = 0, 0, 0, len(s)
    while i < n:
        c = s[i]
        if c == 0x22:  # "
            i += 1
            while i < n and s[i] != 0x22:
                i += 2 if s[i] == 0x5C else 1
        elif c == 0x3C and i > start and s[i - 1] not in b" ,([{":  # a -y decoration
            bracket = 0
            i += 1
            while i < n:
                d = s[i]
                if d == 0x5C:
                    i += 1
                elif d == 0x5B:
                    bracket += 1
                elif d == 0x5D:
                    bracket -= 1
                elif d == 0x3E and bracket <= 0:
                    break
                i += 1
        elif c == 0x2F and s[i + 1:i + 2] == b"*":
            end = s.find(b"*/", i + 2)
            i = n if end < 0 else end + 1
        elif c in b"([{":
            depth += 1
        elif c in b")]}":
            if depth == 0 and c == 0x29:
                args.append(s[start:i].strip())
                return args, i + 1
            depth -= 1
        elif c == 0x2C and depth == 0:
            args.append(s[start:i].strip())
            start = i + 1
        i += 1
    args.append(s[start:].strip())
    return args, -1


def _fd(arg: bytes) -> tuple[int | None, str | None]:
    """An fd argument: its number (AT_FDCWD = -100) and its `-y` path decoration, if any."""
    m = _FD_ARG.match(arg)
    if not m:
        return None, None
    num = AT_FDCWD if m.group(1) == b"AT_FDCWD" else int(m.group(1))
    deco = m.group(2)
    if deco is None or not deco.startswith(b"/"):
        return num, None
    return num, decode_path(_unescape(deco))


def _flags(arg: bytes) -> int:
    value = 0
    for part in arg.split(b"|"):
        part = part.strip()
        if part in _AT_FLAGS:
            value |= _AT_FLAGS[part]
        else:
            try:
                value |= int(part, 0)
            except ValueError:
                pass
    return value


def _errno(name: str) -> int:
    return int(getattr(errno, name, 0) or _KERNEL_ERRNO.get(name, 1))


def _join(base: str | None, path: str) -> str:
    if not path or path.startswith("/") or not base:
        return path
    return base.rstrip("/") + "/" + path


@dataclass
class _Proc:
    cwd: str | None = None
    fds: dict[int, str] = field(default_factory=dict)
    req: int = -1
    last_ns: int = 0
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
        self.first_bad = 0
        self.fragment: tuple[int, bytes] | None = None  # a line cut by "Process N attached"
        self.table: SummaryTable | None = None

    # ---- lines -------------------------------------------------------------------------
    def feed(self, lineno: int, line: bytes) -> None:
        self.out.lines = lineno
        line = line.rstrip(b"\r\n")
        if self.fragment is not None:
            if line.lstrip().startswith(_UNFINISHED):
                line = self.fragment[1] + b" " + line.lstrip()
            self.fragment = None
        if not line.strip():
            self.table = None
            return
        self.nonempty += 1
        if self.table is not None or b"calls" in line or b"---" in line:
            if self._table_line(line):
                self.good += 1
                return
        m = _ATTACHED.search(line)
        if m:
            self.children.add(int(m.group(1)))
            self.good += 1
            head = line[:m.start()]
            if head.strip():
                self.fragment = (lineno, head)
            return
        self._event(lineno, line)
        if self.good == 0 and self.nonempty >= _EARLY_GIVE_UP:
            raise self._not_strace()

    def _table_line(self, line: bytes) -> bool:
        text = line.decode("utf-8", "replace")
        if self.table is None:
            cols = table_header(text)
            if cols is None:
                return False
            self.table = SummaryTable(cols)
            self.out.summary_tables += 1
            self.out.flags_seen.add("-C")
            return True
        if re.fullmatch(r"\s*-{3,}[\s-]*", text) or summary_row(self.table, text) is not None:
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
        m = _PREFIX.match(line)
        assert m is not None  # every group is optional
        body = line[m.end():]
        if not (body.startswith((b"---", b"+++", b"<...", b"strace: ")) or _CALL.match(body)):
            self._bad(lineno)
            return
        pid = self._pid(m)
        ts = self._timestamp(m)
        proc = self._proc(pid)
        if ts is not None:
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
            r = _RESUMED.match(body)
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
        c = _CALL.match(body)
        assert c is not None
        rest = body[c.end():]
        stripped = rest.rstrip()
        if stripped.endswith(_UNFINISHED):
            if proc.pending is not None:
                self.out.unmatched_unfinished += 1
            proc.pending = (c.group(1), stripped[:-len(_UNFINISHED)], now)
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
            value = (int(hh) * 3600 + int(mm) * 60 + int(sec)) * 10**9 + _frac_ns(frac)
            if value + self.clock_day < self.clock_last - _DAY_NS // 2:
                self.clock_day += _DAY_NS  # the log ran past midnight
            value += self.clock_day
            self.clock_last = value
        elif num is not None:
            sec, _, frac = num.partition(b".")
            value = int(sec) * 10**9 + _frac_ns(frac)
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
        args, end = _split_args(text)
        res = _RESULT.match(text, end) if end >= 0 else None
        if res is None:
            self.good -= 1
            self._bad(lineno)
            return
        lat_m = _LATENCY.search(text, end)
        lat = 0
        if lat_m:
            self.out.flags_seen.add("-T")
            lat = int(lat_m.group(1)) * 10**9 + _frac_ns(lat_m.group(2))
        raw_ret, ret_deco, err = res.groups()
        if raw_ret == b"?":
            ret = 0
        else:
            ret = int(raw_ret, 0)
            if ret == -1 and err:
                ret = -_errno(err.decode())
        if ret_deco is not None or _DECORATED.search(text, 0, end):
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
                deco = _fd(b"%d<%s>" % (ret, ret_deco)) if ret_deco else (None, None)
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
        num, deco = _fd(dirfd_arg)
        if num == AT_FDCWD:
            if deco:
                proc.cwd = deco
            return _join(deco or proc.cwd, path)
        return _join(deco or (proc.fds.get(num) if num is not None else None), path)

    def _fd_path(self, proc: _Proc, arg: bytes) -> str:
        num, deco = _fd(arg)
        if deco:
            return deco
        if num == AT_FDCWD:
            return proc.cwd or ""
        return proc.fds.get(num, "") if num is not None else ""

    def _flagged(self, proc: _Proc, name: str, args: list[bytes]) -> tuple[str | None, str]:
        flag_arg = args[2] if name == "statx" else args[3] if len(args) > 3 else b"0"
        raw = _string(args[1]) if len(args) > 1 else None
        flags = _flags(flag_arg)
        call = call_type(name, flags, decode_path(raw) if raw else "")
        if call == "fstat":
            return call, self._fd_path(proc, args[0])
        return call, self._at(proc, args[0], raw)

    def _path(self, proc: _Proc, name: str, args: list[bytes]) -> str:
        if name in _FD_NAMES:
            return self._fd_path(proc, args[0])
        if name == "getcwd":
            raw = _string(args[0])
            return decode_path(raw) if raw is not None else ""
        if name in _AT_NAMES:
            return self._at(proc, args[0], _string(args[1]) if len(args) > 1 else None)
        raw = _string(args[0])
        return _join(proc.cwd, decode_path(raw)) if raw is not None else ""

    def _side_effect(self, pid: int, proc: _Proc, name: str, args: list[bytes], ret: int,
                     returned_ns: int, entry_ns: int) -> None:
        if ret < 0:
            return
        if name in _ACCEPTS:
            if proc.req >= 0:
                self.out.requests[proc.req].end_ns = entry_ns
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
            num, _ = _fd(args[0])
            if num is not None:
                proc.fds.pop(num, None)
        elif name in _DUPS and args:
            num, deco = _fd(args[0])
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
        calls = self.good - out.summary_tables
        if calls <= 0 or out.skipped_bad * 2 > self.nonempty:
            raise self._not_strace()
        for proc in self.procs.values():
            if proc.pending is not None:
                out.unmatched_unfinished += 1
        timed = self.first_ns is not None
        if out.requests:
            for proc in self.procs.values():
                if proc.req >= 0:
                    out.requests[proc.req].end_ns = proc.last_ns if timed else -1
            if not timed:
                for r in out.requests.values():
                    r.end_ns = -1
        else:
            first = out.syscalls[0].pid if out.syscalls else self.main_pid or 0
            end = max((p.last_ns for p in self.procs.values()), default=0)
            out.requests[0] = Request(0, first, 0, end if timed else -1)
            for s in out.syscalls:
                s.req = 0
        return out


def _frac_ns(frac: bytes) -> int:
    return int((frac + b"000000000")[:9]) if frac else 0


def parse_log(lines: Iterable[bytes], *, source: str) -> ParsedLog:
    """Parse an strace log given as raw byte lines; `source` names the file in errors."""
    parser = _LogParser(source)
    for lineno, line in enumerate(lines, 1):
        parser.feed(lineno, line)
    return parser.finish()


# ---- files -----------------------------------------------------------------------------
def _read(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file; give an strace log or an strace -c table") \
            from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory; give an strace log or an strace -c table") \
            from None
    except PermissionError:
        raise UsageError(f"{path}: permission denied; make it readable or run as its owner") \
            from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it ({exc.strerror}); give a readable file") \
            from None
    if not data.strip():
        raise UsageError(f"{path}: empty file, not strace output; {FIX}")
    return data


def _kind(data: bytes) -> Literal["log", "summary"]:
    """A log if syscall lines are at least half of the lines outside `-c` tables."""
    text = data.decode("utf-8", "replace")
    table_lines = sum(len(t) + 2 for t in parse_summaries(text, keep_total=True))
    nonempty = syscalls = 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        nonempty += 1
        m = _PREFIX.match(line)
        if m and (_CALL.match(line, m.end()) or line.startswith(b"<...", m.end())):
            syscalls += 1
    if table_lines and syscalls * 2 < nonempty - table_lines:
        return "summary"
    return "log"


def detect(path: Path) -> Literal["log", "summary"]:
    """Whether a file is an strace log or holds `strace -c` tables."""
    return _kind(_read(path))


def import_file(path: Path, *, requests: int | None = None, table: int = 0) -> Trace:
    """Read an strace log or `-c` table file into an in-memory Trace (`mount` stays -1)."""
    data = _read(path)
    kind = _kind(data)
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    header = new_header("strace-log" if kind == "log" else "strace-c", created=created,
                        host=socket.gethostname(), targets={"import": str(path)}, settings={},
                        mounts=[])
    if requests is not None:
        header["requests_hint"] = requests
    if kind == "summary":
        tables = parse_summaries(data.decode("utf-8", "replace"))
        if not tables:
            raise UsageError(f"{path}: no strace -c table found; {FIX}")
        if not 0 <= table < len(tables):
            raise UsageError(f"{path}: has {len(tables)} strace -c table(s); choose a table "
                             f"from 0 to {len(tables) - 1}")
        header["import"] = {"flags": ["-c"], "table": table, "tables": len(tables)}
        return Trace(header=header, counts=tables[table],
                     trailer={"events": 0, "stopped": "end"})
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    parsed = parse_log(lines, source=str(path))
    header["import"] = {"flags": sorted(parsed.flags_seen), "table": None,
                        "tables": parsed.summary_tables, "lines": parsed.lines,
                        "skipped": parsed.skipped, "skipped_bad": parsed.skipped_bad,
                        "unmatched_unfinished": parsed.unmatched_unfinished}
    duration = max((s.ts_ns + s.lat_ns for s in parsed.syscalls), default=0)
    return Trace(header=header, syscalls=parsed.syscalls, requests=parsed.requests,
                 trailer={"events": len(parsed.syscalls), "stopped": "end",
                          "duration_ns": duration})

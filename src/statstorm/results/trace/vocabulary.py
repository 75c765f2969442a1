"""The trace's vocabulary: its format name and version, the call types and how syscalls map
to them, the PHP operation kinds, and the records as dataclasses (Syscall, Request,
Operation, RequestCounts, CountRow, a whole Trace) with the RecordSink that takes them.

The file format these records are written in is described in the package's docstring
(`results.trace`) and in docs/trace.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Protocol

from statstorm.results.trace.header import Framed

FORMAT = "statstorm-trace"
VERSION = 1



class TracerBackend(StrEnum):
    """What wrote a trace: its header's "source" and its summary's (and the trailer's
    "backend" for the tracers that ran)."""

    EBPF = "ebpf"  # the compiled eBPF tracer (libbpf loader)
    BPFTRACE = "bpftrace"
    STRACE = "strace"  # a running strace
    STRACE_LOG = "strace-log"  # `trace import` of an strace log
    STRACE_C = "strace-c"  # `trace import` of an `strace -c` table


class Detail(StrEnum):
    """What a trace recorded: every syscall, or per-request counts made in the kernel."""

    EVENTS = "events"
    COUNTS = "counts"


# The call types a summary counts; `total` is their sum. chdir is recorded but not counted.
CALLS = ("lstat", "stat", "fstat", "access", "open", "readlink", "getcwd")
SUMMARY_KEYS = CALLS + ("total", "failed")
EXTRA_CALLS = ("chdir",)

# Syscall name → call type, for the names whose type does not depend on flags.
SYSCALL_CALL = {
    "stat": "stat", "stat64": "stat", "oldstat": "stat",
    "lstat": "lstat", "lstat64": "lstat", "oldlstat": "lstat",
    "fstat": "fstat", "fstat64": "fstat", "oldfstat": "fstat",
    "access": "access", "faccessat": "access", "faccessat2": "access",
    "open": "open", "openat": "open", "openat2": "open", "creat": "open",
    "readlink": "readlink", "readlinkat": "readlink",
    "getcwd": "getcwd", "chdir": "chdir", "fchdir": "chdir",
}
# Flag-dependent names: newfstatat/fstatat64/statx → lstat, stat or fstat by their flags.
FLAGGED_STAT = ("newfstatat", "fstatat64", "fstatat", "statx")
AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000

# Operation arguments holding paths: stored as path ids (lists of ids for "candidates").
INTERNED_ARGS = ("name", "path", "cwd", "include_path", "filename")

OP_KINDS = ("startup", "main_script", "include", "include_resolve", "file_probe", "opcache_revalidate",
            "user_ini", "realpath", "stat_cache_clear", "ini_set", "other")


def call_type(syscall: str, flags: int = 0, path: str | None = None) -> str | None:
    """The call type (`lstat`, `stat`, ...) of a syscall, or None if it is not traced."""
    if syscall in FLAGGED_STAT:
        if flags & AT_EMPTY_PATH and not path:
            return "fstat"
        if flags & AT_SYMLINK_NOFOLLOW:
            return "lstat"
        return "stat"
    return SYSCALL_CALL.get(syscall)


def decode_path(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


@dataclass
class Syscall:
    ts_ns: int
    pid: int
    call: str
    syscall: str
    path: str
    ret: int
    lat_ns: int = 0
    req: int = -1
    op: int = -1
    mount: int = -1
    kind: str = "other"

    @property
    def failed(self) -> bool:
        return self.ret < 0


@dataclass
class Request:
    id: int
    pid: int
    start_ns: int
    end_ns: int = -1
    script: str = ""
    uri: str = ""


@dataclass
class Operation:
    id: int
    req: int
    pid: int
    start_ns: int
    end_ns: int
    kind: str
    parent: int = -1
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class RequestCounts:
    """One request's calls as counted in the kernel: {call: (calls, failed, latency_ns)}."""

    req: int
    pid: int
    calls: dict[str, tuple[int, int, int]]


@dataclass
class CountRow:
    syscall: str
    calls: int
    errors: int
    seconds: float


@dataclass
class Trace(Framed):
    """A whole trace in memory (for show/diff/import; the tracer itself streams)."""

    # what report's registry (results/result_files.py KINDS) knows of its files
    KIND: ClassVar[str] = "trace"
    VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    LEGACY: ClassVar[tuple[str, ...]] = ()

    header: dict[str, Any]
    syscalls: list[Syscall] = field(default_factory=list)
    requests: dict[int, Request] = field(default_factory=dict)
    operations: dict[int, Operation] = field(default_factory=dict)
    counts: list[CountRow] = field(default_factory=list)
    request_counts: list[RequestCounts] = field(default_factory=list)
    trailer: dict[str, Any] = field(default_factory=dict)
    # read from a file that ended with its seal (results.trace.seal): checked whole. False
    # for a trace in memory, and for one written before traces were sealed.
    sealed: bool = field(default=False, compare=False)

    def feed(self, sink: RecordSink) -> None:
        """Hand every record to `sink` (a TraceWriter, a SummaryBuilder), in file order."""
        for s in self.syscalls:
            sink.syscall(s)
        for r in self.requests.values():
            sink.request(r)
        for o in self.operations.values():
            sink.operation(o)
        for c in self.counts:
            sink.count(c)
        for rc in self.request_counts:
            sink.request_counts(rc)


class RecordSink(Protocol):
    def syscall(self, s: Syscall) -> None: ...
    def request(self, r: Request) -> None: ...
    def operation(self, o: Operation) -> None: ...
    def count(self, c: CountRow) -> None: ...
    def request_counts(self, rc: RequestCounts) -> None: ...


def new_header(source: str, *, created: str, host: str, targets: dict[str, Any],
               settings: dict[str, Any], mounts: list[tuple[str, str]],
               detail: str = "events") -> dict[str, Any]:
    """`detail`: "events" (every syscall recorded) or "counts" (per-request counts only)."""
    return {"format": FORMAT, "version": VERSION, "source": source, "created": created,
            "host": host, "detail": detail, "targets": targets, "settings": settings,
            "mounts": [list(m) for m in mounts]}

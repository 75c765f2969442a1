"""The counting tracer's lines, read in one place: `statstorm trace --counts` (bpftrace's and
the compiled tracer's runs) and `statstorm exporter` (adapters/tracing/count_stream.py) take
them from here as typed records.

The format (adapters/tracing/bpftrace.py `count_program`, one event per line, tab-separated,
tag first; the compiled tracer's counting mode writes the same events as binary records,
decoded by adapters/tracing/libbpf_trace.py `decode`):

    K pid start end c0 … c15   a request ended (start 0: calls outside a request); its
                               packed per-call counters (bpftrace.py `unpack_counts`)
    U pid ts script            PHP starts a request for this script
    V pid uri                  … with this URI (bpftrace only)
    F parent child             a fork
    E pid                      an exit

`from_fields` reads bpftrace's lines (split on tabs), `from_record` the compiled tracer's
decoded records; both give the same records, and `feed` hands one to the counted trace's
attributor (model/count_attribution.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from statstorm.adapters.tracing.bpftrace import unpack_counts
from statstorm.model.count_attribution import CountAttributor
from statstorm.results.trace import decode_path


@dataclass(frozen=True, slots=True)
class Counted:
    """K: a request counted in the kernel, from `start_ns` to `end_ns` (kernel clock)."""

    pid: int
    start_ns: int  # 0: the calls a process made outside a request
    end_ns: int
    counters: tuple[int, ...]  # packed; `calls()` unpacks them

    def calls(self) -> dict[str, tuple[int, int, int]]:
        """{call: (calls, failed, summed latency ns)} for the calls that happened."""
        return unpack_counts(list(self.counters))


@dataclass(frozen=True, slots=True)
class ScriptStart:
    """U: PHP starts a request (request-startup probe) for `script` (raw bytes)."""

    pid: int
    ts_ns: int
    script: bytes


@dataclass(frozen=True, slots=True)
class Uri:
    """V: the URI of the request `pid` just started (raw bytes)."""

    pid: int
    uri: bytes


@dataclass(frozen=True, slots=True)
class Fork:
    """F: `parent` forked `child`."""

    parent: int
    child: int


@dataclass(frozen=True, slots=True)
class Exit:
    """E: `pid` exited."""

    pid: int


CountLine = Counted | ScriptStart | Uri | Fork | Exit


def from_fields(fields: Sequence[bytes]) -> CountLine | None:
    """One line of bpftrace's counting program, split on tabs (None: not a counting event)."""
    tag = fields[0]
    if tag == b"K":
        return Counted(int(fields[1]), int(fields[2]), int(fields[3]),
                       tuple(int(v) for v in fields[4:]))
    if tag == b"U":
        return ScriptStart(int(fields[1]), int(fields[2]), fields[3])
    if tag == b"V":
        return Uri(int(fields[1]), fields[2])
    if tag == b"F":
        return Fork(int(fields[1]), int(fields[2]))
    if tag == b"E":
        return Exit(int(fields[1]))
    return None


def from_record(rec: tuple[Any, ...]) -> CountLine | None:
    """One of the compiled tracer's decoded records (libbpf_trace.decode's layout; None: not a
    counting event)."""
    tag = rec[0]
    if tag == "K":
        return Counted(rec[1], rec[2], rec[3], tuple(rec[4]))
    if tag == "U":
        return ScriptStart(rec[1], rec[2], rec[3])
    if tag == "V":
        return Uri(rec[1], rec[2])
    if tag == "F":
        return Fork(rec[1], rec[2])
    if tag == "E":
        return Exit(rec[1])
    return None


def feed(attr: CountAttributor, line: CountLine) -> None:
    """Hand one counting event to the counted trace's attributor."""
    match line:
        case Counted():
            attr.on_counts(line.pid, line.start_ns, line.end_ns, line.calls())
        case ScriptStart():
            attr.on_startup(line.pid, line.ts_ns, decode_path(line.script))
        case Uri():
            attr.on_uri(line.pid, decode_path(line.uri))
        case Fork():
            attr.on_fork(line.parent, line.child)
        case Exit():
            attr.on_exit(line.pid)


def feed_fields(attr: CountAttributor, fields: list[bytes]) -> None:
    """Hand one of bpftrace's counting lines (split on tabs) to the attributor."""
    line = from_fields(fields)
    if line is not None:
        feed(attr, line)

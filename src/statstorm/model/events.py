"""Tracer events: the bpftrace program's lines as typed records, their dispatch to the
attributor, and their order across bpftrace's per-CPU buffers (model/attribution.py says what
the events mean; adapters/tracing/bpftrace.py lists them)."""

from __future__ import annotations

import heapq
from typing import Any

from statstorm.model.attribution import Attributor
from statstorm.results.trace.vocabulary import decode_path


def feed(attr: Attributor, fields: list[bytes]) -> None:
    """Dispatch one parsed event line (fields split on tabs) to the attributor."""
    feed_record(attr, parse_fields(fields))


# An event as typed values, tag first (the bpftrace program's line layout):
# ("S", pid, ts, lat, syscall, flags, dfd, ret, raw_path)  ("O", pid, ts, kind, num, raw_s1)
# ("R", pid, ts, kind)  ("P", pid, raw_s2)  ("U", pid, ts, raw_script)  ("V", pid, raw_uri)
# ("A" | "X" | "Q", pid, ts)  ("F", parent, child)  ("E", pid)
Record = tuple[Any, ...]


def parse_fields(fields: list[bytes]) -> Record:
    """An event line's fields → its typed record."""
    tag = fields[0].decode()
    if tag == "S":
        return (tag, int(fields[1]), int(fields[2]), int(fields[3]), fields[4].decode(),
                int(fields[5]), int(fields[6]), int(fields[7]), fields[8])
    if tag == "O":
        return (tag, int(fields[1]), int(fields[2]), fields[3].decode(), int(fields[4]),
                fields[5])
    if tag == "R":
        return (tag, int(fields[1]), int(fields[2]), fields[3].decode())
    if tag in ("P", "V"):
        return (tag, int(fields[1]), fields[2])
    if tag == "U":
        return (tag, int(fields[1]), int(fields[2]), fields[3])
    return (tag, *(int(f) for f in fields[1:]))


def feed_record(attr: Attributor, r: Record) -> None:
    """Dispatch one typed event record to the attributor."""
    tag = r[0]
    if tag == "S":
        attr.on_syscall(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8])
    elif tag == "O":
        attr.on_enter(r[1], r[2], r[3], r[4], decode_path(r[5]))
    elif tag == "R":
        attr.on_return(r[1], r[2], r[3])
    elif tag == "P":
        attr.on_second(r[1], decode_path(r[2]))
    elif tag == "A":
        attr.on_accept(r[1], r[2])
    elif tag == "U":
        attr.on_startup(r[1], r[2], decode_path(r[3]))
    elif tag == "V":
        attr.on_uri(r[1], decode_path(r[2]))
    elif tag == "X":
        attr.on_execute(r[1], r[2])
    elif tag == "Q":
        attr.on_shutdown(r[1], r[2])
    elif tag == "F":
        attr.on_fork(r[1], r[2])
    elif tag == "E":
        attr.on_exit(r[1])


# Events carrying a timestamp, and its field index; others (P, V, F, E) follow their
# predecessor from the same CPU buffer and keep their arrival order.
_TS_FIELD = {b"S": 2, b"O": 2, b"R": 2, b"A": 2, b"U": 2, b"X": 2, b"Q": 2, b"K": 3}


class Reorder:
    """Restore timestamp order across bpftrace's per-CPU buffers.

    Events wait until one newer by `window_ns` has arrived; an untimestamped event takes
    the timestamp of the event before it (same CPU buffer, same probe firing).
    """

    def __init__(self, window_ns: int = 200_000_000) -> None:
        self.window = window_ns
        self._heap: list[tuple[int, int, list[bytes]]] = []
        self._seq = 0
        self._last_ts = 0
        self._max_ts = 0

    def push(self, fields: list[bytes]) -> None:
        idx = _TS_FIELD.get(fields[0])
        ts = int(fields[idx]) if idx is not None else self._last_ts
        if fields[0] == b"S":
            ts += int(fields[3])  # order syscalls by their exit: the probe that printed them
        self._last_ts = ts
        self._max_ts = max(self._max_ts, ts)
        heapq.heappush(self._heap, (ts, self._seq, fields))
        self._seq += 1

    def pop_ready(self, flush: bool = False, now_ns: int = 0) -> list[list[bytes]]:
        """The events no earlier one can still arrive before: older by the window than the
        newest event, or than `now_ns` (the tracer's clock, for a tracer kept attached
        through quiet spells); all of them with `flush`."""
        out = []
        limit = max(self._max_ts, now_ns) - self.window
        while self._heap and (flush or self._heap[0][0] <= limit):
            out.append(heapq.heappop(self._heap)[2])
        return out

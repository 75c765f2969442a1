"""The trace's wall clock for the what-if replay: when its time 0 was, and each event's whole
second (what the realpath cache's TTL and OPcache's revalidate_freq count in)."""

from __future__ import annotations

import bisect
import datetime as dt
import itertools

from statstorm.results.trace.raw import TraceRecords

_G = 1_000_000_000


def epoch_ns(trace: TraceRecords) -> int:
    """Wall-clock ns of the trace's time 0: recorded by the tracer, else the header's
    `created` (1 s resolution, taken a little before time 0)."""
    t0 = trace.tail.t0_wall_ns
    if t0 is not None and t0 > 0:
        return t0
    try:
        return int(dt.datetime.fromisoformat(trace.head.created).timestamp()) * 1_000_000_000
    except ValueError:
        return 0


def seconds(ns: list[int], epoch_ns: int) -> list[int]:
    """Each event's wall clock in whole seconds (times before the trace's start: its start),
    a run of equal seconds at a time (`ns` is in ascending order)."""
    out: list[int] = []
    i, end = 0, len(ns)
    while i < end:
        n = ns[i]
        if n > 0:
            sec = (epoch_ns + n) // _G
            nxt = (sec + 1) * _G - epoch_ns  # the first ns of the next second
        else:
            sec, nxt = epoch_ns // _G, 1
        j = bisect.bisect_left(ns, nxt, i + 1)
        out.extend(itertools.repeat(sec, j - i))
        i = j
    return out

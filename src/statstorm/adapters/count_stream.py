"""The counting tracer kept attached for as long as it is wanted (`statstorm exporter`).

One bpftrace running the counting program (adapters/bpftrace.py `count_program`: per-request
counters kept in the kernel, one line per request) over the workers and masters of any number
of pools. Its lines are framed (adapters/bpftrace_session.py), put back in time order across
the CPUs' buffers (model/events.py `Reorder`), and handed to a callback as soon as no earlier
line can still arrive: the window is measured against the clock as well as against newer
lines, so the last requests before a quiet spell are not held back until the next one.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Sequence

from statstorm.adapters import bpftrace
from statstorm.adapters.bpftrace_session import BpftraceSession, EventFramer, Refused
from statstorm.adapters.trace_targets import Target
from statstorm.model.events import Reorder

ATTACH_TIMEOUT_S = 120.0
# bpftrace prints each CPU's lines in batches; a line can trail one printed after it on
# another CPU by about a buffer poll. Lines older than this are handed out.
ORDER_WINDOW_NS = 200_000_000
BATCH_S = 0.1
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class CountStream:
    """`start()` (returns once attached), then `pump()` in a loop, then `stop()`."""

    def __init__(self, targets: Sequence[Target], on_event: Callable[[list[bytes]], None]) -> None:
        pids = sorted({p for t in targets for p in t.pids})
        parents = sorted({p for t in targets for p in t.parents})
        binaries = sorted({b for t in targets for b in t.binaries})
        self.program = bpftrace.count_program(bpftrace.Targets(tuple(pids), tuple(parents)),
                                              binaries)
        self.on_event = on_event
        self.session: BpftraceSession | None = None
        self.framer = EventFramer()
        self.reorder = Reorder(ORDER_WINDOW_NS)
        self._buf = b""

    @property
    def pid(self) -> int | None:
        s = self.session
        return s.proc.pid if s is not None and s.proc is not None else None

    def start(self) -> None:
        """Start bpftrace and wait until it is attached; Refused (with bpftrace's reason)
        if it is not within ATTACH_TIMEOUT_S."""
        self.session = BpftraceSession(bpftrace.find(), self.program)
        self.session.start()
        deadline = time.monotonic() + ATTACH_TIMEOUT_S
        while True:
            chunk = self.session.read(0.2)
            if chunk is None:
                if self.session.exited():
                    raise self.session.refusal()
                if time.monotonic() > deadline:
                    raise Refused(f"no answer from bpftrace within {ATTACH_TIMEOUT_S:.0f} s")
                continue
            if not chunk:
                raise self.session.refusal()
            self._buf += chunk
            _, sep, rest = self._buf.partition(b"READY\n")
            if sep:
                self._buf = rest
                return

    def pump(self, timeout: float) -> bool:
        """Read what bpftrace printed (waiting up to `timeout`), hand out the lines whose
        order is settled. False once bpftrace has ended (it should not: restart it)."""
        assert self.session is not None
        chunk = self.session.read(timeout)
        alive = True
        if chunk == b"" or (chunk is None and self.session.exited()):
            alive = False
        elif chunk:
            # A few lines per request: take them in batches, not a wake-up for each.
            time.sleep(BATCH_S)
            chunk += self.session.read(0) or b""
            self._buf += chunk
        self._take()
        for fields in self.reorder.pop_ready(now_ns=time.monotonic_ns()):
            self.on_event(fields)
        return alive

    def _take(self) -> None:
        *complete, self._buf = self._buf.split(b"\n")
        for line in complete:
            fields = self.framer.take(line)
            if fields is not None:
                self.reorder.push(fields)

    def stop(self) -> None:
        """Detach: stop bpftrace once every CPU's last line is read, hand out the rest."""
        if self.session is None:
            return
        try:
            self._buf += self.session.stop()
            self._buf += b"\n"
            self._take()
            for fields in self.reorder.pop_ready(flush=True):
                self.on_event(fields)
        finally:
            self.session.close()
            self.session = None

    def cpu_seconds(self) -> float:
        """User + system CPU time bpftrace has used so far (0 when not running)."""
        pid = self.pid
        if pid is None:
            return 0.0
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

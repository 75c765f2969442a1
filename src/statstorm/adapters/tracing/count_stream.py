"""The counting tracer kept attached for as long as it is wanted (`statstorm exporter`).

Two backends, one interface (`start`, `pump`, `stop`, `cpu_seconds`) and the same events, the
counting lines (K U F E) read by adapters/tracing/count_lines.py as typed records:
- CompiledCountStream (the default where it is built): statstorm's compiled tracer in its
  counting mode (adapters/tracing/libbpf_trace.py, `--counts 1`), per-thread state in task storage,
  binary records read from a pipe as they come. It costs the traced pool about half of what
  bpftrace's counting program costs in kernel time (docs/trace-overhead.md).
- CountStream: one bpftrace running the counting program (adapters/tracing/bpftrace.py
  `count_program`: per-request counters kept in the kernel, one line per request) over the
  workers and masters of any number of pools. Its lines are framed
  (adapters/tracing/bpftrace_session.py), put back in time order across the CPUs' buffers
  (model/events.py `Reorder`), and handed to a callback as soon as no earlier line can still
  arrive: the window is measured against the clock as well as against newer lines, so the
  last requests before a quiet spell are not held back until the next one. (The compiled
  tracer's ring buffer is one for all CPUs, in event order: nothing to reorder.)
"""

from __future__ import annotations

import fcntl
import os
import select
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from statstorm.adapters.tracing import (bpftrace, count_lines, libbpf_trace, php_layouts,
                                        tracer_host)
from statstorm.adapters.tracing.bpftrace_session import BpftraceSession, EventFramer, Refused
from statstorm.adapters.tracing.count_lines import CountLine
from statstorm.adapters.tracing.trace_targets import Target
from statstorm.env import Env
from statstorm.errors import DependencyError
from statstorm.model.events import Reorder
from statstorm.results.doctor import DoctorResult, Mode

ATTACH_TIMEOUT_S = 120.0
# bpftrace prints each CPU's lines in batches; a line can trail one printed after it on
# another CPU by about a buffer poll. Lines older than this are handed out.
ORDER_WINDOW_NS = 200_000_000
BATCH_S = 0.1
PIPE_BYTES = 1 << 20  # the compiled tracer's pipe
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class _Tracer:
    """What both streams share: the tracer's process (its session's)."""

    session: BpftraceSession | libbpf_trace.LoaderSession | None = None

    @property
    def pid(self) -> int | None:
        s = self.session
        return s.proc.pid if s is not None and s.proc is not None else None

    def cpu_seconds(self) -> float:
        """User + system CPU time the tracer has used so far (0 when not running)."""
        pid = self.pid
        if pid is None:
            return 0.0
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class CountStream(_Tracer):
    """`start()` (returns once attached), then `pump()` in a loop, then `stop()`."""

    def __init__(self, targets: Sequence[Target], on_event: Callable[[CountLine], None]) -> None:
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
        self._hand_out(self.reorder.pop_ready(now_ns=time.monotonic_ns()))
        return alive

    def _take(self) -> None:
        *complete, self._buf = self._buf.split(b"\n")
        for line in complete:
            fields = self.framer.take(line)
            if fields is not None:
                self.reorder.push(fields)

    def _hand_out(self, ready: list[list[bytes]]) -> None:
        for fields in ready:
            line = count_lines.from_fields(fields)
            if line is not None:
                self.on_event(line)

    def stop(self) -> None:
        """Detach: stop bpftrace once every CPU's last line is read, hand out the rest."""
        if self.session is None:
            return
        try:
            self._buf += self.session.stop()
            self._buf += b"\n"
            self._take()
            self._hand_out(self.reorder.pop_ready(flush=True))
        finally:
            self.session.close()
            self.session = None


class CompiledCountStream(_Tracer):
    """The compiled tracer counting every request: `start()`, `pump()` in a loop, `stop()`."""

    def __init__(self, targets: Sequence[Target], on_event: Callable[[CountLine], None]) -> None:
        self.targets = bpftrace.Targets(tuple(sorted({p for t in targets for p in t.pids})),
                                        tuple(sorted({p for t in targets for p in t.parents})))
        self.binaries = sorted({b for t in targets for b in t.binaries})
        self.on_event = on_event
        self.session: libbpf_trace.LoaderSession | None = None
        self.layout: tuple[str, ...] = ()  # the loader's --layout for a PHP root's binaries
        self._rfd: int | None = None
        self._dir: str | None = None
        self._buf = b""

    def start(self) -> None:
        """Start the loader and wait until it is attached; Refused (with its reason) if not."""
        self._dir = tempfile.mkdtemp(prefix="statstorm-counts-")
        rfd, wfd = os.pipe()
        self._rfd = rfd
        os.set_blocking(rfd, False)
        try:  # room for a few thousand requests' records between two reads
            fcntl.fcntl(wfd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass
        try:
            self.session = libbpf_trace.LoaderSession(self.targets, self.binaries,
                                                      Path(self._dir) / "counts", counts_fd=wfd,
                                                      layout=self.layout)
            self.session.start(ATTACH_TIMEOUT_S)
        except libbpf_trace.Refused as exc:
            raise Refused(str(exc)) from None
        finally:
            os.close(wfd)  # the loader holds its own copy: the pipe ends when it exits

    def pump(self, timeout: float) -> bool:
        """Read the records written so far (waiting up to `timeout`) and hand them out. False
        once the loader has ended (it should not: restart it)."""
        assert self.session is not None and self._rfd is not None
        self.session.poll(0)  # its status lines: the pipe they come through must not fill up
        ready, _, _ = select.select([self._rfd], [], [], timeout)
        if ready:
            time.sleep(BATCH_S)  # a few records per request: take them in batches
        eof = self._read()
        self._hand_out()
        return not eof and not self.session.exited()

    def _read(self) -> bool:
        """Append what the pipe holds; True at its end."""
        assert self._rfd is not None
        while True:
            try:
                chunk = os.read(self._rfd, 1 << 16)
            except BlockingIOError:
                return False
            if not chunk:
                return True
            self._buf += chunk

    def _hand_out(self) -> None:
        n = libbpf_trace.complete(self._buf)
        whole, self._buf = self._buf[:n], self._buf[n:]
        for rec in libbpf_trace.decode(whole):
            line = count_lines.from_record(rec)
            if line is not None:
                self.on_event(line)

    def stop(self) -> None:
        """Detach: the loader writes its last records and exits; hand out the rest."""
        try:
            if self.session is not None:
                try:
                    self.session.stop()
                except libbpf_trace.Refused:
                    pass
                if self._rfd is not None:
                    self._read()
                    self._hand_out()
                self.session.close()
        finally:
            self.session = None
            if self._rfd is not None:
                os.close(self._rfd)
                self._rfd = None
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None


def available(backend: str, host: DoctorResult | None = None) -> str:
    """The backend to count with: `ebpf` when the compiled tracer is built, else bpftrace
    ("auto"); a named one as asked. With `host` (tracer_host.judge()), what this host's kernel
    cannot run is passed over, and refused in doctor's words when neither can run (the
    exporter has no strace fallback: strace cannot count in the kernel)."""
    if host is None:
        if backend == "auto":
            return "ebpf" if libbpf_trace.loader() is not None else "bpftrace"
        return backend
    compiled = tracer_host.refusal(host, Mode.COUNTS)
    fallback = tracer_host.refusal(host, Mode.BPFTRACE)
    if backend == "ebpf" and compiled:
        raise DependencyError(compiled)
    if backend == "bpftrace" and fallback:
        raise DependencyError(fallback)
    if backend != "auto":
        return backend
    if not compiled:
        return "ebpf"
    if not fallback:
        return "bpftrace"
    built = libbpf_trace.loader() is not None
    raise DependencyError(compiled if built or not host.tools.bpftrace else fallback)


def new_stream(backend: str, targets: Sequence[Target],
               on_event: Callable[[CountLine], None], *,
               env: Env | None = None) -> CountStream | CompiledCountStream:
    """env: where a PHP root's layout is kept (adapters/tracing/php_layouts.py): given, the
    compiled tracer reads a root's PHP request scripts with its own version's layout (PHP
    8.4 has no USDT probe to give them)."""
    if backend == "ebpf":
        libbpf_trace.find()  # not built: the error names the fix
        stream = CompiledCountStream(targets, on_event)
        if env is not None:
            layout = php_layouts.for_binaries(env, stream.binaries)
            stream.layout = layout.args if layout.attributes else ()
        return stream
    return CountStream(targets, on_event)

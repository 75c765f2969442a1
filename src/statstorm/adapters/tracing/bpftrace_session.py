"""A running bpftrace: the tracer backend that streams events (the program itself is written
by adapters/tracing/bpftrace.py).

`BpftraceSession` starts bpftrace on a program, hands out its output as it comes (non-blocking,
with a large pipe so bursts are not dropped), tells why it refused to start, and stops it in
a way that loses no event: each CPU emits a SYNC marker after its last event, and once every
marker is read bpftrace is killed (its own SIGINT path detaches every uprobe one by one, which
takes seconds). `EventFramer` turns its output lines into the events' fields.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from statstorm.adapters.tracing import bpftrace

F_SETPIPE_SZ = 1031  # fcntl: resize a pipe (Linux)
PIPE_BYTES = 1 << 20
# The first byte of each event line of the programs (see adapters/tracing/bpftrace.py).
TAGS = frozenset(b"SAUVXQORPFEK")


class Refused(Exception):
    """bpftrace did not start or attach (the message is its first error line)."""


class BpftraceSession:
    """One bpftrace process running one program; `start`, `read` until done, `stop`."""

    def __init__(self, binary: str, program: str) -> None:
        self.binary = binary
        self.program = program
        self.tmpdir = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.fd = -1

    def start(self) -> None:
        self.tmpdir = tempfile.mkdtemp(prefix="statstorm-trace-")
        prog = Path(self.tmpdir, "trace.bt")
        prog.write_text(self.program)
        with open(self.errlog, "wb") as err:
            self.proc = subprocess.Popen(bpftrace.argv(self.binary, str(prog)),
                                         stdout=subprocess.PIPE, stderr=err,
                                         stdin=subprocess.DEVNULL, env=bpftrace.env(),
                                         start_new_session=True)
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        try:  # room for bursts: bpftrace blocks (and then drops events) when the pipe is full
            fcntl.fcntl(self.fd, F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass

    @property
    def errlog(self) -> Path:
        return Path(self.tmpdir, "bpftrace.err")

    def read(self, timeout: float) -> bytes | None:
        """What bpftrace printed since the last read: None if nothing within `timeout`,
        b"" at end of output."""
        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return None
        return os.read(self.fd, PIPE_BYTES)

    def exited(self) -> bool:
        return self.proc is None or self.proc.poll() is not None

    def refusal(self) -> Refused:
        """Why bpftrace ended before it attached."""
        code = self.proc.returncode if self.proc is not None else None
        return Refused(self.first_error() or f"bpftrace exited with status {code}")

    def first_error(self) -> str:
        try:
            for line in self.errlog.read_text(errors="replace").splitlines():
                if "RLIMIT_MEMLOCK" in line or not line.strip():
                    continue
                return line.strip()
        except OSError:
            pass
        return ""

    def stop(self) -> bytes:
        """Stop bpftrace once every CPU's last event is read; its remaining output."""
        bt = self.proc
        rest = b""
        if bt is None or bt.stdout is None:
            return rest
        wanted = _sync_cpus() if bt.poll() is None else 0
        seen: set[bytes] = set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(seen) < wanted:
            r, _, _ = select.select([self.fd], [], [], 0.2)
            if r:
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    break
                rest += chunk
                seen.update(re.findall(rb"^SYNC\t(\d+)$", rest, re.M))
            elif bt.poll() is not None:
                break
        if bt.poll() is None:
            bt.kill()
        bt.wait()
        try:
            rest += bt.stdout.read()
        except (OSError, ValueError):
            pass
        bt.stdout.close()
        return rest

    def close(self) -> None:
        """Remove the program and the error log (after `stop`)."""
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


def _sync_cpus() -> int:
    """Call getppid() once on each CPU we may run on (bpftrace prints SYNC for each)."""
    cpus = sorted(os.sched_getaffinity(0))
    for cpu in cpus:
        os.sched_setaffinity(0, {cpu})
        os.getppid()
    os.sched_setaffinity(0, set(cpus))
    return len(cpus)


class EventFramer:
    """bpftrace's output lines → the events' fields (tab-separated, tag first).

    A path with a newline in it continues on the next line: it is joined back to the event
    before. `keep(pid)` drops events of processes that are not the target's (fork and exit
    events are always kept). "Lost N events" lines are counted in `dropped`."""

    def __init__(self, keep: Callable[[int], bool] | None = None) -> None:
        self.keep = keep
        self.prev: list[bytes] | None = None
        self.dropped = 0

    def take(self, line: bytes) -> list[bytes] | None:
        """The event this line starts (None: a continuation, a marker or another process's)."""
        if len(line) >= 2 and line[0] in TAGS and line[1:2] == b"\t":
            limit = 9 if line[0] == ord("S") else (6 if line[0] == ord("O") else 0)
            fields = line.split(b"\t", limit - 1) if limit else line.split(b"\t")
            if self.keep is not None and fields[0] not in (b"F", b"E"):
                if not self.keep(int(fields[1])):
                    self.prev = None  # its continuation lines go with it
                    return None
            self.prev = fields
            return fields
        if line.startswith(b"Lost "):
            m = re.match(rb"Lost (\d+)", line)
            self.dropped += int(m.group(1)) if m else 0
            return None
        if self.prev is not None and not line.startswith((b"Attaching", b"READY", b"SYNC")):
            self.prev[-1] += b"\n" + line  # a path with a newline in it
        return None

"""A running strace: the fallback tracer backend. It records a log (`-f -tt -T`) of the
metadata syscalls of a command or of attached PIDs; adapters/tracing/strace_log.py imports it.

ptrace stops every traced process twice per syscall: PHP runs several times slower while
traced, which is why it is only the fallback.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from statstorm.errors import DependencyError

SYSCALLS = ("newfstatat,statx,stat,lstat,fstat,access,faccessat,faccessat2,open,openat,"
            "readlink,readlinkat,getcwd,chdir,fchdir,accept,accept4")


class StraceSession:
    """strace on a command (`argv`) or attached to `pids`; `start`, poll, `stop`, `close`."""

    def __init__(self, *, argv: list[str] | None = None, pids: list[int] | None = None) -> None:
        strace = shutil.which("strace")
        if strace is None:
            raise DependencyError("neither bpftrace nor strace can be used; run scripts/setup.sh")
        self.strace = strace
        self.argv, self.pids = argv, pids or []
        self.tmpdir = tempfile.mkdtemp(prefix="statstorm-strace-")
        self.log = Path(self.tmpdir, "strace.log")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        base = [self.strace, "-f", "-tt", "-T", "-qq", "-e", f"trace={SYSCALLS}", "-o",
                str(self.log)]
        if self.argv is not None:
            self.proc = subprocess.Popen(base + ["--", *self.argv], stdin=subprocess.DEVNULL,
                                         stdout=2)
        else:
            self.proc = subprocess.Popen(base + [a for p in self.pids for a in ("-p", str(p))],
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def accepts(self) -> int:
        """How many connections the traced processes accepted so far (requests begun)."""
        try:
            data = self.log.read_bytes()
        except OSError:
            return 0
        return data.count(b"accept(") + data.count(b"accept4(")

    def stop(self) -> Path:
        """Detach (SIGINT, then kill after 30 s); the log."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.log

    def close(self) -> None:
        shutil.rmtree(self.tmpdir, ignore_errors=True)

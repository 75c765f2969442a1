"""Processes and ports, read from /proc and ended by PID only."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

from statstorm.errors import BusyError, ComponentError


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def start_ticks(pid: int) -> int:
    """When `pid` started, in clock ticks since boot (0 if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[19])


def children(pid: int) -> list[int]:
    """Direct children of `pid` (all threads' children), sorted."""
    kids: set[int] = set()
    task_dir = Path(f"/proc/{pid}/task")
    try:
        tids = list(task_dir.iterdir())
    except (FileNotFoundError, ProcessLookupError):
        return []
    for tid in tids:
        try:
            kids.update(int(x) for x in (tid / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):  # gone meanwhile (ENOENT or ESRCH)
            continue
    return sorted(k for k in kids if alive(k))


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):  # gone meanwhile: ENOENT, or ESRCH mid-exit
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def exe(pid: int) -> str:
    """The executable a process runs ('' once it is gone)."""
    try:
        return os.path.realpath(f"/proc/{pid}/exe")
    except OSError:
        return ""


def same_root(pid: int) -> bool:
    """Does `pid` see the file system this process sees as `/`? False for a process in
    another root (a chroot, a container's mount namespace; seen from inside a chroot, the
    host's processes): the paths it names mean other files here. True when its root cannot
    be read (gone, or another user's without privileges): nothing says it is elsewhere."""
    try:
        theirs, ours = os.stat(f"/proc/{pid}/root"), os.stat("/")
    except OSError:
        return True
    return (theirs.st_dev, theirs.st_ino) == (ours.st_dev, ours.st_ino)


def socket_inodes(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """The inodes of the sockets process `pid` holds open; OSError when it is gone or its
    fds cannot be read."""
    out = set()
    for fd in os.scandir(proc / str(pid) / "fd"):
        try:
            target = os.readlink(fd.path)
        except OSError:
            continue
        if target.startswith("socket:[") and target.endswith("]"):
            out.add(int(target[8:-1]))
    return out


def ppid(pid: int) -> int:
    """A process's parent PID (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def find_pids(needles: Sequence[str]) -> list[int]:
    """Live PIDs whose command line contains every string of `needles`.

    Matched as substrings of the joined command line, because servers such as nginx and
    php-fpm rewrite their argv into one title string ("nginx: master process … -c FILE").
    """
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        joined = " ".join(cmdline(int(entry.name)))
        if joined and all(n in joined for n in needles) and alive(int(entry.name)):
            found.append(int(entry.name))
    return sorted(found)


def terminate(pid: int, timeout: float = 10.0, sig: int = signal.SIGTERM) -> None:
    """Send `sig` to `pid`, wait for it to go, SIGKILL if it outlives `timeout`."""
    if not alive(pid):
        return
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.05)
    if alive(pid):
        raise ComponentError(f"process {pid} survived SIGKILL; check it with `ps -p {pid}`")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


_DEFERRED = {signal.SIGINT, signal.SIGTERM}


def _unblock_in_child() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _DEFERRED)


def spawn_daemon(argv: Sequence[str], log_path: Path, record: Callable[[int], None]) -> int:
    """Start a long-running server detached from our session; return its PID.

    The server runs in the foreground of its own session (no double fork), so the PID we
    record is the PID that we later end. Ctrl-C and SIGTERM are held back from the fork
    until `record(pid)` has stored the PID, so an interruption can never lose a server.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
    try:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=_unblock_in_child,
            )
        record(proc.pid)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return proc.pid


def replace_children(master_pid: int, sig: int, old: Sequence[int], name: str,
                     timeout: float) -> list[int]:
    """Signal a master to replace its children gracefully (php-fpm's SIGUSR2, Apache's
    SIGUSR1) and wait until none of `old` is left and the new set has settled. Returns the
    new children; ComponentError if the master exits or the old ones do not go."""
    os.kill(master_pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(master_pid):
            raise ComponentError(f"the {name} master {master_pid} exited while reloading")
        kids = children(master_pid)
        if kids and not set(kids) & set(old):
            time.sleep(0.2)
            if children(master_pid) == kids:
                return kids
        time.sleep(0.1)
    raise ComponentError(f"{name} did not reload within {timeout:.0f} s (master {master_pid})")


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def check_port_free(port: int) -> None:
    if port_in_use(port):
        raise BusyError(
            f"port {port} on 127.0.0.1 is in use: pick another with --port, "
            f"or see who holds it with `ss -ltnp 'sport = :{port}'`"
        )


# The ports `free_port` has handed out: a file per port naming the process that took it
# (its PID and start time), held until that process ends (its server has bound the port by
# then); the picks are made under an fcntl lock on PORT_CLAIMS/.lock
PORT_CLAIMS = Path(os.environ.get("STATSTORM_PORT_CLAIMS", "/run/statstorm/ports"))


def free_port(start: int = 8080, tries: int = 200) -> int:
    """A free loopback TCP port from `start` on, claimed for this process, so that two labs
    made at once on one machine (two users, two lanes of the test suite) never take the same
    one between the pick and their server's bind. A port another live process claimed is
    skipped, and so is one this process claimed before (a demo makes two labs). Where the
    claims cannot be written (not root), the pick is unclaimed."""
    me = f"{os.getpid()} {start_ticks(os.getpid())}"
    try:
        PORT_CLAIMS.mkdir(parents=True, exist_ok=True)
        lock = os.open(PORT_CLAIMS / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        lock = -1
    try:
        if lock >= 0:
            fcntl.flock(lock, fcntl.LOCK_EX)
        for port in range(start, start + tries):
            if port_in_use(port) or (lock >= 0 and _claimed(PORT_CLAIMS / str(port))):
                continue
            if lock >= 0:
                try:
                    (PORT_CLAIMS / str(port)).write_text(me)
                except OSError:
                    pass  # /run full, say: the port is handed out unclaimed
            return port
    finally:
        if lock >= 0:
            os.close(lock)
    raise BusyError(f"no free TCP port in {start}-{start + tries - 1}: pass --port")


def _claimed(claim: Path) -> bool:
    """True while the process that wrote `claim` lives (the same PID started at the same
    tick: not a later process given its number)."""
    try:
        pid, ticks = (int(f) for f in claim.read_text().split())
    except (OSError, ValueError):
        return False
    return alive(pid) and start_ticks(pid) == ticks


class HeldCommand:
    """A command started but held before exec until `release()`, so a tracer can attach to
    its PID first and see it from its first syscall.

    The hold is a shell reading its stdin pipe (a numbered descriptor would not survive the
    child's close_fds unless the pipe happened to get that number); the pipe stays the
    command's stdin: at end of file it reads like /dev/null, and opening /dev/null instead
    would add a traced call. Its stdout goes to our stderr, so `--json` output stays clean."""

    def __init__(self, argv: Sequence[str]) -> None:
        r, self._release_fd = os.pipe()
        wrapper = ["/bin/sh", "-c", 'read _; exec "$@"', "statstorm-held", *argv]
        try:
            self.proc = subprocess.Popen(wrapper, stdin=r, stdout=2)
        finally:
            os.close(r)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> None:
        if self._release_fd >= 0:
            os.close(self._release_fd)
            self._release_fd = -1

    def ended(self) -> bool:
        return self.proc.poll() is not None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def cancel(self) -> None:
        """End it: killed if still held (the command never runs), else as `finish` does."""
        if self._release_fd >= 0 and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            self.release()
        self.finish()

    def finish(self, timeout: float = 60) -> None:
        """Release it if still held, wait up to `timeout` for it to end, then kill it."""
        self.release()
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

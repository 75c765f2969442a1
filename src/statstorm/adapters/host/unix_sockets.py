"""The UNIX-domain sockets of a network namespace, as /proc/net/unix lists them, and the
connections still open on a listening socket.

Linux names each socket in that table by the path it was bound to (`bind(2)`), whatever the
file system calls it now: a path renamed, hard-linked or replaced later changes nothing there.
A stream connection accepted from a listener shares the listener's address, so it shows the
listener's bound path, and so does a connection still waiting in the listener's backlog (its
state SS_CONNECTING, its inode 0); the listener itself carries the flag __SO_ACCEPTCON. So the
entries with a listener's bound path that are not listening are the connections its server
has not finished with: accepted and not yet closed on the server's side, or queued. A client's
end is not among them (it is unbound: no path). tests/test_fpm_handover.py shows this on the
running kernel.

Each network namespace has its own table: `table(pid)` reads the one of `pid`'s namespace
(`/proc/PID/net/unix`), so a server in a container is read as it sees itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from statstorm.adapters.host import procs

ACCEPTCON = 0x10000  # __SO_ACCEPTCON: a listening socket
SS_CONNECTING = 2  # in a listener's backlog, not yet accepted


@dataclass(frozen=True)
class UnixSocket:
    """One line of /proc/net/unix."""

    flags: int
    type: int  # SOCK_STREAM 1, SOCK_DGRAM 2, SOCK_SEQPACKET 5
    state: int  # SS_UNCONNECTED 1, SS_CONNECTING 2, SS_CONNECTED 3, SS_DISCONNECTING 4
    inode: int  # 0 for a connection still in a backlog
    path: str  # the path bound (an accepted socket: its listener's); '' unbound; '@…' abstract

    @property
    def listening(self) -> bool:
        return bool(self.flags & ACCEPTCON)


def parse(text: str) -> list[UnixSocket]:
    """The sockets of /proc/net/unix's text (its header and malformed lines skipped).
    `Num RefCount Protocol Flags Type St Inode Path`: the numbers in hex but the inode."""
    out = []
    for line in text.splitlines():
        words = line.split(None, 7)
        if len(words) < 7 or not words[0].endswith(":"):
            continue
        try:
            out.append(UnixSocket(int(words[3], 16), int(words[4], 16), int(words[5], 16),
                                  int(words[6]), words[7] if len(words) == 8 else ""))
        except ValueError:
            continue
    return out


def table(pid: int = 0) -> list[UnixSocket]:
    """The UNIX sockets of `pid`'s network namespace (0: this process's). OSError when the
    process is gone."""
    where = Path(f"/proc/{pid}/net/unix") if pid else Path("/proc/net/unix")
    return parse(where.read_text(errors="replace"))


def held(pid: int, proc: Path = Path("/proc")) -> list[str]:
    """The paths of the listening UNIX sockets process `pid` holds ([] when its fds cannot
    be read: another user's process, or gone)."""
    try:
        inodes = procs.socket_inodes(pid, proc)
        table = parse((proc / str(pid) / "net/unix").read_text(errors="replace"))
    except OSError:
        return []
    return [s.path for s in table if s.listening and s.inode in inodes
            and s.path.startswith("/")]


def connections(sockets: list[UnixSocket], bound: str) -> int:
    """How many connections the listener bound to `bound` has not finished with: accepted
    and open on the server's side, or waiting in its backlog."""
    return sum(1 for s in sockets if s.path == bound and not s.listening)


def listeners(sockets: list[UnixSocket], bound: str) -> int:
    """How many listening sockets were bound to `bound`."""
    return sum(1 for s in sockets if s.path == bound and s.listening)


__all__ = ["ACCEPTCON", "SS_CONNECTING", "UnixSocket", "connections", "held", "listeners", "parse",
           "table"]

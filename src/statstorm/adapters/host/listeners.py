"""Whether a process still holds a listening socket: a server's old worker that still
accepts connections, or one that has closed its listeners and only finishes what it had.

A listening socket is named in the network namespace's tables by its inode: TCP ones in
`/proc/PID/net/tcp` and `tcp6` in state 0A (TCP_LISTEN), UNIX ones in `/proc/PID/net/unix`
with the flag __SO_ACCEPTCON (`unix_sockets`). A process holds one when an fd in
`/proc/PID/fd` points at `socket:[INODE]` with that inode.
"""

from __future__ import annotations

from pathlib import Path

from statstorm.adapters.host import procs, unix_sockets

TCP_LISTEN = 0x0A


def listening_tcp(text: str) -> set[int]:
    """The inodes of the TCP sockets in state LISTEN in /proc/net/tcp's (or tcp6's) text:
    `sl local rem st tx:rx tr:when retrnsmt uid timeout inode …`, header and malformed
    lines skipped."""
    out = set()
    for line in text.splitlines():
        words = line.split()
        if len(words) < 10 or not words[0].endswith(":"):
            continue
        try:
            if int(words[3], 16) == TCP_LISTEN:
                out.add(int(words[9]))
        except ValueError:
            continue
    return out


def holds_listener(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether process `pid` holds a listening TCP or UNIX socket (False once it is gone)."""
    try:
        held = procs.socket_inodes(pid, proc)
        if not held:
            return False
        net = proc / str(pid) / "net"
        listening = {s.inode for s in unix_sockets.parse(
            (net / "unix").read_text(errors="replace")) if s.listening}
        for name in ("tcp", "tcp6"):
            try:
                listening |= listening_tcp((net / name).read_text(errors="replace"))
            except FileNotFoundError:  # a kernel without IPv6
                continue
    except OSError:
        return False
    return bool(held & listening)


__all__ = ["TCP_LISTEN", "holds_listener", "listening_tcp"]

"""adapters/host/listeners.py: which processes still hold a listening socket, read from
/proc like the kernel lists them (a fixture of /proc/net/tcp, and this process's own TCP
and UNIX sockets on the running kernel)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from statstorm.adapters.host import listeners, procs

TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000    33        0 4343 1 0000000000000000 20 4 30 10 -1
   2: broken line
   3: 0100007F:1F91 00000000:0000 ZZ 00000000:00000000 00:00000000 00000000     0        0 4444 1
"""


def test_listening_tcp_reads_state_0a_only() -> None:
    assert listeners.listening_tcp(TCP) == {4242}
    assert listeners.listening_tcp("") == set()


def test_this_process_with_and_without_a_listener(tmp_path: Path) -> None:
    me = os.getpid()
    client = socket.socket()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    try:
        server.listen()
        assert listeners.holds_listener(me)
        client.connect(server.getsockname())
        accepted, _ = server.accept()
        server.close()
        # connected sockets, both ends in this process, are not listeners
        assert procs.socket_inodes(me) and not listeners.holds_listener(me)
        unix = socket.socket(socket.AF_UNIX)
        unix.bind(str(tmp_path / "s"))
        unix.listen()
        assert listeners.holds_listener(me)
        unix.close()
        accepted.close()
    finally:
        client.close()
        server.close()
    assert not listeners.holds_listener(me)


def test_a_process_gone() -> None:
    assert not listeners.holds_listener(2 ** 22 + 1)

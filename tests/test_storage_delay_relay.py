"""The delaying relay of a CephFS or OpenAFS lab's storage path (adapters/host/delay_relay.py):
its timing logic, and its loop on packet sockets. No root: the TUN devices and the namespace
are tests/test_storage_delay_path.py's."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from statstorm.adapters.host import delay_path, delay_relay
from statstorm.adapters.host.delay_relay import DelayLine, wait_s

MS = 1_000_000
N = 300  # packets each way


def test_a_packet_is_due_exactly_its_delay_after_it_arrived() -> None:
    line = DelayLine(2 * MS)
    assert line.next_due() is None and line.pop_due(10**12) == []
    line.push(100 * MS, b"one")
    line.push(101 * MS, b"two")
    assert line.next_due() == 102 * MS
    assert line.pop_due(102 * MS - 1) == []
    assert line.pop_due(102 * MS) == [b"one"]
    assert line.pop_due(110 * MS) == [b"two"] and len(line) == 0


def test_packets_leave_in_the_order_they_came() -> None:
    line = DelayLine(MS)
    for i in range(1000):
        line.push(i * 1000, str(i).encode())  # 1000 packets in 1 ms, every µs
    out = line.pop_due(10 * MS)
    assert out == [str(i).encode() for i in range(1000)]


def test_a_shorter_delay_never_lets_a_later_packet_overtake() -> None:
    """The delay changed while packets are held (`lab up` puts it on after the copy): the
    ones held keep their place, the new ones wait behind them."""
    line = DelayLine(5 * MS)
    line.push(0, b"held")
    line.delay_ns = MS
    line.push(MS, b"new")  # due at 2 ms, behind one due at 5 ms
    assert line.pop_due(3 * MS) == []
    assert line.pop_due(5 * MS) == [b"held", b"new"]


def test_wait_is_until_the_first_due_packet_of_either_direction() -> None:
    a, b = DelayLine(MS), DelayLine(MS)
    assert wait_s([a, b], 0) is None
    a.push(5 * MS, b"x")
    b.push(3 * MS, b"y")
    assert wait_s([a, b], 3 * MS) == pytest.approx(0.001)
    assert wait_s([a, b], 4 * MS + 500_000) == 0  # overdue: no wait at all
    with pytest.raises(ValueError):
        DelayLine(-1)


def test_lateness_learnt_makes_waits_end_that_much_early() -> None:
    late = delay_relay.Lateness(cap_ns=300_000, gain=8)
    for _ in range(100):
        late.observe(80_000 - late.early_ns)  # each wake 80 µs late, less what it made up
    assert late.early_ns == pytest.approx(80_000, abs=8)
    for _ in range(100):
        late.observe(-late.early_ns)  # the machine quiet again: on time without making up
    assert late.early_ns < 1000
    late.observe(10**9)  # one wake a second late (a stalled vCPU) is not made up in full
    assert late.early_ns == 300_000
    late.observe(-(10**9))
    assert late.early_ns == 0


def test_a_round_trip_pays_the_delay_once() -> None:
    assert delay_relay.split_round_trip(5000) == 2500
    assert delay_relay.split_round_trip(201) == 100  # µs: the odd one lost, 0.5 %


def _pair() -> tuple[socket.socket, socket.socket]:
    one, two = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    one.setblocking(False)
    return one, two


def test_the_loop_delays_both_ways_without_loss_or_reordering() -> None:
    """The relay's own loop between two packet sockets standing for the TUN devices (each
    side read as it comes, as the kernel takes what a TUN device writes): every packet
    arrives, in order, never before its delay."""
    host_dev, host = _pair()
    ns_dev, ns = _pair()
    stop = threading.Event()
    one_way = 2 * MS
    t = threading.Thread(target=delay_relay.relay,
                         args=(host_dev.fileno(), ns_dev.fileno(), one_way,
                               lambda: not stop.is_set()),
                         daemon=True)
    got: dict[str, list[tuple[bytes, int]]] = {"ns": [], "host": []}

    def read(side: str, sock: socket.socket) -> None:
        sock.settimeout(10)
        for _ in range(N):
            got[side].append((sock.recv(65536), time.monotonic_ns()))

    readers = [threading.Thread(target=read, args=("ns", ns), daemon=True),
               threading.Thread(target=read, args=("host", host), daemon=True)]
    for r in (t, *readers):
        r.start()
    try:
        sent: dict[bytes, int] = {}
        for i in range(N):
            for packet, sock in ((f"out-{i}".encode() * 20, host), (f"back-{i}".encode(), ns)):
                sent[packet] = time.monotonic_ns()
                sock.send(packet)
        for r in readers:
            r.join(timeout=30)
        outs = [p for p in sent if p.startswith(b"out")]
        backs = [p for p in sent if p.startswith(b"back")]
        assert [p for p, _ in got["ns"]] == outs
        assert [p for p, _ in got["host"]] == backs
        # never earlier than the most the relay makes up for its machine's lateness
        assert all(at - sent[p] >= one_way * 3 // 4 for side in got.values() for p, at in side)
    finally:
        stop.set()
        t.join(timeout=5)
        for s in (host_dev, host, ns_dev, ns):
            s.close()
    assert not t.is_alive()


def test_path_json_round_trip_and_prefix(tmp_path) -> None:
    assert delay_path.load(tmp_path) is None and delay_path.client_prefix(tmp_path) == ()
    path = delay_path.DelayPath(netns="statstorm-x", host_dev="ssd1h", ns_dev="ssd1n",
                                host_address="172.29.83.5", ns_address="172.29.83.6",
                                delay_us=5000, relay_pid=os.getpid())
    delay_path.record_file(tmp_path).write_text(__import__("json").dumps(path.to_json()))
    assert delay_path.load(tmp_path) == path
    assert delay_path.client_prefix(tmp_path) == ("nsenter", "--net=/run/netns/statstorm-x", "--")

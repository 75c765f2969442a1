"""The delaying relay of a lab's storage path: every IP packet read from one TUN device is
written to the other one a fixed time later, in both directions (adapters/host/delay_path.py
makes the path and starts this as its own process).

Standard library only, so it runs as a script by its path (`python3 delay_relay.py …`) in
whatever environment starts it. A delay is a FIFO per direction: the delay is the same for
every packet, so the order packets arrive in is the order they are due in, and the relay
never reorders a flow; nothing is dropped (the queues grow as needed, the TUN devices' own
queues are made long by the path). The wait for the next due packet is select()'s, with the
process's timer slack at 1 ns so the kernel ends it on time rather than up to 50 µs late, and
ended early by what the relay learns of the machine's own lateness (`Lateness`, at most a
quarter of the delay): on a busy 2-vCPU machine a wait ends 50-300 µs late, which the delays
of a LAN (200 µs) could not bear.

Run: delay_relay.py --netns /run/netns/NS --host-dev A --ns-dev B --one-way-us N [--control F]
It opens A in its own network namespace and B in NS, prints `ready` once both exist, and
relays until it is ended (SIGTERM); the devices go with it. On SIGHUP it reads a new one-way
delay (µs) from the control file F and prints `delay N`: packets already held keep their
place, so a shorter delay never lets a later packet overtake an earlier one.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import os
import select
import signal
import struct
import sys
import time
from collections import deque
from typing import Callable

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
CLONE_NEWNET = 0x40000000
PR_SET_TIMERSLACK = 29
READ_SIZE = 1 << 16  # more than the devices' MTU: one read is one packet
READS_PER_WAKE = 256  # packets drained from one device before the other is looked at
IDLE_S = 1.0  # the longest wait with no packet held (to look at `running` again)
MAX_EARLY_NS = 300_000  # the most a wait is shortened by to make up for the machine's lateness


class DelayLine:
    """One direction of the relay: packets kept in arrival order until `delay_ns` after
    they arrived."""

    def __init__(self, delay_ns: int) -> None:
        if delay_ns < 0:
            raise ValueError("a delay cannot be negative")
        self.delay_ns = delay_ns
        self.queue: deque[tuple[int, bytes]] = deque()

    def push(self, now_ns: int, packet: bytes) -> None:
        self.queue.append((now_ns + self.delay_ns, packet))

    def next_due(self) -> int | None:
        """When the oldest packet is due (ns, the clock `push` was given); None: empty."""
        return self.queue[0][0] if self.queue else None

    def pop_due(self, now_ns: int) -> list[bytes]:
        """The packets due by `now_ns`, oldest first."""
        out = []
        while self.queue and self.queue[0][0] <= now_ns:
            out.append(self.queue.popleft()[1])
        return out

    def __len__(self) -> int:
        return len(self.queue)


class Lateness:
    """How late this machine ends the relay's waits (a busy vCPU wakes it 50-300 µs after
    the time asked), learnt as the relay runs: each wait then ends that much early, so that
    on average a packet leaves when it is due rather than that late. `observe` the lateness
    of the first packet sent at each wake (negative: early); `early_ns` follows an eighth of
    it each time, between 0 and `cap_ns`."""

    def __init__(self, cap_ns: int = MAX_EARLY_NS, gain: int = 8) -> None:
        self.cap_ns, self.gain = cap_ns, gain
        self.early_ns = 0

    def observe(self, late_ns: int) -> None:
        self.early_ns = min(self.cap_ns, max(0, self.early_ns + late_ns // self.gain))


def wait_s(lines: list[DelayLine], now_ns: int) -> float | None:
    """How long select() may wait before a packet is due: None (no packet held), else
    seconds, 0 when one is due already."""
    due = [d for d in (line.next_due() for line in lines) if d is not None]
    if not due:
        return None
    return max(0, min(due) - now_ns) / 1e9


def split_round_trip(round_trip_us: int) -> int:
    """The one-way delay (µs) of each direction that makes one round trip pay `round_trip_us`."""
    return round_trip_us // 2


def open_tun(name: str) -> int:
    """A TUN device named `name` in the caller's network namespace, made for this fd (it goes
    when the fd is closed), without the packet-information header: one read, one IP packet."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


def enter_netns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def _tight_timers() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)  # before the lab's load, as a network would be
    except OSError:
        pass


def relay(a: int, b: int, one_way_ns: int,
          running: Callable[[], bool] = lambda: True,
          lines_out: list[DelayLine] | None = None) -> None:
    """Move packets a → b and b → a, each `one_way_ns` late, while `running()` (the relay
    process: forever). `a` and `b` are non-blocking fds of which one read is one packet;
    `lines_out` receives the two directions (whose `delay_ns` may be changed meanwhile)."""
    lines = {a: (DelayLine(one_way_ns), b), b: (DelayLine(one_way_ns), a)}
    both = [lines[a][0], lines[b][0]]
    if lines_out is not None:
        lines_out.extend(both)
    clock = time.monotonic_ns
    lateness = Lateness()
    timer_wake = False
    while running():
        now = clock()
        early = min(lateness.early_ns, min(line.delay_ns for line in both) // 4)
        for line, out in lines.values():
            due = line.next_due()
            for packet in line.pop_due(now + early):
                _write(out, packet)
            if timer_wake and due is not None and due <= now + early:
                lateness.observe(now - due)  # a wake for that packet: how late it came
                timer_wake = False
        wait = wait_s(both, clock() + early)
        ready, _, _ = select.select([a, b], [], [], IDLE_S if wait is None else wait)
        timer_wake = not ready and wait is not None
        now = clock()
        for fd in ready:
            line = lines[fd][0]
            for _ in range(READS_PER_WAKE):
                try:
                    packet = os.read(fd, READ_SIZE)
                except BlockingIOError:
                    break
                line.push(now, packet)


def _write(fd: int, packet: bytes) -> None:
    while True:
        try:
            os.write(fd, packet)
            return
        except BlockingIOError:
            select.select([], [fd], [], 0.001)
        except OSError:
            return  # a packet the stack refuses (its device going down): as a wire would


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--netns", required=True)
    p.add_argument("--host-dev", required=True)
    p.add_argument("--ns-dev", required=True)
    p.add_argument("--one-way-us", type=int, required=True)
    p.add_argument("--control", default="")
    args = p.parse_args(argv)
    _tight_timers()
    a = open_tun(args.host_dev)
    enter_netns(args.netns)
    b = open_tun(args.ns_dev)
    lines: list[DelayLine] = []

    def reread(signum: int, frame: object) -> None:
        try:
            with open(args.control) as f:
                us = int(f.read().strip())
        except (OSError, ValueError) as exc:
            print(f"control file {args.control}: {exc}", flush=True)
            return
        for line in lines:
            line.delay_ns = max(0, us) * 1000
        print(f"delay {us}", flush=True)

    signal.signal(signal.SIGHUP, reread)
    print("ready", flush=True)
    relay(a, b, args.one_way_us * 1000, lines_out=lines)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

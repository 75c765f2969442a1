"""A CephFS or OpenAFS lab's delayed path alone (adapters/host/delay_path.py): a namespace,
two TUN devices and the relay, with a UDP echo across it. One round trip pays the delay asked
(half each way) within 20 %, and removing the path leaves nothing: no relay, no namespace, no
TUN device."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from statstorm.adapters.host import delay_path, procs
from statstorm.adapters.load.loadgen import LOAD_LOCK
from statstorm.env import Env

pytestmark = [pytest.mark.root, pytest.mark.alone,
              pytest.mark.skipif(not Path("/dev/net/tun").exists(), reason="no /dev/net/tun")]

PINGS = 200
# The client's side, run in the namespace: UDP pings to the host's end, each round trip (µs).
CLIENT = """
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
out = []
for i in range(int(sys.argv[3])):
    t0 = time.perf_counter_ns()
    s.sendto(str(i).encode(), (sys.argv[1], int(sys.argv[2])))
    while s.recv(100) != str(i).encode():
        pass
    out.append((time.perf_counter_ns() - t0) / 1000)
print(json.dumps(out))
"""


def leftovers(path: delay_path.DelayPath) -> list[str]:
    found = [f"relay {pid}" for pid in delay_path.relay_pids(path)]
    if path.netns_file.exists():
        found.append(f"namespace {path.netns}")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [f"device {d}" for d in (path.host_dev, path.ns_dev) if f" {d}:" in links]
    return found


def pings(path: delay_path.DelayPath, port: int, n: int = PINGS) -> list[float]:
    """`n` UDP round trips from the namespace to the host's end, under the load lock."""
    fd = os.open(LOAD_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        out = subprocess.run([*path.enter(), sys.executable, "-c", CLIENT, path.host_address,
                              str(port), str(n)],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    finally:
        os.close(fd)
    return [float(x) for x in json.loads(out)]


def echo(address: str, stop: threading.Event) -> tuple[socket.socket, threading.Thread]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((address, 0))
    s.settimeout(0.2)

    def serve() -> None:
        while not stop.is_set():
            try:
                data, peer = s.recvfrom(100)
            except socket.timeout:
                continue
            s.sendto(data, peer)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return s, t


@pytest.mark.parametrize("delay_us", [5000, 1000])
def test_a_round_trip_across_the_path_pays_the_delay(tmp_path: Path, delay_us: int) -> None:
    name = f"path-{os.getpid()}-{delay_us}"
    env = Env(state_root=tmp_path)
    path = delay_path.plan(env, name, delay_us)
    stop = threading.Event()
    try:
        # As `lab up` makes it: no delay while the app is copied in, then the one asked.
        path = delay_path.make(env, tmp_path, name, delay_us, now_us=0)
        assert delay_path.load(tmp_path) == path and procs.alive(path.relay_pid)
        assert path.in_effect_us == 0
        sock, _ = echo(path.host_address, stop)
        port = sock.getsockname()[1]
        undelayed = statistics.median(pings(path, port, 50))
        assert undelayed < 0.5 * delay_us, undelayed
        path = delay_path.set_delay(tmp_path, delay_us)
        recorded = delay_path.load(tmp_path)
        assert recorded is not None and path.in_effect_us == recorded.in_effect_us == delay_us
        rtts = pings(path, port)
        p50 = statistics.median(rtts)
        facts = (f"{PINGS} UDP round trips across a {delay_us} µs path: p50 {p50:.0f} µs "
                 f"({undelayed:.0f} µs undelayed), "
                 f"min {min(rtts):.0f} µs, max {max(rtts):.0f} µs")
        print(facts)  # shown with pytest -rP
        assert len(rtts) == PINGS  # none lost
        # never much early: the relay makes up at most a quarter of each way for lateness
        assert min(rtts) >= delay_us * 0.75, facts
        assert 0.8 * delay_us <= p50 <= 1.2 * delay_us, facts
    finally:
        stop.set()
        delay_path.remove(env, tmp_path)
    assert leftovers(path) == []
    assert not delay_path.record_file(tmp_path).exists()


def test_removed_after_its_relay_was_killed(tmp_path: Path) -> None:
    """A relay that died (SIGKILL) took its devices with it; remove deletes the namespace."""
    env = Env(state_root=tmp_path)
    name = f"path-{os.getpid()}-kill"
    try:
        path = delay_path.make(env, tmp_path, name, 1000)
        os.kill(path.relay_pid, 9)
    finally:
        delay_path.remove(env, tmp_path)
    assert leftovers(path) == []

"""Two delayed labs made at once take different /30s (adapters/host/delay_path.py `claim`):
the pick of a free block and the claim of it (its addresses added) under one fcntl lock, with
the real lock and real processes. The machine is a file of `ip -4 -o addr show` lines that
each claim appends its host address to (no namespace or device is made: not root). The path
itself, made for real: tests/test_storage_delay_path.py."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import pytest

from statstorm.adapters.host import delay_path
from statstorm.env import Env, RunResult
from statstorm.errors import ComponentError

SRC = Path(__file__).resolve().parent.parent / "src"


class Machine(Env):
    """An Env whose `ip` shows the addresses listed in one file (shared by processes)."""

    def __init__(self, addresses: Path) -> None:
        super().__init__()
        self.addresses = addresses

    def run(self, argv: Sequence[str], **_: Any) -> RunResult:
        text = self.addresses.read_text() if list(argv[:3]) == ["ip", "-4", "-o"] else ""
        return RunResult(tuple(argv), 0, text, "")


def add_address(addresses: Path, path: delay_path.DelayPath) -> delay_path.DelayPath:
    """What `make` ends its claim with: the host's end of the /30 on a device."""
    with addresses.open("a") as f:
        f.write(f"9: {path.host_dev}    inet {path.host_address}/30 scope global "
                f"{path.host_dev}\\       valid_lft forever preferred_lft forever\n")
    return path


# One lab's claim in a process of its own, once the file `start` (argv 5) exists: its host
# address on stdout. Between its pick and its claim it lets the others run (a real lab
# starts its relay there), so without the lock they would pick the same block.
CHILD = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from test_storage_delay_path_lock import Machine, add_address
from statstorm.adapters.host import delay_path
addresses, lock, start = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[5])
print("ready", flush=True)
while not start.exists():
    time.sleep(0.001)

def build(p):
    time.sleep(0.02)
    return add_address(addresses, p)

print(delay_path.claim(Machine(addresses), sys.argv[3], 1000, build, lock).host_address)
"""


def child(addresses: Path, lock: Path, lab: str, start: Path | None = None
          ) -> subprocess.Popen[str]:
    if start is None:
        start = addresses.parent / "start"
        start.touch()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(addresses), str(lock), lab,
                             str(Path(__file__).parent), str(start)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def waiting_on(lock: Path) -> int:
    """How many flock waiters /proc/locks shows on `lock` (`->` lines)."""
    inode = os.stat(lock).st_ino
    return sum(1 for line in Path("/proc/locks").read_text().splitlines()
               if "->" in line and "FLOCK" in line and f":{inode} " in line)


def test_a_second_lab_waits_for_the_first_claim_and_picks_the_next_block(
        tmp_path: Path) -> None:
    addresses, lock = tmp_path / "addresses", tmp_path / "run" / "delay-path.lock"
    addresses.write_text("1: lo    inet 127.0.0.1/8 scope host lo\n")
    picked, go, first = threading.Event(), threading.Event(), []

    def build(path: delay_path.DelayPath) -> delay_path.DelayPath:
        picked.set()
        assert go.wait(60)
        return add_address(addresses, path)

    a = threading.Thread(target=lambda: first.append(
        delay_path.claim(Machine(addresses), "a", 1000, build, lock)))
    a.start()
    assert picked.wait(30)  # a has picked its block and not yet claimed it
    b = child(addresses, lock, "b")
    try:
        for _ in range(600):  # b is blocked on the lock (the kernel says so)
            if waiting_on(lock) or b.poll() is not None:
                break
            time.sleep(0.05)
        assert waiting_on(lock) == 1 and b.poll() is None
    finally:
        go.set()
        a.join(60)
        out, err = b.communicate(timeout=60)
    assert b.returncode == 0, err
    assert first[0].host_address == "172.29.83.1" and first[0].host_dev == "ssd0h"
    assert out.split() == ["ready", "172.29.83.5"]


def test_labs_started_at_the_same_moment_take_different_blocks(tmp_path: Path) -> None:
    addresses, lock = tmp_path / "addresses", tmp_path / "delay-path.lock"
    addresses.write_text("1: eth0    inet 172.29.83.9/30 scope global eth0\n")  # block 2 taken
    start = tmp_path / "start"
    procs = [child(addresses, lock, f"lab{i}", start) for i in range(8)]
    assert all(p.stdout is not None and p.stdout.readline() == "ready\n" for p in procs)
    start.touch()  # all at once
    got = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        got.append(out.strip())
    assert sorted(got, key=lambda a: int(a.rsplit(".", 1)[1])) == [
        f"172.29.83.{4 * i + 1}" for i in (0, 1, 3, 4, 5, 6, 7, 8)]


def test_the_lock_is_refused_to_another_holder_while_held(tmp_path: Path) -> None:
    lock = tmp_path / "delay-path.lock"
    with delay_path.picking(lock):
        fd = os.open(lock, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once released
    finally:
        os.close(fd)


def test_a_lock_it_cannot_make_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ComponentError, match="delayed paths' lock"):
        with delay_path.picking(tmp_path / "file" / "delay-path.lock"):
            pass

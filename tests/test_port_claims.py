"""`procs.free_port`'s claims: two labs made at once (two users, two lanes of the suite) never
take the same port between its pick and their server's bind."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from statstorm.adapters.host import procs

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture
def claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "ports"
    monkeypatch.setattr(procs, "PORT_CLAIMS", where)
    return where


def pick_in_another_process(claims: Path, start: int) -> int:
    env = dict(os.environ, STATSTORM_PORT_CLAIMS=str(claims), PYTHONPATH=SRC)
    out = subprocess.run([sys.executable, "-c", "from statstorm.adapters.host import procs; "
                          f"print(procs.free_port({start}))"], env=env, capture_output=True,
                         text=True, check=True).stdout
    return int(out)


def free_start() -> int:
    """A port with the next 20 free now, below the kernel's ephemeral range (32768 on): the
    connections other tests open meanwhile (wrk's) never take one of them."""
    for _ in range(100):
        base = random.randrange(20000, 32000)
        if all(not procs.port_in_use(p) for p in range(base, base + 20)):
            return base
    raise AssertionError("no 20 free ports in a row below 32000")


def test_one_process_never_gets_a_port_it_already_took(claims: Path) -> None:
    start = free_start()
    first, second = procs.free_port(start), procs.free_port(start)
    assert first == start and second == start + 1  # neither is bound yet
    assert (claims / str(first)).read_text().split()[0] == str(os.getpid())


def test_a_live_process_s_claim_is_skipped_and_an_ended_one_s_is_not(claims: Path) -> None:
    start = free_start()
    mine = procs.free_port(start)
    # another process, while this one lives: not the port this one took, nor bound yet
    theirs = pick_in_another_process(claims, start)
    assert theirs == mine + 1
    # that process has ended: its claim no longer counts
    again = procs.free_port(start)
    assert again == theirs


def test_a_claim_whose_pid_was_given_to_a_later_process_does_not_count(claims: Path) -> None:
    start = free_start()
    claims.mkdir()
    (claims / str(start)).write_text(f"{os.getpid()} 1")  # this PID, another start time
    (claims / str(start + 1)).write_text("not a claim")
    assert procs.free_port(start) == start
    assert procs.free_port(start) == start + 1


def test_without_a_place_for_claims_the_pick_is_unclaimed(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(procs, "PORT_CLAIMS", tmp_path / "file" / "ports")  # not a directory
    start = free_start()
    assert procs.free_port(start) == procs.free_port(start) == start

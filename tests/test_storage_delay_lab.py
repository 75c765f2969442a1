"""`lab up --storage-delay` on a real GlusterFS brick: the delay is what fsbench measures."""

from __future__ import annotations

import fcntl
import json
import os
import statistics
import time
from pathlib import Path

import pytest

from conftest import leftovers, run_cli
from statstorm.adapters.load.loadgen import LOAD_LOCK

pytestmark = pytest.mark.root

SMALL = ("--app", "synthetic", "--storage", "glusterfs", "--workers", "1", "--packages", "4",
         "--classes", "5", "--touch", "10")
DELAY_US = 1000


def sleep_overshoot_us(us: int) -> float:
    """How late this machine ends a sleep of `us` µs (p50): the brick's delay is such a sleep,
    so it ends that late too (timer slack, an idle vCPU's wake-up, a busy core)."""
    late = []
    for _ in range(200):
        t0 = time.perf_counter_ns()
        time.sleep(us / 1e6)
        late.append((time.perf_counter_ns() - t0) / 1000 - us)
    return statistics.median(late)


def test_storage_delay_adds_its_duration_to_each_metadata_call(lab, state_home: Path) -> None:
    near = lab(*SMALL)
    far = lab(*SMALL, "--storage-delay", "1ms")
    assert near["storage_delay_us"] == 0 and far["storage_delay_us"] == DELAY_US
    listing = run_cli(["lab", "list"], state_home, check=True).stdout
    assert "glusterfs +1ms" in listing
    out = state_home / "fsbench.json"
    # Failed lookups: negative-timeout is 0 on a lab's mount, so each one is a LOOKUP on the
    # brick, the one metadata call no cache answers. Both labs interleaved, under the load
    # lock so no other load test runs meanwhile.
    fd = os.open(LOAD_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        run_cli(["fsbench", "--ops", "negative", "--iterations", "5", "-o", str(out),
                 str(near["code_path"]), str(far["code_path"])], state_home, check=True)
        late = sleep_overshoot_us(DELAY_US)
    finally:
        os.close(fd)
    result = json.loads(out.read_text())
    assert result["storage_delay_us"] == [0, DELAY_US]
    stats = {c["path_index"]: c["stats"] for c in result["results"] if c["op"] == "negative"}
    # The fastest call's rise: the floor moves by the delay on every call (100 % delayed), while
    # the other load on a shared machine queues the slower calls of both labs unevenly.
    floor = stats[1]["min_us"] - stats[0]["min_us"]
    median = stats[1]["p50_us"] - stats[0]["p50_us"]
    facts = (f"a failed lookup took {stats[0]['min_us']:.0f}/{stats[0]['p50_us']:.0f} µs "
             f"(min/p50) without the delay and {stats[1]['min_us']:.0f}/"
             f"{stats[1]['p50_us']:.0f} µs with {DELAY_US} µs; a {DELAY_US} µs sleep ends "
             f"{late:.0f} µs late here")
    print(facts)  # shown with pytest -rP
    # Within 20 % of the delay, once the machine's own lateness of such a sleep is allowed.
    assert 0.8 * DELAY_US <= floor <= 1.2 * DELAY_US + late, facts
    assert median >= 0.8 * DELAY_US, facts
    for state in (near, far):
        run_cli(["lab", "down", "--name", str(state["name"])], state_home, check=True)
        assert leftovers(str(state["state_dir"]), str(state["volume"])) == []

"""`lab up --storage-delay` on a real GlusterFS brick: one metadata round trip costs the delay
asked, as fsbench measures it against an undelayed volume (model/storage_delay.py says what
the delay is and what it is not)."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from conftest import leftovers, run_cli
from statstorm.adapters.load.loadgen import LOAD_LOCK
from statstorm.adapters.storage import round_trips
from statstorm.env import Env

pytestmark = [pytest.mark.root, pytest.mark.alone]

# The mount's entry and attribute caches kept (600 s, on both labs): a failed lookup is then
# one LOOKUP on the brick (negative-timeout stays 0), where the default 1 s entry-timeout
# adds a LOOKUP per expired directory of its path now and then (each delayed too).
SMALL = ("--app", "synthetic", "--storage", "glusterfs", "--workers", "1", "--packages", "4",
         "--classes", "5", "--touch", "10", "--mount-opt", "entry-timeout=600",
         "--mount-opt", "attribute-timeout=600")
# Large against what a loaded machine adds to it: the brick's sleep and the wake-ups after
# it end 0.2-0.5 ms late here, which a 20 % band of 1 ms would measure instead of the delay.
DELAY_US = 5000
ITERATIONS = 5


def test_storage_delay_adds_its_duration_to_each_metadata_call(lab, state_home: Path) -> None:
    near = lab(*SMALL)
    far = lab(*SMALL, "--storage-delay", "5ms")
    assert near["storage_delay_us"] == 0 and far["storage_delay_us"] == DELAY_US
    listing = run_cli(["lab", "list"], state_home, check=True).stdout
    assert "glusterfs +5ms" in listing
    out = state_home / "fsbench.json"
    # Measured as bench/storage_delay.py measures: fsbench's warm failed lookups, both labs
    # interleaved, under the load lock so no other load test runs meanwhile; the far brick's
    # LOOKUPs counted meanwhile, so that no call is delayed twice.
    window = round_trips.gluster(Env(state_root=state_home), str(far["volume"]))
    fd = os.open(LOAD_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        window.open()
        run_cli(["fsbench", "--ops", "negative", "--iterations", str(ITERATIONS), "-o",
                 str(out), str(near["code_path"]), str(far["code_path"])], state_home,
                check=True)
    finally:
        os.close(fd)
    result = json.loads(out.read_text())
    assert result["storage_delay_us"] == [0, DELAY_US]
    stats = {c["path_index"]: c["stats"] for c in result["results"] if c["op"] == "negative"}
    counted = window.close(1)
    assert counted is not None, window.note
    lookups = counted["by_fop"].get("LOOKUP", 0)  # type: ignore[union-attr]
    calls = stats[1]["count"] * (ITERATIONS + 1) // ITERATIONS  # and fsbench's priming pass
    # The median call's rise: what one round trip to the far storage adds.
    added = stats[1]["p50_us"] - stats[0]["p50_us"]
    facts = (f"a failed lookup took {stats[0]['p50_us']:.0f} µs (p50) without the delay and "
             f"{stats[1]['p50_us']:.0f} µs with {DELAY_US} µs: {added:.0f} µs more; "
             f"{lookups} LOOKUPs on the brick for {calls} failed lookups")
    print(facts)  # shown with pytest -rP
    assert calls <= lookups <= calls * 1.05, facts
    assert 0.8 * DELAY_US <= added <= 1.2 * DELAY_US, facts
    for state in (near, far):
        run_cli(["lab", "down", "--name", str(state["name"])], state_home, check=True)
        assert leftovers(str(state["state_dir"]), str(state["volume"])) == []

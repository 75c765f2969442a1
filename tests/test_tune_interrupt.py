"""`statstorm tune --yes` stopped at its steps (statstorm.faults: the signal lands at a named
point, never by timing) on a stock Debian host: the pool is left as it was or fully changed
(its backup set `applied`, nothing half-written), it serves, and no shadow or process of the
run is left behind."""

from __future__ import annotations

import json
import signal
import urllib.request
from pathlib import Path

import pytest

import fault_runs
from statstorm.adapters.apply import backups
from conftest import run_cli
from stock_host import TREES, stock_host, tree_digest
from test_tune import SHORT, URL, _no_shadow_left, _wiki_on_gluster

pytestmark = [pytest.mark.root, pytest.mark.alone, pytest.mark.slow]

# inside the trace tune takes (a thread), inside apply between the reload and its health
# check, and after apply before the second measurement
FAULTS = ("trace/recording:1:INT", "apply/reloaded:1:INT", "tune/step-6:1:TERM")


def _backup_sets(home: Path) -> tuple[list[str], list[str]]:
    """The statuses of apply's sets for the pool, and for the shadow (a lab)."""
    pool: list[str] = []
    shadow: list[str] = []
    for m in sorted((home / "apply").glob("*/manifest.json")):
        data = json.loads(m.read_text())
        (shadow if data["target"].get("lab") else pool).append(data["status"])
    return pool, shadow


@pytest.mark.skipif(fault_runs.available() is not None, reason=str(fault_runs.available()))
def test_tune_stopped_at_a_step_leaves_the_pool_whole_and_no_shadow(state_home: Path,
                                                                    tmp_path: Path) -> None:
    problems: list[str] = []
    with stock_host() as host:
        code = _wiki_on_gluster(host)
        mount = str(code.parent)

        def fuse_client(cmdline: str) -> bool:  # apply remakes the mount with new options
            return cmdline.startswith("/usr/sbin/glusterfs") and cmdline.endswith(mount)
        before = {t: tree_digest(t) for t in TREES}
        for i, fault in enumerate(FAULTS):
            home = state_home / f"tune-fault-{i}"
            home.mkdir()
            r = fault_runs.run(["tune", "--pool", "www", "--url", URL, "-o",
                                str(tmp_path / f"out-{i}"), "--yes", *SHORT], home, fault,
                               keep=fuse_client)
            sig = signal.SIGINT if fault.endswith("INT") else signal.SIGTERM
            if r.code not in (130, 128 + sig, -sig):  # the CLI exits 130 for either signal
                problems.append(f"{fault}: exit {r.code}: {r.stderr[-300:]}")
            problems += [f"{fault}: left running: {p}" for p in r.left]
            try:
                _no_shadow_left(home)
            except AssertionError as exc:
                problems.append(f"{fault}: {exc}")
            with urllib.request.urlopen(URL, timeout=30) as page:
                if page.status != 200:
                    problems.append(f"{fault}: the pool answers {page.status}")
            pool, shadow = _backup_sets(home)
            changed = {t: tree_digest(t) for t in TREES} != before
            print(f"{fault}: exit {r.code}; /etc {'fully changed' if changed else 'as it was'}; "
                  f"the pool's backup sets {pool}, the shadow's {shadow}")
            if changed and pool != ["applied"]:
                problems.append(f"{fault}: /etc changed, the pool's backup sets {pool}")
            if not changed and "applied" in pool:
                problems.append(f"{fault}: a backup set says applied, /etc as before")
            if any(s != backups.LAB_REMOVED for s in shadow):  # its files went with it
                problems.append(f"{fault}: the shadow's backup sets {shadow}")
            if changed:  # fully changed: undo it for the next fault
                back = run_cli(["apply", "--rollback"], home)
                assert back.returncode == 0, back.stderr
                assert {t: tree_digest(t) for t in TREES} == before, f"{fault}: rollback"
    assert problems == []

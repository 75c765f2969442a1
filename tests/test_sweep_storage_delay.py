"""`statstorm sweep --lab` on a lab with `--storage-delay`: the lab's storage and its delay
in the plan, the startup line and the printed result (a lab's state on disk; then a real
delayed GlusterFS lab as root)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import invoke
from statstorm.adapters.labs import state as labs
from statstorm.cli.sweep import lab_line
from statstorm.commands import sweep as sweep_cmd
from statstorm.env import Env
from statstorm.results.lab import LabState


def _lab_on_disk(home: Path, name: str, storage: str, delay_us: int) -> None:
    d = labs.lab_dir(Env(state_root=home), name)
    d.mkdir(parents=True)
    me = os.getpid()  # a live process stands for the lab's masters
    labs.save(LabState(name=name, app="synthetic", storage=storage, port=9, workers=1,
                       state_dir=str(d), phase="up", url="http://127.0.0.1:9",
                       entry_path="/index.php", pool=f"lab-{name}", nginx_pid=me,
                       fpm_master_pid=me, storage_delay_us=delay_us))


@pytest.mark.parametrize("storage,delay_us,says", [
    ("glusterfs", 1000, "lab far on glusterfs +1ms, 1ms added to each round trip to the storage"),
    ("glusterfs", 0, "lab far on glusterfs"),
    ("local", 0, "lab far on local"),
])
def test_the_lab_swept_names_its_storage_and_delay(tmp_path: Path, storage: str,
                                                   delay_us: int, says: str) -> None:
    _lab_on_disk(tmp_path, "far", storage, delay_us)
    plan = sweep_cmd.plan(Env(state_root=tmp_path), sweep_cmd.SweepOptions(
        lab="far", concurrency=(1,), output=tmp_path / "s.json", dry_run=True))
    assert (plan.lab, plan.storage, plan.storage_delay_us) == ("far", storage, delay_us)
    assert lab_line(plan).startswith(says)
    assert ("added" in lab_line(plan)) == bool(delay_us)


def test_a_url_sweep_names_no_lab(tmp_path: Path) -> None:
    plan = sweep_cmd.plan(Env(state_root=tmp_path), sweep_cmd.SweepOptions(
        url="http://127.0.0.1:9/", concurrency=(1,), output=tmp_path / "s.json", dry_run=True))
    assert plan.lab is None and plan.lab_storage == "" and lab_line(plan) == ""


@pytest.mark.root
def test_a_sweep_of_a_delayed_lab_prints_its_delay(lab, state_home: Path,
                                                   tmp_path: Path) -> None:
    far = lab("--app", "synthetic", "--storage", "glusterfs", "--workers", "1", "--packages",
              "2", "--classes", "3", "--touch", "5", "--storage-delay", "1ms")
    out = tmp_path / "s.json"
    proc = invoke(["sweep", "--lab", str(far["name"]), "-c", "1", "-d", "1", "--warmup", "0",
                   "--repeats", "1", "-o", str(out)], state_home)
    assert proc.returncode == 0, proc.stderr
    said = f"lab {far['name']} on glusterfs +1ms, 1ms added to each round trip to the storage"
    assert said in proc.stderr  # the startup line
    assert said in proc.stdout and "glusterfs +1ms)" in proc.stdout  # below and in the table
    data = json.loads(out.read_text())
    assert data["levels"][0]["rps"] > 0
    if "storage_delay_us" in data:  # results/sweep.py keeps it (see commands/sweep.py)
        assert (data["storage"], data["storage_delay_us"]) == ("glusterfs", 1000)

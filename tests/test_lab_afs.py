"""`statstorm lab --storage afs` against the real OpenAFS: its own cell's servers, afsd.fuse,
php-fpm and nginx serving the app from the cell, and nothing left after down or Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from conftest import interrupt_up, leftovers, run_cli, unique_name
from statstorm.adapters.storage import afs_client
from test_afs_cache import stat_cache_case

pytestmark = [pytest.mark.root, pytest.mark.beside, pytest.mark.slow,
              pytest.mark.skipif(not Path("/usr/sbin/afsd.fuse").exists(),
                                 reason="OpenAFS is not installed: run scripts/setup.sh --afs")]

PARTITION = Path("/vicepis")


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return resp.status, resp.read().decode("utf-8", "replace")


def afs_leftovers(state_dir: str) -> list[str]:
    """The lab's own leftovers, plus any OpenAFS process or the cell's partition."""
    found = leftovers(state_dir)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                raw = (entry / "cmdline").read_bytes()
                stat = (entry / "stat").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if stat.rsplit(")", 1)[1].split()[0] != "Z" and state_dir.encode() in raw:
                found.append(f"process {entry.name}")
    if PARTITION.exists():
        found.append(f"directory {PARTITION}")
    return found


def test_sigint_during_afs_up_leaves_nothing(state_home: Path) -> None:
    """Ctrl-C once the cell is mounted: the client, the four servers and every file go."""
    name = unique_name("afs")
    try:
        rc, err, state = interrupt_up(state_home, ["--app", "synthetic", "--storage", "afs"],
                                      "fuse_client_pid", signal.SIGINT, name=name, timeout=240)
        assert rc == 130, err
        assert "Traceback" not in err
        assert afs_leftovers(str(state["state_dir"])) == []
    finally:  # whatever the test found, the lab goes
        run_cli(["lab", "down", "--name", name], state_home)


def test_mediawiki_on_afs(lab, state_home: Path) -> None:
    state = lab("--app", "mediawiki", "--storage", "afs", "--workers", "2")
    assert str(state["code_path"]).startswith(str(state["mount_point"]) + "/")
    assert Path(str(state["code_path"]), "includes/WebStart.php").is_file()
    status, body = get(f"{state['url']}/index.php?title=Main_Page")
    assert status == 200 and "MediaWiki" in body
    run_cli(["lab", "down", "--name", str(state["name"])], state_home, check=True)
    assert afs_leftovers(str(state["state_dir"])) == []


# The synthetic AFS lab the last two tests share (one cell per machine, ~40 s to make): up
# at the first of them, after the tests that make cells of their own, and taken down (and
# checked) by the last, or by this fixture whatever happened.
@pytest.fixture(scope="module")
def afs_synthetic(state_home: Path) -> Iterator[dict[str, object]]:
    name = unique_name("afs")
    try:
        run_cli(["lab", "up", "--name", name, "--app", "synthetic", "--storage", "afs",
                 "--workers", "2"], state_home, check=True)
        yield dict(json.loads(run_cli(["lab", "status", "--name", name, "--json"], state_home,
                                      check=True).stdout))
    finally:
        run_cli(["lab", "down", "--name", name], state_home)


def test_synthetic_on_afs_served_through_afsd_fuse_and_a_second_cell_refused(
        afs_synthetic: dict[str, object], state_home: Path) -> None:
    state = afs_synthetic
    assert state["storage"] == "openafs"
    mount_point, code = str(state["mount_point"]), str(state["code_path"])
    assert code.startswith(mount_point + "/")
    # The cell's servers and its client run, all from the lab's directory.
    procs = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True).stdout
    for server in ("ptserver", "vlserver", "fileserver", "volserver"):
        assert any(line.startswith(f"/usr/lib/openafs/{server} ")
                   and str(state["state_dir"]) in line for line in procs.splitlines()), server
    client = Path(f"/proc/{state['fuse_client_pid']}/cmdline").read_bytes().decode()
    assert "afsd.fuse" in client and str(state["state_dir"]) in client
    # The code lives on afsd.fuse's mount, and a worker sees that mount.
    fstype, source = subprocess.run(["findmnt", "-no", "FSTYPE,SOURCE", "--target", code],
                                    capture_output=True, text=True, check=True).stdout.split()
    assert (fstype, source) == ("fuse.afs", "AFS")  # -osubtype=afs: named OpenAFS, not any FUSE
    worker = state["worker_pids"][0]  # type: ignore[index]
    mountinfo = Path(f"/proc/{worker}/mountinfo").read_text()
    assert any(f" {mount_point} " in line and " - fuse.afs AFS " in line
               for line in mountinfo.splitlines())
    assert Path(code, "public/index.php").is_file()
    status, body = get(f"{state['url']}/index.php?format=json")
    assert status == 200 and json.loads(body)["classes"] == 100
    # A file written into the cell through the mount is what nginx and PHP serve next.
    Path(code, "public/afs-probe.php").write_text("<?php echo 'afs:' . __FILE__;")
    status, body = get(f"{state['url']}/afs-probe.php")
    assert status == 200 and body == f"afs:{code}/public/afs-probe.php"

    # AFS's UDP ports are fixed: one cell per machine, so while this one runs a second lab
    # is refused in one line that says so (checked on this lab: a cell takes ~40 s to make)
    second = unique_name("afs")
    proc = run_cli(["lab", "up", "--name", second, "--app", "synthetic", "--storage", "afs"],
                   state_home)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert "UDP port 7000" in lines[-1] and "lab down" in lines[-1]
    assert not (state_home / "labs" / second).exists()


def test_stat_cache_finding_rpcs_apply_and_undo(afs_synthetic: dict[str, object],
                                                 state_home: Path) -> None:
    """tests/test_afs_cache.py's case on the shared lab; then its down leaves nothing."""
    state = afs_synthetic
    mp = str(state["mount_point"])
    try:
        stat_cache_case(state)
    finally:  # the cell goes now, not at the module's end
        down = run_cli(["lab", "down", "--name", str(state["name"])], state_home, check=True)
    assert "down" in down.stderr
    assert not afs_client.client_of(mp)
    assert afs_leftovers(str(state["state_dir"])) == []

"""`statstorm lab --storage cephfs` against the real Ceph: its own single-node cluster (mon,
mgr, OSD on a sparse file, MDS), ceph-fuse, php-fpm and nginx serving the app from the file
system, round trips read from ceph-fuse's admin socket, and nothing left after down or Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import interrupt_up, leftovers, run_cli, unique_name
from statstorm.adapters.storage import ceph_perf
from statstorm.env import Env

pytestmark = [pytest.mark.root, pytest.mark.beside, pytest.mark.slow,
              pytest.mark.skipif(not Path("/usr/bin/ceph-fuse").exists()
                                 or not Path("/usr/bin/ceph-mds").exists(),
                                 reason="Ceph is not installed: run scripts/setup.sh --ceph")]

DAEMONS = ("ceph-mon", "ceph-mgr", "ceph-osd", "ceph-mds")


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return resp.status, resp.read().decode("utf-8", "replace")


def ceph_leftovers(state_dir: str) -> list[str]:
    """The lab's own leftovers, plus any Ceph process of its cluster and what a Ceph daemon
    would write outside the lab's directory by default."""
    found = leftovers(state_dir)
    for pid in Path("/proc").iterdir():
        if pid.name.isdigit():
            try:
                raw = (pid / "cmdline").read_bytes()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if raw.split(b"\0")[0].rsplit(b"/", 1)[-1] in {d.encode() for d in
                                                           (*DAEMONS, "ceph-fuse")} \
                    and state_dir.encode() in raw:
                found.append(f"process {pid.name}")
    for default in ("/var/lib/ceph/mon", "/var/lib/ceph/osd", "/var/run/ceph",
                    "/var/log/ceph"):
        path = Path(default)
        if path.is_dir() and any(state_dir.rsplit("/", 1)[-1] in p.name
                                 for p in path.iterdir()):
            found.append(f"file under {default}")
    return found


def test_synthetic_on_cephfs_served_through_ceph_fuse(lab, state_home: Path) -> None:
    state = lab("--app", "synthetic", "--storage", "cephfs", "--workers", "2")
    assert state["storage"] == "cephfs"
    state_dir, mount_point = str(state["state_dir"]), str(state["mount_point"])
    code = str(state["code_path"])
    assert code == mount_point + "/app"
    # The cluster's four daemons and its client run, all on the lab's own config.
    procs = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True).stdout
    for daemon in DAEMONS:
        assert any(line.startswith(f"/usr/bin/{daemon} ") and state_dir in line
                   for line in procs.splitlines()), daemon
    client = Path(f"/proc/{state['fuse_client_pid']}/cmdline").read_bytes().decode()
    assert "ceph-fuse" in client and state_dir in client
    # The OSD's block is a sparse file in the lab's directory; the monitor listens on loopback.
    block = Path(state_dir, "cluster/osd-block")
    assert block.stat().st_blocks * 512 < block.stat().st_size
    listening = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True).stdout
    assert "127.0.0.1:6789" in listening and "127.0.0.1:3300" in listening
    # The code lives on ceph-fuse's mount, and a worker sees that mount.
    fstype = subprocess.run(["findmnt", "-no", "FSTYPE", "--target", code],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert fstype == "fuse.ceph-fuse"
    worker = state["worker_pids"][0]  # type: ignore[index]
    assert any(f" {mount_point} " in line and " - fuse.ceph-fuse " in line
               for line in Path(f"/proc/{worker}/mountinfo").read_text().splitlines())
    status, body = get(f"{state['url']}/index.php?format=json")
    assert status == 200 and json.loads(body)["classes"] == 100
    # Round trips per request, from ceph-fuse's own admin socket (found from its PID): none
    # once the client holds the capabilities of the app's walk; many once its inode cache
    # is smaller than that walk (client_cache_size, changed live over the same socket).
    asok = ceph_perf.asok_for_mount(mount_point)
    assert asok is not None and str(asok).startswith(state_dir + "/")
    env = Env()

    def per_request(requests: int = 5) -> float:
        get(f"{state['url']}/index.php")  # warm: what the setting holds is held
        before = ceph_perf.snapshot(env, asok)
        for _ in range(requests):
            assert get(f"{state['url']}/index.php")[0] == 200
        calls = ceph_perf.delta(before, ceph_perf.snapshot(env, asok))
        assert set(calls) == {ceph_perf.MDS, ceph_perf.OSD, ceph_perf.OSD_READ,
                              ceph_perf.OSD_WRITE}
        return ceph_perf.total(calls) / requests

    held = per_request()
    subprocess.run(["ceph", "--admin-daemon", str(asok), "config", "set", "client_cache_size",
                    "50"], check=True, capture_output=True)
    trimmed = per_request()
    deadline = time.monotonic() + 30
    while trimmed <= held and time.monotonic() < deadline:
        # the client trims its cache to the new size on its next tick (about a second),
        # which five quick requests can come before: (0.0, 0.0) once on a fast run
        time.sleep(0.5)
        trimmed = per_request()
    assert trimmed > 0 and trimmed > held, (held, trimmed)

    # The monitor's ports are fixed: a second CephFS lab is refused in one line.
    second = unique_name("ceph")
    proc = run_cli(["lab", "up", "--name", second, "--app", "synthetic", "--storage",
                    "cephfs"], state_home)
    assert proc.returncode != 0
    assert "TCP port 3300" in proc.stderr.strip().splitlines()[-1]
    assert "lab down" in proc.stderr.strip().splitlines()[-1]
    assert not (state_home / "labs" / second).exists()

    down = run_cli(["lab", "down", "--name", str(state["name"])], state_home, check=True)
    assert "down" in down.stderr
    assert ceph_leftovers(state_dir) == []


def test_sigint_during_ceph_up_leaves_nothing(state_home: Path) -> None:
    """Ctrl-C once the file system is mounted: the client, the daemons and every file go."""
    name = unique_name("ceph")
    try:
        rc, err, state = interrupt_up(state_home, ["--app", "synthetic", "--storage", "cephfs"],
                                      "fuse_client_pid", signal.SIGINT, name=name, timeout=240)
        assert rc == 130, err
        assert "Traceback" not in err
        assert ceph_leftovers(str(state["state_dir"])) == []
    finally:  # whatever the test found, the lab goes
        run_cli(["lab", "down", "--name", name], state_home)

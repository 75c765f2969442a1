"""`lab up --storage-delay` on CephFS and OpenAFS: the storage's client in a namespace of the
lab's own behind the delaying relay (adapters/host/delay_path.py). fsbench's timed stat loop,
with the client's cache trimmed so that its calls go to the MDS or the file server, measures
what one round trip adds: the delay asked, within 20 %. `down` and Ctrl-C during `up` leave
nothing: processes, mounts, the namespace, the TUN devices."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import interrupt_up, leftovers, run_cli, unique_name
from statstorm.adapters.host import delay_path
from statstorm.adapters.load.loadgen import LOAD_LOCK
from statstorm.adapters.storage import afs_client, ceph_perf, fsbench_ops, openafs, round_trips
from statstorm.env import Env

pytestmark = [pytest.mark.root, pytest.mark.slow,
              pytest.mark.skipif(not Path("/dev/net/tun").exists(), reason="no /dev/net/tun")]
CEPH = pytest.mark.skipif(not Path("/usr/bin/ceph-fuse").exists(), reason="Ceph is not installed")
AFS = pytest.mark.skipif(not Path("/usr/sbin/afsd.fuse").exists(),
                         reason="OpenAFS is not installed")

DELAY_US = 5000
SMALL = ("--app", "synthetic", "--workers", "1", "--storage-delay", "5ms")


def path_leftovers(state_dir: str, netns: str) -> list[str]:
    """The lab's leftovers plus its path's: the relay, the namespace, a TUN device."""
    found = leftovers(state_dir)
    if (delay_path.NETNS_DIR / netns).exists():
        found.append(f"namespace {netns}")
    for pid in Path("/proc").iterdir():
        try:
            if pid.name.isdigit() and netns.encode() in (pid / "cmdline").read_bytes():
                found.append(f"process {pid.name}")
        except OSError:
            continue
    links = subprocess.run(["ip", "-o", "link", "show", "type", "tun"], capture_output=True,
                           text=True).stdout
    found += [f"device {line.split(':')[1].strip()}" for line in links.splitlines()
              if ": ssd" in line]
    return found


def files_of(code: str) -> list[str]:
    files, _ = fsbench_ops.scan_tree(code)
    return [os.path.join(code, f) for f in sorted(files)]


def per_round_trip(env: Env, code: str, held_mean_us: float, window: round_trips.Window
                   ) -> tuple[float, str]:
    """fsbench's stat loop over the tree once, its round trips counted meanwhile: the time it
    took beyond what the calls cost when the client answers them itself, per round trip."""
    paths = files_of(code)
    fd = os.open(LOAD_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        window.open()
        timed = fsbench_ops.stat_pass(paths)
        counted = window.close(1)
    finally:
        os.close(fd)
    assert counted is not None, window.note
    rts = window.round_trips or 0
    total_us = sum(timed.samples) / 1000
    added = (total_us - held_mean_us * len(paths)) / rts if rts else 0.0
    facts = (f"{len(paths)} stats in {total_us / 1000:.1f} ms ({held_mean_us:.0f} µs each when "
             f"held), {rts} round trips ({counted}): {added:.0f} µs per round trip")
    print(facts)  # shown with pytest -rP
    assert rts >= len(paths) // 2, facts  # the calls did go to the servers
    return added, facts


def held_mean_us(code: str) -> float:
    paths = files_of(code)
    fsbench_ops.stat_pass(paths)  # the client holds them now
    timed = fsbench_ops.stat_pass(paths)
    return sum(timed.samples) / 1000 / len(paths)


def check_in_namespace(state: dict[str, object], path: delay_path.DelayPath) -> None:
    assert os.readlink(f"/proc/{state['fuse_client_pid']}/ns/net") != \
        os.readlink("/proc/self/ns/net")
    assert os.readlink(f"/proc/{state['fuse_client_pid']}/ns/mnt") == \
        os.readlink("/proc/self/ns/mnt")  # its mount is the host's, php-fpm's
    assert delay_path.relay_pids(path) == [path.relay_pid]
    assert path.delay_us == path.in_effect_us == DELAY_US


@CEPH
def test_cephfs_round_trip_pays_the_delay(lab, state_home: Path) -> None:
    state = lab(*SMALL, "--storage", "cephfs")
    assert state["storage_delay_us"] == DELAY_US
    assert "cephfs +5ms" in run_cli(["lab", "list"], state_home, check=True).stdout
    path = delay_path.load(Path(str(state["state_dir"])))
    assert path is not None
    check_in_namespace(state, path)
    listening = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True).stdout
    assert f"{path.host_address}:3300" in listening  # the monitor, on the path's host end
    env = Env(state_root=state_home)
    code, mp = str(state["code_path"]), str(state["mount_point"])
    held = held_mean_us(code)
    asok = ceph_perf.asok_for_mount(mp)
    assert asok is not None
    # An inode cache far smaller than the tree: each stat is a request to the MDS again.
    subprocess.run(["ceph", "--admin-daemon", str(asok), "config", "set", "client_cache_size",
                    "10"], check=True, capture_output=True)
    window = round_trips.ceph(env, mp)
    assert window is not None
    added, facts = per_round_trip(env, code, held, window)
    assert 0.8 * DELAY_US <= added <= 1.2 * DELAY_US, facts
    run_cli(["lab", "down", "--name", str(state["name"])], state_home, check=True)
    assert path_leftovers(str(state["state_dir"]), path.netns) == []


@AFS
def test_openafs_round_trip_pays_the_delay(lab, state_home: Path) -> None:
    state = lab(*SMALL, "--storage", "openafs")
    assert state["storage_delay_us"] == DELAY_US
    path = delay_path.load(Path(str(state["state_dir"])))
    assert path is not None
    check_in_namespace(state, path)
    env = Env(state_root=state_home)
    code, mp = str(state["code_path"]), str(state["mount_point"])
    held = held_mean_us(code)
    # A stat cache far smaller than the tree (a restart of the client, which stays in the
    # namespace): each stat fetches the file's status from the file server again.
    cell = openafs.Cell(Path(mp).parent)
    afs_client.apply(env, cell, {"stat": "50"})
    found = afs_client.client_of(mp)
    assert found is not None
    state = {**state, "fuse_client_pid": found[0]}
    check_in_namespace(state, path)
    window = round_trips.afs(env, mp)
    assert window is not None
    added, facts = per_round_trip(env, code, held, window)
    assert 0.8 * DELAY_US <= added <= 1.2 * DELAY_US, facts
    run_cli(["lab", "down", "--name", str(state["name"])], state_home, check=True)
    assert path_leftovers(str(state["state_dir"]), path.netns) == []


@AFS
def test_sigint_during_delayed_up_leaves_nothing(state_home: Path) -> None:
    """Ctrl-C once the client is mounted behind the path (the same path on either storage):
    the path goes with the rest."""
    name = unique_name("dly")
    try:
        rc, err, state = interrupt_up(state_home, [*SMALL, "--storage", "openafs"],
                                      "fuse_client_pid", signal.SIGINT, name=name, timeout=240)
        assert rc == 130, err
        assert "Traceback" not in err
        assert path_leftovers(str(state["state_dir"]), delay_path.NETNS_PREFIX + name) == []
    finally:
        run_cli(["lab", "down", "--name", name], state_home)

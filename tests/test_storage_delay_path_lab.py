"""`lab up --storage-delay` on CephFS and OpenAFS: the storage's client in a namespace of the
lab's own behind the delaying relay (adapters/host/delay_path.py). fsbench's timed stat loop,
with the client's cache trimmed so that its calls go to the MDS or the file server, measures
what one round trip adds (the same loop with the path's delay taken off, then put back): the
delay asked, within 20 %. `down` and Ctrl-C during `up` leave
nothing: processes, mounts, the namespace, the TUN devices."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import interrupt_up, leftovers, run_cli, unique_name
from statstorm.adapters.host import delay_path
from statstorm.adapters.load.loadgen import LOAD_LOCK
from statstorm.adapters.storage import afs_client, ceph_perf, fsbench_ops, openafs, round_trips
from statstorm.env import Env

pytestmark = [pytest.mark.root, pytest.mark.alone, pytest.mark.slow,
              pytest.mark.skipif(not Path("/dev/net/tun").exists(), reason="no /dev/net/tun")]
CEPH = pytest.mark.skipif(not Path("/usr/bin/ceph-fuse").exists(), reason="Ceph is not installed")
AFS = pytest.mark.skipif(not Path("/usr/sbin/afsd.fuse").exists(),
                         reason="OpenAFS is not installed")

DELAY_US = 5000
ROUNDS = 3
TICK_S = 1.5
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


def timed_pass(code: str, window: round_trips.Window) -> tuple[float, int, int]:
    """fsbench's stat loop over the tree once, its round trips counted meanwhile: (µs it
    took, round trips, stats)."""
    paths = files_of(code)
    # ceph-fuse trims its cache to client_cache_size at its tick, once a second, and the
    # kernel keeps afsd.fuse's entries about a second: a pass starts after both.
    time.sleep(TICK_S)
    window.open()
    timed = fsbench_ops.stat_pass(paths)
    assert window.close(1) is not None, window.note
    return sum(timed.samples) / 1000, window.round_trips or 0, len(paths)


def held_call_us(lab_dir: Path, code: str, window: round_trips.Window) -> float:
    """What a stat costs when the client answers it itself (its cache holding the tree, the
    path undelayed): what `added_per_round_trip` leaves out of each pass."""
    delay_path.set_delay(lab_dir, 0)
    timed_pass(code, window)  # the client holds them now
    took, rts, n = timed_pass(code, window)
    assert rts <= n // 10, (rts, n)
    return took / n


def added_per_round_trip(lab_dir: Path, code: str, window: round_trips.Window,
                         held_us: float, *, undelayed: bool = True) -> tuple[float, str]:
    """What the delay adds to one round trip: the loop on the same lab with the client's cache
    trimmed, the path's delay off, then on, ROUNDS times; each pass's time less what its
    calls cost when held, per round trip (what a round trip costs besides, the servers' and
    the client's work, is then left out by the difference); the median round's, under the
    load lock (other helpers' labs still load the machine: a single round can be off)."""
    rounds = []
    for _ in range(ROUNDS):
        per_rt = [0.0]  # without the undelayed pass: all of a round trip's time counts
        for us in (0, DELAY_US) if undelayed else (DELAY_US,):
            delay_path.set_delay(lab_dir, us)
            took, rts, n = timed_pass(code, window)
            assert rts >= n // 10, (rts, n)  # the calls did go to the servers
            per_rt.append((took - n * held_us) / rts)
        rounds.append((per_rt[-2], per_rt[-1]))
    near, far = sorted(rounds, key=lambda r: r[1] - r[0])[len(rounds) // 2]
    without = f"{near:.0f} µs per round trip without the delay, " if undelayed else ""
    facts = (f"{n} stats ({held_us:.0f} µs each when held), the client's cache trimmed, the "
             f"median of {ROUNDS} rounds: {without}{far:.0f} µs with {DELAY_US} µs: "
             f"{far - near:.0f} µs more (each round: "
             + ", ".join(f"+{f - n_:.0f}" for n_, f in rounds) + ")")
    print(facts)  # shown with pytest -rP
    return far - near, facts


class Locked:
    """The load lock held (no other load test runs meanwhile)."""

    def __enter__(self) -> None:
        self.fd = os.open(LOAD_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


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
    lab_dir = Path(str(state["state_dir"]))
    asok = ceph_perf.asok_for_mount(mp)
    window = round_trips.ceph(env, mp)
    assert asok is not None and window is not None
    with Locked():
        held = held_call_us(lab_dir, code, window)
        # An inode cache far smaller than the tree: each stat is a request to the MDS again.
        subprocess.run(["ceph", "--admin-daemon", str(asok), "config", "set",
                        "client_cache_size", "10"], check=True, capture_output=True)
        added, facts = added_per_round_trip(lab_dir, code, window, held)
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
    lab_dir = Path(str(state["state_dir"]))
    window = round_trips.afs(env, mp)
    assert window is not None
    with Locked():
        held = held_call_us(lab_dir, code, window)
        # A stat cache far smaller than the tree (a restart of the client, which stays in
        # the namespace): each stat fetches the file's status from the file server again.
        afs_client.apply(env, openafs.Cell(Path(mp).parent), {"stat": "50"})
        found = afs_client.client_of(mp)
        assert found is not None
        check_in_namespace({**state, "fuse_client_pid": found[0]}, path)
        # Not against an undelayed pass: afsd.fuse's kernel entries live about 1 s, so a pass
        # of a few ms makes few RPCs; the whole RPC counts (the file server's work included).
        added, facts = added_per_round_trip(lab_dir, code, window, held, undelayed=False)
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

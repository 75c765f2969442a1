"""CephFS: a single-node Ceph cluster of a lab's own on loopback, read through ceph-fuse.

One monitor, one manager, one OSD (BlueStore on a sparse file in the lab's directory, no
loop device), one MDS and a file system whose two pools keep one copy. No cephx: the
cluster's config says `auth_*_required = none`, like the OpenAFS lab's NoAuth. Every daemon
and every `ceph` call is given the cluster's own config file (`-c`), which puts the run
directory, the admin sockets, the logs, the data and the crash directory under the lab's
directory, so nothing of the cluster lives anywhere else. The daemons run in the foreground
(`-f`), each spawned and recorded by PID; ceph-fuse too, its mount point the last argument.
Research notes: docs/lab-ceph-notes.md.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from statstorm.adapters.host import delay_path, procs
from statstorm.adapters.storage import mounts
from statstorm.env import Env
from statstorm.errors import BusyError, ComponentError, DependencyError

CLUSTER_DIR = "cluster"  # the cluster's files, in the lab's directory
FS_NAME = "statstorm"
POOLS = ("statstorm_metadata", "statstorm_data")
ADDRESS = "127.0.0.1"
MON_PORTS = (3300, 6789)  # msgr2 and the legacy protocol: fixed, one monitor per machine
DAEMON_PORTS = (6800, 6899)  # OSD, MDS and manager bind here (ms_bind_port_min/max)
BLOCK_SIZE = 10 << 30  # the OSD's sparse block file; only what is written takes disk
DAEMONS = ("ceph-mon", "ceph-mgr", "ceph-osd", "ceph-mds")  # in start order
FUSE = "/usr/bin/ceph-fuse"
CEPH = "/usr/bin/ceph"
MONMAPTOOL = "/usr/bin/monmaptool"
MON_ID, MGR_ID, OSD_ID, MDS_ID = "a", "x", "0", "a"
READY_S = 120.0  # the MDS is active within ~10 s of its start here
CLI_TIMEOUT_S = 30  # a `ceph` call waits this long for the monitor


def require_installed() -> None:
    for tool in (*(f"/usr/bin/{d}" for d in DAEMONS), FUSE, CEPH, MONMAPTOOL):
        if not Path(tool).exists():
            raise DependencyError(f"{tool} is missing: install ceph-mon, ceph-osd, ceph-mds, "
                                  "ceph-mgr and ceph-fuse (run scripts/setup.sh --ceph as root)")
    if not Path("/dev/fuse").exists():
        raise DependencyError("/dev/fuse is missing: load the fuse module (`modprobe fuse`)")


def check_free() -> None:
    """The monitor's ports are fixed: one cluster per machine, on whichever address (loopback,
    or a delayed path's host end)."""
    for port in MON_PORTS:
        if procs.port_in_use(port, "0.0.0.0"):
            raise BusyError(f"TCP port {port} is taken, a Ceph monitor's: stop "
                            "what holds it (another CephFS lab: `statstorm lab down --name "
                            f"NAME`; else see `ss -ltnp 'sport = :{port}'`)")


@dataclass(frozen=True)
class Cluster:
    """The files of one lab's cluster, all under `root`."""

    root: Path

    @property
    def conf(self) -> Path:
        return self.root / "ceph.conf"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def block(self) -> Path:
        return self.root / "osd-block"

    @property
    def mount_point(self) -> Path:
        return self.root / "mnt"

    @property
    def code(self) -> Path:
        return self.mount_point / "app"

    @property
    def client_asok(self) -> Path:
        """ceph-fuse's admin socket (its perf counters: adapters/storage/ceph_perf.py)."""
        return self.run / "client.asok"

    def asok(self, daemon: str, ident: str) -> Path:
        return self.run / f"{daemon.removeprefix('ceph-')}.{ident}.asok"


def render_conf(cluster: Cluster, fsid: str, address: str = ADDRESS) -> str:
    """The cluster's config: every path under the cluster's directory, no cephx, one copy;
    every daemon on `address` (loopback, or the host's end of a delayed path)."""
    r = cluster.root
    return f"""[global]
fsid = {fsid}
mon_host = [v2:{address}:{MON_PORTS[0]},v1:{address}:{MON_PORTS[1]}]
public_addr = {address}
cluster_addr = {address}
ms_bind_ipv4 = true
ms_bind_ipv6 = false
ms_bind_port_min = {DAEMON_PORTS[0]}
ms_bind_port_max = {DAEMON_PORTS[1]}
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
auth_supported = none
keyring = {r}/keyring
run_dir = {cluster.run}
admin_socket = {cluster.run}/$type.$id.asok
log_file = {cluster.log}/$type.$id.log
pid_file = {cluster.run}/$type.$id.pid
crash_dir = {r}/crash
log_to_stderr = false
err_to_stderr = true
mon_cluster_log_file = {cluster.log}/cluster.log
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_max_pg_per_osd = 1000

[mon]
mon_data = {cluster.data}/mon.$id
mon_allow_pool_delete = true

[mgr]
mgr_data = {cluster.data}/mgr.$id
mgr_disabled_modules = dashboard restful prometheus

[osd]
osd_data = {cluster.data}/osd.$id
osd_objectstore = bluestore
bluestore_block_path = {cluster.block}
bluestore_block_create = true
bluestore_block_size = {BLOCK_SIZE}
bluestore_fsck_on_mkfs = false
osd_memory_target = 1073741824

[mds]
mds_data = {cluster.data}/mds.$id

[client]
admin_socket = {cluster.run}/$type.$id.$pid.asok
log_file = {cluster.log}/$type.$id.log
"""


def write_config(cluster: Cluster, address: str = ADDRESS) -> None:
    for d in (cluster.root, cluster.run, cluster.log, cluster.data, cluster.root / "crash",
              cluster.mount_point):
        d.mkdir(parents=True, exist_ok=True)
    cluster.conf.write_text(render_conf(cluster, str(uuid.uuid4()), address))


def ceph_cli(env: Env, cluster: Cluster, *args: str, what: str, check: bool = True,
         timeout: float = 60) -> str:
    """One `ceph` call on the cluster (never the machine's /etc/ceph)."""
    res = env.run([CEPH, "-c", str(cluster.conf), "--connect-timeout", str(CLI_TIMEOUT_S),
                   *args], check=check, what=what, timeout=timeout)
    return res.stdout


def daemon_argv(cluster: Cluster, daemon: str, ident: str, *extra: str) -> list[str]:
    return [f"/usr/bin/{daemon}", "-f", "-c", str(cluster.conf), "-i", ident, *extra]


def start(env: Env, cluster: Cluster, record: Callable[[int], None]) -> list[int]:
    """Make and start the monitor, manager, OSD and MDS (each PID recorded as it starts),
    create the file system and wait until its MDS is active."""
    fsid = _conf_value(cluster, "fsid")
    address = _conf_value(cluster, "public_addr")
    monmap = cluster.root / "monmap"
    env.run([MONMAPTOOL, "--create", "--clobber", "--fsid", fsid, "--addv", MON_ID,
             f"[v2:{address}:{MON_PORTS[0]},v1:{address}:{MON_PORTS[1]}]", str(monmap)],
            what="monmaptool --create")
    env.run(["/usr/bin/ceph-mon", "-c", str(cluster.conf), "-i", MON_ID, "--mkfs",
             "--monmap", str(monmap)], what="ceph-mon --mkfs", timeout=60)
    pids = [_spawn(cluster, "ceph-mon", MON_ID, record)]
    ceph_cli(env, cluster, "mon", "enable-msgr2", what="ceph mon enable-msgr2", check=False)
    pids.append(_spawn(cluster, "ceph-mgr", MGR_ID, record))
    osd_uuid = str(uuid.uuid4())
    osd_id = ceph_cli(env, cluster, "osd", "new", osd_uuid, what="ceph osd new").strip()
    if osd_id != OSD_ID:
        raise ComponentError(f"the cluster's first OSD got id {osd_id!r}, not {OSD_ID}")
    (cluster.data / f"osd.{OSD_ID}").mkdir(exist_ok=True)
    env.run(["/usr/bin/ceph-osd", "-c", str(cluster.conf), "-i", OSD_ID, "--mkfs",
             "--osd-uuid", osd_uuid], what="ceph-osd --mkfs (BlueStore on a sparse file)",
            timeout=120)
    pids.append(_spawn(cluster, "ceph-osd", OSD_ID, record))
    (cluster.data / f"mds.{MDS_ID}").mkdir(exist_ok=True)
    pids.append(_spawn(cluster, "ceph-mds", MDS_ID, record))
    for pool in POOLS:
        ceph_cli(env, cluster, "osd", "pool", "create", pool, "8", what=f"ceph osd pool create {pool}")
        ceph_cli(env, cluster, "osd", "pool", "set", pool, "size", "1", "--yes-i-really-mean-it",
             what=f"ceph osd pool set {pool} size 1")
    ceph_cli(env, cluster, "fs", "new", FS_NAME, *POOLS, what=f"ceph fs new {FS_NAME}")
    _wait_active(env, cluster, pids)
    return pids


def _conf_value(cluster: Cluster, key: str) -> str:
    for line in cluster.conf.read_text().splitlines():
        name, _, value = line.partition("=")
        if name.strip() == key:
            return value.strip()
    raise ComponentError(f"{cluster.conf} has no {key}")


def _spawn(cluster: Cluster, daemon: str, ident: str, record: Callable[[int], None]) -> int:
    return procs.spawn_daemon(daemon_argv(cluster, daemon, ident),
                              cluster.log / f"{daemon}.{ident}.out", record)


def _wait_active(env: Env, cluster: Cluster, pids: list[int]) -> None:
    """Until the file system has an active MDS and its PGs are active."""
    deadline = time.monotonic() + READY_S
    state = "no answer"
    while True:
        for pid, name in zip(pids, DAEMONS):
            if not procs.alive(pid):
                raise ComponentError(f"the cluster's {name} ended at start: see "
                                     f"{cluster.log}/{name.removeprefix('ceph-')}.*.log")
        out = ceph_cli(env, cluster, "status", "--format", "json", what="ceph status", check=False)
        try:
            status = json.loads(out)
            state = _fs_state(status)
        except ValueError:
            status = {}
        if state == "up:active" and _pgs_active(status):
            return
        if time.monotonic() > deadline:
            raise ComponentError(f"the Ceph cluster's file system is not active within "
                                 f"{READY_S:.0f} s (MDS {state}): see {cluster.log}")
        time.sleep(1.0)


def _fs_state(status: dict[str, object]) -> str:
    fsmap = status.get("fsmap")
    if not isinstance(fsmap, dict):
        return "no fsmap"
    ranks = fsmap.get("by_rank") or []
    states = [str(r.get("status", "")) for r in ranks if isinstance(r, dict)]
    return states[0] if states else "no rank"


def _pgs_active(status: dict[str, object]) -> bool:
    pgmap = status.get("pgmap")
    if not isinstance(pgmap, dict):
        return False
    total = int(pgmap.get("num_pgs", 0) or 0)
    states = pgmap.get("pgs_by_state") or []
    active = sum(int(s.get("count", 0)) for s in states
                 if isinstance(s, dict) and "active" in str(s.get("state_name", "")))
    return total > 0 and active == total


def fuse_argv(cluster: Cluster, options: dict[str, str] | None = None) -> list[str]:
    """ceph-fuse in the foreground on the cluster's config, the mount point last; `options`
    are client settings (`--client_cache_size=N`), as `ceph-fuse --help` takes them."""
    opts = [f"--{k}={v}" for k, v in sorted((options or {}).items())]
    return [FUSE, "-f", "-c", str(cluster.conf), "--admin-socket", str(cluster.client_asok),
            *opts, str(cluster.mount_point)]


def mount(cluster: Cluster, record: Callable[[int], None],
          options: dict[str, str] | None = None) -> int:
    """Mount the file system with ceph-fuse (recorded as it starts); its PID. A lab with a
    delayed path runs it in the path's network namespace (adapters/host/delay_path.py)."""
    argv = [*delay_path.client_prefix(cluster.root.parent), *fuse_argv(cluster, options)]
    pid = procs.spawn_daemon(argv, cluster.log / "ceph-fuse.out", record)
    deadline = time.monotonic() + 60
    while not is_mounted(cluster.mount_point):
        if not procs.alive(pid):
            raise ComponentError(f"ceph-fuse ended before it mounted {cluster.mount_point}: "
                                 f"see {cluster.log / 'ceph-fuse.out'}")
        if time.monotonic() > deadline:
            raise ComponentError(f"ceph-fuse did not mount {cluster.mount_point} within 60 s: "
                                 f"see {cluster.log}")
        time.sleep(0.1)
    return pid


def is_mounted(mount_point: Path) -> bool:
    return any(m.mount_point == str(mount_point) for m in mounts.current())


def client_pids(cluster: Cluster) -> list[int]:
    return procs.find_pids([FUSE, str(cluster.conf)])


def unmount(env: Env, cluster: Cluster) -> None:
    """Unmount ceph-fuse (it ends with its mount) and wait for it to end."""
    while is_mounted(cluster.mount_point):
        res = env.run(["umount", str(cluster.mount_point)], check=False, what="umount")
        if res.returncode != 0:
            env.run(["umount", "-l", str(cluster.mount_point)],
                    what=f"umount -l {cluster.mount_point}")
    deadline = time.monotonic() + 10
    while client_pids(cluster) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in client_pids(cluster):
        procs.terminate(pid)


def daemon_pids(cluster: Cluster) -> list[int]:
    """Every process run on the cluster's config (spawned or not yet recorded)."""
    return procs.find_pids([str(cluster.conf)])


def stop(cluster: Cluster, recorded: list[int]) -> None:
    """End the cluster's daemons by PID: SIGTERM to all at once (the file system is unmounted
    and the cluster is thrown away, so no order is needed), then each waited for, SIGKILL
    after 30 s. Only processes running on the cluster's config: a recorded PID the system
    gave to another process since is left alone."""
    conf = str(cluster.conf)
    pids = [p for p in dict.fromkeys([*recorded, *daemon_pids(cluster)])
            if procs.alive(p) and conf in " ".join(procs.cmdline(p))]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for pid in pids:
        procs.terminate(pid, timeout=30)


def recorded_pids(cluster: Cluster) -> list[int]:
    try:
        text = (cluster.root / "pids").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split() if x.isdigit()]


def record_pid(cluster: Cluster, pid: int) -> None:
    with open(cluster.root / "pids", "a") as f:
        f.write(f"{pid}\n")


__all__ = ["ADDRESS", "CLUSTER_DIR", "Cluster", "FS_NAME", "MON_PORTS", "check_free", "ceph_cli",
           "client_pids", "daemon_argv", "daemon_pids", "fuse_argv", "is_mounted", "mount",
           "record_pid", "recorded_pids", "render_conf", "require_installed", "start", "stop",
           "unmount", "write_config"]

"""OpenAFS: a throwaway cell on this machine for a lab, read through afsd.fuse.

The cell's four servers (ptserver, vlserver, fileserver, volserver) run without keys
(`NoAuth`), each in a private mount namespace that lays the lab's own directories over the
paths compiled into them (`/etc/openafs/server`, `/var/lib/openafs/local`) and over the vice
partition `/vicepis`, so nothing of the cell lives outside the lab's directory but that
partition's empty mount point. The app lives in the cell's `root.cell` volume, read through
afsd.fuse at `<cell dir>/mnt/<cell>/app`. Research notes: docs/lab-afs-notes.md.
"""

from __future__ import annotations

import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from statstorm.adapters.host import delay_path, procs
from statstorm.adapters.storage import mounts
from statstorm.env import Env
from statstorm.errors import BusyError, ComponentError, DependencyError

CELL = "statstorm.lab"
CELL_DIR = "cell"  # the cell's files, in the lab's directory
VOLUME = "root.cell"
PARTITION = Path("/vicepis")  # the fileserver takes only /vicepXX partitions
SERVER_BIN = Path("/usr/lib/openafs")
SERVERS = ("ptserver", "vlserver", "fileserver", "volserver")  # in start order
AFSD = "/usr/sbin/afsd.fuse"
VOS, PTS = "/usr/bin/vos", "/usr/bin/pts"
# Compiled-in paths the servers read whatever -config says (docs/lab-afs-notes.md).
SERVER_CONF = Path("/etc/openafs/server")
SERVER_LOCAL = Path("/var/lib/openafs/local")
PORTS = (7000, 7001, 7002, 7003, 7005)  # fileserver, client, ptserver, vlserver, volserver
READY_S = 120.0  # ubik's election and the fileserver's address registration take ~30 s


def require_installed() -> None:
    for tool in (*(str(SERVER_BIN / s) for s in SERVERS), AFSD, VOS, PTS, "/usr/bin/unshare"):
        if not Path(tool).exists():
            raise DependencyError(f"{tool} is missing: install openafs-fileserver, "
                                  "openafs-dbserver and openafs-fuse (run scripts/setup.sh --afs "
                                  "as root)")
    if not Path("/dev/fuse").exists():
        raise DependencyError("/dev/fuse is missing: load the fuse module (`modprobe fuse`)")


def check_free() -> None:
    """AFS's UDP ports are fixed: one cell (and one client) per machine."""
    for port in PORTS:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                raise BusyError(f"UDP port {port} is taken: another AFS cell or client runs "
                                "here; stop it (an AFS lab: `statstorm lab down --name NAME`)"
                                ) from None


def host_address(env: Env) -> str:
    """The address the cell names: ubik refuses loopback as its own address, so the
    host's primary IPv4 address (its traffic still stays on this machine)."""
    out = env.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                  what="reading this machine's addresses").stdout
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            return parts[parts.index("inet") + 1].split("/")[0]
    raise ComponentError("no global IPv4 address on this machine: an OpenAFS cell's database "
                         "servers refuse loopback; add one (e.g. a dummy interface)")


@dataclass(frozen=True)
class Cell:
    """The files of one lab's cell, all under `root`."""

    root: Path

    @property
    def server(self) -> Path:
        return self.root / "server"

    @property
    def local(self) -> Path:
        return self.root / "local"

    @property
    def part(self) -> Path:
        return self.root / "part"

    @property
    def client(self) -> Path:
        return self.root / "client"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def mount_point(self) -> Path:
        return self.root / "mnt"

    @property
    def code(self) -> Path:
        return self.mount_point / CELL / "app"


def write_config(cell: Cell, address: str) -> None:
    for d in (cell.server, cell.local, cell.part, cell.client, cell.cache, cell.log,
              cell.root / "db", cell.mount_point):
        d.mkdir(parents=True, exist_ok=True)
    cell.local.chmod(0o700)
    cell.cache.chmod(0o700)
    for conf in (cell.server, cell.client):
        (conf / "ThisCell").write_text(CELL + "\n")
        (conf / "CellServDB").write_text(f">{CELL}\n{address} #{socket.gethostname()}\n")
    (cell.local / "NoAuth").write_text("")
    (cell.part / "AlwaysAttach").write_text("")
    (cell.client / "cacheinfo").write_text(f"{cell.mount_point}:{cell.cache}:50000\n")


def server_argv(cell: Cell, name: str) -> list[str]:
    """`name` in its own mount namespace with the cell's directories over its paths."""
    binds = " && ".join(f"mount --bind {src} {dst}" for src, dst in (
        (cell.local, SERVER_LOCAL), (cell.part, PARTITION), (cell.server, SERVER_CONF)))
    args = ["-config", str(cell.server), "-logfile", str(cell.log / f"{name}.log")]
    if name in ("ptserver", "vlserver"):
        args += ["-db", str(cell.root / "db" / name.removesuffix("server"))]
    if name == "vlserver":
        args.append("-noauth")
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
            f'{binds} && exec "$@"', "sh", str(SERVER_BIN / name), *args]


def start(env: Env, cell: Cell, record: Callable[[int], None],
          clients: tuple[str, ...] = ()) -> list[int]:
    """Start the cell's servers (each PID recorded as it starts) and wait until the volume
    server answers; make this host's callers (and those from `clients`, the address of a
    client in a delayed path's namespace) the cell's administrators; create the volume."""
    PARTITION.mkdir(mode=0o700, exist_ok=True)
    pids = []
    for name in SERVERS:
        pids.append(procs.spawn_daemon(server_argv(cell, name), cell.log / f"{name}.out",
                                       record))
    address = (cell.server / "CellServDB").read_text().splitlines()[1].split()[0]
    _wait_ready(env, cell, address, pids)
    for host in dict.fromkeys([address, "127.0.0.1", *clients]):
        # A host entry in system:administrators: every caller from this host, anonymous
        # (afsd.fuse has no token) included, gets the administrators' rights of the ACLs.
        _afs(env, cell, PTS, "createuser", "-name", host, what=f"pts createuser {host}")
        _afs(env, cell, PTS, "adduser", "-user", host, "-group", "system:administrators",
             what=f"pts adduser {host}")
    _afs(env, cell, VOS, "create", "-server", address, "-partition", str(PARTITION),
         "-name", VOLUME, "-maxquota", "0", what=f"vos create {VOLUME}")  # 0: no quota
    return pids


def _afs(env: Env, cell: Cell, tool: str, *args: str, what: str, check: bool = True) -> str:
    res = env.run([tool, *args, "-noauth", "-config", str(cell.server)], check=check,
                  what=what, timeout=60)
    return res.stdout


def _wait_ready(env: Env, cell: Cell, address: str, pids: list[int]) -> None:
    deadline = time.monotonic() + READY_S
    while True:
        for pid, name in zip(pids, SERVERS):
            if not procs.alive(pid):
                raise ComponentError(f"the cell's {name} ended at start: see "
                                     f"{cell.log / (name + '.log')}")
        res = env.run([VOS, "partinfo", "-server", address, "-noauth", "-config",
                       str(cell.server)], check=False, what="vos partinfo", timeout=30)
        if res.returncode == 0 and str(PARTITION) in res.stdout:
            return
        if time.monotonic() > deadline:
            raise ComponentError(f"the OpenAFS cell did not answer within {READY_S:.0f} s "
                                 f"({res.first_error_line()}): see {cell.log}")
        time.sleep(1.0)


# `-osubtype=afs`: /proc/mounts shows the mount as `fuse.afs`, which model/storage_kinds.py
# names OpenAFS (plain `fuse` would be any FUSE file system); -mountdir last, so the client
# is found as every FUSE client is, by the mount point ending its command line.
SUBTYPE = ("-osubtype=afs",)  # one word: afsd.fuse hands what afsd does not know to FUSE


def client_argv(cell: Cell, cache_args: tuple[str, ...] = ()) -> list[str]:
    """afsd.fuse's command line for the lab's mount, with `cache_args` (`-stat N`, …)."""
    return [AFSD, "-confdir", str(cell.client), "-cachedir", str(cell.cache), "-dynroot",
            "-fakestat", *cache_args, *SUBTYPE, "-mountdir", str(cell.mount_point)]


def mount(env: Env, cell: Cell, cache_args: tuple[str, ...] = ()) -> int:
    """Mount the cell with afsd.fuse (it forks into the background); return its PID. A lab
    with a delayed path runs it in the path's network namespace (adapters/host/delay_path.py),
    restarts with other cache sizes included."""
    env.run([*delay_path.client_prefix(cell.root.parent), *client_argv(cell, cache_args)],
            what="mounting AFS with afsd.fuse", timeout=60)
    if not is_mounted(cell.mount_point):
        raise ComponentError(f"afsd.fuse did not mount {cell.mount_point}")
    pids = client_pids(cell)
    return pids[0] if pids else 0


def copy_in(env: Env, src: Path, dest: Path) -> None:
    """Copy a tree into the cell through the mount: AFS has no Unix owners (afsd.fuse
    answers chown with ENOSYS, which tar's extraction as root stops at), so no owner is
    kept; the ACLs decide who reads."""
    dest.mkdir(parents=True, exist_ok=True)
    env.run(["cp", "-R", "--no-preserve=ownership", f"{src}/.", f"{dest}/"],
            what=f"copying {src} into the OpenAFS cell", timeout=900)


def is_mounted(mount_point: Path) -> bool:
    return any(m.mount_point == str(mount_point) for m in mounts.current())


def client_pids(cell: Cell) -> list[int]:
    return procs.find_pids(["afsd.fuse", str(cell.cache)])


def unmount(env: Env, cell: Cell) -> None:
    """Unmount afsd.fuse and wait for it to end (it does within seconds)."""
    while is_mounted(cell.mount_point):
        res = env.run(["umount", str(cell.mount_point)], check=False, what="umount")
        if res.returncode != 0:
            env.run(["umount", "-l", str(cell.mount_point)],
                    what=f"umount -l {cell.mount_point}")
    deadline = time.monotonic() + 10
    while client_pids(cell) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in client_pids(cell):
        procs.terminate(pid)


def server_pids(cell: Cell) -> list[int]:
    """The cell's servers, found by their config directory (spawned or not yet recorded)."""
    return procs.find_pids([str(SERVER_BIN) + "/", str(cell.server)])


def stop(cell: Cell, recorded: list[int]) -> None:
    """End the cell's servers by PID. The fileserver ignores SIGTERM; SIGQUIT is every
    server's shutdown."""
    for pid in dict.fromkeys([*recorded, *server_pids(cell)]):
        procs.terminate(pid, timeout=30, sig=signal.SIGQUIT)
    try:
        PARTITION.rmdir()  # only while empty: never another cell's partition
    except OSError:
        pass


def recorded_pids(cell: Cell) -> list[int]:
    try:
        text = (cell.root / "pids").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split() if x.isdigit()]


def record_pid(cell: Cell, pid: int) -> None:
    with open(cell.root / "pids", "a") as f:
        f.write(f"{pid}\n")


__all__ = ["CELL", "CELL_DIR", "Cell", "SUBTYPE", "VOLUME", "check_free", "client_argv",
           "client_pids", "copy_in", "host_address", "is_mounted", "mount", "record_pid", "recorded_pids", "require_installed", "server_argv",
           "server_pids", "start", "stop", "unmount", "write_config"]

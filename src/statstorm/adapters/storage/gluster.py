"""GlusterFS: glusterd, a single-brick volume on loopback, and its FUSE mount."""

from __future__ import annotations

import fcntl
import ipaddress
import os
import shutil
import signal
import socket
import time
from pathlib import Path
from contextlib import contextmanager
from typing import Iterator, Mapping

from statstorm.adapters.host import procs
from statstorm.adapters.storage import mounts
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError, UsageError
from statstorm.model import storage_delay
from statstorm.model.storage_kinds import STORAGE, mount_type
from statstorm.results.storage_kind import StorageKind

GLUSTERD = "/usr/sbin/glusterd"
GLUSTERD_PIDFILE = Path("/run/statstorm-glusterd.pid")
GLUSTERD_LOCK = Path("/run/statstorm-glusterd.lock")
# Mount options the lab accepts (passed to mount.glusterfs as -o k=v).
KNOWN_MOUNT_OPTIONS = {
    "attribute-timeout", "entry-timeout", "negative-timeout", "direct-io-mode",
    "use-readdirp", "fopen-keep-cache", "gid-timeout", "background-qlen",
    "log-level", "reader-thread-count", "kernel-writeback-cache", "lru-limit",
    "invalidate-limit", "congestion-threshold", "auto-invalidation",
}


def require_installed() -> None:
    for tool in (GLUSTERD, "/usr/sbin/gluster", "/sbin/mount.glusterfs"):
        if not Path(tool).exists():
            raise DependencyError(
                f"{tool} is missing: install glusterfs-server and glusterfs-client "
                "(run scripts/setup.sh --lab as root)"
            )
    if not Path("/dev/fuse").exists():
        raise DependencyError("/dev/fuse is missing: load the fuse module (`modprobe fuse`)")


XLATOR_DIRS = ("/usr/lib/x86_64-linux-gnu/glusterfs", "/usr/lib/aarch64-linux-gnu/glusterfs",
               "/usr/lib64/glusterfs", "/usr/lib/glusterfs")


def require_delay_translator() -> None:
    """A one-line error unless the installed GlusterFS ships debug/delay-gen."""
    found = [p for d in XLATOR_DIRS for p in Path(d).glob("*/xlator/debug/delay-gen.so")]
    if not found:
        raise UsageError("--storage-delay needs GlusterFS's debug/delay-gen translator "
                         "(xlator/debug/delay-gen.so), which this GlusterFS does not ship: "
                         "drop --storage-delay, or install a GlusterFS that has it (3.12 and later)")


def brick_host() -> str:
    """A host name for the brick that resolves to this machine's loopback.

    glusterd refuses 127.0.0.1 and `localhost` as brick hosts, but accepts the machine's own
    name when it resolves to a local address (Debian maps it to 127.0.1.1 in /etc/hosts).
    """
    name = socket.gethostname()
    try:
        addr = socket.gethostbyname(name)
    except OSError:
        raise ComponentError(
            f"host name {name!r} does not resolve: add `127.0.1.1 {name}` to /etc/hosts"
        ) from None
    if not ipaddress.ip_address(addr).is_loopback:
        raise ComponentError(
            f"host name {name!r} resolves to {addr}, not loopback: the lab keeps GlusterFS on "
            f"this machine; add `127.0.1.1 {name}` to /etc/hosts"
        )
    return name


def _gluster(env: Env, *args: str, what: str, check: bool = True, timeout: float = 60) -> str:
    """Run a gluster CLI command, retrying while another transaction holds the cluster lock."""
    argv = ["gluster", "--mode=script", *args]
    deadline = env.clock() + timeout
    while True:
        res = env.run(argv, check=False, timeout=timeout, what=what)
        out = res.stdout + res.stderr
        if res.returncode == 0 or not check:
            return out
        busy = "Another transaction is in progress" in out or "Locking failed" in out
        if busy and env.clock() < deadline:
            env.sleep(0.5)
            continue
        raise ComponentError(f"{what} failed: {res.first_error_line()}")


def glusterd_running(env: Env) -> bool:
    res = env.run(["gluster", "--mode=script", "volume", "list"], check=False, timeout=30)
    return res.returncode == 0


@contextmanager
def glusterd_lock() -> Iterator[None]:
    """Held while a statstorm process starts glusterd and creates its volume, or deletes its
    volume and decides whether to stop glusterd: otherwise a lab going down in one process
    could stop the glusterd another has just started for a volume not created yet."""
    GLUSTERD_LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(GLUSTERD_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ensure_glusterd(env: Env) -> bool:
    """Start glusterd if it is not answering; return True if we started it."""
    if glusterd_running(env):
        return False
    env.log("Starting glusterd…")
    env.run([GLUSTERD, "-p", str(GLUSTERD_PIDFILE)], what="glusterd", timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if glusterd_running(env):
            return True
        time.sleep(0.3)
    raise ComponentError(
        "glusterd did not start within 30 s: see /var/log/glusterfs/glusterd.log"
    )


def stop_glusterd(env: Env) -> None:
    """Stop the glusterd that statstorm started (by its recorded PID)."""
    try:
        pid = int(GLUSTERD_PIDFILE.read_text().strip())
    except (FileNotFoundError, ValueError):
        return
    if procs.alive(pid) and "glusterd" in " ".join(procs.cmdline(pid)):
        # Let any hook scripts glusterd spawned finish first.
        for kid in procs.children(pid):
            deadline = time.monotonic() + 10
            while procs.alive(kid) and time.monotonic() < deadline:
                time.sleep(0.1)
        procs.terminate(pid)
    GLUSTERD_PIDFILE.unlink(missing_ok=True)


def list_volumes(env: Env) -> list[str]:
    """The volumes glusterd knows. A failed listing raises (after waiting out another
    transaction): read as names, its error text let a volume pass for deleted (its brick
    then removed under it) and glusterd pass for serving nothing."""
    out = _gluster(env, "volume", "list", what="gluster volume list")
    if "No volumes present" in out:
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def create_volume(env: Env, volume: str, brick: Path, *, delay_us: int = 0) -> None:
    """Create and start a single-brick volume; with `delay_us`, its brick delays every
    metadata call by that much (`delay_options`, set before the brick starts)."""
    host = brick_host()
    brick.mkdir(parents=True, exist_ok=True)
    _gluster(env, "volume", "create", volume, f"{host}:{brick}", "force",
             what=f"creating GlusterFS volume {volume}")
    for key, value in delay_options(delay_us).items():
        set_volume_option(env, volume, key, value)
    _gluster(env, "volume", "start", volume, what=f"starting GlusterFS volume {volume}")


# The volume keys of the debug/delay-gen translator (glusterd's volume-set table; not in
# `gluster volume set help`, which lists documented keys only). `debug.delay-gen` names the
# brick translator to sit on: `posix`, so the delay is served by the brick's io-threads, as
# round trips overlap on a real network. delay-gen reads its options at start only (its
# reconfigure does nothing), so they are set before `volume start`.
DELAY_XLATOR_KEY = "debug.delay-gen"


def delay_options(delay_us: int) -> dict[str, str]:
    """The `gluster volume set` options (in order) that delay every metadata call on the
    brick by `delay_us` µs, 100 % of them; none for 0."""
    if not delay_us:
        return {}
    return {DELAY_XLATOR_KEY: "posix",
            "delay-gen.enable": ",".join(storage_delay.METADATA_FOPS),
            "delay-gen.delay-percentage": "100",
            "delay-gen.delay-duration": str(delay_us)}


def delay_in_effect(options: Mapping[str, str]) -> int:
    """The delay in µs a volume's effective options (`volume_options`) give its brick: 0
    unless delay-gen is on, at 100 %, on every metadata call of `delay_options`."""
    if options.get(DELAY_XLATOR_KEY, "off") in ("off", "", "(null)"):
        return 0
    enabled = set(options.get("delay-gen.enable", "").split(","))
    if (options.get("delay-gen.delay-percentage", "").rstrip("%") not in ("100", "100.0")
            or not set(storage_delay.METADATA_FOPS) <= enabled):
        return 0
    try:
        return int(options.get("delay-gen.delay-duration", "0"))
    except ValueError:
        return 0


def check_delay(env: Env, volume: str, delay_us: int) -> None:
    """The volume's own options read back: its brick delays what `--storage-delay` asked."""
    got = delay_in_effect(volume_options(env, volume))
    if got != delay_us:
        raise ComponentError(
            f"volume {volume}: delay-gen reads {storage_delay.format_us(got)} per metadata call, "
            f"not the {storage_delay.format_us(delay_us)} asked: see `gluster volume get "
            f"{volume} all | grep delay-gen`")


def delete_volume(env: Env, volume: str, brick: Path | None) -> None:
    deadline = env.clock() + 60
    while volume in list_volumes(env):
        # A volume just created (a lab stopped while it was being made) may not stop at the
        # first try: stop and delete again until glusterd has let it go.
        _gluster(env, "volume", "stop", volume, "force", what=f"stopping volume {volume}",
                 check=False)
        try:
            _gluster(env, "volume", "delete", volume, what=f"deleting volume {volume}")
        except ComponentError:
            if env.clock() >= deadline:
                raise
            env.sleep(1.0)
    if brick is not None and brick.exists():
        shutil.rmtree(brick, ignore_errors=True)


def volume_options(env: Env, volume: str) -> dict[str, str]:
    """The volume's effective options (`gluster volume get VOL all`)."""
    out = _gluster(env, "volume", "get", volume, "all", what=f"reading options of {volume}")
    return parse_volume_get(out)


def parse_volume_get(out: str) -> dict[str, str]:
    """`gluster volume get VOL all` output (a header, a rule, then `key  value` rows)."""
    opts: dict[str, str] = {}
    for line in out.splitlines()[2:]:
        parts = line.split(None, 1)
        if len(parts) == 2:
            opts[parts[0]] = parts[1].strip()
    return opts


def mount(env: Env, volume: str, mount_point: Path, options: Mapping[str, str]) -> int:
    """Mount `volume` with the FUSE client; return the client's PID."""
    mount_point.mkdir(parents=True, exist_ok=True)
    argv = ["mount", "-t", mount_type(StorageKind.GLUSTERFS)]
    if options:
        argv += ["-o", ",".join(f"{k}={v}" for k, v in options.items())]
    argv += [f"{brick_host()}:/{volume}", str(mount_point)]
    env.run(argv, what=f"mounting GlusterFS volume {volume}", timeout=60)
    if not is_mounted(mount_point):
        raise ComponentError(
            f"mount of {volume} on {mount_point} did not appear: see "
            "/var/log/glusterfs/ for the FUSE client's log"
        )
    pids = procs.find_pids(["--process-name", "fuse", str(mount_point)])
    return pids[0] if pids else 0


def is_mounted(mount_point: Path) -> bool:
    return mount_depth(mount_point) > 0


def unmount(env: Env, mount_point: Path, client_pid: int = 0) -> None:
    """Unmount the top mount of `mount_point` (with clients stacked there, the one below
    serves again) and wait for its client to end. A client whose mount was only detached
    (busy) and that outlives the wait is ended with SIGKILL: on SIGTERM a GlusterFS client
    unmounts its mount point by path once more, which would take the mount below."""
    detached = False
    if is_mounted(mount_point):
        res = env.run(["umount", str(mount_point)], check=False, what="umount")
        if res.returncode != 0:
            # Busy: a process still has files open there. Detach lazily so the FUSE client
            # can exit once they close; we end our own processes before this point.
            env.run(["umount", "-l", str(mount_point)], what=f"umount -l {mount_point}")
            detached = True
    if client_pid and procs.alive(client_pid):
        deadline = time.monotonic() + 10
        while procs.alive(client_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if procs.alive(client_pid):
            procs.terminate(client_pid, sig=signal.SIGKILL if detached else signal.SIGTERM)


def set_volume_option(env: Env, volume: str, key: str, value: str) -> None:
    _gluster(env, "volume", "set", volume, key, value, what=f"gluster volume set {volume} {key}")


def reset_volume_option(env: Env, volume: str, key: str) -> None:
    _gluster(env, "volume", "reset", volume, key, what=f"gluster volume reset {volume} {key}")


def mount_depth(mount_point: Path) -> int:
    """How many mounts are stacked on `mount_point`."""
    target = str(mount_point)
    return sum(1 for m in mounts.current() if m.mount_point == target)


def client_argv_with(argv: list[str], options: Mapping[str, str]) -> list[str]:
    """A FUSE client's argv with these mount options as its `--name=value` flags (the ones
    mount.glusterfs passes for them), every other argument kept, the mount point last."""
    keep = [a for a in argv[1:-1] if a.split("=", 1)[0].lstrip("-") not in options]
    return [argv[0], *(f"--{k}={v}" for k, v in options.items()), *keep, argv[-1]]


def stack_client(env: Env, argv: list[str], mount_point: Path, timeout: float = 30) -> int:
    """Start another FUSE client for the same volume on top of the live mount at
    `mount_point` (new lookups go to it; open files stay with the one below) and return its
    PID. mount.glusterfs refuses a second mount on one point, so the client runs directly."""
    depth = mount_depth(mount_point)
    before = {pid for pid, _ in _clients(mount_point)}
    env.run(argv, what=f"starting a GlusterFS client on {mount_point}", timeout=timeout)
    deadline = time.monotonic() + timeout
    while mount_depth(mount_point) <= depth:
        if time.monotonic() > deadline:
            raise ComponentError(f"the new GlusterFS client did not mount {mount_point} within "
                                 f"{timeout:.0f} s: see /var/log/glusterfs/")
        time.sleep(0.1)
    new = [pid for pid, _ in _clients(mount_point) if pid not in before]
    return new[0] if new else 0


def _clients(mount_point: Path) -> list[tuple[int, list[str]]]:
    return mounts.fuse_clients(str(mount_point), STORAGE[StorageKind.GLUSTERFS].client)

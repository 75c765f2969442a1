"""An OpenAFS client's cache sizes, read from the running cache manager, and a lab's client
restarted with new ones (statstorm apply's step for the `openafs-stat-cache` finding).

afsd takes its cache sizes only when it starts, so a change is a restart of the client: on a
lab, afsd.fuse unmounted and started again with the new flags (requests fail for the second
in between; the old flags are kept to restart it with on undo); on a host whose kernel module
serves /afs, the flags belong in Debian's OPTIONS (`afs_conf_text`), taken at the next
`systemctl restart openafs-client`, which statstorm leaves to the admin. What the sizes mean:
model/afs_cache.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from statstorm.adapters.host import procs
from statstorm.adapters.storage import afs_stats, mounts, openafs
from statstorm.adapters.storage.afs_options import DEFAULT_CONF, cache_options
from statstorm.env import Env
from statstorm.errors import ComponentError
from statstorm.model import afs_cache, afs_fuse
from statstorm.model.storage_kinds import STORAGE, kind_of
from statstorm.results.storage_kind import StorageKind

CLIENT = STORAGE[StorageKind.OPENAFS].client  # afsd.fuse
DEBIAN_CONF = Path("/etc/openafs/afs.conf.client")
SIZE_FLAGS = tuple(f"-{k}" for k in afs_cache.AFS_CACHE_KEYS)


def client_of(mount_point: str) -> tuple[int, list[str]] | None:
    """PID and command line of the afsd.fuse serving `mount_point` (the newest)."""
    found = []
    for pid in procs.find_pids([CLIENT, mount_point]):
        argv = procs.cmdline(pid)
        if argv and Path(argv[0]).name == CLIENT and _mountdir(argv) == mount_point.rstrip("/"):
            found.append((pid, argv))
    found.sort(key=lambda f: procs.start_ticks(f[0]), reverse=True)
    return found[0] if found else None


def _mountdir(argv: list[str]) -> str:
    flags = afs_cache.afsd_flags(argv)
    return flags.get("mountdir", "").rstrip("/")


def servers_of(mount_point: str) -> list[str]:
    """The file servers to count a mount's round trips at: the database servers its client's
    CellServDB names for its cell (a lab's cell runs every server on one address)."""
    found = client_of(mount_point)
    conf = Path(afs_cache.afsd_flags(found[1]).get("confdir") or DEFAULT_CONF) if found \
        else DEFAULT_CONF
    return afs_stats.cell_servers(conf)


def mount_cache_options(mount_point: str) -> dict[str, str]:
    """The cache sizes of the client serving `mount_point`; {} when no afsd.fuse serves it
    (a kernel client's sizes are not read here)."""
    found = client_of(mount_point)
    return cache_options(found[1]) if found else {}


def size_args(argv: list[str]) -> tuple[str, ...]:
    """The cache-size flags of a command line, in order (`-stat 3000`, …)."""
    out: list[str] = []
    args = argv[1:]
    for i, a in enumerate(args):
        if a in SIZE_FLAGS and i + 1 < len(args):
            out += [a, args[i + 1]]
    return tuple(out) + tuple(a for a in args if afs_fuse.is_timeout_word(a))  # FUSE's too


def with_sizes(args: tuple[str, ...], options: dict[str, str]) -> tuple[str, ...]:
    """Cache-size flags with `options` ({"stat": "32768"}) set, the others kept; FUSE
    timeouts in `options` ({"attr-timeout": "60"}) as one `-o` word after them."""
    sizes = [a for a in args if not afs_fuse.is_timeout_word(a)]
    given = dict(zip(sizes[::2], sizes[1::2]))
    given.update({f"-{k}": v for k, v in options.items() if f"-{k}" in SIZE_FLAGS})
    return tuple(x for kv in given.items() for x in kv) + afs_fuse.with_timeouts(
        [a for a in args if afs_fuse.is_timeout_word(a)], options)


@dataclass
class ClientRestart:
    """A lab's afsd.fuse restarted with other cache sizes: what it ran with before and after."""

    mount_point: str
    before: tuple[str, ...]  # the size flags before (() : all autotuned)
    after: tuple[str, ...]
    client_pid: int = 0
    done: bool = field(default=False)


def restart(env: Env, cell: openafs.Cell, args: tuple[str, ...]) -> int:
    """Restart the lab's afsd.fuse with these cache-size flags; its new PID. The mount must
    show the same files after."""
    mp = str(cell.mount_point)
    try:
        listing = sorted(p.name for p in cell.code.iterdir()) if cell.code.is_dir() else None
    except OSError:  # a dead client's mount (Transport endpoint is not connected): restart it
        listing = None
    openafs.unmount(env, cell)
    pid = openafs.mount(env, cell, args)
    found = client_of(mp)
    if found is None or size_args(found[1]) != args:
        raise ComponentError(f"afsd.fuse did not come back on {mp} with {' '.join(args)}")
    if listing is not None and sorted(p.name for p in cell.code.iterdir()) != listing:
        raise ComponentError(f"the remounted {mp} does not show the same files")
    return pid


def apply(env: Env, cell: openafs.Cell, options: dict[str, str]) -> ClientRestart:
    """Give the lab's client these cache sizes ({"stat": "32768"}): a restart, undone by
    `undo` (the old flags again) if anything after it fails."""
    mp = str(cell.mount_point)
    found = client_of(mp)
    if found is None:
        raise ComponentError(f"no afsd.fuse serves {mp}: is the lab up?")
    before = size_args(found[1])
    step = ClientRestart(mp, before, with_sizes(before, options))
    step.client_pid = restart(env, cell, step.after)
    step.done = True
    return step


def undo(env: Env, cell: openafs.Cell, step: ClientRestart) -> int:
    """The client started again with the flags it had before `step`; its PID."""
    pid = restart(env, cell, step.before)
    step.done = False
    return pid


def lab_cell(mount_point: str) -> openafs.Cell | None:
    """The lab cell whose afsd.fuse serves `mount_point` (its -confdir is the cell's client
    directory beside the mount point), or None: a host's client, which statstorm does not
    restart."""
    found = client_of(mount_point)
    if found is None:
        return None
    cell = openafs.Cell(Path(mount_point).parent)
    confdir = afs_cache.afsd_flags(found[1]).get("confdir", "")
    return cell if confdir.rstrip("/") == str(cell.client) else None


def live_step(mount_point: str, options: dict[str, str]
              ) -> tuple[dict[str, str], list[str]] | str:
    """What apply needs to restart a lab's client with these cache sizes: the sizes it runs
    with now (as `options` names them) and its command line; or, for a client statstorm does
    not restart, the line that gives them to it by hand."""
    found = client_of(mount_point)
    if found is None or lab_cell(mount_point) is None:
        return (f"{STORAGE[StorageKind.OPENAFS].set_live}: {afs_conf_text(options)} in "
                f"{DEBIAN_CONF} (Debian), then `systemctl restart openafs-client`")
    now = cache_options(found[1])
    return {k: now.get(k, "") for k in options}, found[1]


def restart_with(env: Env, mount_point: str, argv: list[str], options: dict[str, str]) -> int:
    """Restart the lab's client that ran with `argv` with these cache sizes; its PID."""
    cell = lab_cell(mount_point) or openafs.Cell(Path(mount_point).parent)
    return restart(env, cell, with_sizes(size_args(argv), options))


def restore(env: Env, mount_point: str, argv: list[str]) -> int:
    """Restart the lab's client with the cache sizes of `argv` (what it ran with before)."""
    cell = lab_cell(mount_point) or openafs.Cell(Path(mount_point).parent)
    return restart(env, cell, size_args(argv))


def afs_conf_text(options: dict[str, str], current: str = "") -> str:
    """Debian's afs.conf.client line that gives a kernel client these cache sizes at its next
    start (`current`: the OPTIONS it has, kept but for the sizes changed)."""
    args = current.split()
    kept: list[str] = []
    i = 0
    while i < len(args):
        if args[i] in {f"-{k}" for k in options} and i + 1 < len(args):
            i += 2
            continue
        kept.append(args[i])
        i += 1
    new = kept + [x for k, v in options.items() for x in (f"-{k}", v)]
    return f'OPTIONS="{" ".join(new)}"'


def is_afs(mount_point: str) -> bool:
    """The mount at `mount_point` is an OpenAFS client's (afsd.fuse's or the kernel's)."""
    entry = mounts.find_mount(mounts.current(), mount_point)
    return entry is not None and entry.mount_point == mount_point.rstrip("/") and (
        kind_of(entry.fstype) is StorageKind.OPENAFS
        or (entry.fstype == "fuse" and entry.source == "AFS"))


__all__ = ["ClientRestart", "afs_conf_text", "apply", "cache_options", "client_of", "is_afs",
           "lab_cell", "live_step", "mount_cache_options", "restart", "restart_with", "restore",
           "servers_of", "size_args", "undo", "with_sizes"]

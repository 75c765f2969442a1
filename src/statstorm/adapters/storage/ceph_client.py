"""A ceph-fuse client's per-call settings, as it runs with them (its admin socket, else its
command line: adapters/storage/ceph_admin.py), and a lab's client restarted with new ones (statstorm apply's step for the `cephfs-fuse-request-work` finding).

On a lab, ceph-fuse runs on the cluster's own config with its options on its command line
(adapters/storage/ceph.py `fuse_argv`): apply unmounts it and starts it again with the new
options (the old ones kept to start it with on undo); requests on the mount fail for the
second in between. A command-line option wins over ceph.conf and the cluster's configuration
database, so the restarted client runs with what apply gave it, whatever they say; the
restart reads that back from its admin socket, the same answer check judges. A host's ceph-fuse is left to the admin: the settings go in ceph.conf's
`[client]` section and live through its admin socket. What the settings mean:
model/ceph_fuse.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from statstorm.adapters.storage import ceph, ceph_admin, mounts
from statstorm.env import Env
from statstorm.errors import ComponentError
from statstorm.model import ceph_fuse
from statstorm.model.storage_kinds import CEPHFS_CACHE_KEYS, STORAGE
from statstorm.results.storage_kind import StorageKind

CLIENT = STORAGE[StorageKind.CEPHFS].client  # ceph-fuse


def client_of(mount_point: str) -> tuple[int, list[str]] | None:
    """PID and command line of the ceph-fuse serving `mount_point` (the newest)."""
    return mounts.fuse_client(mount_point, CLIENT)


def cache_options(argv: list[str]) -> dict[str, str]:
    """The per-call settings a ceph-fuse with this command line runs with (Ceph's defaults
    for the ones not given), and its other options as given."""
    return ceph_fuse.cache_options(argv, CEPHFS_CACHE_KEYS)


def mount_cache_options(mount_point: str, env: Env | None = None) -> dict[str, str]:
    """The settings the ceph-fuse serving `mount_point` runs with (its admin socket's, else
    its command line's; `ceph_fuse.SOURCE` says which); {} when none serves it."""
    found = client_of(mount_point)
    return ceph_admin.cache_options(found[0], found[1], env) if found else {}


def lab_cluster(mount_point: str) -> ceph.Cluster | None:
    """The lab cluster whose ceph-fuse serves `mount_point` (it runs on the config file beside
    the mount point), or None: a host's client, which statstorm does not restart."""
    found = client_of(mount_point)
    if found is None:
        return None
    cluster = ceph.Cluster(Path(mount_point.rstrip("/")).parent)
    argv = found[1]
    conf = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-c", "--conf")), "")
    return cluster if conf == str(cluster.conf) and cluster.mount_point == Path(
        mount_point.rstrip("/")) else None


def manual_line(options: dict[str, str]) -> str:
    """What gives a host's ceph-fuse these settings by hand."""
    sets = "; ".join(f"`ceph daemon <its admin socket> config set {k.replace('-', '_')} {v}`"
                     for k, v in options.items())
    return (f"ceph-fuse: {sets} (live), and in ceph.conf's [client] section: "
            + ", ".join(ceph_fuse.conf_lines(options)))


def live_step(mount_point: str, options: dict[str, str]
              ) -> tuple[dict[str, str], list[str]] | str:
    """What apply needs to restart a lab's ceph-fuse with these settings: the values it runs
    with now (as `options` names them) and its command line; or, for a client statstorm does
    not restart, the lines that give them to it by hand."""
    found = client_of(mount_point)
    if found is None or lab_cluster(mount_point) is None:
        return manual_line(options)
    now = ceph_admin.cache_options(found[0], found[1])
    return {k: now.get(k, "") for k in options}, found[1]


def restart(env: Env, cluster: ceph.Cluster, options: dict[str, str]) -> int:
    """Restart the lab's ceph-fuse with these options (all of them: the command line is made
    anew); its PID. The mount must show the same files after."""
    mp = str(cluster.mount_point)
    listing = _listing(cluster.code)
    ceph.unmount(env, cluster)
    pid = ceph.mount(cluster, lambda p: ceph.record_pid(cluster, p), options)
    found = client_of(mp)
    if found is None or ceph_fuse.argv_options(found[1]) != {
            ceph_fuse.option_key(k): v for k, v in options.items()}:
        raise ComponentError(f"ceph-fuse did not come back on {mp} with {options}")
    _check_running(env, found, options)
    if listing is not None and _listing(cluster.code) != listing:
        raise ComponentError(f"the remounted {mp} does not show the same files")
    list_tree(cluster.code)
    return pid


def _check_running(env: Env, client: tuple[int, list[str]], options: dict[str, str]) -> None:
    """The restarted client runs with the per-call settings it was given, as its admin socket
    says (what check reads); a client with no socket that answers is taken at its word."""
    got = ceph_admin.running_config(env, client[0], client[1])
    if isinstance(got, str):
        return
    asked = {ceph_fuse.option_key(k): v for k, v in options.items()}
    now = ceph_fuse.running_options(got[1])
    wrong = {k: now[k] for k in ceph_fuse.PER_CALL_KEYS
             if k in asked and not ceph_fuse.same(k, now[k], asked[k])}
    if wrong:
        raise ComponentError(f"the restarted ceph-fuse runs with {wrong} (its admin socket "
                             f"{got[0]}), not the {asked} it was given")


def list_tree(code: Path) -> int:
    """Read every directory of the code once through the new client: a directory ceph-fuse
    has listed whole (and holds the capability of) answers a name PHP probes and does not
    find by itself; one it has not is an MDS request per probe, every request (measured: 33
    per page view of the synthetic app after a restart, until listed). The directories read."""
    n = 0
    for _root, _dirs, _files in os.walk(code):
        n += 1
    return n


def _listing(code: Path) -> list[str] | None:
    """The names in the code's directory; None when there is none to compare with (no code
    yet, or a client that died: `Transport endpoint is not connected`)."""
    try:
        return sorted(p.name for p in code.iterdir())
    except OSError:
        return None


def restart_with(env: Env, mount_point: str, argv: list[str], options: dict[str, str]) -> int:
    """Restart the lab's ceph-fuse that ran with `argv` with these settings added; its PID."""
    cluster = lab_cluster(mount_point) or ceph.Cluster(Path(mount_point.rstrip("/")).parent)
    return restart(env, cluster, {**ceph_fuse.argv_options(argv), **options})


def restore(env: Env, mount_point: str, argv: list[str]) -> int:
    """Restart the lab's ceph-fuse with the options of `argv` (what it ran with before)."""
    cluster = lab_cluster(mount_point) or ceph.Cluster(Path(mount_point.rstrip("/")).parent)
    return restart(env, cluster, ceph_fuse.argv_options(argv))


__all__ = ["CLIENT", "cache_options", "client_of", "lab_cluster", "live_step",
           "list_tree", "manual_line", "mount_cache_options", "restart", "restart_with", "restore"]

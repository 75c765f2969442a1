"""A running ceph-fuse's settings from its admin socket: `ceph --admin-daemon SOCK config show`.

Ceph merges a client's settings from its defaults, the cluster's configuration database
(`ceph config set client …`), ceph.conf, its command line and live `config set`s, each over
the one before; only the client knows the result, and tells it on its admin socket. So check
reads the socket, and the client's command line only when no socket answers (no `ceph` tool,
no socket, a socket only root may open); the options it gives carry `ceph_fuse.SOURCE`,
which says which (model/ceph_fuse.py judges them, tests/fixtures/ceph/config-show-*.json are
real answers).

The socket is found, in this order: the listening UNIX socket the process holds (its fds
against `/proc/PID/net/unix`, its own network namespace's table: wherever its config put
it); the path its command line names (`--admin-socket`, `--admin_socket`, metavariables
expanded); Ceph's default, `/var/run/ceph/$cluster-$name.$pid.$cctid.asok`. A process in
another mount namespace is reached through `/proc/PID/root`.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Sequence

from statstorm.adapters.host import unix_sockets
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError
from statstorm.model import ceph_fuse
from statstorm.model.storage_kinds import CEPHFS_CACHE_KEYS

CEPH = "/usr/bin/ceph"  # ceph-common's tool
RUN_DIR = "/var/run/ceph"  # $run_dir's default
DEFAULT_ASOK = "$run_dir/$cluster-$name.$pid.$cctid.asok"  # admin_socket's default (16.2)
TIMEOUT_S = 10.0
TRIES = 3  # sockets asked at most, the likeliest first


def parse_config(text: str) -> dict[str, str]:
    """`config show` / `config get NAME` JSON → {option: value as text}; ComponentError on
    anything else."""
    try:
        data = json.loads(text)
    except ValueError:
        raise ComponentError("the admin socket's answer is not JSON") from None
    if not isinstance(data, dict) or not data or isinstance(data.get("diff"), dict):
        raise ComponentError("the admin socket's answer is not a `config show`")
    return {str(k): _text(v) for k, v in data.items()}


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _arg(argv: Sequence[str], *names: str) -> str | None:
    """The value of the first of `names` on a Ceph command line (`--admin-socket X`,
    `--admin_socket=X`, `-n X`); `-` and `_` alike in long names."""
    want = {n.replace("_", "-") for n in names}
    for i, a in enumerate(argv[1:], 1):
        name, eq, value = a.partition("=")
        if name.replace("_", "-") not in want:
            continue
        if eq:
            return value
        if i + 1 < len(argv):
            return argv[i + 1]
    return None


def identity(argv: Sequence[str]) -> tuple[str, str]:
    """The cluster and the entity name a Ceph client runs as, as far as its command line
    says (`*`, `client.admin`: a cluster it does not name, usually Ceph's default `ceph`, may
    come from CEPH_ARGS, so it is left to the glob)."""
    cluster = _arg(argv, "--cluster") or "*"
    name = _arg(argv, "--name", "-n")
    if not name:
        name = "client." + (_arg(argv, "--id", "-i", "--user") or "admin")
    return cluster, name


def expand(template: str, argv: Sequence[str], pid: int) -> str:
    """An admin_socket path with its metavariables filled in; `$cctid` (the client's
    context's address, not known from outside) and any other left as `*` for a glob."""
    cluster, name = identity(argv)
    kind, _, ident = name.partition(".")
    out = template.replace("$run_dir", RUN_DIR)
    for var, value in (("$cluster", cluster), ("$name", name), ("$type", kind),
                       ("$id", ident), ("$pid", str(pid)), ("$host", socket.gethostname())):
        out = out.replace(var, value)
    while "$" in out:  # $cctid and what statstorm does not know
        head, _, rest = out.partition("$")
        tail = rest.lstrip("abcdefghijklmnopqrstuvwxyz_")
        out = f"{head}*{tail}"
    return out


def _matches(path: str, pattern: str) -> bool:
    return Path(path).match(pattern) if "*" in pattern else path == pattern


def _existing(pattern: str, pid: int, proc: Path) -> list[str]:
    """The paths matching `pattern` that exist, here or in the process's root."""
    for base in (Path("/"), proc / str(pid) / "root"):
        where = base / pattern.lstrip("/")
        found = sorted(str(p) for p in where.parent.glob(where.name)) if "*" in where.name \
            else [str(where)] if where.exists() else []
        if found:
            return found
    return []


def candidates(pid: int, argv: Sequence[str], proc: Path = Path("/proc")) -> list[str]:
    """The admin sockets to ask for client `pid` with this command line, the likeliest
    first: the one it holds that its command line names, any other `.asok` it holds, the
    command line's, Ceph's default."""
    named = _arg(argv, "--admin-socket")
    pattern = expand(named, argv, pid) if named else ""
    default = expand(DEFAULT_ASOK, argv, pid)
    held = unix_sockets.held(pid, proc)
    out = [p for p in held if pattern and _matches(p, pattern)]
    out += [p for p in held if p.endswith(".asok") or _matches(p, default)]
    out = [q for p in out for q in _existing(p, pid, proc)[:1] or [p]]
    for pat in (pattern, default):
        if pat:
            out += _existing(pat, pid, proc)
    return list(dict.fromkeys(out))


def read_config(env: Env, asok: str) -> dict[str, str]:
    """The settings the client behind `asok` runs with; ComponentError saying why not."""
    try:
        res = env.run([CEPH, "--admin-daemon", asok, "config", "show"], check=False,
                      timeout=TIMEOUT_S, what=f"ceph --admin-daemon {asok} config show")
    except DependencyError:
        raise ComponentError(f"{CEPH} is not installed (ceph-common)") from None
    if res.returncode != 0:
        line = res.first_error_line()
        hint = (": run check as root" if "Permission denied" in line or "Errno 13" in line
                else "")
        raise ComponentError(f"{asok}: {line}{hint}")
    return parse_config(res.stdout)


def running_config(env: Env, pid: int, argv: Sequence[str],
                   proc: Path = Path("/proc")) -> tuple[str, dict[str, str]] | str:
    """The socket that answered and the settings it gave, or why none did."""
    found = candidates(pid, argv, proc)
    if not found:
        return f"no admin socket found for PID {pid}"
    why = ""
    for asok in found[:TRIES]:
        try:
            return asok, read_config(env, asok)
        except ComponentError as exc:
            why = why or str(exc)
    return f"no admin socket answered: {why}"


def cache_options(pid: int, argv: list[str], env: Env | None = None) -> dict[str, str]:
    """A running ceph-fuse's cache options and per-call settings, as `mounts.describe` shows
    them: from its admin socket, else from its command line; `ceph_fuse.SOURCE` says which."""
    got = running_config(env or Env(), pid, argv) if pid > 0 else "no client process"
    if isinstance(got, str):
        return {**ceph_fuse.cache_options(argv, CEPHFS_CACHE_KEYS),
                ceph_fuse.SOURCE: f"{ceph_fuse.FROM_ARGV}: {got}"}
    asok, config = got
    return {**ceph_fuse.running_options(config, CEPHFS_CACHE_KEYS),
            ceph_fuse.SOURCE: f"{ceph_fuse.FROM_SOCKET} {asok}"}


__all__ = ["CEPH", "DEFAULT_ASOK", "cache_options", "candidates", "expand", "identity", "parse_config", "read_config", "running_config"]

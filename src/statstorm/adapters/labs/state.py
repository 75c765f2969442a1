"""Labs as the other verbs see them: where their state lives, what is running, their pool.

`statstorm lab` makes and removes labs; every other verb (trace, check, apply, sweep,
fsbench, demo) only reads a lab's state through here, or records a change a lab must
remember (apply's remount). A lab's state is `<state root>/labs/<name>/lab.json`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from statstorm.adapters.host import procs
from statstorm.adapters.labs import apache_lab, phpfpm
from statstorm.adapters.php import target
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.results.common import read_json, write_json_atomic
from statstorm.results.lab import LabState


def labs_root(env: Env) -> Path:
    return env.state_root / "labs"


def lab_dir(env: Env, name: str) -> Path:
    return labs_root(env) / name


def mirror_root(env: Env, name: str) -> Path:
    """Where apply puts a lab's local mirror of its code (removed with the lab)."""
    return lab_dir(env, name) / "mirror"


def save(state: LabState) -> None:
    write_json_atomic(Path(state.state_dir) / "lab.json", state.to_json())


class LabRecord:
    """A lab's state while `lab up` makes it: each change is a new `LabState`, written the
    moment it is made, so `lab down` (or the cleanup after a failed `up`) finds everything
    started so far. The one place a lab's state changes step by step."""

    def __init__(self, state: LabState) -> None:
        self.state = state

    def record(self, **changes: Any) -> LabState:
        """The state with `changes` (none: as it is), written to lab.json."""
        self.state = dataclasses.replace(self.state, **changes)
        save(self.state)
        return self.state


def load(env: Env, name: str) -> LabState:
    """The lab's recorded state, as written (no liveness check)."""
    path = lab_dir(env, name) / "lab.json"
    if not path.exists():
        raise UsageError(f"no lab named {name!r}: start one with `statstorm lab up --name {name}`")
    return LabState.from_json(read_json(path, "lab state"))


def masters(state: LabState) -> list[int]:
    """The masters the lab runs: the web server's, and php-fpm's unless Apache runs PHP."""
    server = state.apache_pid if state.server == "apache" else state.nginx_pid
    return [server, *target.kind_of(state.handler).lab_masters(state)]


def php_pids(state: LabState) -> list[int]:
    """The processes running the lab's PHP: php-fpm's master and workers, Apache's children
    (mod_php) or mod_fcgid's php-cgi processes."""
    return target.kind_of(state.handler).lab_php_pids(state)


def server_pids(state: LabState) -> list[int]:
    """The web server's processes (master and children), PHP's excluded."""
    top = state.apache_pid if state.server == "apache" else state.nginx_pid
    if not top or not procs.alive(top):
        return []
    php = set(php_pids(state))
    return [p for p in [top, *procs.children(top)] if p not in php or p == top]


def status(env: Env, name: str) -> LabState:
    """The lab's state with its live workers; phase "degraded" if a master it started died."""
    state = load(env, name)
    state = dataclasses.replace(
        state, worker_pids=tuple(p for p in php_pids(state) if p != state.fpm_master_pid))
    if state.phase == "up" and not all(procs.alive(pid) for pid in masters(state)):
        return dataclasses.replace(state, phase="degraded")
    return state


def require_up(env: Env, name: str, *, pool: bool = False) -> LabState:
    """The lab's state; a one-line error naming the fix unless it is up (and, with `pool`,
    runs its PHP in a php-fpm pool rather than in Apache's mod_php or mod_fcgid)."""
    state = status(env, name)
    if pool and state.phase == "up" and not state.pool:
        raise UsageError(f"lab {name!r} runs PHP through Apache's {state.handler}, not a php-fpm "
                         f"pool: start a lab with `--handler fpm` for this")
    if state.phase != "up":
        raise UsageError(f"lab {name!r} is {state.phase}: start it with `statstorm lab up "
                         f"--name {name}` (or `statstorm lab down --name {name}` first)")
    return state


def list_labs(env: Env) -> list[LabState]:
    root = labs_root(env)
    if not root.exists():
        return []
    return [status(env, d.name) for d in sorted(root.iterdir()) if (d / "lab.json").exists()]


def fpm_conf(state: LabState) -> Path:
    return phpfpm.lab_conf(state)


def nginx_conf(state: LabState) -> Path:
    return Path(state.state_dir) / "conf/nginx.conf"


def apache_conf(state: LabState) -> Path:
    return Path(state.state_dir) / "conf/apache2.conf"


def php_ini_file(state: LabState) -> Path:
    """The ini file of the PHP overrides under mod_php and fcgid (see adapters.apache_lab)."""
    return Path(state.state_dir) / "conf/php" / apache_lab.INI_FILE


def fpm_argv(state: LabState) -> list[str]:
    """The lab master's binary and the options that decide its settings: its own config
    file and its ini overrides, which it gets as -d options."""
    return phpfpm.lab_argv(state)


def record_mount(env: Env, name: str, options: dict[str, str], client_pid: int) -> None:
    """The lab's mount now runs with these `options` in client `client_pid` (apply)."""
    state = load(env, name)
    save(dataclasses.replace(state, mount_options={**state.mount_options, **options},
                             fuse_client_pid=client_pid))

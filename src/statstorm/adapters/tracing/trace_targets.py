"""What `statstorm trace` attaches to: a lab, a php-fpm pool, PIDs or a command, resolved to
the processes to trace, the parents whose forks are followed, the PHP binaries to probe, a
title filter and the settings the processes run with (recorded in the trace's header)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from typing import Any, Callable

from statstorm.adapters.host import procs
from statstorm.adapters.labs import state as labs
from statstorm.adapters.php import php_targets
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.results.lab import LabState


OWN_MAX = 64  # the most PIDs the compiled tracer probes one by one (statstorm-trace --own)


@dataclass
class Target:
    mode: str  # pool | pids | lab | cmd
    description: str
    pids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    binaries: list[str] = field(default_factory=list)
    pool: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    allow: Callable[[str], bool] | None = None  # given a process title: trace it?
    settled: Callable[[str], bool] | None = None  # is that title final (remember the answer)?
    code: str = ""  # where the code is served from (round trips of the storage under it)
    # PHP's functions probed in these processes only, not in every process of the binary
    # (php-fpm workers given by PID: they start no PHP children, and others stay untouched)
    own_probes: bool = False


def _pool_target(env: Env, pool: php_targets.FpmPool, mode: str, description: str) -> Target:
    return Target(mode=mode, description=description, pids=pool.workers, parents=pool.masters,
                  binaries=pool.binaries, pool=pool.name, settings=pool.settings(env),
                  allow=pool.allow)


def _server_php_target(env: Env, state: LabState) -> Target:
    """An Apache lab whose PHP runs in Apache's children (mod_php) or in php-cgi (fcgid)."""
    workers = state.worker_pids
    if not workers:
        raise UsageError(f"lab {state.name}: no PHP process is running yet (mod_fcgid starts "
                         f"php-cgi on the first request): load {state.url}{state.entry_path} "
                         "once and trace again")
    php = php_targets.lab_server_php(state, workers)
    settings = php.settings(env)
    settings["lab"] = state.name
    return Target(mode="lab", description=f"lab {state.name} (Apache {state.mpm}, "
                  f"{state.handler})", pids=php.workers, parents=php.masters,
                  binaries=php.binaries, pool=php.name, settings=settings, allow=php.allow,
                  settled=php.settled, code=state.docroot)


def resolve(env: Env, *, lab: str | None = None, pool: str | None = None,
            pids: list[int] | None = None, cmd: str | None = None) -> Target:
    """The one target given: a lab, a php-fpm pool, PIDs or a command line."""
    if lab:
        state = labs.require_up(env, lab)
        if state.handler in ("mod_php", "fcgid"):
            return _server_php_target(env, state)
        # The lab's master gets its ini overrides as -d options: read them back the same way.
        lab_pool = php_targets.lab_pool(state, labs.fpm_argv(state))
        t = _pool_target(env, lab_pool, "lab", f"lab {lab} (pool {state.pool})")
        t.settings["lab"] = lab
        t.code = state.docroot
        return t
    if pool:
        fpm = php_targets.find_pool(pool)
        t = _pool_target(env, fpm, "pool", f"pool {pool}")
        t.code = php_targets.docroot_of(env, fpm)
        return t
    if pids:
        for p in pids:
            if not procs.alive(p):
                raise UsageError(f"PID {p} is not running")
        binaries = [procs.exe(p) for p in pids]
        t = Target(mode="pids", description="PIDs " + ",".join(map(str, pids)),
                   pids=list(pids), binaries=php_targets.php_binaries(binaries))
        pool_name = php_targets.pool_of_worker(pids[0])
        t.own_probes = len(pids) <= OWN_MAX and all(php_targets.pool_of_worker(p) for p in pids)
        if pool_name:
            master = procs.ppid(pids[0])
            cm = re.search(r"\((\S+)\)", " ".join(procs.cmdline(master)))
            t.settings = php_targets.fpm_settings(
                env, binaries[0], [binaries[0]] + (["-y", cm.group(1)] if cm else []), pool_name)
        elif os.path.basename(binaries[0]).startswith("php"):
            t.settings = php_targets.cli_settings(env, [binaries[0], *procs.cmdline(pids[0])[1:]])
        return t
    assert cmd is not None
    argv = shlex.split(cmd)
    exe = shutil.which(argv[0])
    if exe is None:
        raise UsageError(f"--cmd: {argv[0]!r} not found in PATH")
    t = Target(mode="cmd", description=f"command {cmd}", argv=argv,
               binaries=php_targets.php_binaries([os.path.realpath(exe)]))
    t.settings = php_targets.cli_settings(env, argv)
    return t

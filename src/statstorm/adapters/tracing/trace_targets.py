"""What `statstorm trace` attaches to: a lab, a php-fpm pool, the system Apache's PHP, PIDs or
a command (or, when none is named, the one PHP target running on the host), resolved to
the processes to trace, the parents whose forks are followed, the PHP binaries to probe, a
title filter and the settings the processes run with (recorded in the trace's header)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from typing import Callable

from statstorm.adapters.host import procs
from statstorm.adapters.labs import state as labs
from statstorm.adapters.php import php_targets, target
from statstorm.env import Env
from statstorm.errors import UsageError


OWN_MAX = 64  # the most PIDs the compiled tracer probes one by one (statstorm-trace --own)


@dataclass
class Target:
    mode: str  # pool | apache | pids | lab | cmd
    description: str
    pids: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    binaries: list[str] = field(default_factory=list)
    pool: str = ""
    settings: php_targets.Settings = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)
    allow: Callable[[str], bool] | None = None  # given a process title: trace it?
    settled: Callable[[str], bool] | None = None  # is that title final (remember the answer)?
    code: str = ""  # where the code is served from (round trips of the storage under it)
    # PHP's functions probed in these processes only, not in every process of the binary
    # (php-fpm workers given by PID: they start no PHP children, and others stay untouched)
    own_probes: bool = False
    php_version: str = ""  # a lab's PHP as its state says ("8.4"; '' for the others)


def _php_target(env: Env, php: target.PhpTarget, mode: str, description: str) -> Target:
    return Target(mode=mode, description=description, pids=php.workers, parents=php.masters,
                  binaries=own_binaries(php), pool=php.name, settings=php.settings(env),
                  allow=php.allow, settled=php.settled)


def own_binaries(php: target.PhpTarget) -> list[str]:
    """A php-fpm pool's binaries as its processes run them (/proc/PID/exe: a chrooted
    master's is its root's php-fpm), else the ones the target names."""
    if not isinstance(php, php_targets.FpmPool):
        return php.binaries
    exes = (procs.exe(p) for p in [*php.masters, *php.workers])
    own = [e for e in dict.fromkeys(exes)
           if e and os.path.basename(e).startswith("php") and os.path.isfile(e)]
    return own or php.binaries


def _found(env: Env, php: target.PhpTarget) -> Target:
    """A target found on the host: a php-fpm pool, or the system Apache's PHP (its master's
    forks followed, so children replaced during the trace are traced too)."""
    if isinstance(php, php_targets.FpmPool):
        t = _php_target(env, php, "pool", php.label)
        t.code = php_targets.docroot_of(env, php)
        return t
    sites = ", ".join(f"{s.name}:{s.vhost.port}" for s in getattr(php, "sites", ()))
    t = _php_target(env, php, "apache", f"the system Apache's PHP ({php.label}"
                    + (f"; sites {sites}" if sites else "") + ")")
    t.code = php.docroot
    return t


def resolve(env: Env, *, lab: str | None = None, pool: str | None = None,
            pids: list[int] | None = None, cmd: str | None = None,
            apache: bool = False) -> Target:
    """The one target given: a lab, a php-fpm pool, the system Apache's PHP, PIDs or a
    command line; none given: the one PHP target running here (UsageError if several)."""
    if apache:
        return _found(env, target.require_system_apache(env))
    if not (lab or pool or pids or cmd):
        return _found(env, target.sole(env))
    if lab:
        state = labs.require_up(env, lab)
        # A lab's php-fpm master gets its ini overrides as -d options: read back the same way.
        php = target.for_lab(state, " and trace again")
        t = _php_target(env, php, "lab", f"lab {lab} ({php.label})")
        t.settings["lab"] = lab
        t.code = state.docroot
        t.php_version = state.php_version
        return t
    if pool:
        fpm = php_targets.find_pool(pool)
        t = _php_target(env, fpm, "pool", fpm.label)
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

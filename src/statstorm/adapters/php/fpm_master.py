"""A running php-fpm master as its service manager starts it, and its graceful reload followed
to the master that serves after it.

Debian starts php-fpm three ways: its init script (`--daemonize`: the master is a child of
PID 1 and writes the pid file its configuration names, `pid =` in `[global]`), its systemd
unit (`--nodaemonize`, the unit's main PID) and containers (`-F`). The reload is `systemctl
reload UNIT` where systemd runs the master as its unit's main PID, else SIGUSR2 to the master.
On SIGUSR2 php-fpm re-executes itself; with `daemonize = yes` it then forks again, so the PID
that was signalled exits and a new master (the PID its pid file names now) serves. `reload`
follows it: the master after the reload is the old PID while it lives, else the one in the pid
file, once that is a live `php-fpm: master process (CONF)` with workers of the pool.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from statstorm.adapters.host import procs
from statstorm.adapters.labs import phpfpm
from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError

SYSTEMD_DIR = Path("/run/systemd/system")  # exists while systemd is the init system
MASTER_TITLE = "php-fpm: master process"


def systemd_running() -> bool:
    """Is systemd this machine's init system (sd_booted's test)?"""
    return SYSTEMD_DIR.is_dir()


# -- what the configuration and /proc say ------------------------------------------------------
def pid_file(tt: str) -> Path | None:
    """The pid file `pid =` of `[global]` names, from `php-fpm -tt` output (None: not set)."""
    value = phpfpm.pool_directives(tt, "global").get("pid", "")
    return Path(value) if value else None


def parse_pid(text: str) -> int:
    """The PID a pid file holds (0: empty or not a number)."""
    word = text.split()[0] if text.split() else ""
    return int(word) if word.isdigit() and int(word) > 0 else 0


def read_pid(path: Path | None) -> int:
    """The PID in the pid file `path` (0: none configured, none written, or not a PID)."""
    if path is None:
        return 0
    try:
        return parse_pid(path.read_text(errors="replace")[:64])
    except OSError:
        return 0


def conf_of(argv: list[str]) -> str:
    """The configuration file among a master's options (`-y FILE`, `--fpm-config FILE`)."""
    for i, a in enumerate(argv[:-1]):
        if a in ("-y", "--fpm-config"):
            return argv[i + 1]
    m = re.search(r"(?:^|\s)(?:-y|--fpm-config)=(\S+)", " ".join(argv))
    return m.group(1) if m else ""


def title(pid: int) -> str:
    return " ".join(procs.cmdline(pid)).strip()


def is_master(pid: int, conf: str = "") -> bool:
    """Is `pid` a live php-fpm master (of the configuration file `conf`, when given)?"""
    t = title(pid)
    want = f"{MASTER_TITLE} ({conf})" if conf else MASTER_TITLE
    return pid > 0 and procs.alive(pid) and (t == want if conf else t.startswith(want))


def pool_workers(pool: str) -> list[int]:
    """The PIDs of the processes titled `php-fpm: pool NAME`."""
    return [p for p in procs.find_pids([f"php-fpm: pool {pool}"])
            if title(p) == f"php-fpm: pool {pool}"]


def running_pools() -> list[str]:
    """The names of the php-fpm pools running on this machine (by their workers' titles:
    a master started by an init script, a unit or a container alike)."""
    names = set()
    for pid in procs.find_pids(["php-fpm: pool "]):
        m = re.fullmatch(r"php-fpm: pool (\S+)", title(pid))
        if m:
            names.add(m.group(1))
    return sorted(names)


def only_pool(what: str) -> str:
    """The one pool running, for a verb given no --pool; UsageError naming them when there
    are several (or none). `what`: what the pool is for ("to change", "to trace")."""
    pools = running_pools()
    if len(pools) != 1:
        raise UsageError(f"name the pool {what} with --pool NAME" + (
            f" (running: {', '.join(pools)})" if pools else ": no php-fpm pool is running"))
    return pools[0]


def _settled_workers(master: int, pool: str, old: set[int]) -> tuple[int, ...]:
    """The master's children once they are all new workers, one of them the pool's (())."""
    kids = procs.children(master)
    titles = [title(k) for k in kids]
    if (not kids or set(kids) & old or not all(t.startswith("php-fpm: pool ") for t in titles)
            or f"php-fpm: pool {pool}" not in titles):
        return ()
    return tuple(kids)


def master_named(path: Path | None, conf: str) -> int:
    """The master the pid file names; 0 when no pid file is configured or written. UsageError
    (nothing changed yet) when it names a PID that is not a live php-fpm master of `conf`."""
    if path is None:
        return 0
    try:
        pid = parse_pid(path.read_text(errors="replace")[:64])
    except OSError:  # not written (or not readable without root): nothing to hold against it
        return 0
    if not is_master(pid, conf):
        what = title(pid) if procs.alive(pid) else "no process"
        where = conf or "its configuration"
        raise UsageError(f"the pid file {path} names PID {pid or '(none)'}, which is not a "
                         f"php-fpm master ({what!s:.60}): restart php-fpm so that it writes "
                         f"the file again (or correct `pid =` in [global] of {where}), then "
                         "run statstorm again")
    return pid


# -- reloading -----------------------------------------------------------------------------------
def service_unit(cgroup: str) -> str:
    """The systemd service a process runs in, from /proc/PID/cgroup ('' when none)."""
    for line in cgroup.splitlines():
        for part in reversed(line.rpartition(":")[2].split("/")):
            if part.endswith(".service"):
                return part
    return ""


def reload_unit(master: int, systemd: bool, unit: str, main_pid: int) -> str:
    """The unit to `systemctl reload` ('' to signal the master): only where systemd runs and
    the master is its unit's main PID (else systemd would reload some other process)."""
    return unit if systemd and unit and main_pid == master else ""


def unit_of(env: Env, master: int, systemd: Callable[[], bool] = systemd_running) -> str:
    """The unit to reload `master` through, or '' (see `reload_unit`)."""
    if not systemd():
        return ""
    try:
        unit = service_unit(Path(f"/proc/{master}/cgroup").read_text())
    except OSError:
        return ""
    if not unit:
        return ""
    res = env.run(["systemctl", "show", "--property=MainPID", "--value", unit], check=False,
                  what="systemctl show")
    return reload_unit(master, True, unit, parse_pid(res.stdout))


@dataclass(frozen=True)
class Reloaded:
    """A php-fpm reload: the master serving after it and how it was found."""

    master: int  # the master after the reload (0: none found)
    via: str  # "systemctl reload UNIT" or "SIGUSR2"
    followed: bool  # False: the new master was not seen settle (`lost` says why); the pool's
    lost: str = ""  # answers decide whether the reload worked


def follow(old: int, old_workers: list[int], pool: str, conf: str, path: Path | None,
           timeout: float, sleep: Callable[[float], None] = time.sleep) -> int:
    """The master serving after a reload of `old`: `old` while it lives, else the one the pid
    file names (the pool workers' parent when there is no pid file), once its children are
    new workers of the pool, unchanged over two looks. ComponentError when none settles."""
    deadline = time.monotonic() + timeout
    seen: tuple[int, tuple[int, ...]] = (0, ())
    gone = set(old_workers)
    while time.monotonic() < deadline:
        if procs.alive(old):
            cand = old
        elif path is not None:
            cand = read_pid(path)
        else:
            cand = next(iter(sorted({procs.ppid(w) for w in pool_workers(pool)} - {0})), 0)
        kids = _settled_workers(cand, pool, gone) if cand and is_master(cand, conf) else ()
        if kids and seen == (cand, kids):
            return cand
        seen = (cand, kids) if kids else (0, ())
        sleep(0.1)
    where = f" (pid file {path}: PID {read_pid(path) or 'none'})" if path else ""
    raise ComponentError(f"no php-fpm master with new workers of pool {pool} within "
                         f"{timeout:.0f} s after reloading master {old}{where}")


def reload(env: Env, master: int, pool: str, argv: list[str], path: Path | None,
           timeout: float = 40.0, systemd: Callable[[], bool] = systemd_running) -> Reloaded:
    """Reload the master gracefully (systemctl where systemd runs it, else SIGUSR2) and follow
    it to the master serving after. ComponentError/OSError when the reload cannot be asked
    for; a master not seen to settle is `followed=False` with the best guess of the master."""
    conf = conf_of(argv)
    old_workers = procs.children(master)
    unit = unit_of(env, master, systemd)
    if unit:
        env.run(["systemctl", "reload", unit], what=f"systemctl reload {unit}")
        via = f"systemctl reload {unit}"
    else:
        os.kill(master, signal.SIGUSR2)
        via = "SIGUSR2"
    try:
        return Reloaded(follow(master, old_workers, pool, conf, path, timeout), via, True)
    except ComponentError as exc:
        guess = [p for p in (master, read_pid(path)) if is_master(p, conf)]
        parents = sorted({procs.ppid(w) for w in pool_workers(pool)} - {0})
        return Reloaded((guess or parents or [0])[0], via, False, str(exc))

"""The second php-fpm master of apply's handover (adapters/apply/fpm_handover.py): the pool's
section, with its new settings, run by a master of statstorm's own on a listen address of its
own, for the time the pool drains and reloads; then stopped gracefully.

Its configuration (model/fpm_handover.py `handover_conf`) sets `process_control_timeout`, so
the SIGQUIT that stops it lets its workers finish their requests. php-fpm unlinks its UNIX
listen path when it exits for good: the second master's is its own (a temporary path), never
the pool's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Iterator, Protocol

from statstorm.adapters.host import procs
from statstorm.adapters.labs import phpfpm
from statstorm.adapters.php import fastcgi
from statstorm.env import Env
from statstorm.errors import ComponentError
from statstorm.model import fpm_handover
from statstorm.results.common import signals_deferred

START_S = 20.0  # the second master listening
STOP_S = 15.0  # its graceful stop (its process_control_timeout is 10 s), then SIGKILL


class Target(Protocol):
    """What a handover reads of apply's target (adapters/apply/pool_config.py `Target`,
    which calls it)."""

    pool: str
    fpm_binary: str
    pool_file: Path
    listen: str
    master_pid: int
    nginx_test: list[str]
    nginx_pid: int
    lab: str
    control_timeout: str
    php_in_apache: bool


class HandoverFailed(Exception):
    """The handover could not be made: said, and the plain reload goes ahead."""


def unix_listen(listen: str) -> bool:
    """Whether php-fpm's `listen` value is a UNIX socket's path (php-fpm reads a value with a
    colon, or digits only, as a TCP address)."""
    return listen.startswith("/") and ":" not in listen


def host_path(target: Target, listen: str) -> Path:
    """A UNIX `listen` path as this machine sees it (a php-fpm in a PHP root binds inside
    it: adapters/labs/phpfpm.py `root_of`)."""
    root = phpfpm.root_of(target.fpm_binary)
    return Path(root + listen) if root else Path(listen)


def accepts(listen: str, where: Path | None = None) -> bool:
    """Whether something accepts connections on `listen` (a UNIX path, at `where` on this
    machine when given, or php-fpm's TCP forms)."""
    try:
        fastcgi.connect(str(where) if where else listen, timeout=1).close()
    except ComponentError:
        return False
    return True


@contextlib.contextmanager
def second_master(env: Env, target: Target, work: Path, listen: str) -> Iterator[int]:
    """A php-fpm master running the pool's section on `listen` (its configuration, pid file
    and log in `work`), once it accepts connections; yields its PID. Stopped gracefully
    (SIGQUIT: its workers finish their requests) on the way out, whatever happens, and a UNIX
    `listen` left behind removed. HandoverFailed when it cannot be run or does not start."""
    conf = work / "php-fpm.conf"
    try:
        text = fpm_handover.handover_conf(target.pool_file.read_text(), target.pool, listen,
                                          pid=str(work / "php-fpm.pid"),
                                          error_log=str(work / "php-fpm.log"))
    except (OSError, ValueError) as exc:
        raise HandoverFailed(f"the pool's section of {target.pool_file} cannot be run apart "
                             f"({exc})") from None
    conf.write_text(text)
    where = host_path(target, listen) if unix_listen(listen) else None
    argv = [*phpfpm.command(target.fpm_binary), "--fpm-config", str(conf), "--nodaemonize"]
    started: list[int] = []  # recorded before Ctrl-C can land: never a master lost
    try:
        pid = procs.spawn_daemon(argv, work / "php-fpm.out", started.append)
        deadline = env.clock() + START_S
        while not accepts(listen, where):
            if not procs.alive(pid) or env.clock() > deadline:
                tail = (work / "php-fpm.out").read_text(errors="replace").strip()[-200:]
                raise HandoverFailed(f"the second php-fpm master did not start ({tail!r})")
            time.sleep(0.05)
        yield pid
    finally:
        with signals_deferred():  # a second Ctrl-C does not leave it running
            for pid in started:
                procs.terminate(pid, timeout=STOP_S, sig=signal.SIGQUIT)
            if where is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(where)


__all__ = ["HandoverFailed", "Target", "accepts", "host_path", "second_master", "unix_listen"]

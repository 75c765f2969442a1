"""apply's php-fpm reload where the running master would end the requests running: the
traffic handed to a second master first, so the pool is drained when it reloads
(model/fpm_handover.py says why and how).

A pool listening on a UNIX socket P hands the socket's path over, whatever serves in front
(nginx, Apache's proxy_fcgi, anything that connects to P): no web server reloads, so no
client connection is closed:

1. a hidden hard link K beside P keeps a name for the running master's listening socket;
2. a second master (adapters/apply/handover_master.py) listens on a temporary path T beside
   P, with the pool's `listen.owner`/`group`/`mode`, so the web server may connect;
3. T is renamed over P, atomically: new connections reach the second master, while the
   pool's master keeps its listening socket and serves what it accepted or has queued;
4. the pool's master drains: no connection left on its socket, as /proc/net/unix shows it
   (adapters/host/unix_sockets.py: an accepted or queued connection carries its listener's
   bound path, P, where the second master's carry T);
5. it reloads (`plain_reload`). php-fpm hands its listening sockets to the re-executed master
   by their `listen` path (FPM_SOCKETS), so the reloaded master keeps the same socket;
6. K is renamed over P: the pool, with its new settings, gets the new connections again; the
   second master stops once its own connections are done.

Any failure or Ctrl-C on the way first puts P back on the pool master's socket (K renamed over
it), then stops the second master; when the reload itself has not run yet, one line says why
and it runs alone: a reload is never skipped (Ctrl-C aside: apply rolls back). P never stays
on the second master, nor missing. php-fpm unlinks its UNIX listen path when it exits for
good: the second master's is T (gone once renamed), never P; a pool master that exits for good
meanwhile unlinks P, which K then names again.

A pool listening on TCP cannot be handed over so: there nginx's passes are pointed at the
second master instead (adapters/apply/nginx_handover.py), which takes two nginx reloads.

Taken only where it can be undone whole: a php-fpm pool (not a lab: a lab's master is
statstorm's own; not PHP inside Apache) whose running master has `process_control_timeout =
0`, listening on a UNIX socket, or on TCP behind a running nginx.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from statstorm.adapters.apply import handover_master, nginx_handover
from statstorm.adapters.apply.handover_master import HandoverFailed, Target
from statstorm.adapters.host import procs, unix_sockets
from statstorm.env import Env
from statstorm.errors import ComponentError, Interrupted, StatstormError
from statstorm.results.common import signals_deferred

T = TypeVar("T", bound=Target)

DRAIN_S = 120.0  # a master finishing its connections (a slow page included)
LOOK_S = 0.1  # between two looks at the socket table
QUIET_LOOKS = 2  # looks in a row with no connection: drained (a connect() in flight is seen)
SUN_PATH = 108  # a UNIX socket's path, its NUL included


@dataclass(frozen=True)
class Names:
    """The names a socket handover moves: the pool's socket P, its keeper K and the second
    master's temporary T, each as php-fpm binds it and as this machine reaches it."""

    bound: str  # P as the pool's master bound it (its `listen`)
    path: Path  # P here
    keep: Path  # K, a hard link of the pool master's socket beside P
    temp: str  # T as the second master binds it
    temp_path: Path  # T here


def names(target: Target) -> Names:
    bound = target.listen
    temp = f"{os.path.dirname(bound)}/.statstorm-handover-{target.pool}.sock"
    path = handover_master.host_path(target, bound)
    return Names(bound, path, path.with_name(f".statstorm-handover-{target.pool}.keep"),
                 temp, handover_master.host_path(target, temp))


def wanted(target: Target) -> bool:
    """Whether this reload would end requests and a handover can spare them."""
    if (target.lab or target.php_in_apache or target.control_timeout.rstrip("s") != "0"
            or not target.listen or not target.pool_file.is_file()):
        return False
    return handover_master.unix_listen(target.listen) or nginx_handover.possible(target)


def how(target: Target) -> str:
    """How the handover hands the requests over, for apply's note."""
    if handover_master.unix_listen(target.listen):
        return ("the pool's socket is handed to a second php-fpm master while the pool drains "
                "and reloads, then handed back")
    return "nginx hands them to a second php-fpm master while the pool reloads"


def reload(env: Env, target: T, plain_reload: Callable[[Env, T], str]) -> str:
    """Reload the pool through a handover (see the module); `plain_reload(env, target)` is
    the reload itself, run once whatever happens. When the handover cannot be made, one line
    says why and the plain reload runs alone. Returns what `plain_reload` returns."""
    work = env.state_root / "handover" / f"{target.pool}-{os.getpid()}"
    calls: list[int] = []

    def once(e: Env, t: T) -> str:
        calls.append(1)
        return plain_reload(e, t)
    try:
        work.mkdir(parents=True, exist_ok=True)
        if handover_master.unix_listen(target.listen):
            return _socket_reload(env, target, once, work)
        return nginx_handover.reload(env, target, once, work)
    except BaseException as exc:
        # the reload itself failed, or the user stopped apply: the caller says so (apply
        # rolls back); else the handover could not be made and the plain reload runs
        if calls or isinstance(exc, Interrupted) \
                or not isinstance(exc, (HandoverFailed, StatstormError, OSError)):
            raise
        env.log(f"the reload without ending requests could not be made ({exc}): reloading "
                "php-fpm as it is")
        return plain_reload(env, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _socket_reload(env: Env, target: T, plain_reload: Callable[[Env, T], str],
                   work: Path) -> str:
    n = names(target)
    _ready(env, target, n)
    try:
        os.link(n.path, n.keep)
    except OSError as exc:
        raise HandoverFailed(f"cannot link {n.path} to {n.keep.name} ({exc.strerror})") from None
    try:
        with handover_master.second_master(env, target, work, n.temp) as second:
            try:
                os.rename(n.temp_path, n.path)
                env.log(f"pool {target.pool}'s socket {n.path} leads to a second php-fpm master "
                        f"({second}) while master {target.master_pid} finishes its connections…")
                _drain(env, target, n, second)
                lost = plain_reload(env, target)
            except BaseException as exc:
                _put_back(n)
                if not isinstance(exc, (KeyboardInterrupt, Interrupted)):
                    _second_drained(env, second, n)
                raise
            _put_back(n)
            env.log(f"pool {target.pool}'s socket leads to its master {target.master_pid} "
                    "again; the second master stops once its connections are done")
            _second_drained(env, second, n)
        return lost
    finally:
        _put_back(n)  # nothing once done: K is gone


def _ready(env: Env, target: Target, n: Names) -> None:
    """HandoverFailed unless P is the pool master's listening socket and T and K can be
    made; a keeper a killed run left beside the same socket is removed."""
    if len(n.temp.encode()) >= SUN_PATH:
        raise HandoverFailed(f"{n.temp} is too long for a UNIX socket's path")
    try:
        if not stat.S_ISSOCK(os.lstat(n.path).st_mode):
            raise HandoverFailed(f"{n.path} is not a socket")
        listening = unix_sockets.listeners(unix_sockets.table(target.master_pid), n.bound)
    except OSError as exc:
        raise HandoverFailed(f"{exc.filename or n.path}: {exc.strerror}") from None
    if not listening:
        raise HandoverFailed(f"master {target.master_pid} does not listen on {n.bound}")
    if os.path.lexists(n.keep):
        if not os.path.samefile(n.keep, n.path):
            raise HandoverFailed(
                f"{n.keep} is left from a handover that was stopped and is not {n.path}: if "
                f"{n.path} does not answer, `mv {n.keep} {n.path}` gives the pool its socket "
                f"back, else remove {n.keep}")
        n.keep.unlink()
        env.log(f"removed {n.keep}, left from a handover that was stopped")


def _put_back(n: Names) -> None:
    """P names the pool master's socket again (K renamed over it: nothing happens where it
    already does) and K is gone; nothing when K is gone already. Runs whole under Ctrl-C."""
    with signals_deferred():
        if not os.path.lexists(n.keep):
            return
        try:
            os.rename(n.keep, n.path)
            n.keep.unlink(missing_ok=True)  # left where P named the same socket already
        except OSError as exc:
            raise ComponentError(f"{n.path} could not be given back to the pool's master "
                                 f"({exc.strerror}): `mv {n.keep} {n.path}` does it") from None


def _drain(env: Env, target: Target, n: Names, second: int) -> None:
    """Until the pool's master has no connection on its socket, on QUIET_LOOKS looks in a
    row. HandoverFailed when either master exits or stops listening, or after DRAIN_S."""
    deadline = env.clock() + DRAIN_S
    quiet = left = 0
    while quiet < QUIET_LOOKS:
        if not procs.alive(second):
            raise HandoverFailed("the second php-fpm master exited")
        try:
            sockets = unix_sockets.table(target.master_pid)
        except OSError:
            raise HandoverFailed(f"the pool's master {target.master_pid} exited") from None
        if not unix_sockets.listeners(sockets, n.bound):
            raise HandoverFailed(f"master {target.master_pid} stopped listening on {n.bound}")
        left = unix_sockets.connections(sockets, n.bound)
        quiet = quiet + 1 if left == 0 else 0
        if quiet < QUIET_LOOKS:
            if env.clock() > deadline:
                raise HandoverFailed(f"master {target.master_pid} still had {left} "
                                     f"connection(s) after {DRAIN_S:.0f} s")
            env.sleep(LOOK_S)


def _second_drained(env: Env, second: int, n: Names) -> None:
    """Until the second master has no connection on its socket (bound to T), or it exited;
    after DRAIN_S one line says so and its graceful stop gives them its timeout."""
    deadline = env.clock() + DRAIN_S
    quiet = 0
    while quiet < QUIET_LOOKS:
        try:
            left = unix_sockets.connections(unix_sockets.table(second), n.temp)
        except OSError:  # it exited
            return
        quiet = quiet + 1 if left == 0 else 0
        if quiet < QUIET_LOOKS:
            if env.clock() > deadline:
                env.log(f"the second php-fpm master still has {left} connection(s) after "
                        f"{DRAIN_S:.0f} s: stopping it gracefully")
                return
            env.sleep(LOOK_S)


__all__ = ["DRAIN_S", "HandoverFailed", "Names", "how", "names", "reload", "wanted"]

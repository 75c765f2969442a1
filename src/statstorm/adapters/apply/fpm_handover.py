"""apply's php-fpm reload where the running master would end the requests running: the
traffic handed to a second master first, so the pool is drained when it reloads
(model/fpm_handover.py says why and how).

Taken only where it can be undone whole: a php-fpm pool (not a lab: a lab's master is
statstorm's own) whose running master has `process_control_timeout = 0`, fronted by a running
nginx whose passes to the pool statstorm can point elsewhere. Anything that goes wrong on the
way puts nginx's files back byte for byte, stops the second master, and leaves the plain
reload to the caller (said in one line): a reload is never skipped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Callable, Iterator, Protocol, TypeVar

from statstorm.adapters.apply import backups
from statstorm.adapters.host import procs
from statstorm.adapters.labs import phpfpm
from statstorm.adapters.servers import nginx, nginx_conf
from statstorm.env import Env
from statstorm.errors import Interrupted, StatstormError
from statstorm.model import fpm_handover


class Target(Protocol):
    """What a handover reads of apply's target (adapters/apply/pool_config.py `Target`,
    which calls this module)."""

    pool: str
    fpm_binary: str
    pool_file: Path
    listen: str
    nginx_test: list[str]
    nginx_pid: int
    lab: str
    control_timeout: str
    php_in_apache: bool


T = TypeVar("T", bound=Target)

START_S = 20.0  # the second master listening
DRAIN_S = 120.0  # nginx's old workers finishing their requests (a slow page included)


class HandoverFailed(Exception):
    """The handover could not be made: said, and the plain reload goes ahead."""


def wanted(target: Target) -> bool:
    """Whether this reload would end requests and a handover can spare them."""
    return (not target.lab and not target.php_in_apache and target.nginx_pid > 0
            and bool(target.nginx_test) and target.control_timeout.rstrip("s") == "0"
            and bool(target.listen) and target.pool_file.is_file())


def _nginx_argv(target: Target) -> list[str]:
    return [a for a in target.nginx_test if a not in ("-t", "-q")]


def _passing_files(target: Target) -> list[Path]:
    """Every nginx file with a `fastcgi_pass` or an upstream `server` reaching the pool."""
    config = nginx.read_master(_nginx_argv(target))
    files: list[str] = []

    def walk(block: tuple[nginx_conf.Directive, ...], in_upstream: bool) -> None:
        for d in block:
            if (d.name == "fastcgi_pass" or (d.name == "server" and in_upstream)) and d.args \
                    and nginx_conf.names_listen(d.args[0].removeprefix("unix:"), target.listen):
                files.append(d.file)
            if d.block is not None:
                walk(d.block, d.name == "upstream")

    walk(config.directives, False)
    return [Path(f) for f in dict.fromkeys(files)]


def _address(target: Target) -> tuple[str, str]:
    """The second master's `listen` and how nginx names it: a socket beside the pool's, or a
    free loopback port when the pool listens on TCP."""
    if target.listen.startswith("/"):
        path = Path(target.listen).with_name(f"statstorm-handover-{target.pool}.sock")
        return str(path), f"unix:{path}"
    port = procs.free_port(19000)
    return f"127.0.0.1:{port}", f"127.0.0.1:{port}"


def _listening(listen: str) -> bool:
    family = socket.AF_UNIX if listen.startswith("/") else socket.AF_INET
    where: str | tuple[str, int] = listen
    if family == socket.AF_INET:
        host, _, port = listen.rpartition(":")
        where = (host, int(port))
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        try:
            s.connect(where)
        except OSError:
            return False
    return True


def _reload_nginx(env: Env, target: Target, why: str) -> None:
    """nginx reloaded gracefully, returning once its old workers are gone: the requests they
    were serving are finished."""
    old = procs.children(target.nginx_pid)
    env.log(f"reloading nginx gracefully (master {target.nginx_pid}): {why}…")
    nginx.reload(target.nginx_pid)
    deadline = time.monotonic() + DRAIN_S
    while any(procs.alive(p) for p in old):
        if time.monotonic() > deadline:
            raise HandoverFailed(f"nginx's old workers {old} still serve after {DRAIN_S:.0f} s")
        time.sleep(0.05)


def _test_nginx(env: Env, target: Target) -> None:
    res = env.run(target.nginx_test, check=False, what="nginx -t")
    if res.returncode != 0:
        raise HandoverFailed("nginx refused the configuration pointed at the second master ("
                             + " ".join((res.stderr or res.stdout).split())[:160] + ")")


@contextlib.contextmanager
def _second_master(env: Env, target: Target, work: Path) -> Iterator[str]:
    """A php-fpm master running the pool's section on a socket of its own, stopped gracefully
    (SIGQUIT: its workers finish their requests) on the way out; yields nginx's name for it."""
    listen, upstream = _address(target)
    conf = work / "php-fpm.conf"
    try:
        text = fpm_handover.handover_conf(target.pool_file.read_text(), target.pool, listen,
                                          pid=str(work / "php-fpm.pid"),
                                          error_log=str(work / "php-fpm.log"))
    except (OSError, ValueError) as exc:
        raise HandoverFailed(f"the pool's section of {target.pool_file} cannot be run apart "
                             f"({exc})") from None
    conf.write_text(text)
    argv = [*phpfpm.command(target.fpm_binary), "--fpm-config", str(conf), "--nodaemonize"]
    pid = procs.spawn_daemon(argv, work / "php-fpm.out", lambda _pid: None)
    try:
        deadline = time.monotonic() + START_S
        while not _listening(listen):
            if not procs.alive(pid) or time.monotonic() > deadline:
                tail = (work / "php-fpm.out").read_text(errors="replace").strip()[-200:]
                raise HandoverFailed(f"the second php-fpm master did not start ({tail!r})")
            time.sleep(0.05)
        yield upstream
    finally:
        procs.terminate(pid, timeout=15.0, sig=signal.SIGQUIT)
        if listen.startswith("/"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(listen)


def reload(env: Env, target: T, plain_reload: Callable[[Env, T], str]) -> str:
    """Reload the pool through a handover (see the module); `plain_reload(env, target)` is
    the reload itself, run once whatever happens. When the handover cannot be made, one line
    says why and the plain reload runs alone. Returns what `plain_reload` returns."""
    work = env.state_root / "handover" / f"{target.pool}-{os.getpid()}"
    reloaded = False
    try:
        work.mkdir(parents=True, exist_ok=True)
        with _second_master(env, target, work) as upstream:
            files: dict[Path, tuple[str, os.stat_result]] = {}
            try:  # nginx's passes put back before the second master stops, whatever happens
                _point(target, upstream, files)
                _test_nginx(env, target)
                _reload_nginx(env, target, "its requests go to a second php-fpm master while "
                              f"pool {target.pool} reloads")
                reloaded = True
                lost = plain_reload(env, target)
            finally:
                if files:
                    _restore(files)
                    try:
                        _reload_nginx(env, target, f"its requests go back to pool {target.pool}")
                    except (HandoverFailed, StatstormError, OSError) as exc:
                        env.log(f"nginx's way back to pool {target.pool}: {exc}")
        return lost
    except BaseException as exc:
        # the reload itself failed, or the user stopped apply: the caller says so (apply
        # rolls back); else the handover could not be made and the plain reload runs
        if reloaded or isinstance(exc, Interrupted) \
                or not isinstance(exc, (HandoverFailed, StatstormError, OSError)):
            raise
        env.log(f"the reload without ending requests could not be made ({exc}): reloading "
                "php-fpm as it is")
        return plain_reload(env, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _point(target: Target, upstream: str, files: dict[Path, tuple[str, os.stat_result]]) -> None:
    """nginx's passes to the pool pointed at `upstream`, in every file that has one; each
    file's bytes and mode kept in `files` as it is written."""
    for path in _passing_files(target):
        before = backups.read_text(path)
        if before is None:
            raise HandoverFailed(f"{path} cannot be read")
        after, n = fpm_handover.repoint(
            before, lambda a: nginx_conf.names_listen(a, target.listen), upstream)
        if n:
            files[path] = (before, path.stat())
            backups.write_file(path, after, like=files[path][1])
    if not files:
        raise HandoverFailed("no nginx pass to the pool could be pointed elsewhere")


def _restore(files: dict[Path, tuple[str, os.stat_result]]) -> None:
    for path, (text, like) in files.items():
        backups.write_file(path, text, like=like)


__all__ = ["HandoverFailed", "reload", "wanted"]

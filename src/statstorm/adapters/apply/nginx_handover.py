"""apply's php-fpm handover for a pool listening on TCP, where its address cannot be handed
over as a UNIX socket's path can (adapters/apply/fpm_handover.py): nginx's passes to the pool
are pointed at a second master and nginx reloads gracefully, so its old workers finish their
requests and the pool drains; after the pool's reload they are put back byte for byte and
nginx reloads again. Each nginx reload closes its idle keep-alive client connections, so a
client that sends on one at that moment sees it closed: the UNIX socket handover has no such
moment.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, TypeVar

from statstorm.adapters.apply import backups, handover_master
from statstorm.adapters.apply.handover_master import HandoverFailed, Target
from statstorm.adapters.host import procs
from statstorm.adapters.servers import nginx, nginx_conf
from statstorm.env import Env
from statstorm.errors import StatstormError
from statstorm.model import fpm_handover

T = TypeVar("T", bound=Target)

DRAIN_S = 120.0  # nginx's old workers finishing their requests (a slow page included)


def possible(target: Target) -> bool:
    """Whether nginx fronts the pool in a way this module can re-point."""
    return target.nginx_pid > 0 and bool(target.nginx_test)


def _nginx_argv(target: Target) -> list[str]:
    return [a for a in target.nginx_test if a not in ("-t", "-q")]


def passing_files(target: Target) -> list[Path]:
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


def reload_nginx(env: Env, target: Target, why: str) -> None:
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


def check_nginx(env: Env, target: Target) -> None:
    res = env.run(target.nginx_test, check=False, what="nginx -t")
    if res.returncode != 0:
        raise HandoverFailed("nginx refused the configuration pointed at the second master ("
                             + " ".join((res.stderr or res.stdout).split())[:160] + ")")


def reload(env: Env, target: T, plain_reload: Callable[[Env, T], str], work: Path) -> str:
    """The pool reloaded while nginx passes its requests to a second master listening on a
    free loopback port (state in `work`); returns what `plain_reload` returns. HandoverFailed
    (nginx's files put back, the second master stopped) when the handover cannot be made
    before the reload; anything `plain_reload` raises, after the same."""
    listen = f"127.0.0.1:{procs.free_port(19000)}"
    with handover_master.second_master(env, target, work, listen):
        files: dict[Path, tuple[str, os.stat_result]] = {}
        try:  # nginx's passes put back before the second master stops, whatever happens
            _point(target, listen, files)
            check_nginx(env, target)
            reload_nginx(env, target, "its requests go to a second php-fpm master while "
                         f"pool {target.pool} reloads")
            return plain_reload(env, target)
        finally:
            if files:
                _restore(files)
                try:
                    reload_nginx(env, target, f"its requests go back to pool {target.pool}")
                except (HandoverFailed, StatstormError, OSError) as exc:
                    env.log(f"nginx's way back to pool {target.pool}: {exc}")


def _point(target: Target, upstream: str, files: dict[Path, tuple[str, os.stat_result]]) -> None:
    """nginx's passes to the pool pointed at `upstream`, in every file that has one; each
    file's bytes and mode kept in `files` as it is written."""
    for path in passing_files(target):
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


__all__ = ["DRAIN_S", "passing_files", "possible", "reload", "reload_nginx", "check_nginx"]

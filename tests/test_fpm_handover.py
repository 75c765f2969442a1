"""apply's php-fpm handover: its texts (model/fpm_handover.py), the /proc/net/unix reader it
drains by (on this kernel), and its steps and failure paths with php-fpm faked (the socket
handover on real sockets in tmp_path; the nginx re-pointing for TCP pools). The handover
itself runs against Debian's php-fpm and nginx in tests/test_stock_fpm.py."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import types
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from statstorm.adapters.apply import fpm_handover as handover
from statstorm.adapters.apply import handover_master, nginx_handover
from statstorm.adapters.host import unix_sockets
from statstorm.env import Env
from statstorm.errors import ComponentError, Interrupted
from statstorm.model import fpm_handover

POOL = """; Debian's www.conf, shortened
[www]
user = www-data
group = www-data
listen = /run/php/php8.2-fpm.sock
listen.owner = www-data
pm = dynamic
pm.max_children = 5
php_admin_value[realpath_cache_ttl] = 600

[other]
listen = 127.0.0.1:9001
pm = static
"""

SOCK = "/run/php/php8.2-fpm.sock"


def reaches(address: str) -> bool:
    return address == SOCK


def test_the_second_master_runs_the_pools_section_on_its_own_socket() -> None:
    text = fpm_handover.handover_conf(POOL, "www", "/run/php/statstorm-handover-www.sock",
                                      pid="/s/php-fpm.pid", error_log="/s/php-fpm.log")
    lines = text.splitlines()
    assert lines[1:6] == ["[global]", "pid = /s/php-fpm.pid", "error_log = /s/php-fpm.log",
                          "daemonize = no", "process_control_timeout = 10s"]
    pool = lines[lines.index("[www]") + 1:]
    assert pool[0] == "listen = /run/php/statstorm-handover-www.sock"
    assert "listen = /run/php/php8.2-fpm.sock" not in text
    assert "php_admin_value[realpath_cache_ttl] = 600" in pool  # the new settings
    assert "listen.owner = www-data" in pool  # nginx may still connect
    assert "[other]" not in text and "9001" not in text


@pytest.mark.parametrize("text,why", [(POOL, "no \\[nope\\] section"),
                                      ("[www]\ninclude = /etc/x.conf\n", "includes")])
def test_a_pool_that_cannot_run_apart_is_refused(text: str, why: str) -> None:
    pool = "nope" if "nope" in why else "www"
    with pytest.raises(ValueError, match=why):
        fpm_handover.handover_conf(text, pool, "/x.sock", pid="p", error_log="l")


def test_passes_and_upstream_servers_are_pointed_elsewhere_and_nothing_else() -> None:
    conf = ("upstream php {\n    server unix:/run/php/php8.2-fpm.sock weight=2;\n"
            "    server 127.0.0.1:9001;\n}\n"
            "server {\n\tlisten 80;\n\troot /srv/www;  # fastcgi_pass unix:/run/php/php8.2-fpm.sock;\n"
            "\tlocation ~ \\.php$ { include snippets/fastcgi-php.conf; "
            "fastcgi_pass unix:/run/php/php8.2-fpm.sock; }\n"
            "\tlocation /other { fastcgi_pass \"unix:/run/php/php8.2-fpm.sock\"; }\n"
            "\tlocation /var { fastcgi_pass unix:$sock; }\n}\n")
    out, n = fpm_handover.repoint(conf, reaches, "unix:/run/php/statstorm-handover-www.sock")
    assert n == 3
    assert out.count("unix:/run/php/statstorm-handover-www.sock") == 3
    assert "server unix:/run/php/statstorm-handover-www.sock weight=2;" in out
    assert "server 127.0.0.1:9001;" in out  # another pool's
    assert "# fastcgi_pass unix:/run/php/php8.2-fpm.sock;" in out  # a comment stays
    assert "fastcgi_pass unix:$sock;" in out  # a variable: not known to reach the pool
    back, m = fpm_handover.repoint(out, lambda a: a.endswith("handover-www.sock"),
                                   "unix:" + SOCK)
    assert m == 3 and back == conf.replace('"unix:/run/php/php8.2-fpm.sock"',
                                           "unix:/run/php/php8.2-fpm.sock")




# -- /proc/net/unix on this kernel -------------------------------------------------------------
def test_a_listeners_connections_carry_its_bound_path_whatever_the_file_is_called_now(
        tmp_path: Path) -> None:
    bound = str(tmp_path / "p.sock")
    with socket.socket(socket.AF_UNIX) as listener, socket.socket(socket.AF_UNIX) as client:
        listener.bind(bound)
        listener.listen(4)
        assert unix_sockets.listeners(unix_sockets.table(), bound) == 1
        assert unix_sockets.connections(unix_sockets.table(), bound) == 0
        client.connect(bound)  # in the backlog: not accepted yet
        queued = [s for s in unix_sockets.table() if s.path == bound and not s.listening]
        assert [(s.state, s.inode) for s in queued] == [(unix_sockets.SS_CONNECTING, 0)]
        server, _ = listener.accept()
        assert unix_sockets.connections(unix_sockets.table(os.getpid()), bound) == 1
        os.rename(bound, tmp_path / "renamed.sock")  # the table keeps the bound name
        sockets = unix_sockets.table()
        assert unix_sockets.connections(sockets, bound) == 1
        assert unix_sockets.listeners(sockets, bound) == 1
        assert unix_sockets.connections(sockets, str(tmp_path / "renamed.sock")) == 0
        server.close()  # the server's end closed: done, though the client's is open
        assert unix_sockets.connections(unix_sockets.table(), bound) == 0


def test_the_tables_lines() -> None:
    text = ("Num       RefCount Protocol Flags    Type St Inode Path\n"
            "0000000000000000: 00000002 00000000 00010000 0001 01 8068969 /run/php/a b.sock\n"
            "0000000000000000: 00000002 00000000 00000000 0001 03 8068973 /run/php/a b.sock\n"
            "0000000000000000: 00000003 00000000 00000000 0001 03 8068974\n"
            "0000000000000000: 00000002 00000000 00000000 0002 01 17 @abstract\n"
            "garbage\n")
    sockets = unix_sockets.parse(text)
    assert [(s.listening, s.state, s.inode, s.path) for s in sockets] == [
        (True, 1, 8068969, "/run/php/a b.sock"), (False, 3, 8068973, "/run/php/a b.sock"),
        (False, 3, 8068974, ""), (False, 1, 17, "@abstract")]
    assert unix_sockets.connections(sockets, "/run/php/a b.sock") == 1


# -- the socket handover, php-fpm faked: real sockets, links and renames in tmp_path -------------
SECOND = 4242  # the fake second master's PID


class Host:
    """The pool master's listening socket at P (this process plays the master), a fake second
    master listening on T while it runs, and what the handover did, step by step."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        pool = tmp / "www.conf"
        pool.write_text(POOL)
        self.path = tmp / "php.sock"
        self.keep = tmp / ".statstorm-handover-www.keep"
        self.temp = tmp / ".statstorm-handover-www.sock"
        self.pool = socket.socket(socket.AF_UNIX)
        self.pool.bind(str(self.path))
        self.pool.listen(8)
        self.pool_ino = self.path.stat().st_ino
        self.second_ino = 0
        self.second_alive = True
        self.events: list[str] = []
        self.target = types.SimpleNamespace(
            pool="www", fpm_binary="/usr/sbin/php-fpm8.2", pool_file=pool,
            listen=str(self.path), master_pid=os.getpid(), nginx_test=[], nginx_pid=0,
            lab="", control_timeout="0", php_in_apache=False)
        self.now = 0.0
        self.env = Env(state_root=tmp / "state", stderr=io.StringIO(), clock=lambda: self.now,
                       sleep=self.sleep)
        self.on_sleep: Callable[[], None] = lambda: None
        monkeypatch.setattr(handover_master, "second_master", self.second_master)
        real_table = unix_sockets.table

        def table(pid: int = 0) -> list[unix_sockets.UnixSocket]:
            if pid not in (os.getpid(), SECOND) or (pid == SECOND and not self.second_alive):
                raise FileNotFoundError(f"/proc/{pid}/net/unix")
            return real_table()
        monkeypatch.setattr(unix_sockets, "table", table)
        monkeypatch.setattr(handover.procs, "alive",
                            lambda pid: pid == SECOND and self.second_alive)

    def sleep(self, s: float) -> None:
        self.now += s
        self.on_sleep()

    def where(self) -> str:
        """What P leads to now."""
        if not self.path.exists():
            return "missing"
        ino = self.path.stat().st_ino
        return "pool" if ino == self.pool_ino else "second" if ino == self.second_ino else "?"

    @contextlib.contextmanager
    def second_master(self, env: Env, target: Any, work: Path, listen: str) -> Iterator[int]:
        assert listen == str(self.temp) and self.keep.stat().st_ino == self.pool_ino
        with socket.socket(socket.AF_UNIX) as second:
            second.bind(listen)
            second.listen(8)
            self.second_ino = self.temp.stat().st_ino
            self.events.append("second up")
            try:
                yield SECOND
            finally:
                self.events.append(f"second stopped, P: {self.where()}")
                self.temp.unlink(missing_ok=True)

    def plain_reload(self, env: Env, target: Any) -> str:
        self.events.append(f"reload, P: {self.where()}, K: {self.keep.exists()}")
        return ""

    def reload(self, plain: Callable[[Env, Any], str] | None = None) -> str:
        return handover.reload(self.env, self.target, plain or self.plain_reload)

    def log(self) -> str:
        return self.env.stderr.getvalue()  # type: ignore[attr-defined, no-any-return]

    def left(self) -> list[str]:
        """The handover's names left beside P (none may be)."""
        return sorted(p.name for p in self.path.parent.glob(".statstorm-handover-*"))


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Host]:
    h = Host(tmp_path, monkeypatch)
    try:
        yield h
    finally:
        h.pool.close()


def test_the_pool_reloads_drained_while_its_socket_leads_to_the_second_master(
        host: Host) -> None:
    client = socket.socket(socket.AF_UNIX)
    client.connect(str(host.path))  # a request the pool's master holds: it must finish first

    def serve() -> None:
        if "served" not in host.events and host.now > 1:  # answered by a worker, later
            server, _ = host.pool.accept()
            server.close()
            host.events.append("served")
    host.on_sleep = serve
    assert host.reload() == ""
    client.close()
    assert host.events == ["second up", "served", "reload, P: second, K: True",
                           "second stopped, P: pool"]  # drained, then reloaded
    assert host.where() == "pool" and host.left() == []
    assert "leads to a second php-fpm master" in host.log()
    assert "leads to its master" in host.log()


def test_new_connections_reach_the_second_master_during_the_reload(host: Host) -> None:
    reached: list[int] = []

    def reload(env: Env, target: Any) -> str:
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(str(host.path))  # a web server's connection made during the reload
            reached.append(unix_sockets.connections(unix_sockets.table(os.getpid()),
                                                    str(host.temp)))
        return "lost"
    assert host.reload(reload) == "lost"
    assert reached == [1]  # queued on the second master's socket (bound to T)
    assert unix_sockets.connections(unix_sockets.table(os.getpid()), str(host.path)) == 0


def test_a_second_master_that_does_not_start_leaves_the_plain_reload(
        host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    @contextlib.contextmanager
    def fails(env: Env, target: Any, work: Path, listen: str) -> Iterator[int]:
        raise handover.HandoverFailed("the second php-fpm master did not start ('boom')")
        yield 0
    monkeypatch.setattr(handover_master, "second_master", fails)
    host.reload()
    assert host.events == ["reload, P: pool, K: False"]  # once, on the pool's own socket
    assert host.where() == "pool" and host.left() == []
    assert "could not be made (the second php-fpm master did not start ('boom')): reloading " \
        "php-fpm as it is" in host.log()


def test_a_pool_that_does_not_drain_is_put_back_and_reloaded_plainly(host: Host) -> None:
    client = socket.socket(socket.AF_UNIX)
    client.connect(str(host.path))  # never answered
    try:
        host.reload()
    finally:
        client.close()
    assert host.events == ["second up", "second stopped, P: pool", "reload, P: pool, K: False"]
    assert host.now >= handover.DRAIN_S
    assert host.where() == "pool" and host.left() == []
    assert f"still had 1 connection(s) after {handover.DRAIN_S:.0f} s" in host.log()


def test_a_second_master_that_dies_is_not_left_on_the_socket(host: Host) -> None:
    client = socket.socket(socket.AF_UNIX)
    client.connect(str(host.path))

    def dies() -> None:
        host.second_alive = False
    host.on_sleep = dies
    try:
        host.reload()
    finally:
        client.close()
    assert host.events == ["second up", "second stopped, P: pool", "reload, P: pool, K: False"]
    assert "the second php-fpm master exited" in host.log()


def test_a_failed_reload_is_the_callers_with_the_socket_put_back(host: Host) -> None:
    def fails(env: Env, target: Any) -> str:
        host.events.append(f"reload, P: {host.where()}")
        raise ComponentError("the php-fpm master 42 exited while reloading")
    with pytest.raises(ComponentError, match="exited while reloading"):
        host.reload(fails)
    assert host.events == ["second up", "reload, P: second", "second stopped, P: pool"]
    assert host.where() == "pool" and host.left() == []


@pytest.mark.parametrize("stop", [KeyboardInterrupt, Interrupted])
@pytest.mark.parametrize("during", ["drain", "reload"])
def test_an_interruption_puts_the_socket_back_first(host: Host, stop: type[BaseException],
                                                    during: str) -> None:
    def interrupt(*args: Any) -> str:
        host.events.append(f"{during}, P: {host.where()}")
        raise stop("stopped")
    if during == "drain":
        client = socket.socket(socket.AF_UNIX)
        client.connect(str(host.path))
        host.on_sleep = interrupt  # type: ignore[assignment]
    with pytest.raises(stop):
        host.reload(interrupt if during == "reload" else None)
    if during == "drain":
        client.close()
    assert host.events == ["second up", f"{during}, P: second", "second stopped, P: pool"]
    assert host.where() == "pool" and host.left() == []  # no plain reload: apply rolls back


def test_a_keeper_left_by_a_killed_run(host: Host) -> None:
    os.link(host.path, host.keep)  # beside the same socket: removed, and the handover goes on
    host.reload()
    assert host.events[1] == "reload, P: second, K: True" and host.left() == []
    assert "left from a handover that was stopped" in host.log()
    host.events.clear()
    host.keep.write_text("")  # another file: left alone, said, and the plain reload runs
    host.reload()
    assert host.events == ["reload, P: pool, K: True"] and host.left() == [host.keep.name]
    assert f"`mv {host.keep} {host.path}` gives the pool its socket back" in host.log()


def test_a_socket_its_master_does_not_listen_on_is_not_handed_over(host: Host) -> None:
    host.target.master_pid = 1  # another process's: its table is not this one
    host.reload()
    assert host.events == ["reload, P: pool, K: False"] and host.left() == []


# -- the nginx re-pointing for a pool on TCP, with its processes faked ----------------------------
TCP = "127.0.0.1:9000"


def target(tmp: Path, **kw: Any) -> Any:
    site = tmp / "site"
    site.write_text("server { location ~ \\.php$ { fastcgi_pass " + TCP + "; } }\n")
    pool = tmp / "www.conf"
    pool.write_text(POOL)
    base = dict(pool="www", fpm_binary="/usr/sbin/php-fpm8.2", pool_file=pool, listen=TCP,
                master_pid=1, nginx_test=["nginx", "-t", "-q"], nginx_pid=1, lab="",
                control_timeout="0", php_in_apache=False, site=site)
    return types.SimpleNamespace(**{**base, **kw})


@pytest.fixture
def faked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {"nginx": []}
    t = target(tmp_path)

    @contextlib.contextmanager
    def second(env: Env, tg: Any, work: Path, listen: str) -> Iterator[int]:
        seen["second"] = listen
        try:
            yield SECOND
        finally:  # as the real one stops it
            seen["site_when_stopped"] = t.site.read_text()

    monkeypatch.setattr(handover_master, "second_master", second)
    monkeypatch.setattr(nginx_handover, "passing_files", lambda tg: [t.site])
    monkeypatch.setattr(nginx_handover, "check_nginx", lambda env, tg: None)
    monkeypatch.setattr(nginx_handover, "reload_nginx",
                        lambda env, tg, why: seen["nginx"].append(t.site.read_text()))
    seen["target"] = t
    return seen


def env_at(tmp: Path) -> Env:
    return Env(state_root=tmp / "state", stderr=io.StringIO())


def test_a_tcp_pool_reloads_while_nginx_passes_to_the_second_master(
        tmp_path: Path, faked: dict[str, Any]) -> None:
    t = faked["target"]
    original = t.site.read_text()
    during: list[str] = []
    lost = handover.reload(env_at(tmp_path), t, lambda env, tg: during.append(
        t.site.read_text()) or "")
    assert lost == "" and len(during) == 1
    assert f"fastcgi_pass {faked['second']};" in during[0]  # nginx pointed away meanwhile
    assert faked["second"].startswith("127.0.0.1:") and faked["second"] != TCP
    assert faked["nginx"] == [during[0], original]  # reloaded there, then back
    assert faked["site_when_stopped"] == original  # put back before the second master stops
    assert t.site.read_text() == original


def test_a_handover_that_cannot_be_made_leaves_the_plain_reload(
        tmp_path: Path, faked: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    t = faked["target"]
    original = t.site.read_text()

    def refused(env: Env, tg: Any) -> None:
        raise handover.HandoverFailed("nginx refused the configuration")
    monkeypatch.setattr(nginx_handover, "check_nginx", refused)
    calls: list[str] = []
    env = env_at(tmp_path)
    handover.reload(env, t, lambda e, tg: calls.append(t.site.read_text()) or "")
    assert calls == [original]  # once, with nginx's file as it was
    assert t.site.read_text() == original
    assert "could not be made (nginx refused the configuration): reloading php-fpm as it is" \
        in env.stderr.getvalue()  # type: ignore[attr-defined]


def test_a_failed_reload_is_the_callers_with_nginx_put_back(tmp_path: Path,
                                                            faked: dict[str, Any]) -> None:
    t = faked["target"]
    original = t.site.read_text()
    calls: list[int] = []

    def fails(env: Env, tg: Any) -> str:
        calls.append(1)
        raise ComponentError("the php-fpm master 42 exited while reloading")
    with pytest.raises(ComponentError):
        handover.reload(env_at(tmp_path), t, fails)
    assert calls == [1] and t.site.read_text() == original
    assert faked["site_when_stopped"] == original


@pytest.mark.parametrize("change,want", [
    ({}, True), ({"listen": SOCK, "nginx_pid": 0, "nginx_test": []}, True),  # any front
    ({"nginx_pid": 0}, False), ({"control_timeout": "10s"}, False), ({"lab": "x"}, False),
    ({"php_in_apache": True}, False), ({"listen": SOCK, "php_in_apache": True}, False)])
def test_wanted_only_where_a_reload_would_end_requests_and_a_handover_can_be_made(
        tmp_path: Path, change: dict[str, Any], want: bool) -> None:
    assert handover.wanted(target(tmp_path, **change)) is want


def test_a_unix_listen_is_a_path_without_a_colon() -> None:
    assert handover_master.unix_listen(SOCK)
    assert not handover_master.unix_listen("127.0.0.1:9000")
    assert not handover_master.unix_listen("9000")
    assert not handover_master.unix_listen("[::1]:9000")

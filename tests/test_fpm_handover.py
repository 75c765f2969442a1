"""The texts of apply's php-fpm handover (model/fpm_handover.py): the second master's
configuration and nginx's passes pointed at it. The handover itself runs against Debian's
php-fpm and nginx in tests/test_stock_fpm.py."""

from __future__ import annotations

import pytest

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


# -- the adapter's paths, with its processes faked (the real one: tests/test_stock_fpm.py) ----
import contextlib  # noqa: E402
import io  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Iterator  # noqa: E402

from statstorm.adapters.apply import fpm_handover as handover  # noqa: E402
from statstorm.env import Env  # noqa: E402
from statstorm.errors import ComponentError  # noqa: E402


def target(tmp: Path, **kw: Any) -> Any:
    site = tmp / "site"
    site.write_text("server { location ~ \\.php$ { fastcgi_pass unix:" + SOCK + "; } }\n")
    pool = tmp / "www.conf"
    pool.write_text(POOL)
    base = dict(pool="www", fpm_binary="/usr/sbin/php-fpm8.2", pool_file=pool, listen=SOCK,
                nginx_test=["nginx", "-t", "-q"], nginx_pid=1, lab="", control_timeout="0",
                php_in_apache=False, site=site)
    return types.SimpleNamespace(**{**base, **kw})


@pytest.fixture
def faked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {"nginx": []}
    t = target(tmp_path)

    @contextlib.contextmanager
    def second(env: Env, tg: Any, work: Path) -> Iterator[str]:
        seen["second"] = "up"
        try:
            yield "unix:/run/php/statstorm-handover-www.sock"
        finally:  # as the real one stops it
            seen["second"] = "stopped"
            seen["site_when_stopped"] = t.site.read_text()

    monkeypatch.setattr(handover, "_second_master", second)
    monkeypatch.setattr(handover, "_passing_files", lambda tg: [t.site])
    monkeypatch.setattr(handover, "_test_nginx", lambda env, tg: None)
    monkeypatch.setattr(handover, "_reload_nginx",
                        lambda env, tg, why: seen["nginx"].append(t.site.read_text()))
    seen["target"] = t
    return seen


def env_at(tmp: Path) -> Env:
    return Env(state_root=tmp / "state", stderr=io.StringIO())


def test_the_reload_runs_while_nginx_passes_to_the_second_master(tmp_path: Path,
                                                                 faked: dict[str, Any]) -> None:
    t = faked["target"]
    original = t.site.read_text()
    during: list[str] = []
    lost = handover.reload(env_at(tmp_path), t, lambda env, tg: during.append(
        t.site.read_text()) or "")
    assert lost == "" and len(during) == 1
    assert "statstorm-handover-www.sock" in during[0]  # nginx pointed away while it reloads
    assert faked["nginx"] == [during[0], original]  # reloaded there, then back
    assert faked["site_when_stopped"] == original  # put back before the second master stops
    assert t.site.read_text() == original


def test_a_handover_that_cannot_be_made_leaves_the_plain_reload(tmp_path: Path,
                                                                faked: dict[str, Any],
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    t = faked["target"]
    original = t.site.read_text()

    def refused(env: Env, tg: Any) -> None:
        raise handover.HandoverFailed("nginx refused the configuration")
    monkeypatch.setattr(handover, "_test_nginx", refused)
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


@pytest.mark.parametrize("change,want", [({}, True), ({"control_timeout": "10s"}, False),
                                         ({"lab": "x"}, False), ({"nginx_pid": 0}, False),
                                         ({"php_in_apache": True}, False)])
def test_wanted_only_where_a_reload_would_end_requests_behind_nginx(
        tmp_path: Path, change: dict[str, Any], want: bool) -> None:
    assert handover.wanted(target(tmp_path, **change)) is want

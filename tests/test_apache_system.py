"""Golden tests of the system Apache's readers (adapters/servers/apache_system.py) on
configuration trees copied from this machine's Debian defaults (`fixtures/apache/make.sh`)
and what `apache2ctl -S`, `-t -D DUMP_RUN_CFG` and `-M` said of them. Not root."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statstorm.adapters.servers import apache_conf, apache_facts, apache_system
from statstorm.env import Env
from statstorm.results.serving import Handler

FIX = Path(__file__).parent / "fixtures/apache"
CASES = sorted(p.name for p in FIX.iterdir() if (p / "etc").is_dir())


def sites_of(case: str) -> list[dict[str, object]]:
    d = FIX / case
    cfg = apache_conf.read(d / "etc/apache2.conf", str(d / "etc"))
    run_cfg = apache_facts.parse_run_cfg((d / "run_cfg.txt").read_text())
    variables = apache_system.envvars(Env(), d / "etc")
    found = apache_system.sites(
        cfg, apache_system.parse_vhosts((d / "S.txt").read_text()), variables,
        tuple(apache_facts.parse_modules((d / "M.txt").read_text())),
        main_root=run_cfg["Main DocumentRoot"], reported_root=run_cfg["ServerRoot"],
        read_root=str(d / "etc"))
    out = [s.to_json() for s in found]
    for s in out:  # file:line of this checkout, as /etc/apache2 names it on a host
        s["handler_source"] = str(s["handler_source"] or "").replace(str(d / "etc"),
                                                                     "/etc/apache2") or None
    return out


@pytest.mark.parametrize("case", CASES)
def test_sites_golden(case: str) -> None:
    expected = json.loads((FIX / case / "expected.json").read_text())
    assert sites_of(case) == expected


def test_cases_are_all_there() -> None:
    assert set(CASES) == {"modphp_two_vhosts", "event_fpm_sethandler", "proxypassmatch",
                          "docroot_variable"}


def test_debian_includes_followed() -> None:
    d = FIX / "event_fpm_sethandler/etc"
    cfg = apache_conf.read(d / "apache2.conf", str(d))
    names = {Path(f).relative_to(d).as_posix() for f in cfg.files}
    assert {"ports.conf", "mods-enabled/proxy_fcgi.load", "mods-enabled/mpm_event.conf",
            "conf-enabled/php8.2-fpm.conf", "sites-enabled/app.conf"} <= names


def test_parse_vhosts_named_and_ip_based() -> None:
    named = apache_system.parse_vhosts((FIX / "docroot_variable/S.txt").read_text())
    assert [(v.address, v.port, v.name, v.line) for v in named] == [
        ("127.0.0.1:8085", 8085, "blog.example", 2), ("127.0.0.1:8085", 8085, "shop.example", 6),
        ("127.0.0.1:8085", 8085, "lost.example", 10)]
    ip = apache_system.parse_vhosts((FIX / "modphp_two_vhosts/S.txt").read_text())
    assert [(v.name, v.file) for v in ip] == [
        ("pma.example", "/etc/apache2/sites-enabled/pma.conf"),
        ("wiki.example", "/etc/apache2/sites-enabled/wiki.conf")]


def test_run_cfg_user_and_pid_file() -> None:
    run_cfg = apache_facts.parse_run_cfg((FIX / "modphp_two_vhosts/run_cfg.txt").read_text())
    assert apache_system.run_user(run_cfg) == "www-data"
    assert run_cfg["PidFile"] == "/var/run/apache2/apache2.pid"


def test_envvars_sourced_as_apache2ctl_does() -> None:
    variables = apache_system.envvars(Env(), FIX / "docroot_variable/etc")
    assert variables["APACHE_PID_FILE"] == "/var/run/apache2/apache2.pid"
    assert variables["SITE_BASE"] == "/srv/sites"


@pytest.mark.parametrize("case,listen,docroot", [
    ("event_fpm_sethandler", "/run/php/php8.2-fpm.sock", "/srv/app"),
    ("proxypassmatch", "127.0.0.1:9000", "/srv/shop"),
    ("proxypassmatch", "9000", "/srv/shop"),
    ("proxypassmatch", "/run/php/php8.2-fpm.sock", ""),
    ("modphp_two_vhosts", "/run/php/php8.2-fpm.sock", ""),
])
def test_docroot_of_a_pool_behind_apache(case: str, listen: str, docroot: str) -> None:
    d = FIX / case / "etc"
    assert apache_system.docroot_passing_to(d / "apache2.conf", listen, {}, str(d)) == docroot


def test_handler_only_where_its_module_is_loaded() -> None:
    d = FIX / "modphp_two_vhosts/etc"
    cfg = apache_conf.read(d / "apache2.conf", str(d))
    src = next(k for k in cfg.vhost_roots if k.endswith("wiki.conf:1"))
    assert apache_system.site_handler(cfg, src, {"php_module"})[0] is Handler.MOD_PHP
    assert apache_system.site_handler(cfg, src, set())[0] is None

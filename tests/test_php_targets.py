"""The PHP-target interface: every kind implements the protocol, every handler has a kind, and
what each kind says of a lab without asking a process (pure and fast: no process started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from statstorm.adapters.php import target
from statstorm.adapters.php.php_targets import FpmPool, PoolAnswer
from statstorm.adapters.php.server_php import FcgidPhpCgi, ModPhpChildren
from statstorm.errors import UsageError
from statstorm.results.lab import LabState
from statstorm.results.serving import Handler, Mpm, Server, handler_of


def _state(handler: str, **kw: object) -> LabState:
    base = dict(name="t", app="synthetic", storage="local", port=8080, workers=2,
                state_dir="/var/lib/statstorm/labs/t", server="apache", handler=handler,
                fpm_master_pid=4242, url="http://127.0.0.1:8080", entry_path="/index.php")
    base.update(kw)
    return LabState(**base)  # type: ignore[arg-type]


def _instances() -> list[target.PhpTarget]:
    fpm: target.PhpTarget = FpmPool("www", [11, 12], [10], "/usr/sbin/php-fpm8.2",
                                    ["/usr/sbin/php-fpm8.2"])
    mod_php: target.PhpTarget = ModPhpChildren("mod_php (lab t)", [21], [20],
                                               "/usr/lib/apache2/modules/libphp8.2.so",
                                               server_title="/usr/sbin/apache2 -f x",
                                               mpm="prefork")
    fcgid: target.PhpTarget = FcgidPhpCgi("fcgid (lab t)", [31], [30], "/usr/bin/php-cgi8.2",
                                          server_title="/usr/sbin/apache2 -f x")
    return [fpm, mod_php, fcgid]


def test_every_kind_implements_the_protocol() -> None:
    for php in _instances():
        assert isinstance(php, target.PhpTarget), type(php).__name__
        assert php.binaries and php.settings_source and php.label


def test_every_handler_has_exactly_one_kind() -> None:
    assert set(target.KINDS) == set(Handler)
    for handler, kind in target.KINDS.items():
        assert kind.handler is handler
        assert target.kind_of(handler.value) is kind
    assert len(set(target.KINDS.values())) == len(Handler)


def test_enum_values_are_the_strings_the_files_use() -> None:
    assert [h.value for h in Handler] == ["fpm", "mod_php", "fcgid"]
    assert [s.value for s in Server] == ["nginx", "apache"]
    assert [m.value for m in Mpm] == ["event", "worker", "prefork"]
    assert str(Handler.MOD_PHP) == "mod_php" and f"{Handler.FCGID}" == "fcgid"
    assert handler_of("fcgid") is Handler.FCGID and handler_of("") is None


def test_handler_traits() -> None:
    assert [h.php_in_server for h in Handler] == [False, True, True]
    assert [h.children_carry_php for h in Handler] == [False, True, False]
    assert Handler.MOD_PHP.mpms == (Mpm.PREFORK,) and Handler.MOD_PHP.default_mpm == "prefork"
    assert Handler.FPM.default_mpm == Handler.FCGID.default_mpm == "event"
    assert Handler.FCGID.process_limit_directive == "FcgidMaxProcessesPerClass"
    assert Handler.FPM.process_limit_directive == Handler.MOD_PHP.process_limit_directive == ""


def test_where_a_lab_kind_writes_settings_and_its_masters() -> None:
    conf_php = Path("/var/lib/statstorm/labs/t/conf/php")
    assert FpmPool.lab_ini_file(_state("fpm")) == conf_php / "99-statstorm.ini"
    for handler in (Handler.MOD_PHP, Handler.FCGID):
        assert target.kind_of(handler).lab_ini_file(_state(handler)) == conf_php / "statstorm.ini"
        assert target.kind_of(handler).lab_masters(_state(handler)) == []
    assert FpmPool.lab_masters(_state("fpm")) == [4242]
    assert FpmPool.cgi_binary() == ModPhpChildren.cgi_binary() == ""


def test_titles_each_kind_traces() -> None:
    fpm, mod_php, fcgid = _instances()
    assert fpm.allow("php-fpm: pool www") and fpm.allow("php-fpm: master process (x)")
    assert not fpm.allow("php-fpm: pool other") and not fpm.settled("php-fpm: master process")
    assert mod_php.label == "Apache prefork, mod_php" and fpm.label == "pool www"
    assert mod_php.allow("/usr/sbin/apache2 -f x") and not mod_php.allow("/usr/bin/php-cgi8.2")
    assert fcgid.allow("/usr/bin/php-cgi8.2 -d error_log=x")
    assert not fcgid.allow("/usr/sbin/apache2 -f x")
    assert not fcgid.settled("/usr/sbin/apache2 -f x") and fcgid.settled("/usr/bin/php-cgi8.2")


def test_caveats_of_asking_over_fastcgi() -> None:
    fpm, mod_php, fcgid = _instances()
    assert fpm.query_caveats("/run/www.sock") == [] and "listen address" in fpm.query_caveats("")[0]
    assert mod_php.query_caveats("")[0].startswith("mod_php:")
    assert fcgid.query_caveats("") == []


def test_a_fcgid_lab_before_its_first_request_names_the_fix() -> None:
    with pytest.raises(UsageError, match=r"load http://127.0.0.1:8080/index.php once and trace"):
        target.for_lab(_state("fcgid"), " and trace again")


def test_a_pool_answer_is_typed_once() -> None:
    a = PoolAnswer.from_json({"ini": {"realpath_cache_size": "4096K", "open_basedir": None},
                              "realpath_used": "812", "extensions": ["Core", "Zend OPcache"],
                              "opcache": False, "sapi": "fpm-fcgi", "pid": 77})
    assert a.ini == {"realpath_cache_size": "4096K", "open_basedir": ""}
    assert (a.realpath_used, a.extensions, a.opcache, a.pid) == (812, ("Core", "Zend OPcache"),
                                                                  None, 77)
    empty = PoolAnswer.from_json({})
    assert (empty.ini, empty.realpath_used, empty.extensions, empty.pid) == ({}, None, None, 0)


def test_a_pool_answers_opcache_status_is_typed() -> None:
    a = PoolAnswer.from_json({"ini": {}, "pid": "12", "realpath_used": None,
                              "opcache": {"opcache_enabled": True,
                                          "memory_usage": {"used_memory": 10, "free_memory": 5,
                                                           "current_wasted_percentage": 0.5},
                                          "opcache_statistics": {"num_cached_keys": 7,
                                                                 "oom_restarts": 1}}})
    assert a.pid == 12 and a.opcache is not None
    assert (a.opcache.enabled, a.opcache.used_memory, a.opcache.free_memory,
            a.opcache.num_cached_keys, a.opcache.oom_restarts) == (True, 10, 5, 7, 1)
    assert a.opcache.memory_usage == {"used_memory": 10, "free_memory": 5,
                                      "current_wasted_percentage": 0.5}
    assert PoolAnswer.from_json({"opcache": {}}).opcache is None


def test_mod_php_caveat_names_where_its_settings_come_from() -> None:
    lab = ModPhpChildren("mod_php (lab a)", [1], [1], "libphp8.2.so",
                         probe_url="http://127.0.0.1:8081/statstorm-phpinfo.php")
    system = ModPhpChildren("mod_php", [1], [1], "libphp8.2.so")
    assert "the lab's phpinfo page" in lab.query_caveats("")[0]
    assert "lab" not in system.query_caveats("")[0]
    assert "php.ini and conf.d" in system.query_caveats("")[0]

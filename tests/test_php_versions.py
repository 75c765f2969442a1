"""The per-version table of PHP facts (model/php_versions.py) and how check uses it: pure, no
process started."""

from __future__ import annotations

import pytest

from statstorm.model import php_versions as pv
from statstorm.model.checkfacts import Facts
from statstorm.model.rules_php import opcache_revalidate
from statstorm.results.check import Finding, Severity
from statstorm.results.php_root import RELEASES


@pytest.mark.parametrize("name,version", [
    ("/usr/sbin/php-fpm8.2", "8.2"), ("/var/tmp/r/8.4/usr/sbin/php-fpm8.4", "8.4"),
    ("/usr/bin/php7.4", "7.4"), ("/usr/bin/php-cgi8.2", "8.2"),
    ("/usr/lib/apache2/modules/libphp8.2.so", "8.2"), ("/usr/bin/php", ""),
    ("libphp.so", ""), ("/usr/sbin/php-fpm", ""), ("/opt/bin/php-fpm8.4-old", ""),
])
def test_version_from_a_binary_name(name: str, version: str) -> None:
    assert pv.version_of(name) == version


def test_every_version_a_lab_runs_is_in_the_table() -> None:
    assert set(RELEASES) <= set(pv.VERSIONS)
    for v, facts in pv.VERSIONS.items():
        assert facts.version == v
        assert set(facts.defaults) | facts.lacks == pv.TRACKED, v


def test_settings_that_some_versions_lack() -> None:
    # the JIT came with 8.0, preloading with 7.4; consistency checks left in 8.3
    assert not pv.has_setting("7.4", "opcache.jit")
    assert not pv.has_setting("7.4", "opcache.jit_buffer_size")
    assert pv.has_setting("7.4", "opcache.preload")
    assert pv.has_setting("8.2", "opcache.jit") and pv.has_setting("8.4", "opcache.jit")
    assert pv.has_setting("8.2", "opcache.consistency_checks")
    assert not pv.has_setting("8.4", "opcache.consistency_checks")
    # what check's rules propose exists everywhere
    for v in pv.VERSIONS:
        for key in ("realpath_cache_size", "realpath_cache_ttl", "opcache.revalidate_path",
                    "opcache.file_cache", "opcache.huge_code_pages", "opcache.revalidate_freq"):
            assert pv.has_setting(v, key), (v, key)
    # a version the table does not know is not second-guessed; a full version is its minor
    assert pv.has_setting("9.1", "opcache.jit") and pv.facts_of("9.1") is None
    assert pv.facts_of("8.4.11") is pv.VERSIONS["8.4"]


def test_defaults_per_version() -> None:
    assert pv.default("8.4", "opcache.jit", "?") == "disable"
    assert pv.default("8.4", "opcache.jit_buffer_size", "?") == "64M"
    assert pv.default("8.2", "opcache.jit", "?") == "tracing"
    assert pv.default("8.2", "opcache.jit_buffer_size", "?") == "0"
    assert pv.default("7.4", "opcache.jit", "?") == "?"  # none: 7.4 has no JIT
    for v in pv.VERSIONS:
        assert pv.default(v, "realpath_cache_size", "") == "4096K"
        assert pv.default(v, "opcache.max_accelerated_files", "") == "10000"


def test_setting_of_falls_back_to_the_binary_versions_default() -> None:
    assert pv.setting_of({"opcache.jit": "off"}, "/usr/sbin/php-fpm8.4", "opcache.jit") == "off"
    assert pv.setting_of({}, "/usr/sbin/php-fpm8.4", "opcache.jit") == "disable"
    assert pv.setting_of({}, "/usr/sbin/php-fpm", "opcache.jit") == "tracing"  # the host's
    assert pv.setting_of({}, "/usr/bin/php7.4", "opcache.jit") is None


def _finding(*change: str) -> Finding:
    return Finding(id="x", severity=Severity.WARNING, title="t", evidence=(), change=change,
                   tradeoff="")


def test_a_setting_the_version_lacks_is_never_proposed() -> None:
    both = _finding("opcache.jit_buffer_size = 64M", "; or: opcache.file_cache = /var/cache")
    only_jit = _finding("opcache.jit = tracing", "# a comment")
    plain = _finding("# nothing to change")
    kept = pv.proposable([both, only_jit, plain], "7.4")
    assert [f.change for f in kept] == [("; or: opcache.file_cache = /var/cache",),
                                        ("# nothing to change",)]
    assert pv.proposable([both, only_jit, plain], "8.4") == [both, only_jit, plain]
    assert pv.settings_named(["include_path = \"/a\"", "zend_extension = opcache",
                              "; or: opcache.revalidate_freq = 60", "x = 1"]) == [
        "opcache.revalidate_freq"]


def test_a_rule_reads_the_versions_default_when_the_setting_is_not_shown() -> None:
    # revalidate_freq not among the settings: the version's default (2) is judged, so a
    # pool with code on local disk gets no finding, as with the setting shown
    facts = Facts(pool="www", settings={"opcache.enable": "1"},
                  php_binary="/usr/sbin/php-fpm8.4")
    assert opcache_revalidate(facts) == []
    shown = Facts(pool="www", settings={"opcache.enable": "1", "opcache.revalidate_freq": "0"},
                  php_binary="/usr/sbin/php-fpm8.4")
    assert [f.title for f in opcache_revalidate(shown)]

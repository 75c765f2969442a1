"""apply and the php-fpm master's `-d` options: a setting only the master reads, given on its
command line, is beyond any ini file apply could write, so the change is manual (one line
naming the -d to remove) instead of reported as applied with no effect."""

from __future__ import annotations

from pathlib import Path

from statstorm.adapters.apply import apply_target
from statstorm.adapters.apply.pool_config import Target
from statstorm.model.applyplan import MANUAL, MASTER_INI, POOL_INI, Change


def _target(tmp: Path, argv: list[str], lab: str = "") -> Target:
    pool = tmp / "php-fpm.conf"
    pool.write_text("[global]\n[www]\npm = static\n")
    return Target("www", "/usr/sbin/php-fpm8.2", argv, pool, 1, "/run/x.sock",
                  tmp / "99-statstorm.ini", lab=lab, fpm_conf=pool)


def test_master_defines_reads_both_spellings() -> None:
    argv = ["/usr/sbin/php-fpm8.2", "-y", "/x.conf", "-d", "opcache.enable=0",
            "-drealpath_cache_ttl=7"]
    assert apply_target.master_defines(argv) == {"opcache.enable": "0",
                                                 "realpath_cache_ttl": "7"}
    assert apply_target.master_defines(["/usr/sbin/php-fpm8.2", "-y", "/x.conf"]) == {}


def test_a_master_only_setting_given_as_d_is_manual(tmp_path: Path) -> None:
    argv = ["/usr/sbin/php-fpm8.2", "-y", str(tmp_path / "php-fpm.conf"), "-d",
            "opcache.enable=0"]
    on = Change("opcache-disabled", MASTER_INI, "opcache.enable", "1", "opcache.enable = 1")
    ttl = Change("realpath-cache-ttl", POOL_INI, "realpath_cache_ttl", "600",
                 "realpath_cache_ttl = 600")
    changes, edits = apply_target.plan_edits(_target(tmp_path, argv, lab="seed"), [on, ttl])
    manual, pool = changes
    assert manual.kind == MANUAL and manual.key == "opcache.enable"
    assert "`-d opcache.enable=0`" in manual.why and "--php-ini opcache.enable=0" in manual.why
    assert "\n" not in manual.why
    assert pool.kind == POOL_INI  # php_admin_value is set after -d: still applied
    assert [e.path.name for e in edits] == ["php-fpm.conf"]  # no ini file written for it


def test_a_running_pools_d_names_the_command_line(tmp_path: Path) -> None:
    argv = ["/usr/sbin/php-fpm8.2", "-y", "/etc/php/8.2/fpm/php-fpm.conf", "-d",
            "opcache.enable=0"]
    on = Change("opcache-disabled", MASTER_INI, "opcache.enable", "1", "opcache.enable = 1")
    (manual,), edits = apply_target.plan_edits(_target(tmp_path, argv), [on])
    assert manual.kind == MANUAL and "remove `-d opcache.enable=0`" in manual.why
    assert edits == []


def test_without_d_the_master_ini_is_written(tmp_path: Path) -> None:
    on = Change("opcache-disabled", MASTER_INI, "opcache.enable", "1", "opcache.enable = 1")
    (kept,), (edit,) = apply_target.plan_edits(
        _target(tmp_path, ["/usr/sbin/php-fpm8.2", "-y", "/x.conf", "-d", "memory_limit=1G"]),
        [on])
    assert kept.kind == MASTER_INI and "opcache.enable = 1" in edit.after

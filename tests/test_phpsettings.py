"""--set KEY=VALUE and the recorded settings: each ini key sets its field with its type."""

from __future__ import annotations

import pytest

from statstorm.errors import UsageError
from statstorm.model.phpsettings import PhpSettings, from_recorded, parse_set, with_changes


def test_each_settable_key_sets_its_field_typed() -> None:
    s = with_changes(PhpSettings(), {}, parse_set([
        "realpath_cache_size=16K", "realpath_cache_ttl=600", "open_basedir=/srv",
        "include_path=.", "opcache.validate_timestamps=0", "opcache.revalidate_freq=60",
        "opcache.revalidate_path=On", "opcache.enable_file_override=1",
        "opcache.file_update_protection=0", "user_ini.filename=", "user_ini.cache_ttl=5",
        "cgi.fix_pathinfo=0", "pm.max_requests=500", "pm.max_children=8"]))
    assert s == PhpSettings(realpath_cache_size=16 << 10, realpath_cache_ttl=600,
                            open_basedir="/srv", include_path=".",
                            opcache_validate_timestamps=False, opcache_revalidate_freq=60,
                            opcache_revalidate_path=True, opcache_enable_file_override=True,
                            opcache_file_update_protection=0, user_ini_filename="",
                            user_ini_cache_ttl=5, cgi_fix_pathinfo=False, max_requests=500,
                            workers=8)
    with pytest.raises(UsageError, match="must not be negative"):
        with_changes(PhpSettings(), {}, [("pm.max_children", "-1")])
    with pytest.raises(UsageError, match="expected a whole number"):
        with_changes(PhpSettings(), {}, [("realpath_cache_ttl", "x")])


def test_recorded_settings_skip_what_does_not_parse() -> None:
    s = from_recorded({"sapi": "fpm-fcgi", "realpath_cache_ttl": "x", "pm.max_children": 4,
                       "opcache.enable": "1", "include_path": None})
    assert (s.sapi, s.realpath_cache_ttl, s.workers, s.opcache, s.include_path) == \
        ("fpm-fcgi", 120, 4, True, ".:/usr/share/php")

"""The PHP settings the what-if model depends on, parsed from ini-style strings."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields, replace
from typing import Callable, Mapping

from statstorm.errors import UsageError
from statstorm.model import php_versions
from statstorm.results.php_root import HOST_VERSION
from statstorm.results.jsontypes import JsonValue

TRUE = ("1", "on", "yes", "true")


def ini_size(value: str, key: str) -> int:
    """PHP's size syntax: 4096K, 16k, 1M, 1G or bytes."""
    m = re.fullmatch(r"\s*([0-9]{1,18})\s*([kKmMgG]?)\s*", value)
    if not m:
        raise UsageError(f"{key}={value!r}: expected a size such as 16K, 4096K or 4M")
    n = int(m.group(1))
    return n * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]


def ini_int(value: str, key: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise UsageError(f"{key}={value!r}: expected a whole number") from None


def ini_bool(value: str) -> bool:
    return value.strip().lower() in TRUE


@dataclass(frozen=True)
class PhpSettings:
    """What the model needs; names follow php.ini (dots become underscores)."""

    sapi: str = "cli"
    realpath_cache_size: int = 4096 << 10
    realpath_cache_ttl: int = 120
    open_basedir: str = ""
    include_path: str = ".:/usr/share/php"
    opcache: bool = False  # OPcache loaded and enabled for this SAPI
    opcache_validate_timestamps: bool = True
    opcache_revalidate_freq: int = 2
    opcache_revalidate_path: bool = False
    opcache_enable_file_override: bool = False
    opcache_file_update_protection: int = 2
    user_ini_filename: str = ".user.ini"
    user_ini_cache_ttl: int = 300
    cgi_fix_pathinfo: bool = True
    max_requests: int = 0  # pm.max_requests (0: workers never recycle)
    workers: int = 0  # pm.max_children for replay (0: as traced)
    php_version: str = ""  # the PHP modelled ("7.4", "8.4"; '' the host's), not a setting

    def describe(self) -> dict[str, str | int | float | bool]:
        """The settings (the PHP version is said apart: results/whatif.py `ModelledPhp`)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "php_version"}


# The model's fields whose built-in default comes from the PHP version's (model/php_versions.py).
_VERSION_DEFAULTS = ("realpath_cache_size", "realpath_cache_ttl", "opcache.validate_timestamps",
                     "opcache.revalidate_freq", "opcache.revalidate_path",
                     "opcache.enable_file_override", "opcache.file_update_protection",
                     "user_ini.filename", "user_ini.cache_ttl")


def defaults(php_version: str = "", sapi: str = "cli") -> PhpSettings:
    """The model's settings before any ini: PHP `php_version`'s built-in defaults (the host's
    version when '')."""
    s = PhpSettings(sapi=sapi, php_version=php_version)
    version = php_version or HOST_VERSION
    for key in _VERSION_DEFAULTS:
        value = php_versions.default(version, key, "")
        if value:
            s = _KEYS[key](s, key, value)
    return s


def _count(value: str, key: str) -> int:
    n = ini_int(value, key)
    if n < 0:
        raise UsageError(f"{key}={value!r}: must not be negative")
    return n


# ini key → how its value sets the model's field (settings, ini key, value) → settings
_Setter = Callable[[PhpSettings, str, str], PhpSettings]
_KEYS: dict[str, _Setter] = {
    "realpath_cache_size": lambda s, k, v: replace(s, realpath_cache_size=ini_size(v, k)),
    "realpath_cache_ttl": lambda s, k, v: replace(s, realpath_cache_ttl=_count(v, k)),
    "open_basedir": lambda s, k, v: replace(s, open_basedir=v),
    "include_path": lambda s, k, v: replace(s, include_path=v),
    "opcache.validate_timestamps":
        lambda s, k, v: replace(s, opcache_validate_timestamps=ini_bool(v)),
    "opcache.revalidate_freq": lambda s, k, v: replace(s, opcache_revalidate_freq=_count(v, k)),
    "opcache.revalidate_path": lambda s, k, v: replace(s, opcache_revalidate_path=ini_bool(v)),
    "opcache.enable_file_override":
        lambda s, k, v: replace(s, opcache_enable_file_override=ini_bool(v)),
    "opcache.file_update_protection":
        lambda s, k, v: replace(s, opcache_file_update_protection=_count(v, k)),
    "user_ini.filename": lambda s, k, v: replace(s, user_ini_filename=v),
    "user_ini.cache_ttl": lambda s, k, v: replace(s, user_ini_cache_ttl=_count(v, k)),
    "cgi.fix_pathinfo": lambda s, k, v: replace(s, cgi_fix_pathinfo=ini_bool(v)),
    "pm.max_requests": lambda s, k, v: replace(s, max_requests=_count(v, k)),
    "pm.max_children": lambda s, k, v: replace(s, workers=_count(v, k)),
}
SETTABLE = tuple(sorted(_KEYS)) + ("opcache.enable", "opcache.enable_cli")


def _apply(s: PhpSettings, key: str, value: str, loaded: dict[str, str]) -> PhpSettings:
    if key in ("opcache.enable", "opcache.enable_cli"):
        loaded[key] = value
        return s
    setter = _KEYS.get(key)
    if setter is None:
        raise UsageError(f"--set {key}: not a setting the model knows; use one of "
                         + ", ".join(SETTABLE))
    return setter(s, key, value)


def from_recorded(recorded: Mapping[str, JsonValue], php_version: str = "") -> PhpSettings:
    """The settings stored in a trace header (`php -i` / `php-fpm -i` values), over PHP
    `php_version`'s defaults (the trace's PHP; '' the host's)."""
    s = defaults(php_version, str(recorded.get("sapi", "cli")))
    opc: dict[str, str] = {}
    for key, value in recorded.items():
        if key in ("sapi",) or not isinstance(value, (str, int)):
            continue
        value = str(value)
        if key.startswith("opcache."):
            opc[key] = value
        if key in _KEYS:
            try:
                s = _apply(s, key, value, opc)
            except UsageError:
                continue
    return replace(s, opcache=_opcache_on(s.sapi, opc))


def _opcache_on(sapi: str, opc: dict[str, str]) -> bool:
    if not opc:
        return False  # the extension is not loaded
    on = ini_bool(opc.get("opcache.enable", "1"))
    if sapi == "cli":
        on = on and ini_bool(opc.get("opcache.enable_cli", "0"))
    return on


def with_changes(base: PhpSettings, recorded: Mapping[str, JsonValue],
                 changes: list[tuple[str, str]]) -> PhpSettings:
    """`base` with `--set KEY=VALUE` changes applied."""
    s = base
    opc = {k: str(v) for k, v in recorded.items() if k.startswith("opcache.")}
    if not opc:
        opc = {}
    touched_opcache = False
    for key, value in changes:
        if key in ("opcache.enable", "opcache.enable_cli"):
            touched_opcache = True
            if not opc:
                opc = {"opcache.enable": "1", "opcache.enable_cli": "0"}
        s = _apply(s, key, value, opc)
    if touched_opcache:
        s = replace(s, opcache=_opcache_on(s.sapi, opc))
    return s


def parse_set(items: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set {item!r}: expected KEY=VALUE, e.g. "
                             "--set realpath_cache_size=16K")
        if key not in SETTABLE:
            shown = key if key.isprintable() else repr(key)
            raise UsageError(f"--set {shown}: not a setting the model knows; use one of "
                             + ", ".join(SETTABLE))
        out.append((key, value.strip()))
    return out

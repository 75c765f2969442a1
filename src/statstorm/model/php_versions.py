"""What differs between the PHP versions statstorm runs (7.4, 8.2, 8.4) for check's rules and
apply: which of the settings they read or propose each version has, and its built-in
defaults. Pure: the table was read from each version's own binary (`php -n -d
zend_extension=opcache -r 'print_r(ini_get_all(null, false));'`, Debian's 7.4.33, 8.2 and
8.4 builds) and from php-src's NEWS/UPGRADING; `tests/test_php_root_check.py` compares it
with the roots' binaries again.

The facts that touch the rules:
- realpath cache: `realpath_cache_size` 4096K and `realpath_cache_ttl` 120 in all three
  (PHP 7.0.16 raised the size from 16K);
- OPcache: `opcache.preload`/`preload_user` since 7.4; `opcache.jit`, `jit_buffer_size` and
  `record_warnings` since 8.0 (so not in 7.4); `opcache.consistency_checks` removed in 8.3;
  8.4 turns the JIT off by `opcache.jit=disable` with a 64M buffer, where 8.0–8.3 had
  `tracing` with a buffer of 0 (off too, for lack of a buffer);
- `opcache.revalidate_path`, `file_cache`, `huge_code_pages`, `enable_file_override`,
  `file_update_protection`, `lockfile_path` exist in all three with the same defaults.

What the what-if model replays differently per version is each entry's `Mechanisms` (the
rest was found the same: docs/whatif.md, "PHP versions").

A new version is one entry of `VERSIONS`; a version not in it is not second-guessed (every
setting is taken to exist).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Iterable, Mapping

from statstorm.results.check import Finding
from statstorm.results.php_root import HOST_VERSION

# The defaults every version shares (the settings check reads or proposes).
_COMMON: dict[str, str] = {
    "realpath_cache_size": "4096K", "realpath_cache_ttl": "120",
    "user_ini.filename": ".user.ini", "user_ini.cache_ttl": "300",
    "opcache.enable": "1", "opcache.validate_timestamps": "1", "opcache.revalidate_freq": "2",
    "opcache.revalidate_path": "0", "opcache.memory_consumption": "128",
    "opcache.interned_strings_buffer": "8", "opcache.max_accelerated_files": "10000",
    "opcache.max_wasted_percentage": "5", "opcache.enable_file_override": "0",
    "opcache.file_update_protection": "2", "opcache.file_cache": "",
    "opcache.huge_code_pages": "0", "opcache.lockfile_path": "/tmp",
}
# Settings only some versions have: the first version with it, the first without it again.
_SPANS: dict[str, tuple[str, str]] = {
    "opcache.preload": ("7.4", ""), "opcache.preload_user": ("7.4", ""),
    "opcache.jit": ("8.0", ""), "opcache.jit_buffer_size": ("8.0", ""),
    "opcache.record_warnings": ("8.0", ""), "opcache.consistency_checks": ("", "8.3"),
}


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def _has(version: str, key: str) -> bool:
    since, until = _SPANS[key]
    return ((not since or _key(version) >= _key(since))
            and (not until or _key(version) < _key(until)))


@dataclass(frozen=True)
class Mechanisms:
    """What the what-if model (model/php_engine.py, model/replay_*.py) replays differently
    per version; every mechanism not named here was found the same in 7.4, 8.2 and 8.4
    (docs/whatif.md, "PHP versions": the php-src evidence, and the fidelity runs on each
    version's own binary)."""

    # OPcache's lock file at start-up (zend_shared_alloc_create_lock): 7.4 and 8.2 make it
    # with mkstemp() under opcache.lockfile_path (an `open` of /tmp/.ZendSem.XXXXXX, which
    # a CLI run pays once); 8.3 and later take a memfd_create() first on Linux: no open.
    opcache_lock_file_open: bool = True
    # The stat family's one-entry caches: from 8.1 php_stat (ext/standard/filestat.c) keeps
    # them itself and a successful lstat of a non-link fills the stat cache too (is_link()
    # then is_file() of a directory: one call); 7.4 keeps them in _php_stream_stat_path
    # (main/streams/streams.c), where an lstat fills the lstat cache only.
    lstat_fills_stat_cache: bool = True
    # 8.4 clears the stat family's caches while it compiles an included file (its traces
    # show two stat-cache clears in each compile, and real 8.4 stats again a name it had
    # just stat'ed before the include): a probe repeated across an include costs its call
    # again; an OPcache hit, which compiles nothing, does not clear.
    compile_clears_stat_cache: bool = False
    # With open_basedir, 7.4's php_stat (ext/standard/filestat.c) checks the path itself
    # before it asks the stat cache, and the plain wrapper's url_stat
    # (php_plain_files_url_stater, main/streams/plain_wrapper.c) checks it again before its
    # stat/lstat: every stat or lstat probe (not the access() ones: file_exists,
    # is_readable, ...) costs one check more, a cached one costs a check. 8.x checks once,
    # after the cache (seen on 7.4.33, 8.2.36, 8.4.27: is_file() of an allowed file is 35
    # calls on 7.4, 18 on 8.x; repeated, 17 and 0).
    stat_checks_open_basedir_twice: bool = False


@dataclass(frozen=True)
class PhpVersion:
    """One PHP version's facts: the settings statstorm knows it lacks, its defaults, and
    what the what-if model replays differently for it."""

    version: str  # "8.4"
    defaults: Mapping[str, str] = field(default_factory=dict)  # built in, before any ini
    mechanisms: Mechanisms = field(default_factory=Mechanisms)

    @property
    def lacks(self) -> frozenset[str]:
        """The settings of other versions that this one does not have."""
        return frozenset(k for k in _SPANS if not _has(self.version, k))

    def has(self, key: str) -> bool:
        return key not in self.lacks


def _version(version: str, defaults: Mapping[str, str],
             mechanisms: Mechanisms = Mechanisms()) -> PhpVersion:
    spans = {k: "" for k in _SPANS if _has(version, k)}
    return PhpVersion(version, {**_COMMON, **spans, **defaults}, mechanisms)


# The one table of per-version facts (results/php_root.py lists the versions labs run).
VERSIONS: dict[str, PhpVersion] = {
    "7.4": _version("7.4", {"opcache.consistency_checks": "0"},
                    Mechanisms(lstat_fills_stat_cache=False,
                               stat_checks_open_basedir_twice=True)),
    "8.2": _version("8.2", {"opcache.consistency_checks": "0", "opcache.jit": "tracing",
                            "opcache.jit_buffer_size": "0", "opcache.record_warnings": "0"}),
    "8.4": _version("8.4", {"opcache.jit": "disable", "opcache.jit_buffer_size": "64M",
                            "opcache.record_warnings": "0"},
                    Mechanisms(opcache_lock_file_open=False, compile_clears_stat_cache=True)),
}
TRACKED = frozenset(_COMMON) | frozenset(_SPANS)  # the settings the table speaks for


def version_of(binary: str) -> str:
    """The PHP version in a PHP binary's Debian name: php-fpm8.4, php7.4, php-cgi8.2,
    libphp8.2.so → "8.4", "7.4", "8.2"; '' when the name carries none (php, libphp.so)."""
    m = re.fullmatch(r"(?:php-fpm|php-cgi|php|libphp)(\d+\.\d+)(?:\.so)?",
                     PurePosixPath(binary).name)
    return m.group(1) if m else ""


def facts_of(version: str) -> PhpVersion | None:
    """The facts of `version` ("8.4", also "8.4.11"); None for a version not in the table."""
    parts = version.split(".")
    return VERSIONS.get(".".join(parts[:2])) if len(parts) >= 2 else None


def nearest(version: str) -> str:
    """The version of the table nearest to `version` ("8.3" → "8.2", "8.5" → "8.4", "7.3" →
    "7.4"): the newest at or below it, else the oldest."""
    known = sorted(VERSIONS, key=_key)
    below = [v for v in known if _key(v) <= _key(version)]
    return below[-1] if below else known[0]


def mechanisms(version: str) -> Mechanisms:
    """What the model replays for PHP `version` ('' the host's; a version not in the table:
    the nearest one's)."""
    found = facts_of(version or HOST_VERSION) or VERSIONS[nearest(version or HOST_VERSION)]
    return found.mechanisms


def has_setting(version: str, key: str) -> bool:
    """Whether PHP `version` has the setting `key` (True for a version not in the table)."""
    found = facts_of(version)
    return found is None or found.has(key)


def default(version: str, key: str, fallback: str) -> str:
    """`key`'s built-in default in PHP `version`; `fallback` when the table does not say."""
    found = facts_of(version)
    return found.defaults.get(key, fallback) if found is not None else fallback


def setting_of(settings: Mapping[str, str], binary: str, key: str) -> str | None:
    """`key` as the pool runs it: its value in `settings`, else the built-in default of the
    version `binary` names (the host's when it names none), else None."""
    if key in settings:
        return settings[key]
    found = facts_of(version_of(binary) or HOST_VERSION)
    return found.defaults.get(key) if found is not None else None


_SETTING_LINE = re.compile(r"^\s*(?:;\s*or:\s*)?([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)+|[a-z_]+)\s*=")


def settings_named(lines: Iterable[str]) -> list[str]:
    """The ini settings a finding's change lines set (`key = value`, `; or: key = value`)."""
    out = []
    for line in lines:
        m = _SETTING_LINE.match(line)
        if m and m.group(1) in TRACKED:
            out.append(m.group(1))
    return out


def proposable(findings: Iterable[Finding], version: str) -> list[Finding]:
    """The findings as PHP `version` can take them: a change line setting what that version
    does not have is left out, and a finding left with none of the settings it proposed is
    dropped (never a setting the version would refuse or ignore)."""
    out = []
    for f in findings:
        named = settings_named(f.change)
        absent = [k for k in named if not has_setting(version, k)]
        if not absent:
            out.append(f)
        elif len(absent) < len(named):
            keep = tuple(line for line in f.change
                         if not set(settings_named([line])) & set(absent))
            out.append(replace(f, change=keep))
    return out

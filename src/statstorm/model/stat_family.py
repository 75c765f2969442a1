"""PHP's stat family (`php_stat`, ext/standard/filestat.c) as pure code, for the what-if
engine (`model.php_engine`): which call a probe makes and its one-entry stat caches.

`file_exists`/`is_readable`/`is_writable`/`is_executable` make one `access`, never cached;
`is_link`/`lstat` one `lstat`, unless the same name was the last successful one (its own
one-entry cache); the others (`is_file`, `is_dir`, `filemtime`, …) one `stat`, unless the
same name was the last successful `stat` (or, since PHP 8.1, a successful `lstat` of a
non-link). Both
caches are per worker, reset per request, by `clearstatcache()` and, for relative names,
by `chdir()`. An open_basedir check comes before the call; on PHP 7.4 a stat or lstat probe
makes one more before its cache (php_stat's own, then the plain wrapper's url_stat's).
"""

from __future__ import annotations

from typing import Any, Callable

from statstorm.model.fs_view import LINK, MISSING, FsView

ACCESS_FUNCS = frozenset(("file_exists", "is_readable", "is_writable", "is_executable"))
LSTAT_FUNCS = frozenset(("is_link", "lstat"))

Emit = Callable[[str, str, bool], None]


def probe(w: Any, fs: FsView, emit: Emit, allowed: Callable[[], bool] | None, name: str,
          func: str, abspath: str, lstat_fills_stat: bool = True,
          checks_before_cache: bool = False) -> None:
    """The calls of `func(name)` for worker `w` (its `stat_file`/`lstat_file` caches);
    `abspath`: the name made absolute; `allowed`: the open_basedir check, if any;
    `lstat_fills_stat`: a successful lstat of a non-link fills the stat cache too (PHP 8.1
    and later; not 7.4, model/php_versions.py); `checks_before_cache`: a stat or lstat
    probe checks open_basedir before its cache too, and its stat again (PHP 7.4)."""
    if func in ACCESS_FUNCS:
        if allowed is not None and not allowed():
            return
        emit("access", abspath, not fs.exists(abspath))
        return
    if checks_before_cache and allowed is not None and not allowed():
        return
    if func in LSTAT_FUNCS:
        if w.lstat_file == name:
            return
        if allowed is not None and not allowed():
            return
        kind = fs.kind(abspath)
        emit("lstat", abspath, kind == MISSING)
        if kind != MISSING:
            w.lstat_file = name
            if kind != LINK and lstat_fills_stat:
                w.stat_file = name
        return
    if w.stat_file == name:
        return
    if allowed is not None and not allowed():
        return
    exists = fs.exists(abspath)
    emit("stat", abspath, not exists)
    if exists:
        w.stat_file = name

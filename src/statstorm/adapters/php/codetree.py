"""The PHP code tree `statstorm check` judges: its files, their realpath-cache footprint,
`.user.ini` files, fresh or future-dated files, include_path entries, symlinks, and the places
PHP writes to."""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from statstorm.results.facts import realpath_bytes, with_parents

MAX_FILES = 200_000


@dataclass
class CodeTree:
    php_files: int = 0
    entries: int = 0
    bytes: int = 0
    user_ini_files: int = 0
    htaccess: tuple[str, ...] = ()  # .htaccess files (Apache's per-directory rules)
    recent: tuple[str, ...] = ()
    future: tuple[str, ...] = ()


def scan(roots: list[str], user_ini: str, protection: int) -> CodeTree:
    """PHP files (with realpath entries and bytes), user_ini and .htaccess files, and PHP
    files changed in the last `protection` seconds or dated in the future, under `roots`."""
    php: list[str] = []
    ini = 0
    htaccess: list[str] = []
    recent: list[str] = []
    future: list[str] = []
    now = time.time()
    seen: set[tuple[int, int]] = set()
    for root in roots:
        for d, dirs, files in os.walk(root, followlinks=True):
            try:
                st = os.stat(d)
            except OSError:
                dirs[:] = []
                continue
            if (st.st_dev, st.st_ino) in seen:
                dirs[:] = []
                continue
            seen.add((st.st_dev, st.st_ino))
            for f in files:
                if user_ini and f == user_ini:
                    ini += 1
                elif f == ".htaccess":
                    htaccess.append(os.path.join(d, f))
                if f.endswith(".php") and len(php) < MAX_FILES:
                    p = os.path.join(d, f)
                    php.append(p)
                    if protection > 0:
                        try:
                            mtime = os.stat(p).st_mtime
                        except OSError:
                            continue
                        if mtime > now + 1:
                            future.append(p)
                        elif mtime > now - protection:
                            recent.append(p)
    entries, size = realpath_bytes(with_parents(php))
    return CodeTree(len(php), entries, size, ini, tuple(sorted(htaccess)), tuple(recent[:20]),
                    tuple(future[:20]))


def app_root(docroot: str) -> str:
    """The docroot, or its parent when that is a Composer project (`public/` beside `vendor/`):
    the code a request runs lives there too."""
    parent = Path(docroot).parent
    if (parent / "vendor").is_dir() or (parent / "composer.json").is_file():
        return str(parent)
    return docroot


def count_php(entry: str, limit: int = 1000) -> int:
    """PHP files under an include_path entry (up to `limit`); -1 if it does not exist."""
    if not Path(entry).is_dir():
        return -1
    n = 0
    for _, _, files in os.walk(entry):
        n += sum(1 for f in files if f.endswith(".php"))
        if n >= limit:
            break
    return n


def symlinks_on(paths: list[str]) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for path in paths:
        parts = Path(path).parts
        for i in range(2, len(parts) + 1):
            p = str(Path(*parts[:i]))
            try:
                if stat.S_ISLNK(os.lstat(p).st_mode):
                    out.setdefault(p, os.readlink(p))
            except OSError:
                break
    return tuple(out.items())


CACHE_DIRS = ("cache", "tmp", "temp", "var", "storage", "sessions", "uploads")


def writable_paths(settings: dict[str, str], app_root: str) -> list[tuple[str, str]]:
    """(what, path) of the places PHP writes to: sessions, OPcache's file cache, upload and
    temp dirs, and the app's own cache-like directories (`cache/`, `var/`, `storage/` …)."""
    out: list[tuple[str, str]] = []
    if settings.get("session.save_handler", "files") == "files":
        path = settings.get("session.save_path", "").rsplit(";", 1)[-1]
        if path.startswith("/"):
            out.append(("session files", path))
    for key, what in (("opcache.file_cache", "OPcache file cache"),
                      ("upload_tmp_dir", "upload temp dir"), ("sys_temp_dir", "temp dir")):
        if settings.get(key, "").startswith("/"):
            out.append((what, settings[key]))
    if app_root:
        for name in CACHE_DIRS:
            if Path(app_root, name).is_dir():
                out.append(("app directory", str(Path(app_root, name))))
    return out

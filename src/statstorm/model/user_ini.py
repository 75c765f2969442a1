"""PHP's per-directory `.user.ini` files (CGI and FPM): the scan of a script's directories,
cached per worker for `user_ini.cache_ttl` seconds. Pure code for the what-if engine
(`model.php_engine`)."""

from __future__ import annotations

from typing import Callable

from statstorm.model.phpsettings import PhpSettings
from statstorm.model.fs_view import FsView


def scan(s: PhpSettings, fs: FsView, emit: Callable[[str, str, bool], None],
         scanned: dict[str, int], request_time: int, script_dir: str,
         dirs: tuple[str, ...]) -> None:
    """The scan for a script in `script_dir` (`dirs`: the directories PHP looks in), unless
    the worker's last scan of it (`scanned`: script dir → expires) is still fresh."""
    if not s.user_ini_filename:
        return
    expires = scanned.get(script_dir)
    if expires is not None and request_time <= expires:
        return
    for d in dirs:
        path = d.rstrip("/") + "/" + s.user_ini_filename
        exists = fs.exists(path)
        emit("stat", path, not exists)
        if exists:  # fopen + the parser's reads
            emit("open", path, False)
            emit("fstat", path, False)
            emit("fstat", path, False)
    scanned[script_dir] = request_time + s.user_ini_cache_ttl

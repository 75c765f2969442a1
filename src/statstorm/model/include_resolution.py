"""Include resolution (`php_resolve_path`, main/fopen_wrappers.c), as pure code: which paths
an include's name is tried as, in order, and the OPcache key of that name.

Absolute, `./` and `../` names (and any name when include_path is empty) resolve directly,
against the process cwd. Other names try each include_path entry (an empty entry is the
name under `/`, except a last one: the scan stops at the string's end, so `a:b:` tries a and
b only; stream wrappers are skipped), then the including script's directory. Each try is a
`tsrm_realpath` (`CWD_REALPATH`): a missing candidate costs one `lstat`.
"""

from __future__ import annotations

from typing import Any

from statstorm.model.realpath_cache import REALPATH, Resolver


def resolve(r: Resolver, name: str, cwd: str, include_path: str, fallback: str) -> str | None:
    """The resolved path of an include's `name`, or None; `fallback`: the including
    script's directory."""
    if name.startswith(("/", "./", "../")) or not include_path:
        return r.resolve(name, cwd, REALPATH)
    entries = include_path.split(":")
    if not entries[-1]:
        entries.pop()
    for entry in entries:
        if "://" in entry:
            continue
        res = r.resolve(entry + "/" + name, cwd, REALPATH)
        if res is not None:
            return res
    if fallback:
        return r.resolve(fallback + "/" + name, cwd, REALPATH)
    return None


def opc_key(name: str, cwd: str, include_path: str, fallback: str) -> Any:
    """OPcache's key for an include's name: an absolute name as written; a relative one
    with the cwd (and include_path, but for `./` and `../` names)."""
    if name.startswith("/"):
        return name
    if name.startswith(("./", "../")):
        return (name, cwd, "", fallback)
    return (name, cwd, include_path, fallback)

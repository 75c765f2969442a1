"""open_basedir checks (`php_check_open_basedir`, main/fopen_wrappers.c), as pure code: what a
check costs under chosen settings, and where a trace shows one.

A check tries each `:`-separated entry in turn until one holds the path. Each try is
`expand_filepath(path)` + `VCWD_REALPATH` of the result (when that fails: one `readlink` of
the path, then its parents in turn until one resolves) + `expand_filepath(entry)` (an entry
`.` is the cwd, read with a `getcwd` first). PHP makes one before every include's open and
every stat-family probe (the engine makes those with the include or probe), and in functions
the model does not otherwise know: `chdir()`, `fopen()` and the like, `unlink()`, `rename()`.

A trace recorded with open_basedir shows such a check as a run of top-level path
resolutions, try by try; `group` turns each run into one logical check (`E_BASEDIR`), which
the engine makes again only when the replayed settings have an open_basedir. A trace
recorded without one shows only the function's own call: a `chdir` is turned into a check
(`chdir_checks`); the others cannot be seen in such a trace.
"""

from __future__ import annotations

from typing import Any, Callable

from statstorm.model.realpath_cache import FILEPATH, REALPATH, Resolver

E_BASEDIR = 10  # (E_BASEDIR, req, path as written, cwd): a check outside includes and probes

Emit = Callable[[str, str, bool], None]


def entries(open_basedir: str) -> list[str]:
    """The entries a check tries, in order."""
    return [b for b in open_basedir.split(":") if b]


def allowed(r: Resolver, emit: Emit, basedirs: list[str], path: str, cwd: str) -> bool:
    """php_check_open_basedir: each entry until one holds the path."""
    for basedir in basedirs:
        if _one(r, emit, basedir, path, cwd):
            return True
    return False


def _one(r: Resolver, emit: Emit, basedir: str, path: str, cwd: str) -> bool:
    """php_check_specific_open_basedir."""
    local = basedir
    if basedir == ".":
        emit("getcwd", cwd, False)
        local = cwd
    name = r.resolve(path, cwd, FILEPATH)
    if name is None:
        return False
    tmp = name
    nesting = 0
    while True:
        resolved = r.resolve(tmp, cwd, REALPATH)
        if resolved is not None:
            break
        if nesting == 0:
            emit("readlink", tmp, True)
        i = tmp.rfind("/")
        if i < 0:
            return False
        tmp = tmp[:i] or "/"
        nesting += 1
    base = r.resolve(local, cwd, FILEPATH)
    if base is None:
        return False
    base = base.rstrip("/") + "/"
    return resolved.startswith(base) or resolved + "/" == base


# -- in a trace ------------------------------------------------------------------------------
# Event kinds of model.php_engine (repeated here: that module imports this one)
_E_PASS, _E_REALPATH = 1, 2


def group(tl: list[tuple[int, Any]], basedirs: list[str]) -> list[tuple[int, Any]]:
    """A worker's time-ordered events with each recorded check (a run of tries, see the
    module's docstring) replaced by one `E_BASEDIR` event at the check's start."""
    out: list[tuple[int, Any]] = []
    i, n = 0, len(tl)
    while i < n:
        end = _check_at(tl, i, basedirs)
        if end is None:
            out.append(tl[i])
            i += 1
            continue
        start = i
        while start < end and tl[start][1][0] == _E_PASS:  # the getcwd of an entry "."
            start += 1
        ev = tl[start][1]
        out.append((tl[i][0], (E_BASEDIR, ev[1], ev[2], ev[3])))
        i = end
    return out


def _check_at(tl: list[tuple[int, Any]], i: int, basedirs: list[str]) -> int | None:
    """The end (exclusive) of a check starting at `tl[i]`, or None: try k of entry k is
    [getcwd (entry ".")] expand(path) realpath(...)+ [readlink] expand(entry), every try of
    the same path, the first one of the first entry."""
    path = None
    end = None
    for k, basedir in enumerate(basedirs):
        j = _try_at(tl, i, basedir, path)
        if j is None:
            break
        if path is None:
            path = _path_of(tl, i)
        end = i = j
        if k + 1 < len(basedirs) and _try_at(tl, i, basedirs[k + 1], path) is None:
            break
    return end


def _path_of(tl: list[tuple[int, Any]], i: int) -> str:
    while tl[i][1][0] == _E_PASS:
        i += 1
    return str(tl[i][1][2])


def _try_at(tl: list[tuple[int, Any]], i: int, basedir: str, path: str | None) -> int | None:
    n = len(tl)
    cwd_seen = None
    if basedir == ".":
        if i < n and tl[i][1][0] == _E_PASS and tl[i][1][2] == "getcwd":
            cwd_seen = tl[i][1][3]
            i += 1
        else:
            return None
    if i >= n:
        return None
    ev = tl[i][1]
    if ev[0] != _E_REALPATH or ev[4] != FILEPATH or ev[5] or (path is not None and ev[2] != path):
        return None
    cwd = ev[3]
    i += 1
    resolutions = 0
    while i < n:
        ev = tl[i][1]
        if ev[0] == _E_REALPATH and ev[4] == REALPATH:
            resolutions += 1
        elif not (ev[0] == _E_PASS and ev[2] == "readlink" and resolutions == 1):
            break
        i += 1
    if not resolutions or i >= n:
        return None
    ev = tl[i][1]
    if ev[0] != _E_REALPATH or ev[4] != FILEPATH:
        return None
    if basedir == ".":
        if ev[2] not in (cwd_seen, cwd):
            return None
    elif ev[2] != basedir:
        return None
    return i + 1


def chdir_checks(chdirs: list[tuple[int, int, int, str, str]], single: bool) -> list[
        tuple[int, int, tuple[Any, ...]]]:
    """(pid, ns, E_BASEDIR event) for each `chdir()` call of the PHP script in a trace
    recorded without open_basedir: `chdirs` is (pid, ns, request, path, cwd before) of every
    chdir syscall, in time order. A CLI run makes no chdir of its own; php-fpm makes one to
    the script's directory and one back around each request, which are not checked (the
    first and last of a request's)."""
    if single:
        keep = chdirs
    else:
        by_req: dict[tuple[int, int], list[int]] = {}
        for k, c in enumerate(chdirs):
            by_req.setdefault((c[0], c[2]), []).append(k)
        drop = {k for ks in by_req.values() for k in (ks[0], ks[-1])}
        keep = [c for k, c in enumerate(chdirs) if k not in drop]
    return [(pid, ns, (E_BASEDIR, req, path, cwd)) for pid, ns, req, path, cwd in keep]


def fopen_checks(tl: list[tuple[int, Any]], expands: set[int]) -> list[tuple[int, Any]]:
    """A worker's time-ordered events (of a trace recorded without open_basedir) with a
    check before each plain-files open of the script: `fopen()`, `file_get_contents()`,
    `file_put_contents()` and the like check the path, then expand it (`expands`: the
    times of the script's own expand_filepath calls) and open it."""
    out: list[tuple[int, Any]] = []
    for i, (ns, ev) in enumerate(tl):
        if (ns in expands and ev[0] == _E_REALPATH and ev[4] == FILEPATH and i + 1 < len(tl)
                and tl[i + 1][1][0] == _E_PASS and tl[i + 1][1][2] == "open"):
            out.append((ns, (E_BASEDIR, ev[1], ev[2], ev[3])))
        out.append((ns, ev))
    return out

"""apply's local mirror of the code (the MIRROR change of `code-local-mirror`): planned as one
live step (the copy, undone by removing it) and one NGINX_ROOT change per `root` directive of
the nginx servers passing to the pool that serve the mirrored tree; `statstorm apply`
writes those like its other nginx edits (`nginx -t`, graceful reload, backup set), so
`--rollback` puts the roots back byte for byte, reloads, then removes the copy.

A lab takes a mirror too (the demo's escalation ends with it, as tune's does on a pool): its copy
lives in the lab's own directory, so `lab down` removes it with the lab.

Refused in one line: a root built from variables (which tree it serves is known only per
request), a root set at `http` level (shared with servers that do not pass to the pool), an
`alias`, a mirror already there, a disk without room for the copy, a mirror root under a
directory other users may not enter (the pool's workers could not read the copy)."""

from __future__ import annotations

import re
import stat
from dataclasses import replace
from pathlib import Path

from statstorm.adapters.apply.pool_config import Target
from statstorm.adapters.labs import state as labs
from statstorm.adapters.servers import nginx, nginx_conf
from statstorm.adapters.storage import code_mirror
from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.model.applyplan import MANUAL, MIRROR, NGINX_ROOT, POOL_INI, Change
from statstorm.model.mirror import inside, mirror_dir, rebased_include_path, served_root
from statstorm.results.apply import StorageStep


_USER = re.compile(r"^[ \t]*user[ \t]*=[ \t]*([^\s;]+)", re.M)


def cannot(target: Target) -> str:
    """Why apply cannot switch this target's web server to a mirror ('' : it can)."""
    if target.php_in_apache or target.apache_conf is not None or target.system_apache:
        return ("Apache serves this pool: copy the code and switch its DocumentRoot by hand "
                "(statstorm switches nginx's root)")
    if not target.nginx_test or not target.nginx_pid:
        return "no running nginx passes requests to this pool: switch its web server's root " \
               "by hand"
    return ""


def _roots(target: Target, source: str) -> list[nginx_conf.RootAt]:
    """The root directives to switch: every server passing to the pool whose docroot is in
    `source` (UsageError for one apply cannot switch)."""
    config = nginx.read_master(target.nginx_test[:-2])  # the master's argv, without -t -q
    roots = nginx_conf.roots_passing_to(config, target.listen)
    for r in roots:
        if r.site.docroot_unknown:
            where = f"{r.file}:{r.line}" if r.file else r.site.config_file
            raise UsageError(f"the root of {_name(r)} ({where}) is built from "
                             f"{r.site.docroot_unknown}: statstorm cannot tell which tree it "
                             "serves; write a fixed root, or switch it to a copy by hand")
    found = [r for r in roots if r.site.docroot and inside(r.site.docroot, source)]
    if not found:
        raise UsageError(f"no nginx server passing to pool {target.pool} has its root in "
                         f"{source}: nothing would serve a mirror of it")
    for r in found:
        if r.level == "http" or not r.file:
            raise UsageError(f"the root of {_name(r)} is set at http level ({r.file}:{r.line}),"
                             " shared with other servers: set it in the server block first")
        if r.alias:
            raise UsageError(f"{_name(r)} serves PHP through alias ({r.file}:{r.line}): switch "
                             "it to a copy by hand")
    return found


def _name(r: nginx_conf.RootAt) -> str:
    names = [n for n in r.site.server_names if n and n != "_"]
    return f"server {names[0]}" if names else f"the server at {r.site.config_file}:" \
                                              f"{r.site.config_line}"


def plan(env: Env, target: Target, changes: list[Change],
         ) -> tuple[list[Change], list[StorageStep], list[str]]:
    """The MIRROR changes as a copy step and the root changes; MANUAL with the reason where
    the target cannot take one. Adds the files holding the roots to the target's nginx files
    (so they are tested with `nginx -t` and nginx reloads)."""
    out = [c for c in changes if c.kind != MIRROR]
    steps: list[StorageStep] = []
    paths = [c for c in changes if c.kind == MIRROR and c.key == "include_path"]
    for c in (c for c in changes if c.kind == MIRROR and c.key != "include_path"):
        why = cannot(target)
        if why:
            out.append(Change(c.finding, MANUAL, "", "", c.line, why))
            continue
        source = Path(c.value)
        if not source.is_dir():
            raise UsageError(f"{source} is not a directory: run statstorm check again")
        roots = _roots(target, str(source))
        under = where(env, target)
        dest = Path(mirror_dir(str(under), target.pool, str(source)))
        if dest.exists() or dest.is_symlink():
            raise UsageError(f"{dest} exists: a mirror of {source} is there already "
                             f"(`statstorm mirror sync --pool {target.pool}` refreshes it)")
        closed = unreachable(dest) if workers_user(target) not in ("", "root") else None
        if closed is not None:
            raise UsageError(f"{closed} is closed to other users (mode "
                             f"{stat.S_IMODE(closed.stat().st_mode):o}): the pool's workers "
                             f"could not reach the mirror under it; set STATSTORM_MIRROR_ROOT "
                             "to a directory other users may enter")
        entries, size = code_mirror.tree_size(source)
        code_mirror.check_space(source, dest, size)
        steps.append(StorageStep(MIRROR, str(dest), {"source": str(source), "under": str(under)},
                                 {"pool": target.pool, "files": str(entries),
                                  "bytes": str(size)}))
        out.append(c)
        for r in roots:
            new = served_root(str(dest), str(source), r.site.docroot)
            out.append(Change(c.finding, NGINX_ROOT, "root", new, f"root {new};",
                              f"{_name(r)} served from the local mirror", r.value,
                              f"{r.file}:{r.line}"))
            if Path(r.file) not in target.nginx_files:
                target.nginx_files.append(Path(r.file))
        for p in paths:  # includes through the pool's include_path: from the mirror too
            out = _rebase_include_path(out, c.finding, p.value, str(source), str(dest))
    return out, steps, []


def _rebase_include_path(out: list[Change], finding: str, current: str, source: str,
                         dest: str) -> list[Change]:
    """`out` with the pool's include_path pointed at the mirror: the include_path another
    change of this apply sets (include-path-misses' order) rebased in place, else the pool's
    current one as a change of its own."""
    at = next((i for i, x in enumerate(out) if x.kind == POOL_INI and x.key == "include_path"),
              None)
    new = rebased_include_path(out[at].value if at is not None else current, source, dest)
    if not new:
        return out
    line = f"php_value[include_path] = {new}"
    if at is not None:
        return [*out[:at], replace(out[at], value=new, line=line), *out[at + 1:]]
    return [*out, Change(finding, POOL_INI, "include_path", new, line,
                         "include_path served from the local mirror", current)]


def where(env: Env, target: Target) -> Path:
    """The directory the target's mirrors go under: a lab's own directory (removed with it),
    else the machine's mirror root."""
    return labs.mirror_root(env, target.lab) if target.lab else code_mirror.root_dir()


def workers_user(target: Target) -> str:
    """The `user` the pool's workers run as, from its pool file ('' where it does not say)."""
    try:
        text = target.pool_file.read_text(errors="replace")
    except OSError:
        return ""
    m = _USER.search(text)
    return m.group(1) if m else ""


def unreachable(dest: Path) -> Path | None:
    """The first existing directory above `dest` that other users may not enter (the pool's
    workers run as its own user, and would answer 404 for a tree they cannot reach)."""
    for parent in reversed(dest.parents):
        try:
            mode = parent.stat().st_mode
        except FileNotFoundError:
            return None  # made by the copy, with the copy's modes
        if not mode & stat.S_IXOTH:
            return parent
    return None


def do(env: Env, st: StorageStep) -> None:
    """Make the copy (the step counts as done from its first byte: undo removes it)."""
    st.done = True
    made = code_mirror.make(Path(st.where), Path(st.before["source"]), st.after.get("pool", ""),
                            _under(st))
    st.after.update(files=str(made.marker.files), bytes=str(made.marker.bytes))
    env.log(f"mirror: {made.marker.source} copied to {made.path}/{made.marker.tree} in "
            f"{made.seconds:g} s")


def _under(st: StorageStep) -> Path | None:
    """The root the step's mirror is under (None: the mirror root; a set written before
    the step recorded it)."""
    return Path(st.before["under"]) if st.before.get("under") else None


def undo(env: Env, st: StorageStep) -> None:
    if not st.done:
        return
    env.log(f"mirror: removing {st.where}")
    try:
        code_mirror.remove(Path(st.where), _under(st))
    except OSError as exc:
        raise ComponentError(f"cannot remove {st.where} ({exc.strerror or exc}): remove it by "
                             "hand") from None
    st.done = False

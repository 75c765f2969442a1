"""A shadow of a running php-fpm pool on local disk: tune's reference.

The pool's code tree (the docroot of the site serving it, or the directory above it that
holds the code its requests include: `ShadowPlan.tree`, model/app_tree.py) copied under
statstorm's state root, a php-fpm master of the same binary with the pool's own directives
(its php_value and php_admin_value lines, env, limits; paths into the code rewritten to the
copy) and the master's -d options, on its own socket, behind a loopback-only nginx on a free
port serving the copy with the same URL paths. A pool of another PHP than the host's (a lab made with
`lab up --php 8.4`) runs chrooted in its PHP root: its shadow's php-fpm runs there too, with
the shadow's directory (copy, configuration, socket) mounted in the root at the same path,
as a lab's own is (adapters/labs/php_roots.py). It is registered as a lab (`app` "shadow", named
`tune-POOL`), so `statstorm lab list` shows a leftover and `statstorm lab down` removes it;
`running()` removes it whatever happens (an error, Ctrl-C, SIGTERM).
"""

from __future__ import annotations

import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from statstorm.adapters.host import procs
from statstorm.adapters.labs import lab_build, lab_servers, php_roots, phpfpm, state as labs
from statstorm.adapters.storage import tree_copy
from statstorm.env import Env
from statstorm.errors import BusyError, UsageError
from statstorm.results.lab import LabState
from statstorm.results.php_root import release

APP = "shadow"  # the `app` of a shadow's lab state
MAX_WORKERS = 32
# The pool directives a shadow keeps (besides pm.max_children): what PHP runs with.
KEPT_PREFIXES = ("php_value[", "php_admin_value[", "php_flag[", "php_admin_flag[", "env[")
KEPT_KEYS = ("security.limit_extensions", "request_terminate_timeout", "pm.max_requests")
_INI_SPECIAL = re.compile(r'[{}|&~!\[\]()^";=]')
SPACE_MARGIN = 64 << 20  # bytes left free on the state root after the copy


@dataclass(frozen=True)
class ShadowPlan:
    """What a shadow of `pool` is made of, read from the running pool before anything starts."""

    pool: str
    lab: str  # its lab's name
    source: str  # the docroot of the site serving the pool
    binary: str  # the pool's php-fpm
    ini: dict[str, str] = field(default_factory=dict)  # the master's -d options
    directives: dict[str, str] = field(default_factory=dict)  # the pool's, from php-fpm -tt
    workers: int = 5
    user: str = "www-data"
    front: str = "index.php"  # the front controller nginx falls back to
    notes: tuple[str, ...] = ()
    tree: str = ""  # the tree copied: the docroot, or a directory above it (model/app_tree.py)

    @property
    def copied(self) -> str:
        return self.tree or self.source


def php_of(binary: str) -> tuple[str, str]:
    """The PHP version of a php-fpm binary ('' when its name carries none) and the PHP root
    holding it ('' for the host's)."""
    return phpfpm.version_of(binary), phpfpm.root_of(binary)


def php_note(binary: str) -> str:
    """One line saying which PHP the shadow runs."""
    version, root = php_of(binary)
    where = f"from its PHP root {root}" if root else "the host's"
    return f"the shadow runs PHP {version or '?'} ({where}, {binary}), as the pool does"


def _enter_root(env: Env, rec: labs.LabRecord, binary: str) -> str:
    """The binary the shadow runs: the pool's own. For a PHP root's, the root is statstorm's
    root of that version and the shadow's directory is mounted in it at the same path (each
    mount recorded in its state, so `lab down` undoes it)."""
    version, root = php_of(binary)
    if not root:
        rec.record(php_version=version)
        return binary
    rel = release(version, "the pool's php-fpm")
    mine = php_roots.root_dir(env, rel)
    if Path(root) != mine:
        raise UsageError(f"the pool runs {binary}, from a PHP root other than statstorm's "
                         f"{mine}: set STATSTORM_PHP_ROOTS={Path(root).parent} so the shadow "
                         "runs in the pool's root")
    return php_roots.lab_fpm(env, rec, rel.version, binary)


def lab_name(pool: str) -> str:
    """The shadow's lab name: `tune-` and the pool's name in lab-name letters."""
    slug = re.sub(r"[^a-z0-9-]+", "-", pool.lower()).strip("-") or "pool"
    return f"tune-{slug}"[:32].rstrip("-")


def master_ini(master_args: list[str]) -> tuple[dict[str, str], list[str]]:
    """The master's `-d KEY=VALUE` options as ini overrides, and notes of the options a
    shadow cannot repeat (-c, -n: it reads the same binary's php.ini and conf.d)."""
    ini: dict[str, str] = {}
    notes: list[str] = []
    i = 0
    while i < len(master_args):
        a = master_args[i]
        value = master_args[i + 1] if a in ("-d", "-c", "-y", "--fpm-config") and \
            i + 1 < len(master_args) else ""
        if a == "-d" or (a.startswith("-d") and len(a) > 2):
            key, _, val = (value if a == "-d" else a[2:]).partition("=")
            ini[key.strip()] = val.strip()
        elif a in ("-c", "-n") or a.startswith("-c"):
            notes.append(f"the master's {a} {value}".rstrip() + " is not repeated in the shadow")
        i += 2 if value else 1
    return ini, notes


def kept_directives(directives: dict[str, str], source: str, copy: str) -> dict[str, str]:
    """The pool directives a shadow runs with, paths into `source` rewritten to `copy`."""
    def moved(value: str) -> str:
        return re.sub(rf"{re.escape(source.rstrip('/'))}(?=/|:|$)", copy.rstrip("/"), value)
    return {k: moved(v) for k, v in directives.items()
            if k.startswith(KEPT_PREFIXES) or k in KEPT_KEYS}


def workers_of(directives: dict[str, str]) -> int:
    """The shadow's static worker count: the pool's pm.max_children (1 to MAX_WORKERS)."""
    try:
        n = int(directives.get("pm.max_children", "5"))
    except ValueError:
        n = 5
    return max(1, min(MAX_WORKERS, n))


def _ini_value(value: str) -> str:
    """A value as php-fpm's ini reader takes it back: quoted when it holds INI syntax."""
    if _INI_SPECIAL.search(value):
        return '"' + value.replace('"', '\\"') + '"'
    return value


def render_fpm_conf(plan: ShadowPlan, root: Path, copy: Path) -> str:
    """The shadow master's configuration: its own pid, log and socket; the pool's directives."""
    lines = [f"{k} = {_ini_value(v)}" for k, v in
             kept_directives(plan.directives, plan.copied, str(copy)).items()]
    body = "\n".join(lines)
    return f"""\
; written by statstorm tune: the shadow of pool {plan.pool}, serving a copy on local disk
[global]
pid = {root}/run/php-fpm.pid
error_log = {root}/log/php-fpm.log
daemonize = no
process_control_timeout = 5s

[statstorm-{plan.lab}]
user = {plan.user}
group = {plan.user}
listen = {root}/run/php-fpm.sock
listen.owner = {plan.user}
listen.group = {plan.user}
listen.mode = 0660
pm = static
pm.max_children = {plan.workers}
catch_workers_output = yes
{body}
"""


def tree_bytes(path: Path) -> int:
    """The bytes a copy of the tree takes (apparent sizes, symlinks not followed)."""
    total = 0
    for top, dirs, files in os.walk(path):
        for name in files + dirs:
            try:
                total += os.lstat(os.path.join(top, name)).st_size
            except OSError:
                continue
    return total


def pin_escaping_links(source: Path, copy: Path) -> int:
    """Relative symlinks of the copy that lead out of the tree, pointed at the same place
    as in the source (absolute): they must reach the same files. How many were changed."""
    changed = 0
    src = os.path.normpath(source)
    for top, dirs, files in os.walk(copy):
        for name in dirs + files:
            link = os.path.join(top, name)
            if not os.path.islink(link):
                continue
            target = os.readlink(link)
            if os.path.isabs(target):
                continue
            orig = os.path.join(src, os.path.relpath(top, copy))
            where = os.path.normpath(os.path.join(orig, target))
            if where != src and not where.startswith(src + os.sep):
                os.unlink(link)
                os.symlink(where, link)
                changed += 1
    return changed


def check_space(need: int, free: int, source: str, where: Path) -> None:
    """UsageError when a copy of `need` bytes does not fit in `free` (with a margin)."""
    if need + SPACE_MARGIN > free:
        raise UsageError(f"the code tree {source} ({need >> 20} MiB) does not fit in the free "
                         f"space of {where} ({free >> 20} MiB): free some, or set "
                         "STATSTORM_HOME to a larger local disk")


def up(env: Env, plan: ShadowPlan, say: Callable[[str], None]) -> LabState:
    """Copy the code, start the shadow's php-fpm and nginx; its lab state (URL in `url`).
    On any failure or interruption what was started is removed and the error re-raised."""
    root = labs.lab_dir(env, plan.lab)
    if root.exists():
        raise BusyError(f"a lab named {plan.lab!r} exists (a shadow left behind?): remove it "
                        f"with `statstorm lab down --name {plan.lab}`")
    root.parent.mkdir(parents=True, exist_ok=True)
    tree = Path(plan.copied)
    check_space(tree_bytes(tree), shutil.disk_usage(root.parent).free, str(tree), root.parent)
    root.mkdir()
    for path in (env.state_root, root.parent, root):
        path.chmod(0o755)  # www-data serves from below here, whatever the umask
    rec = labs.LabRecord(LabState(name=plan.lab, app=APP, storage="local",
                                  port=procs.free_port(), workers=plan.workers,
                                  state_dir=str(root), php_ini=dict(plan.ini),
                                  fpm_binary=plan.binary))
    try:
        rec.record()
        for sub in ("conf", "run", "log", "tmp"):
            (root / sub).mkdir(exist_ok=True)
        code = root / "code"
        within = os.path.relpath(plan.source, tree)
        docroot = code if within == "." else code / within
        rec.record(code_path=str(code), docroot=str(docroot))
        say(f"shadow of pool {plan.pool}: copying {tree} to {code}…")
        tree_copy.copy_tree(tree, code, jobs=4)
        code.chmod(tree.stat().st_mode & 0o7777)
        pin_escaping_links(tree, code)
        state = rec.record(pool=f"statstorm-{plan.lab}", fpm_socket=str(root / "run/php-fpm.sock"))
        conf = phpfpm.lab_conf(state)
        conf.write_text(render_fpm_conf(plan, root, code))
        binary = _enter_root(env, rec, plan.binary)  # in the pool's PHP root, if it has one
        phpfpm.test_config(env, binary, conf, plan.ini)
        state = rec.record(effective_ini=phpfpm.effective_ini(
            env, binary, conf, plan.ini, sorted({*lab_servers.REPORTED_INI, *plan.ini})))
        say(f"shadow of pool {plan.pool}: starting php-fpm ({plan.workers} workers, PHP "
            f"{rec.state.php_version or '?'}) and nginx…")

        def record_fpm(pid: int) -> None:
            rec.record(fpm_master_pid=pid)
        labs.php_ini_file(state).parent.mkdir(parents=True, exist_ok=True)
        phpfpm.start(env, binary, conf, plan.ini, root / "log/php-fpm.out", plan.workers,
                     record_fpm, ini_dir=labs.php_ini_file(state).parent)
        rec.record(worker_pids=tuple(phpfpm.worker_pids(rec.state.fpm_master_pid)))
        lab_servers.start_nginx(env, rec, docroot, plan.front, fixed_port=False)
        rec.record(url=f"http://127.0.0.1:{rec.state.port}", phase="up")
    except BaseException:
        try:
            rec.record(phase="failed")
        except OSError:
            pass
        lab_build.down(env, plan.lab, quiet=True)
        raise
    return rec.state


@contextmanager
def running(env: Env, plan: ShadowPlan, say: Callable[[str], None]) -> Iterator[LabState]:
    """The shadow while the block runs; removed after it whatever happens (an error, Ctrl-C,
    SIGTERM as the CLI raises it). A shadow left by a killed statstorm: `lab down`."""
    state = up(env, plan, say)
    try:
        yield state
    finally:
        say(f"shadow of pool {plan.pool}: removing {state.state_dir}…")
        lab_build.down(env, plan.lab, quiet=True)

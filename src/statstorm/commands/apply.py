"""`statstorm apply`: make the changes `statstorm check` recommends, safely, and prove them.

Default is a dry run: the findings' changes as unified diffs of the files they go to. With
`yes`: every file is backed up first (`<state root>/apply/<stamp>-<pool>/`), written through a
temp file + rename, checked with `php-fpm -t` (and `nginx -t` when nginx changes), then the
php-fpm master (and nginx) reload gracefully; if a check fails, the reload fails or the pool
stops answering, the files are restored and reloaded again. With `verify`: a short traced
sweep before and after, with the same method; a change that made things worse is rolled back.

It touches only the pool's php-fpm configuration file, a file of its own in the FPM SAPI's
conf.d (settings only the master reads), the nginx files that pass requests to the pool and
/etc/fstab's line for a code mount; in a lab, only the lab's own files and volume.

Storage changes are live steps, undone like files: a GlusterFS volume option is set with
`gluster volume set` (the old value kept), and a GlusterFS FUSE mount gets new options from a
second client stacked on its mount point (a FUSE mount cannot change them in place, and
unmounting first would fail every request in between); open files stay with the client below,
and undoing unmounts the new one, which brings the old options back.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import shutil
import tempfile
import time
import urllib.error
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from statstorm.adapters import fastcgi, gluster, mounts, nginx, phpfpm, procs
from statstorm.commands import check as check_cmd
from statstorm.commands import lab as lab_cmd
from statstorm.commands import sweep as sweep_cmd
from statstorm.commands import trace as trace_cmd
from statstorm.context import Env
from statstorm.errors import ComponentError, PrivilegeError, UsageError
from statstorm.model import applyplan
from statstorm.model.applyplan import (MANUAL, MASTER_INI, MOUNT, NGINX, POOL, POOL_INI,
                                       VOLUME, Change)
from statstorm.model.findings import RULES, Finding
from statstorm.results.common import read_json, write_json_atomic, write_atomic

SCHEMA = "statstorm.apply/1"
MASTER_INI_NAME = "99-statstorm.ini"
FSTAB = Path("/etc/fstab")
# --verify: a change is "worse" beyond these margins (a short run's noise stays inside them).
WORSE_SYSCALLS = 0.02  # metadata calls per request up by more than 2 %
WORSE_RPS = 0.10  # throughput down by more than 10 %


@dataclass(frozen=True)
class ApplyOptions:
    findings: tuple[str, ...] = ()
    all: bool = False
    pool: str | None = None
    lab: str | None = None
    yes: bool = False
    verify: bool = False
    rollback: bool = False
    trace: Path | None = None
    url: str = ""  # --verify on a pool: the page to load
    verify_duration_s: float = 5.0
    verify_concurrency: int = 4


@dataclass
class Target:
    """What apply may touch for one pool, and how to check and reload it."""

    pool: str
    fpm_binary: str
    fpm_argv: list[str]  # binary + the options that decide its configuration (for -t)
    pool_file: Path
    master_pid: int
    listen: str
    master_ini: Path | None  # statstorm's own conf.d file; None: the lab (its -d options)
    nginx_files: list[Path] = field(default_factory=list)
    nginx_test: list[str] = field(default_factory=list)  # argv of `nginx -t`
    nginx_pid: int = 0
    url: str = ""  # a page of the app (health check and --verify)
    lab: str = ""
    control_timeout: str = ""  # php-fpm's process_control_timeout, as `php-fpm -tt` shows it
    fstab: Path | None = None  # where mount options persist (None: the lab, whose mount is its own)

    def to_json(self) -> dict[str, Any]:
        return {"pool": self.pool, "lab": self.lab, "pool_file": str(self.pool_file),
                "master_ini": str(self.master_ini) if self.master_ini else None,
                "nginx_files": [str(p) for p in self.nginx_files], "url": self.url}


@dataclass
class FileEdit:
    path: Path
    before: str | None  # None: the file does not exist yet
    after: str
    labels: tuple[str, str] = ("current", "recommended")

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            (self.before or "").splitlines(keepends=True), self.after.splitlines(keepends=True),
            f"{self.path} ({self.labels[0]})", f"{self.path} ({self.labels[1]})"))


@dataclass
class StorageStep:
    """A live storage change: options of a GlusterFS volume (VOLUME) or of a FUSE mount
    (MOUNT: a client with the new options stacked on the mount point)."""

    kind: str  # VOLUME | MOUNT
    where: str  # the volume, or the mount point
    before: dict[str, str]
    after: dict[str, str]
    client_argv: list[str] = field(default_factory=list)  # MOUNT: the client serving it before
    client_pid: int = 0  # MOUNT: the client apply started
    done: bool = False

    def text(self) -> str:
        what = f"gluster volume {self.where}" if self.kind == VOLUME else f"mount {self.where}"
        return what + ": " + ", ".join(f"{k} {self.before.get(k) or '(unset)'} → {v}"
                                       for k, v in self.after.items())

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "where": self.where, "before": self.before,
                "after": self.after, "client_argv": self.client_argv,
                "client_pid": self.client_pid, "done": self.done}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "StorageStep":
        return cls(str(d["kind"]), str(d["where"]), dict(d["before"]), dict(d["after"]),
                   list(d.get("client_argv") or []), int(d.get("client_pid") or 0),
                   bool(d.get("done")))


@dataclass
class ApplyResult:
    mode: str  # dry-run | applied | rolled-back | nothing
    target: Target | None
    changes: list[Change] = field(default_factory=list)
    edits: list[FileEdit] = field(default_factory=list)
    steps: list[StorageStep] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)  # asked-for ids check did not report
    backup: str = ""
    reason: str = ""  # why it was rolled back
    verify: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def manual(self) -> list[Change]:
        return [c for c in self.changes if c.kind == MANUAL]

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "mode": self.mode,
                "target": self.target.to_json() if self.target else None,
                "changes": [c.to_json() for c in self.changes if c.kind != MANUAL],
                "manual": [c.to_json() for c in self.manual],
                "files": [{"path": str(e.path), "created": e.before is None, "diff": e.diff()}
                          for e in self.edits],
                "storage": [st.to_json() for st in self.steps],
                "not_found": self.not_found, "backup": self.backup or None,
                "reason": self.reason or None, "verify": self.verify, "notes": self.notes}


def validate(env: Env, opts: ApplyOptions) -> None:
    if opts.pool and opts.lab:
        raise UsageError("give --pool or --lab, not both")
    if opts.rollback and (opts.findings or opts.all or opts.verify):
        raise UsageError("--rollback restores the last backup set: give it alone (with --lab or "
                         "--pool)")
    if not opts.rollback and not opts.findings and not opts.all:
        raise UsageError("name the findings to apply (ids from `statstorm check`) or give --all")
    if opts.findings and opts.all:
        raise UsageError("give finding ids or --all, not both")
    unknown = [f for f in opts.findings if f not in RULES]
    if unknown:
        raise UsageError(f"unknown finding id {unknown[0]!r}: see `statstorm check` or "
                         "docs/check.md for the ids")
    if opts.verify and not opts.yes:
        raise UsageError("--verify measures an applied change: add --yes")
    if opts.verify and not opts.lab and not opts.url:
        raise UsageError("--verify on a pool needs the page to load: add --url URL")
    if opts.url:
        try:
            sweep_cmd.check_loopback(opts.url, False)
        except UsageError:
            raise UsageError(f"--url {opts.url}: give an http(s) page of this machine's server "
                             "(127.0.0.1, ::1 or localhost)") from None
    if (opts.yes or opts.rollback) and not env.is_root():
        raise PrivilegeError("statstorm apply --yes/--rollback writes configuration files and "
                             "signals php-fpm: run it as root")


# -- target --------------------------------------------------------------------------------------
def resolve(env: Env, opts: ApplyOptions) -> Target:
    if opts.lab:
        state = lab_cmd.status(env, opts.lab)
        if state.phase != "up":
            raise UsageError(f"lab {opts.lab!r} is not up; start it with `statstorm lab up "
                             f"--name {opts.lab}`")
        root = Path(state.state_dir)
        argv = [state.fpm_binary, "-y", str(root / "conf/php-fpm.conf"),
                *phpfpm.ini_args(state.php_ini)]
        ngx = root / "conf/nginx.conf"
        return Target(state.pool, state.fpm_binary, argv, root / "conf/php-fpm.conf",
                      state.fpm_master_pid, state.fpm_socket, None, [ngx],
                      [*nginx.lab_argv(ngx, root), "-t", "-q"],
                      state.nginx_pid, state.url + state.entry_path, lab=opts.lab)
    pools = [opts.pool] if opts.pool else check_cmd.running_pools()
    if len(pools) != 1:
        raise UsageError("name the pool to change with --pool NAME" + (
            f" (running: {', '.join(pools)})" if pools else ": no php-fpm pool is running"))
    pool = pools[0]
    workers = trace_cmd.pool_workers(pool)
    if not workers:
        raise UsageError(f"no php-fpm pool {pool!r} is running (no process titled "
                         f"'php-fpm: pool {pool}')")
    master, binary, conf_name = phpfpm.master_of(workers[0])
    if not conf_name:
        raise UsageError(f"cannot tell the php-fpm master {master}'s configuration file from its "
                         "process title")
    conf = Path(conf_name)
    found = phpfpm.pool_file(conf, pool)
    if found is None:
        raise UsageError(f"no file among {conf} and its includes holds [{pool}]")
    argv = [binary, "-y", str(conf)]
    res = env.run([binary, "-i", "-y", str(conf)], check=False, what="php-fpm -i")
    scan = phpfpm.ini_scan_dir(res.stdout)
    res = env.run([binary, "-tt", "-y", str(conf)], check=False, what="php-fpm -tt")
    tt = res.stderr + res.stdout
    listen = phpfpm.pool_directives(tt, pool).get("listen", "")
    control = phpfpm.pool_directives(tt, "global").get("process_control_timeout", "")
    files: list[Path] = []
    test: list[str] = []
    npid = 0
    for pid, nargv in nginx.running_masters_by_pid():
        dump = env.run([*nargv, "-T"], check=False, what="nginx -T").stdout
        names = nginx.files_passing_to(dump, listen)
        if names:
            files, test, npid = [Path(n) for n in names], [*nargv, "-t", "-q"], pid
            break
    return Target(pool, binary, argv, found, master, listen,
                  Path(scan) / MASTER_INI_NAME if scan else None, files, test, npid, opts.url,
                  control_timeout=control, fstab=FSTAB)


# -- planning -----------------------------------------------------------------------------------
def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def plan_edits(target: Target, changes: list[Change]) -> tuple[list[Change], list[FileEdit]]:
    """The file edits that carry `changes`; changes with no file to go to become manual."""
    out: list[Change] = []
    for c in changes:
        if c.kind == MASTER_INI and target.master_ini is None:
            c = Change(c.finding, MANUAL, c.key, c.value, c.line,
                       f"{c.key} is read by the php-fpm master at start-up and the lab passes "
                       f"its ini as -d options: recreate the lab with `statstorm lab up "
                       f"--php-ini {c.key}={c.value}`", c.current)
        elif c.kind == NGINX and not target.nginx_files:
            c = Change(c.finding, MANUAL, c.key, c.value, c.line,
                       "no running nginx passes requests to this pool: change its web server "
                       "by hand", c.current)
        out.append(c)
    edits: list[FileEdit] = []
    try:
        pool_changes = [c for c in out if c.kind in (POOL_INI, POOL)]
        if pool_changes:
            before = _read(target.pool_file) or ""
            edits.append(FileEdit(target.pool_file, before,
                                  applyplan.edit_pool(before, target.pool, pool_changes)))
        master = [c for c in out if c.kind == MASTER_INI]
        if master and target.master_ini is not None:
            before_ini = _read(target.master_ini)
            edits.append(FileEdit(target.master_ini, before_ini,
                                  applyplan.edit_ini(before_ini or "", master)))
        params = [c for c in out if c.kind == NGINX]
        for path in target.nginx_files if params else []:
            text = _read(path) or ""
            edits.append(FileEdit(path, text, applyplan.edit_nginx(text, params, target.listen)))
    except ValueError as exc:
        raise UsageError(f"cannot write this change: {exc}") from None
    return out, [e for e in edits if e.before != e.after]


def _as_manual(changes: list[Change], why: str) -> list[Change]:
    """One manual step per distinct line (a mount line gives one change per option)."""
    out: dict[str, Change] = {}
    for c in changes:
        out.setdefault(c.line, Change(c.finding, MANUAL, "", "", c.line, why, where=c.where))
    return list(out.values())


def _mount_step(env: Env, mp: str, cs: list[Change]) -> StorageStep | str:
    """The step that gives the mount at `mp` these options, or why apply cannot."""
    info = mounts.detect(mp)
    if info.mount_point.rstrip("/") != mp.rstrip("/"):
        return f"{mp} is not a mount point now"
    if info.kind == "nfs":
        return ("an NFS mount takes attribute and lookup cache options only when it is mounted "
                "anew: put them in /etc/fstab and remount it while the site is quiet")
    if info.kind != "glusterfs-fuse":
        return f"{mp} is {info.fstype}: change its options by hand"
    client = mounts.fuse_client(mp, "glusterfs")
    if client is None:
        return f"no GlusterFS client process serves {mp}"
    current = mounts.gluster_client_options(client[1])
    before = {c.key: current.get(c.key, mounts.GLUSTER_FUSE_DEFAULTS.get(c.key, ""))
              for c in cs}
    return StorageStep(MOUNT, mp, before, {c.key: c.value for c in cs}, client[1])


def _volume_step(env: Env, volume: str, cs: list[Change]) -> StorageStep | str:
    if not shutil.which("gluster"):
        return "the gluster CLI is not on this machine: run it on a server of the volume"
    try:
        current = gluster.volume_options(env, volume)
    except ComponentError:
        return f"volume {volume} is not managed from this machine: run it on one of its servers"
    before = {c.key: current.get(c.key, "").replace("(DEFAULT)", "").strip() for c in cs}
    return StorageStep(VOLUME, volume, before, {c.key: c.value for c in cs})


def plan_storage(env: Env, target: Target, changes: list[Change],
                 ) -> tuple[list[Change], list[StorageStep], list[FileEdit], list[str]]:
    """The live steps (and /etc/fstab edits) that carry the MOUNT and VOLUME changes; the
    ones apply cannot make become manual, with the reason."""
    out = [c for c in changes if c.kind not in (MOUNT, VOLUME)]
    groups: dict[tuple[str, str], list[Change]] = {}
    for c in changes:
        if c.kind in (MOUNT, VOLUME):
            groups.setdefault((c.kind, c.where), []).append(c)
    steps: list[StorageStep] = []
    for (kind, where), cs in groups.items():
        made = _mount_step(env, where, cs) if kind == MOUNT else _volume_step(env, where, cs)
        if isinstance(made, str):
            out += _as_manual(cs, made)
            continue
        out += [dataclasses.replace(c, current=made.before.get(c.key)) for c in cs]
        if made.before != made.after:
            steps.append(made)
    edits: list[FileEdit] = []
    notes: list[str] = []
    for st in (st for st in steps if st.kind == MOUNT):
        if target.fstab is None:
            continue
        text = _read(target.fstab) or ""
        mine = [c for c in out if c.kind == MOUNT and c.where == st.where]
        after = applyplan.edit_fstab(text, st.where, mine)
        if after is None:
            notes.append(f"{st.where} is not in {target.fstab}: its new options last until "
                         "it is mounted again")
        elif after != text:
            edits.append(FileEdit(target.fstab, text, after))
    return out, steps, edits, notes


def _check(env: Env, opts: ApplyOptions) -> tuple[list[Finding], dict[str, str]]:
    """The pool's findings and live settings, as `statstorm check` sees them."""
    env.log("reading the live configuration (statstorm check)…")
    res = check_cmd.run(env, check_cmd.CheckOptions(pools=(opts.pool,) if opts.pool else (),
                                                    lab=opts.lab, trace=opts.trace))
    settings = res.pools[0].facts.settings if res.pools else {}
    return res.findings, {k: str(v) for k, v in settings.items()}


def plan(env: Env, opts: ApplyOptions) -> ApplyResult:
    """What would change (the dry run), from the findings check reports now."""
    target = resolve(env, opts)
    found, settings = _check(env, opts)
    chosen = [f for f in found if opts.all or f.id in opts.findings]
    result = ApplyResult("dry-run", target,
                         not_found=[i for i in opts.findings if i not in {f.id for f in found}])
    changes = applyplan.merge([c for f in chosen for c in applyplan.classify(f, settings)])
    changes, result.steps, fstab_edits, result.notes = plan_storage(env, target, changes)
    result.changes, result.edits = plan_edits(target, changes)
    result.edits += fstab_edits
    if not result.edits and not result.steps:
        result.mode = "nothing"
    if target.control_timeout.rstrip("s") == "0" and (result.edits or result.steps):
        result.notes.append("process_control_timeout = 0: a php-fpm reload does not wait for "
                            "running requests; set `process_control_timeout = 10s` in [global] "
                            "for a graceful reload")
    return result


# -- files --------------------------------------------------------------------------------------
def apply_root(env: Env) -> Path:
    return env.state_root / "apply"


def save_backup(env: Env, target: Target, edits: list[FileEdit],
                steps: list[StorageStep] | None = None) -> Path:
    """Copy every file about to change into a new backup set; refuse if one changed since the
    plan was made (someone else is editing it)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    d = apply_root(env) / f"{stamp}-{re.sub(r'[^A-Za-z0-9_.-]', '_', target.pool)}"
    d.mkdir(parents=True)
    entries: list[dict[str, Any]] = []
    for i, e in enumerate(edits):
        if _read(e.path) != e.before:
            shutil.rmtree(d, ignore_errors=True)
            raise UsageError(f"{e.path} changed while apply was planning: run it again")
        entry: dict[str, Any] = {"path": str(e.path), "existed": e.before is not None}
        if e.before is not None:
            copy = d / f"{i}-{e.path.name}"
            shutil.copy2(e.path, copy)
            st = e.path.stat()
            entry.update(copy=copy.name, mode=st.st_mode & 0o7777, uid=st.st_uid, gid=st.st_gid)
        entries.append(entry)
    write_json_atomic(d / "manifest.json", {
        "schema": SCHEMA, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "target": target.to_json(), "files": entries,
        "storage": [st.to_json() for st in steps or []], "status": "applying"})
    return d


def _save_steps(d: Path, steps: list[StorageStep]) -> None:
    data = _manifest(d)
    data["storage"] = [st.to_json() for st in steps]
    write_json_atomic(d / "manifest.json", data)


def _manifest(d: Path) -> dict[str, Any]:
    data = read_json(d / "manifest.json", "apply backup manifest")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UsageError(f"{d}/manifest.json: not a statstorm apply backup set")
    return data


def _mark(d: Path, status: str, reason: str = "") -> None:
    data = _manifest(d)
    data["status"] = status
    if reason:
        data["reason"] = reason
    write_json_atomic(d / "manifest.json", data)


def restore(d: Path) -> list[Path]:
    """Put back every file of a backup set (remove the ones apply created)."""
    out = []
    for entry in _manifest(d)["files"]:
        path = Path(entry["path"])
        if entry["existed"]:
            write_atomic(path, (d / entry["copy"]).read_bytes(), new_mode=int(entry["mode"]))
            if os.geteuid() == 0:
                os.chown(path, int(entry["uid"]), int(entry["gid"]))
        else:
            path.unlink(missing_ok=True)
        out.append(path)
    return out


# -- checking and reloading ---------------------------------------------------------------------
class ApplyFailed(Exception):
    """Validation, reload or the health check failed: the caller rolls back."""


def _check_fstab(env: Env, fstab: Path, mount_points: list[str]) -> None:
    """`findmnt --verify` on the fstab lines of these mount points (the rest of the file is
    not apply's business)."""
    lines = [ln for ln in fstab.read_text().splitlines()
             if len(ln.split()) >= 4 and not ln.lstrip().startswith("#")
             and ln.split()[1].replace("\\040", " ") in mount_points]
    with tempfile.NamedTemporaryFile("w", prefix="statstorm-fstab-") as tmp:
        tmp.write("\n".join(lines) + "\n")
        tmp.flush()
        res = env.run(["findmnt", "--verify", "--tab-file", tmp.name], check=False,
                      what="findmnt --verify")
    if res.returncode != 0:
        errors = [ln.strip() for ln in res.stdout.splitlines() if "[E]" in ln]
        raise ApplyFailed(f"findmnt --verify rejected {fstab}'s line for "
                          f"{', '.join(mount_points)} ({(errors or [res.first_error_line()])[0]})")


def test_config(env: Env, target: Target, paths: list[Path],
                mount_points: list[str] | None = None) -> None:
    """`php-fpm -t` (and `nginx -t` when an nginx file changed, `findmnt --verify` when fstab
    did) on the files as written."""
    if target.fstab is not None and target.fstab in paths and mount_points:
        _check_fstab(env, target.fstab, mount_points)
    res = env.run([target.fpm_argv[0], "-t", *target.fpm_argv[1:]], check=False,
                  what="php-fpm -t")
    if res.returncode != 0:
        lines = [ln for ln in (res.stderr + res.stdout).splitlines() if "ERROR" in ln]
        first = (lines or [res.first_error_line()])[0].strip()
        raise ApplyFailed(f"php-fpm -t rejected the change ({first.split('ERROR: ')[-1]})")
    if any(p in target.nginx_files for p in paths) and target.nginx_test:
        res = env.run(target.nginx_test, check=False, what="nginx -t")
        if res.returncode != 0:
            raise ApplyFailed(f"nginx -t rejected the change ({res.first_error_line()})")


def reload(env: Env, target: Target, paths: list[Path], fpm: bool = False) -> None:
    """Reload what the changed files belong to; `fpm`: php-fpm anyway (its workers then
    open the code through a new mount, with cold caches)."""
    fpm_files = {target.pool_file, *([target.master_ini] if target.master_ini else [])}
    try:
        if fpm or any(p in fpm_files for p in paths):
            env.log(f"reloading php-fpm gracefully (master {target.master_pid})…")
            phpfpm.reload(target.master_pid, procs.children(target.master_pid))
        if any(p in target.nginx_files for p in paths):
            if not target.nginx_pid:
                raise ComponentError("nginx changed but its master is unknown: reload it by hand")
            env.log(f"reloading nginx gracefully (master {target.nginx_pid})…")
            nginx.reload(target.nginx_pid)
    except (ComponentError, OSError) as exc:
        raise ApplyFailed(f"the reload failed ({exc})") from None


def _same(got: str, want: str) -> bool:
    words = {"on": "1", "yes": "1", "true": "1", "off": "0", "no": "0", "false": "0", "": "0"}
    if want in ("0", "1"):
        return words.get(got.strip().lower(), got.strip()) == want
    return got.strip() == want.strip()


def health(env: Env, target: Target, changes: list[Change], timeout: float = 20.0) -> list[str]:
    """Raise ApplyFailed unless the pool (and the app's page) answers; return notes on settings
    that are not in effect although written."""
    keys = tuple(c.key for c in changes if c.kind in (POOL_INI, MASTER_INI))
    deadline = time.monotonic() + timeout
    answers: list[dict[str, Any]] = []
    while True:
        try:
            answers = check_cmd.query_pool(env, target.listen, 1, keys)
            break
        except fastcgi.AnsweredError:
            break  # it answered, without the query's JSON (open_basedir keeps the script out)
        except ComponentError as exc:
            if time.monotonic() > deadline:
                raise ApplyFailed(f"the pool stopped answering ({exc})") from None
            time.sleep(0.5)
    if target.url:
        status, body = 0, ""
        while time.monotonic() < deadline + 10:
            try:
                status, body = lab_cmd.fetch(target.url, timeout=30)
                if status not in (502, 503, 504):  # a gateway error may pass; others will not
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                body = str(exc)
            time.sleep(0.5)
        if status != 200:
            raise ApplyFailed(f"{target.url} answered {status or 'nothing'} after the reload "
                              f"({' '.join(body.split())[:80]!r})")
    notes = []
    ini = (answers[0].get("ini") or {}) if answers else {}
    for c in changes:
        if c.kind in (POOL_INI, MASTER_INI) and c.key in ini and not _same(str(ini[c.key]), c.value):
            notes.append(f"{c.key} is {ini[c.key]!r} in the pool after the reload, not "
                         f"{c.value!r}: something else sets it (a .user.ini, ini_set)")
    if not answers:
        notes.append("the pool answered but could not run the settings query (open_basedir?): "
                     "the new values are not confirmed")
    return notes


def _do_step(env: Env, target: Target, st: StorageStep) -> None:
    """Make one storage step; ApplyFailed when the new mount does not serve the same tree."""
    env.log(f"storage: {st.text()}")
    if st.kind == VOLUME:
        st.done = True  # a half-made step is undone whole
        try:
            for key, value in st.after.items():
                gluster.set_volume_option(env, st.where, key, value)
        except ComponentError as exc:
            raise ApplyFailed(str(exc)) from None
        return
    mp = Path(st.where)
    listing = sorted(os.listdir(mp))
    try:
        st.client_pid = gluster.stack_client(
            env, gluster.client_argv_with(st.client_argv, st.after), mp)
    except ComponentError as exc:
        raise ApplyFailed(f"the remount of {mp} failed ({exc})") from None
    st.done = True
    top = mounts.fuse_client(st.where, "glusterfs")
    got = mounts.gluster_client_options(top[1]) if top else {}
    if top is None or top[0] != st.client_pid or any(got.get(k) != v for k, v in st.after.items()):
        raise ApplyFailed(f"the new client of {mp} does not serve it with {st.after}")
    if sorted(os.listdir(mp)) != listing:
        raise ApplyFailed(f"the remounted {mp} does not show the same files")
    if target.lab:
        lab_cmd.record_mount(env, target.lab, st.after, st.client_pid)


def _undo_step(env: Env, target: Target, st: StorageStep) -> None:
    if not st.done:
        return
    env.log(f"storage: undoing {st.text()}")
    if st.kind == VOLUME:
        for key, value in st.before.items():
            if value:
                gluster.set_volume_option(env, st.where, key, value)
            else:
                gluster.reset_volume_option(env, st.where, key)
    else:
        top = mounts.fuse_client(st.where, "glusterfs")
        if top is None or top[0] != st.client_pid:
            raise ComponentError(f"{st.where} is no longer served by the client apply started "
                                 f"(PID {st.client_pid}): unmount it by hand")
        gluster.unmount(env, Path(st.where), st.client_pid)
        below = mounts.fuse_client(st.where, "glusterfs")
        if target.lab:
            lab_cmd.record_mount(env, target.lab, st.before, below[0] if below else 0)
    st.done = False


def _install(env: Env, target: Target, edits: list[FileEdit], changes: list[Change],
             steps: list[StorageStep]) -> list[str]:
    """Change the storage, write, test, reload and check; ApplyFailed on any failure (steps
    and files may be half-way)."""
    for st in steps:
        _do_step(env, target, st)
    for e in edits:
        write_atomic(e.path, e.after, e.path.stat() if e.before is not None else None,
                          new_mode=0o644)
    paths = [e.path for e in edits]
    test_config(env, target, paths, [st.where for st in steps if st.kind == MOUNT])
    reload(env, target, paths, fpm=bool(steps))
    return health(env, target, changes)


def _roll_back(env: Env, target: Target, backup: Path, reason: str,
               steps: list[StorageStep] | None = None) -> None:
    """Restore the backup set and undo the storage steps, reload, check; mark the set
    rolled back."""
    env.log(f"rolling back: {reason}")
    paths = restore(backup)
    undone = [st for st in steps or [] if st.done]
    try:
        for st in reversed(undone):
            _undo_step(env, target, st)
        test_config(env, target, paths)
        reload(env, target, paths, fpm=bool(undone))
        health(env, target, [])
    except (ApplyFailed, ComponentError) as exc:
        if steps:
            _save_steps(backup, steps)
        _mark(backup, "rollback-failed", f"{reason}; then {exc}")
        raise ComponentError(f"{reason}; the previous files are back but {exc}: see "
                             f"{backup}/manifest.json") from None
    if steps:
        _save_steps(backup, steps)
    _mark(backup, "rolled-back", reason)


# -- verifying ----------------------------------------------------------------------------------
def measure(env: Env, target: Target, opts: ApplyOptions) -> dict[str, Any]:
    """One short traced run at one concurrency (a sweep of one level, after a warm-up):
    throughput, latency and metadata calls per request."""
    with tempfile.TemporaryDirectory(prefix="statstorm-apply-") as tmp:
        p = sweep_cmd.Plan(
            url=target.url, tool="wrk", model="closed",
            levels=(float(opts.verify_concurrency),), duration_s=opts.verify_duration_s,
            warmup_s=2.0, repeats=1, timeout_s=10.0, expect_status=200, expect_text="",
            fpm_status_url=None, pool=None, output=Path(tmp) / "sweep.json", plot=None,
            trace_lab=target.lab or None, trace_pool=None if target.lab else target.pool)
        res = sweep_cmd.run(env, p, progress=lambda msg, lv: env.log(f"verify: {msg}"))
    lv = res.levels[0]
    return {"rps": round(lv.rps, 1), "p50_ms": round(lv.p50, 2),
            "p99_ms": round(lv.p99, 2), "errors": lv.errors.total,
            "syscalls_per_request": lv.server.file_syscalls_per_request,
            "failed_per_request": lv.server.failed_per_request,
            "requests": sum(r.run.requests for r in lv.repeats)}


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The change from `before` to `after`, and why it is worse (empty: it is not)."""
    def rel(key: str) -> float | None:
        b, a = before.get(key), after.get(key)
        return None if not b or a is None else round((a - b) / b, 4)

    why = []
    sc = rel("syscalls_per_request")
    if sc is not None and sc > WORSE_SYSCALLS:
        why.append(f"metadata calls per request rose {sc:+.1%}")
    rps = rel("rps")
    if rps is not None and rps < -WORSE_RPS:
        why.append(f"throughput fell {rps:+.1%}")
    if after.get("errors", 0) > before.get("errors", 0):
        why.append(f"{after['errors']} failed requests (before: {before.get('errors', 0)})")
    return {"before": before, "after": after,
            "change": {"rps": rps, "p50_ms": rel("p50_ms"), "p99_ms": rel("p99_ms"),
                       "syscalls_per_request": sc},
            "worse": "; ".join(why)}


# -- the command --------------------------------------------------------------------------------
def run(env: Env, opts: ApplyOptions) -> ApplyResult:
    validate(env, opts)
    if opts.rollback:
        return rollback(env, opts)
    result = plan(env, opts)
    if not opts.yes or not (result.edits or result.steps):
        return result
    return execute(env, result, opts)


def execute(env: Env, result: ApplyResult, opts: ApplyOptions) -> ApplyResult:
    """Make the planned edits: back up, write, test, reload, check; roll back on failure;
    with opts.verify, measure before and after and roll back a change for the worse."""
    target = result.target
    assert target is not None
    before = None
    if opts.verify:
        env.log("verify: measuring before the change…")
        before = measure(env, target, opts)
    backup = save_backup(env, target, result.edits, result.steps)
    result.backup = str(backup)
    env.log(f"backed up {len(result.edits)} file(s) to {backup}")
    try:
        result.notes += _install(env, target, result.edits, result.changes, result.steps)
    except ApplyFailed as exc:
        _roll_back(env, target, backup, str(exc), result.steps)
        raise ComponentError(f"{exc}: rolled back, the pool serves with the previous "
                             f"configuration (backup {backup})") from None
    except BaseException:
        _roll_back(env, target, backup, "interrupted while applying", result.steps)
        raise
    _save_steps(backup, result.steps)
    _mark(backup, "applied")
    result.mode = "applied"
    if before is not None:
        env.log("verify: measuring after the change…")
        result.verify = compare(before, measure(env, target, opts))
        if result.verify["worse"]:
            result.reason = f"--verify: {result.verify['worse']}"
            _roll_back(env, target, backup, result.reason, result.steps)
            result.mode = "rolled-back"
        else:
            _mark(backup, "verified")
    return result


def backup_sets(env: Env) -> list[Path]:
    root = apply_root(env)
    return sorted(p for p in root.iterdir() if (p / "manifest.json").is_file()) if root.is_dir() else []


def rollback(env: Env, opts: ApplyOptions) -> ApplyResult:
    """Restore the newest backup set still in effect (for the pool or lab, if one is named)."""
    for d in reversed(backup_sets(env)):
        data = _manifest(d)
        t = data.get("target") or {}
        if data.get("status") not in ("applied", "verified"):
            continue
        if (opts.lab and t.get("lab") != opts.lab) or (opts.pool and t.get("pool") != opts.pool):
            continue
        target = resolve(env, ApplyOptions(lab=t.get("lab") or None,
                                           pool=None if t.get("lab") else t.get("pool"),
                                           url=t.get("url") or ""))
        edits = []
        for entry in data["files"]:
            path = Path(entry["path"])
            before = (d / entry["copy"]).read_text() if entry["existed"] else None
            edits.append(FileEdit(path, _read(path), before or "", ("now", "restored")))
        steps = [StorageStep.from_json(x) for x in data.get("storage") or []]
        _roll_back(env, target, d, "statstorm apply --rollback", steps)
        return ApplyResult("rolled-back", target, edits=edits, steps=steps, backup=str(d),
                           reason="statstorm apply --rollback")
    where = f" for {'lab ' + opts.lab if opts.lab else 'pool ' + str(opts.pool)}" if (
        opts.lab or opts.pool) else ""
    raise UsageError(f"no applied change to roll back{where} (backup sets: {apply_root(env)})")


__all__ = ["ApplyOptions", "ApplyResult", "run"]

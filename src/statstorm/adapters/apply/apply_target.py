"""Where apply's changes go: the target of a lab or of a running php-fpm pool (its files, its
master, the web server in front), and the file edits that carry a set of changes there."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from statstorm.adapters.apply import backups
from statstorm.adapters.labs import apache_lab, phpfpm, shadow, state as labs
from statstorm.adapters.php import fpm_master, php_targets, server_php, target
from statstorm.adapters.servers import nginx, nginx_conf
from statstorm.adapters.storage import fstab
from statstorm.adapters.apply.pool_config import Target
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.model import apacheplan, applyplan
from statstorm.model.applyplan import (APACHE, APP, FPM_GLOBAL, MANUAL, MASTER_INI, NGINX,
                                       NGINX_ROOT, POOL, POOL_INI, Change)
from statstorm.results.apply import FileEdit
from statstorm.results.serving import Handler

MASTER_INI_NAME = php_targets.MASTER_INI_NAME


def system_apache(php: target.PhpTarget, url: str) -> Target:
    """The system Apache's PHP as apply changes it: PHP settings in statstorm's file of the
    SAPI's conf.d (`/etc/php/VERSION/apache2/conf.d/99-statstorm.ini`, the version its
    binary names, else the host's), tested with `apache2ctl configtest`, applied with
    `apache2ctl graceful`."""
    assert isinstance(php, server_php.ServerPhp)
    ini = Path(php.runtime.etc(php.sapi_dir)) / "conf.d" / MASTER_INI_NAME
    ctl = list(php.ctl)
    sites = [f"http://{_loopback(s.vhost.address)}:{s.vhost.port}/" for s in php.sites]
    return Target(php.name, php.binary, [], ini, 0, "", ini, [], [], 0, url,
                  apache_test=[*ctl, "configtest"], apache_pid=php.server_pid,
                  php_in_apache=True, apache_ctl=ctl, apache_sites=sites)


def _loopback(address: str) -> str:
    host = address.rpartition(":")[0]
    return "127.0.0.1" if host in ("*", "_default_", "0.0.0.0", "") else host.strip("[]")


def resolve(env: Env, *, lab: str | None, pool: str | None, url: str = "",
            apache: bool = False) -> Target:
    """The pool (or lab) apply changes, with every file and process its changes go to: a
    lab's own files, the system Apache's PHP (`apache`, or when it is the only PHP running),
    or a running pool's configuration, its master's ini directory and the nginx files that
    pass requests to it."""
    if apache:
        return system_apache(target.require_system_apache(env), url)
    if not lab and not pool:
        only = target.sole(env)
        if isinstance(only, server_php.ServerPhp):
            return system_apache(only, url)
        pool = only.name
    if lab:
        state = labs.require_up(env, lab)
        # PHP inside Apache reads the lab's own ini file (its --php-ini): apply edits it;
        # a php-fpm master reads its -d options, then settings only it reads from here
        ini = target.kind_of(state.handler).lab_ini_file(state)
        url = state.url + state.entry_path
        in_apache = Handler(state.handler).php_in_server
        if state.server == "apache":
            conf = labs.apache_conf(state)
            apache_t = [*apache_lab.lab_argv(conf), "-t"]
            return Target(state.pool or f"lab-{state.name}", state.fpm_binary,
                          labs.fpm_argv(state) if state.pool else [], labs.fpm_conf(state),
                          state.fpm_master_pid, state.fpm_socket, ini, [], [], 0, url,
                          lab=lab, apache_conf=conf, apache_test=apache_t,
                          apache_pid=state.apache_pid, php_in_apache=in_apache,
                          fstab=fstab.location(env, lab=True),
                          fpm_conf=labs.fpm_conf(state) if state.pool else None)
        ngx = labs.nginx_conf(state)
        return Target(state.pool, state.fpm_binary, labs.fpm_argv(state), labs.fpm_conf(state),
                      state.fpm_master_pid, state.fpm_socket, ini, [ngx],
                      [*nginx.lab_argv(ngx, Path(state.state_dir)), "-t", "-q"],
                      state.nginx_pid, url, lab=lab, fstab=fstab.location(env, lab=True),
                      fpm_conf=labs.fpm_conf(state))
    fpm = php_targets.find_pool(pool or fpm_master.only_pool("to change"))
    pool, binary = fpm.name, fpm.binary
    if not fpm.conf:
        raise UsageError(f"cannot tell the php-fpm master {fpm.masters}'s configuration file "
                         "from its process title")
    conf = Path(fpm.conf)
    found = phpfpm.pool_file(conf, pool)
    if found is None:
        raise UsageError(f"no file among {conf} and its includes holds [{pool}]")
    argv = [binary, "-y", str(conf)]
    res = env.run([*phpfpm.command(binary), "-i", "-y", str(conf)], check=False,
                  what="php-fpm -i")
    scan = phpfpm.ini_scan_dir(res.stdout)
    if scan and fpm.runtime.root:  # the master's conf.d as this machine sees it
        scan = str(fpm.runtime.host_path(scan))
    tt = php_targets.fpm_tt(env, argv)
    listen = phpfpm.pool_directives(tt, pool).get("listen", "")
    control = phpfpm.pool_directives(tt, "global").get("process_control_timeout", "")
    pid_file = fpm_master.pid_file(tt)
    named = fpm_master.master_named(pid_file, fpm.conf)  # a stale pid file: nothing changed
    master = named if named in fpm.masters else fpm.masters[0] if fpm.masters else named
    files: list[Path] = []
    test: list[str] = []
    npid = 0
    for pid, nargv in nginx.running_masters_by_pid():
        config = nginx.read_master(nargv)
        names = nginx_conf.files_passing_to(config, listen)
        names += tuple(dict.fromkeys(  # where a mirror's root is switched (adapters/apply/mirror)
            r.file for r in nginx_conf.roots_passing_to(config, listen)
            if names and r.file and r.level != "http" and r.file not in names))
        if names:
            files, test, npid = [Path(n) for n in names], [*nargv, "-t", "-q"], pid
            break
    return Target(pool, binary, argv, found, master, listen,
                  Path(scan) / MASTER_INI_NAME if scan else None, files, test, npid, url,
                  control_timeout=control, fstab=fstab.location(env, lab=False),
                  pid_file=pid_file, fpm_conf=conf)


def master_defines(argv: list[str]) -> dict[str, str]:
    """The `-d KEY=VALUE` options of a php-fpm master's command line (`Target.fpm_argv`: a
    lab's carries its ini overrides; a running pool's title hides them, so none is known)."""
    defines, _ = shadow.master_ini(php_targets.settings_args(argv))
    return defines


def overridden(target: Target, change: Change) -> Change | None:
    """`change` made manual when the master's `-d` for its key would beat the file apply
    writes (php.ini, conf.d and the lab's ini file are read before -d; a pool's
    php_admin_value is set after it, so POOL_INI changes are not affected)."""
    if change.kind != MASTER_INI or target.php_in_apache:
        return None
    defines = master_defines(target.fpm_argv)
    if change.key not in defines:
        return None
    given = f"-d {change.key}={defines[change.key]}"
    how = (f"recreate the lab without `--php-ini {change.key}={defines[change.key]}`"
           if target.lab else f"remove `{given}` from the master's command line and restart it")
    return Change(change.finding, MANUAL, change.key, change.value, change.line,
                  f"the php-fpm master runs with `{given}`, which overrides any ini file: "
                  f"{how}", change.current)


def plan_edits(target: Target, changes: list[Change]) -> tuple[list[Change], list[FileEdit]]:
    """The file edits that carry `changes`; changes with no file to go to, or that the
    master's `-d` options would override, become manual."""
    out: list[Change] = []
    for c in changes:
        c = overridden(target, c) or c
        if target.php_in_apache and c.kind == POOL_INI:  # no pool: the lab's ini file
            c = dataclasses.replace(c, kind=MASTER_INI)
        if target.php_in_apache and c.kind == POOL:
            c = Change(c.finding, MANUAL, c.key, c.value, c.line,
                       "PHP runs inside Apache here: its process limits are Apache's "
                       "(MaxRequestWorkers, FcgidMaxProcesses)", c.current)
        elif c.kind == APACHE and target.apache_conf is None:
            c = Change(c.finding, MANUAL, c.key, c.value, c.line,
                       "no Apache configuration of this target is known: change it by hand",
                       c.current)
        if c.kind == MASTER_INI and target.master_ini is None:
            c = Change(c.finding, MANUAL, c.key, c.value, c.line,
                       f"{c.key} is read by the php-fpm master at start-up and the lab passes "
                       f"its ini as -d options: recreate the lab with `statstorm lab up "
                       f"--php-ini {c.key}={c.value}`", c.current)
        elif c.kind == FPM_GLOBAL and target.fpm_conf is None:
            c = Change(c.finding, MANUAL, c.key, c.value, c.line,
                       "no php-fpm configuration of this target is known: set it in [global] "
                       "by hand", c.current)
        elif c.kind == NGINX and not target.nginx_files:
            c = Change(c.finding, MANUAL, c.key, c.value, c.line,
                       "no running nginx passes requests to this pool: change its web server "
                       "by hand", c.current)
        out.append(c)
    edits: list[FileEdit] = []
    try:
        pool_changes = [c for c in out if c.kind in (POOL_INI, POOL)]
        fpm_global = [c for c in out if c.kind == FPM_GLOBAL]
        same = target.fpm_conf == target.pool_file  # a lab's one file holds both
        if pool_changes or (fpm_global and same):
            before = backups.read_text(target.pool_file) or ""
            after = applyplan.edit_pool(before, target.pool, pool_changes)
            edits.append(FileEdit(target.pool_file, before, applyplan.edit_global(
                after, fpm_global) if fpm_global and same else after))
        if fpm_global and target.fpm_conf is not None and not same:
            before_conf = backups.read_text(target.fpm_conf) or ""
            edits.append(FileEdit(target.fpm_conf, before_conf,
                                  applyplan.edit_global(before_conf, fpm_global)))
        master = [c for c in out if c.kind == MASTER_INI]
        if master and target.master_ini is not None:
            before_ini = backups.read_text(target.master_ini)
            edits.append(FileEdit(target.master_ini, before_ini,
                                  applyplan.edit_ini(before_ini or "", master)))
        directives = [c for c in out if c.kind == APACHE]
        if directives and target.apache_conf is not None:
            conf_text = backups.read_text(target.apache_conf) or ""
            edits.append(FileEdit(target.apache_conf, conf_text,
                                  apacheplan.edit_apache(conf_text, directives)))
        params = [c for c in out if c.kind == NGINX]
        roots = [c for c in out if c.kind == NGINX_ROOT]
        for path in target.nginx_files if params or roots else []:
            text = backups.read_text(path) or ""
            after = applyplan.edit_nginx(text, params, target.listen) if params else text
            after = applyplan.edit_roots(after, [(int(c.where.rpartition(":")[2]), c.value)
                                                 for c in roots
                                                 if c.where.rpartition(":")[0] == str(path)])
            edits.append(FileEdit(path, text, after))
        for where in dict.fromkeys(c.where for c in out if c.kind == APP):
            app_text = backups.read_text(Path(where))
            if app_text is None:
                raise ValueError(f"{where} does not exist")
            edits.append(FileEdit(Path(where), app_text, applyplan.edit_app(
                app_text, [c for c in out if c.kind == APP and c.where == where])))
    except ValueError as exc:
        raise UsageError(f"cannot write this change: {exc}") from None
    return out, [e for e in edits if e.before != e.after]

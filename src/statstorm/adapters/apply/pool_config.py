"""A php-fpm pool's configuration as apply changes it: the files it may touch, how they
are tested (`php-fpm -t`, `nginx -t`, `findmnt --verify`), how the pool and its web server
reload gracefully, and whether the pool (and the app's page) still answers after."""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from statstorm.adapters.apply import fpm_handover
from statstorm.adapters.host import procs
from statstorm.adapters.labs import apache_lab, phpfpm
from statstorm.adapters.load import http
from statstorm.adapters.php import fastcgi, fpm_master, php_targets, server_php
from statstorm.adapters.servers import nginx
from statstorm.adapters.storage import fstab
from statstorm.env import Env
from statstorm.errors import ComponentError
from statstorm.model.applyplan import FPM_GLOBAL, MASTER_INI, POOL_INI, Change
from statstorm.results.jsontypes import JsonObject


@dataclass
class Target:
    """What apply may touch for one pool, and how to check and reload it."""

    pool: str
    fpm_binary: str
    fpm_argv: list[str]  # binary + the options that decide its configuration (for -t)
    pool_file: Path
    master_pid: int  # the master serving now (a reload may change it: see `reload`)
    listen: str
    master_ini: Path | None  # statstorm's own conf.d file; None: the lab (its -d options)
    nginx_files: list[Path] = field(default_factory=list)
    nginx_test: list[str] = field(default_factory=list)  # argv of `nginx -t`
    nginx_pid: int = 0
    url: str = ""  # a page of the app (health check and --verify)
    lab: str = ""
    control_timeout: str = ""  # php-fpm's process_control_timeout, as `php-fpm -tt` shows it
    fstab: Path | None = None  # where mount options persist (adapters/storage/fstab.py; None:
    # nowhere, a lab's mount is its own)
    # Apache in front (a lab with --server apache): its configuration, `-t` argv and master.
    # `php_in_apache`: PHP runs in Apache's children or mod_fcgid's php-cgi (no php-fpm):
    # its settings are the lab's ini file (master_ini), applied by a graceful restart.
    apache_conf: Path | None = None
    apache_test: list[str] = field(default_factory=list)
    apache_pid: int = 0
    php_in_apache: bool = False
    # the system Apache (mod_php, mod_fcgid): apache2ctl, which tests and restarts it; its
    # PHP settings go to statstorm's file in the SAPI's conf.d (master_ini)
    apache_ctl: list[str] = field(default_factory=list)
    apache_sites: list[str] = field(default_factory=list)  # its PHP sites' loopback URLs
    pid_file: Path | None = None  # the pid file php-fpm's [global] names (None: a lab's, none)
    fpm_conf: Path | None = None  # the master's main configuration, its [global] (None: none)

    @property
    def system_apache(self) -> bool:
        return bool(self.apache_ctl)

    def reload_note(self, changes: list[Change]) -> str:
        """What the reload of these changes does to the requests running ('' : nothing to
        say): with process_control_timeout = 0 the master ends them."""
        if self.control_timeout.rstrip("s") != "0":
            return ""
        graceful = any(c.kind == FPM_GLOBAL and c.key == "process_control_timeout"
                       for c in changes)
        if fpm_handover.wanted(self):
            return ("process_control_timeout = 0 in the running master: a reload would end "
                    f"the requests running, so {fpm_handover.how(self)}; " + (
                        "the reloads after it wait for them (the change above)" if graceful
                        else "apply fpm-reload-ends-requests (or set "
                        "`process_control_timeout = 10s` in [global]) for graceful reloads"))
        return ("process_control_timeout = 0 in the running master: this reload ends the "
                "requests running then; " + (
                    "the reloads after it wait for them (the change above)" if graceful else
                    "apply fpm-reload-ends-requests (or set `process_control_timeout = 10s` "
                    "in [global]) for graceful reloads"))

    def to_json(self) -> JsonObject:
        return {"pool": self.pool, "lab": self.lab, "pool_file": str(self.pool_file),
                "master_ini": str(self.master_ini) if self.master_ini else None,
                "nginx_files": [str(p) for p in self.nginx_files], "url": self.url,
                "apache_conf": str(self.apache_conf) if self.apache_conf else None,
                "apache": self.system_apache}


class ApplyFailed(Exception):
    """Validation, reload or the health check failed: the caller rolls back."""


def test_config(env: Env, target: Target, paths: list[Path],
                mount_points: list[str] | None = None, apps: bool = True) -> None:
    """`php-fpm -t` (`apache2 -t` when Apache's configuration changed or runs PHP itself,
    `nginx -t` when an nginx file changed, `findmnt --verify` when fstab did) on the files as
    written."""
    if target.fstab is not None and target.fstab in paths and mount_points:
        problem = fstab.verify(env, fstab.read(target.fstab) or "", mount_points)
        if problem:
            raise ApplyFailed(problem)
    if target.apache_test and (target.php_in_apache or target.apache_conf in paths):
        res = env.run(target.apache_test, check=False, what="apache2 -t")
        if res.returncode != 0:
            lines = [ln for ln in (res.stderr + res.stdout).splitlines()
                     if ln.strip() and "Syntax OK" not in ln]
            raise ApplyFailed("apache2 -t rejected the change ("
                              + (lines[-1].strip() if lines else res.first_error_line()) + ")")
    if not target.php_in_apache:  # PHP inside Apache: apache2 -t above loaded it
        res = env.run([*phpfpm.command(target.fpm_argv[0]), "-t", *target.fpm_argv[1:]],
                      check=False, what="php-fpm -t")
        if res.returncode != 0:
            lines = [ln for ln in (res.stderr + res.stdout).splitlines() if "ERROR" in ln]
            first = (lines or [res.first_error_line()])[0].strip()
            raise ApplyFailed(f"php-fpm -t rejected the change ({first.split('ERROR: ')[-1]})")
    if any(p in target.nginx_files for p in paths) and target.nginx_test:
        res = env.run(target.nginx_test, check=False, what="nginx -t")
        if res.returncode != 0:
            raise ApplyFailed(f"nginx -t rejected the change ({res.first_error_line()})")
    for p in app_files(target, paths) if apps else []:
        problem = php_lint(env, target, p)
        if problem:
            raise ApplyFailed(f"php -l rejected {p} ({problem})")


def php_lint(env: Env, target: Target, path: Path) -> str:
    """'' when `php -l` accepts the PHP file, else its first error line."""
    res = env.run([*phpfpm.command(php_cli(target)), "-n", "-l", str(path)], check=False,
                  what="php -l")
    return "" if res.returncode == 0 else res.first_error_line()


def app_files(target: Target, paths: list[Path]) -> list[Path]:
    """The changed files that are the app's own PHP (its configuration file)."""
    own = {target.pool_file, target.master_ini, *target.nginx_files, target.fstab}
    return [p for p in paths if p not in own and p.suffix == ".php"]


def php_cli(target: Target) -> str:
    binary = target.fpm_binary
    return phpfpm.php_cli_for(binary) if Path(binary).name.startswith("php-fpm") else "php"


def reload(env: Env, target: Target, paths: list[Path], fpm: bool = False) -> str:
    """Reload what the changed files belong to; `fpm`: php-fpm anyway (its workers then
    open the code through a new mount, with cold caches). php-fpm's master is followed
    (`fpm_master.reload`): `target.master_pid` is the master serving after. Returns why the
    new master could not be followed ('' when it was): then the pool's answers decide."""
    fpm_files = {target.pool_file, *([target.master_ini] if target.master_ini else [])}
    lost = ""
    if target.php_in_apache:
        if fpm or any(p in fpm_files or p == target.apache_conf for p in paths) \
                or app_files(target, paths):
            _apache_graceful(env, target)
        return lost
    try:
        # an app's configuration file too: with opcache.validate_timestamps=0 the workers
        # would keep running the old one
        if fpm or any(p in fpm_files for p in paths) or app_files(target, paths):
            lost = (fpm_handover.reload(env, target, _fpm_reload) if fpm_handover.wanted(target)
                    else _fpm_reload(env, target))
        if target.apache_conf is not None and target.apache_conf in paths:
            _apache_graceful(env, target)
        if any(p in target.nginx_files for p in paths):
            if not target.nginx_pid:
                raise ComponentError("nginx changed but its master is unknown: reload it by hand")
            env.log(f"reloading nginx gracefully (master {target.nginx_pid})…")
            nginx.reload(target.nginx_pid)
    except (ComponentError, OSError) as exc:
        raise ApplyFailed(f"the reload failed ({exc})") from None
    return lost


def _fpm_reload(env: Env, target: Target) -> str:
    env.log(f"reloading php-fpm gracefully (master {target.master_pid})…")
    done = fpm_master.reload(env, target.master_pid, target.pool, target.fpm_argv,
                             target.pid_file)
    if done.master and done.master != target.master_pid:
        env.log(f"php-fpm's master is now {done.master} (was {target.master_pid}; "
                f"{done.via})")
    target.master_pid = done.master or target.master_pid
    if not done.followed:
        env.log(f"php-fpm's new master was not seen to settle ({done.lost}): the pool's "
                "answers decide")
    return done.lost


def _apache_graceful(env: Env, target: Target) -> None:
    env.log(f"restarting Apache gracefully (master {target.apache_pid})…")
    try:
        if target.system_apache:
            server_php.graceful_ctl(env, tuple(target.apache_ctl), target.apache_pid)
        else:
            apache_lab.graceful(target.apache_pid)
    except (ComponentError, OSError) as exc:
        raise ApplyFailed(f"the graceful restart failed ({exc})") from None


def _serves(url: str, deadline: float) -> None:
    """The system Apache answers `url` (any status but a server error: a site's front page
    may redirect or ask for a login)."""
    status, body = 0, ""
    while time.monotonic() < deadline:
        try:
            status, body = http.fetch(url, timeout=30)
            if status and status < 500:
                return
        except OSError as exc:
            body = str(exc)
        time.sleep(0.5)
    raise ApplyFailed(f"{url} answered {status or 'nothing'} after the restart "
                      f"({' '.join(body.split())[:80]!r})")


def _same(got: str, want: str) -> bool:
    words = {"on": "1", "yes": "1", "true": "1", "off": "0", "no": "0", "false": "0", "": "0"}
    if want in ("0", "1"):
        return words.get(got.strip().lower(), got.strip()) == want
    return got.strip() == want.strip()


def health(env: Env, target: Target, changes: list[Change], timeout: float = 20.0,
           lost: str = "") -> list[str]:
    """Raise ApplyFailed unless the pool (and the app's page) answers; return notes on settings
    that are not in effect although written. `lost`: the reload's master was not followed
    (why), so a setting the pool answers with another value fails the reload."""
    keys = tuple(c.key for c in changes if c.kind in (POOL_INI, MASTER_INI))
    deadline = time.monotonic() + timeout
    answers: list[php_targets.PoolAnswer] = []
    while target.php_in_apache and keys and not target.system_apache:  # the lab's phpinfo page
        try:
            site = urllib.parse.urlsplit(target.url)
            answers = [php_targets.PoolAnswer(
                ini=apache_lab.effective_ini(f"{site.scheme}://{site.netloc}", list(keys)),
                realpath_used=None, extensions=None, opcache=None, pid=0)]
            break
        except (ComponentError, OSError) as exc:
            if time.monotonic() > deadline:
                raise ApplyFailed(f"PHP stopped answering ({exc})") from None
            time.sleep(0.5)
    while not target.php_in_apache:
        try:
            answers = php_targets.ask_pool(env, target.listen, 1, keys,
                                           root=phpfpm.root_of(target.fpm_binary))
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
                status, body = http.fetch(target.url, timeout=30)
                if status not in (502, 503, 504):  # a gateway error may pass; others will not
                    break
            except OSError as exc:
                body = str(exc)
            time.sleep(0.5)
        if status != 200:
            raise ApplyFailed(f"{target.url} answered {status or 'nothing'} after the reload "
                              f"({' '.join(body.split())[:80]!r})")
    for page in target.apache_sites if target.system_apache and not target.url else []:
        _serves(page, deadline + 10)
    notes = []
    ini = answers[0].ini if answers else {}
    for c in changes:
        if c.kind in (POOL_INI, MASTER_INI) and c.key in ini and not _same(str(ini[c.key]), c.value):
            notes.append(f"{c.key} is {ini[c.key]!r} in the pool after the reload, not "
                         f"{c.value!r}: something else sets it (a .user.ini, ini_set)")
    if lost and notes:
        raise ApplyFailed(f"{lost}, and {notes[0].split(': ')[0]}")
    loaded = {e.lower() for e in answers[0].extensions or ()} if answers else set()
    for c in changes:
        name = Path(c.value).name.removesuffix(".so")
        if c.key == "extension" and answers and name.lower() not in loaded:
            raise ApplyFailed(f"the pool's workers did not load {c.value} (see the php-fpm log)")
    if target.system_apache and not procs.alive(target.apache_pid):
        raise ApplyFailed(f"the Apache master {target.apache_pid} is gone after the restart")
    if target.system_apache and keys:
        notes.append("PHP inside the system Apache is not asked for its settings (no phpinfo "
                     "page of statstorm's is there): the new values are in "
                     f"{target.master_ini}; Apache restarted and serves")
    elif not answers and (keys or not target.php_in_apache):
        notes.append("the pool answered but could not run the settings query (open_basedir?): "
                     "the new values are not confirmed")
    return notes

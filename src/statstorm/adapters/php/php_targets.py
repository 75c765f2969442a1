"""The PHP processes serving a site, and the settings they run with.

One place answers "which processes run this site's PHP, which new ones may appear, and with
what settings": trace attaches to them, check and apply read and change their settings,
sweep and the exporter follow them. Here: a php-fpm pool (`FpmPool`: its master forks the
workers, respawns included), a PHP command line's settings, and asking a pool's workers over
FastCGI. Apache's mod_php children and mod_fcgid's `php-cgi` are the other `PhpTarget`s
(`adapters/php/server_php.py`); the protocol they share and the table from a lab's handler to
its kind are in `adapters/php/target.py`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, ClassVar

from statstorm.adapters.host import procs
from statstorm.adapters.labs import phpfpm
from statstorm.adapters.php import fastcgi, fpm_master, php_runtime
from statstorm.adapters.servers import nginx
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.model.checkfacts import OpcacheStatus
from statstorm.results import jsonlenient as lenient
from statstorm.results.jsontypes import JsonObject
from statstorm.results.lab import LabState
from statstorm.results.php_root import HOST_VERSION
from statstorm.results.serving import Handler

# The settings a trace records (the ones that change what PHP asks the file system).
SETTING_PREFIXES = ("realpath_cache", "open_basedir", "include_path", "opcache.", "user_ini.",
                    "cgi.fix_pathinfo", "auto_prepend_file", "session.save_handler",
                    "session.save_path")
# The effective settings of a target: directive -> value as `php -i` shows it, and "sapi".
Settings = dict[str, str]
# statstorm's own file in the master's ini scan directory (a lab's: <state dir>/conf/php)
MASTER_INI_NAME = "99-statstorm.ini"
# The host's own PHP (Debian 12's): probed when a target runs no PHP binary directly.
PHP_BINARIES = (f"/usr/bin/php{HOST_VERSION}", f"/usr/sbin/php-fpm{HOST_VERSION}",
                f"/usr/bin/php-cgi{HOST_VERSION}")
# The script a worker runs for `check` (no output but JSON; nothing is changed).
QUERY_PHP = r"""<?php
header('Content-Type: application/json');
$keys = ['realpath_cache_size', 'realpath_cache_ttl', 'open_basedir', 'include_path',
  'user_ini.filename', 'user_ini.cache_ttl', 'cgi.fix_pathinfo', 'session.save_handler',
  'session.save_path', 'upload_tmp_dir', 'sys_temp_dir'];
$ini = [];
foreach ($keys as $k) { $v = ini_get($k); if ($v !== false) { $ini[$k] = $v; } }
foreach ((ini_get_all('zend opcache', false) ?: []) as $k => $v) { $ini[$k] = (string)$v; }
foreach (explode(',', (string)($_GET['keys'] ?? '')) as $k) {
  $v = $k === '' ? false : ini_get($k); if ($v !== false) { $ini[$k] = $v; } }
if (isset($_GET['hold'])) { usleep(min(200000, (int)$_GET['hold'])); }
echo json_encode(['ini' => $ini, 'realpath_used' => realpath_cache_size(),
  'extensions' => get_loaded_extensions(),
  'opcache' => function_exists('opcache_get_status') ? opcache_get_status(false) : null,
  'sapi' => PHP_SAPI, 'pid' => getmypid(), 'php_version' => PHP_VERSION,
  'php_ini' => (string)php_ini_loaded_file()]);
"""


# -- settings --------------------------------------------------------------------------------
def _relevant(key: str) -> bool:
    return key.startswith(SETTING_PREFIXES)


def parse_php_i(text: str) -> dict[str, str]:
    """Directive values (the local value) from `php -i` / `php-fpm -i` output."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("=>")]
        if len(parts) == 3 and _relevant(parts[0]):
            out[parts[0]] = "" if parts[1] == "no value" else parts[1]
    return out


def parse_fpm_tt(text: str, pool: str) -> dict[str, str]:
    """The pool's pm.* settings and php_value/php_admin_value lines from `php-fpm -tt`."""
    out: dict[str, str] = {}
    for key, value in phpfpm.pool_directives(text, pool).items():
        if key.startswith("pm"):
            out[key] = value
        vm = re.fullmatch(r"php_(?:admin_)?value\[(.+)\]", key)
        if vm and _relevant(vm.group(1)):
            out[vm.group(1)] = value
    return out


def settings_args(argv: list[str]) -> list[str]:
    """The options of a PHP command line that change its settings: -d, -c, -n (and php-fpm's
    -y/--fpm-config)."""
    out: list[str] = []
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("-d", "-c") and i + 1 < len(argv):
            out += [a, argv[i + 1]]
            i += 2
            continue
        if a == "-n" or (a.startswith(("-d", "-c")) and len(a) > 2):
            out.append(a)
        elif a == "-y" or a == "--fpm-config":
            out += [a, argv[i + 1]] if i + 1 < len(argv) else []
            i += 2
            continue
        elif not a.startswith("-"):
            break
        i += 1
    return out


def fpm_tt(env: Env, argv: list[str]) -> str:
    """`php-fpm -tt` of the master started as `argv` (binary + options): the full
    configuration it would run with."""
    res = env.run([*phpfpm.command(argv[0]), "-tt", *settings_args(argv)], what="php-fpm -tt",
                  check=False)
    return res.stderr + res.stdout


def fpm_settings(env: Env, binary: str, master_argv: list[str], pool: str) -> Settings:
    """The settings a pool's workers start with: the master's ini (`php-fpm -i` with its own
    options) and the pool's php_value/php_admin_value and pm.* (`php-fpm -tt`), each run as
    the master runs (chrooted in its PHP root for a root's binary)."""
    args = settings_args(master_argv)
    settings: Settings = {}
    res = env.run([*phpfpm.command(binary), "-i", *args], what="php-fpm -i", check=False)
    settings.update(parse_php_i(res.stdout))
    settings.update(parse_fpm_tt(fpm_tt(env, [binary, *args]), pool))
    settings["sapi"] = "fpm-fcgi"
    return settings


def cli_settings(env: Env, argv: list[str]) -> Settings:
    """The settings of a PHP command line (`php -i` with its -d/-c/-n options; a PHP root's
    binary run chrooted in its root)."""
    php = shutil.which(argv[0]) or argv[0]
    if not os.path.basename(php).startswith("php"):
        php = shutil.which("php") or PHP_BINARIES[0]
        args: list[str] = []
    else:
        args = [a for a in settings_args(argv) if a not in ("-y", "--fpm-config")]
    res = env.run([*phpfpm.command(php), *args, "-i"], what="php -i", check=False)
    settings = parse_php_i(res.stdout)
    settings["sapi"] = "cli"
    return settings


def php_binaries(extra: list[str]) -> list[str]:
    """The PHP binaries to probe: the targets' own, or every known one if they run no PHP
    binary directly (e.g. a shell script that starts php)."""
    own = [b for b in dict.fromkeys(extra) if b and os.path.basename(b).startswith("php")]
    return own or [b for b in PHP_BINARIES if os.path.exists(b)]


# -- php-fpm pools ---------------------------------------------------------------------------
@dataclass
class FpmPool:
    """A running php-fpm pool: its workers now, the masters that fork new ones, and the
    master's binary and options (they decide the workers' settings)."""

    handler: ClassVar[Handler] = Handler.FPM
    settings_source: ClassVar[str] = ("php-fpm -i and -tt (the master's ini, the pool's "
                                       "php_value/php_admin_value)")

    name: str
    workers: list[int]
    masters: list[int]
    binary: str
    argv: list[str]  # binary + the options that decide its settings
    conf: str = ""  # the master's configuration file, when known
    lab: str = ""
    docroot: str = ""

    @property
    def label(self) -> str:
        return f"pool {self.name}"

    @property
    def binaries(self) -> list[str]:
        return php_binaries([self.binary])

    @property
    def runtime(self) -> php_runtime.PhpRuntime:
        """Its PHP: version, and the root its master runs chrooted in ('' for the host's)."""
        return php_runtime.of_binary(self.binary)

    def allow(self, title: str) -> bool:
        """Given a process title: is it one of this pool's PHP processes? A worker forked a
        moment ago may still carry the master's title."""
        return (title == f"php-fpm: pool {self.name}" or title.startswith("php-fpm: master")
                or not title)

    def settled(self, title: str) -> bool:
        return _fpm_settled(title)

    def settings(self, env: Env) -> Settings:
        return fpm_settings(env, self.binary, self.argv, self.name)

    def directives(self, env: Env) -> dict[str, str]:
        """The pool's own directives (`listen`, `pm.*`, `chroot`, …) from `php-fpm -tt`."""
        return phpfpm.pool_directives(fpm_tt(env, self.argv), self.name)

    def query_caveats(self, listen: str) -> list[str]:
        """Why check cannot ask the workers over FastCGI ([] when it can try)."""
        return [] if listen else ["the pool's listen address is unknown (php-fpm -tt did not "
                                  "show it): not asked over FastCGI"]

    def reload(self, env: Env) -> None:
        """php-fpm's graceful reload: new workers start with the new settings; the master
        is followed when it changes (fpm_master: a daemonized master re-executes and forks)."""
        master = self.masters[0]
        env.log(f"reloading php-fpm gracefully (master {master})…")
        done = fpm_master.reload(env, master, self.name, self.argv,
                                 fpm_master.pid_file(fpm_tt(env, self.argv)))
        self.masters = [done.master or master]

    # -- a lab's pool ----------------------------------------------------------------------
    @staticmethod
    def lab_php_pids(state: LabState) -> list[int]:
        """The lab's php-fpm master and workers."""
        master = state.fpm_master_pid
        return [master, *phpfpm.worker_pids(master)] if master and procs.alive(master) else []

    @staticmethod
    def lab_masters(state: LabState) -> list[int]:
        return [state.fpm_master_pid]

    @staticmethod
    def lab_ini_file(state: LabState) -> Path:
        """The master reads its -d options, then settings only it reads from this file."""
        return Path(state.state_dir) / "conf/php" / MASTER_INI_NAME

    @staticmethod
    def cgi_binary() -> str:
        return ""

    @classmethod
    def from_lab(cls, state: LabState) -> FpmPool:
        """The lab's pool; its master's options (its ini overrides as -d) from its state."""
        return lab_pool(state, phpfpm.lab_argv(state))


def _fpm_settled(title: str) -> bool:
    return title.startswith("php-fpm: pool")


class TitleFilter:
    """Is a PID one of the target's PHP processes? Decided by its title through `allow`,
    remembered once the title is settled (`settled`: a php-fpm worker has renamed itself, a
    forked php-cgi has exec'd)."""

    def __init__(self, allow: Callable[[str], bool],
                 settled: Callable[[str], bool] = _fpm_settled) -> None:
        self.allow = allow
        self.settled = settled
        self.known: dict[int, bool] = {}

    def __call__(self, pid: int) -> bool:
        ok = self.known.get(pid)
        if ok is None:
            title = " ".join(procs.cmdline(pid))
            ok = self.allow(title)
            if self.settled(title):
                self.known[pid] = ok
        return ok


def docroot_of(env: Env, pool: FpmPool) -> str:
    """Where the web server serves the pool's code from: the `root` of the nginx server that
    passes to the pool's listen address, the first one when several do ('' when none is
    found, or when its root holds a variable)."""
    listen = phpfpm.pool_directives(fpm_tt(env, pool.argv), pool.name).get("listen", "")
    sites = nginx.sites_passing_to(None, listen) if listen else ()
    return sites[0].known_docroot if sites else ""


pool_workers = fpm_master.pool_workers  # the processes titled `php-fpm: pool NAME`


running_pools = fpm_master.running_pools  # the pools running on this machine, by name


def _not_running(pool: str) -> UsageError:
    return UsageError(f"no php-fpm pool {pool!r} is running (no process titled "
                      f"'php-fpm: pool {pool}'); list them with `ps -eo args | grep "
                      "'php-fpm: pool'`")


def find_pool(pool: str, argv: list[str] | None = None) -> FpmPool:
    """The running pool `pool`. Its settings are read with `argv` (the master's binary and
    options) when given, else with the config file named in the master's title (the title
    hides the master's -d options)."""
    workers = pool_workers(pool)
    if not workers:
        raise _not_running(pool)
    masters = sorted({procs.ppid(w) for w in workers} - {0})
    _, binary, conf = phpfpm.master_of(workers[0])
    if argv is None:
        argv = [binary] + (["-y", conf] if conf else [])
    return FpmPool(pool, workers, masters, binary, argv, conf)


def lab_pool(state: LabState, argv: list[str]) -> FpmPool:
    """The pool of a lab that is up (its master's options from the lab's state)."""
    p = find_pool(state.pool, argv)
    p.lab, p.docroot, p.binary = state.name, state.docroot, state.fpm_binary
    return p


def pool_of_worker(pid: int) -> str:
    """The pool name in a php-fpm worker's title, or ''."""
    m = re.match(r"php-fpm: pool (\S+)", " ".join(procs.cmdline(pid)))
    return m.group(1) if m else ""


# -- asking a worker ---------------------------------------------------------------------------
class PoolAnswerError(fastcgi.AnsweredError):
    """The pool answered, but not with the query's JSON (it could not run the script)."""


def decode_answer(head: str, body: bytes) -> JsonObject:
    try:
        data = json.loads(body)
    except ValueError:
        status = re.search(r"Status:\s*(.*)", head)
        raise PoolAnswerError(f"the pool answered {status.group(1).strip() if status else 'no JSON'}"
                             f": {body.decode(errors='replace').strip()[:120]!r}") from None
    if not isinstance(data, dict):
        raise PoolAnswerError("the pool answered something other than the query's JSON")
    return data


QUERY_DIR_PREFIX, QUERY_FILE = fastcgi.SCRIPT_DIR_PREFIX, fastcgi.SCRIPT_FILE


def is_query_script(path: bytes) -> bool:
    """Is this SCRIPT_FILENAME the query `ask_pool` sends (a request of statstorm's own)?"""
    return path.endswith(b"/" + QUERY_FILE.encode()) and QUERY_DIR_PREFIX.encode() in path


def ask_pool(env: Env, listen: str, workers: int,
             keys: tuple[str, ...] = (), root: str = "") -> list[PoolAnswer]:
    """Ask the pool `workers` times at once (each answer held 50 ms, so that busy workers make
    the next request go to another): one answer per worker that replied. `keys`: more ini
    settings to report besides the ones the query always reads; `root`: the PHP root the
    workers run chrooted in (the query is written there)."""
    with fastcgi.script_file(QUERY_PHP, root) as script:
        env.debug(f"FastCGI {listen}: {script} x{workers}")
        n = max(1, min(workers, 16))
        query = "&".join(q for q in ("hold=50000" if n > 1 else "",
                                       "keys=" + ",".join(keys) if keys else "") if q)
        with ThreadPoolExecutor(max_workers=n) as ex:
            replies = list(ex.map(lambda _: fastcgi.run_script(listen, script, query=query),
                                  range(n)))
    by_pid: dict[int, PoolAnswer] = {}
    for head, body in replies:
        answer = PoolAnswer.from_json(decode_answer(head, body))
        by_pid.setdefault(answer.pid, answer)
    return list(by_pid.values())


def _int(d: JsonObject, key: str) -> int | None:
    """The JSON number or numeric string under `key` as an int (None: absent or not a
    number). A worker's answer is read tolerantly: a value of another kind reads as absent."""
    v = d.get(key)
    if isinstance(v, (int, float, str)) and not isinstance(v, bool):
        try:
            return int(v)
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class PoolAnswer:
    """One worker's answer to the settings query (QUERY_PHP)."""

    ini: Settings  # the settings it runs with (None given as '')
    realpath_used: int | None  # realpath_cache_size(): bytes its realpath cache holds
    extensions: tuple[str, ...] | None  # get_loaded_extensions(), None when not a list
    opcache: OpcacheStatus | None  # opcache_get_status(false), if on
    pid: int
    php_version: str = ""  # PHP_VERSION of the worker ('' when it did not say)
    php_ini: str = ""  # php_ini_loaded_file(), as the worker sees it

    @classmethod
    def from_json(cls, data: JsonObject) -> PoolAnswer:
        ini, status = lenient.obj_or_empty(data, "ini"), lenient.obj_or_empty(data, "opcache")
        ext = lenient.list_or_none(data, "extensions")
        return cls(ini={str(k): "" if v is None else str(v) for k, v in ini.items()},
                   realpath_used=_int(data, "realpath_used"),
                   extensions=None if ext is None else tuple(str(e) for e in ext),
                   opcache=OpcacheStatus.from_json(status) if status else None,
                   pid=_int(data, "pid") or 0, php_version=str(data.get("php_version") or ""),
                   php_ini=str(data.get("php_ini") or ""))

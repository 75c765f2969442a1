"""Apache for a lab: the lab's own apache2 master on 127.0.0.1, with one MPM and one way to
run PHP, from Debian's packages of the host's PHP (apache2, libapache2-mod-phpX.Y,
libapache2-mod-fcgid, phpX.Y-cgi; Debian 12: 8.2), never the system's Apache or its
/etc/apache2. PHP of another version (`--php 7.4|8.4`, a chrooted php-fpm) is for nginx labs
only.

The three handlers:
- `fpm`: mod_proxy_fcgi passes `.php` to the lab's php-fpm pool over its Unix socket (as
  Debian's conf-available/phpX.Y-fpm.conf does);
- `mod_php`: PHP runs inside Apache's children (Debian's PHP is not thread-safe, so only
  under `prefork`);
- `fcgid`: mod_fcgid starts `php-cgi` processes on demand, one request at a time each.

PHP settings: a `fpm` lab gives its overrides to the php-fpm master as `-d` options; the
others read them from the lab's ini file `<state dir>/conf/php/statstorm.ini`, parsed after
the SAPI's own php.ini and conf.d (through PHP_INI_SCAN_DIR with a leading `:`, which keeps
Debian's scan directory) — the same startup-time meaning as `-d`.
"""

from __future__ import annotations

import glob
import html
import re
import signal
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, Mapping

from statstorm.adapters.host import procs
from statstorm.adapters.load import http
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError, UsageError
from statstorm.results.php_root import HOST_VERSION
from statstorm.results.serving import Handler, Mpm, handler_of

BINARY = "/usr/sbin/apache2"
MODULES = Path("/usr/lib/apache2/modules")
MPMS = tuple(m.value for m in Mpm)
HANDLERS = tuple(h.value for h in Handler)
OVERRIDES = ("None", "All")
INI_FILE = "statstorm.ini"
# Served from outside the docroot, loopback only: phpinfo()'s settings, read back by `up`.
PHPINFO_PATH = "/statstorm-phpinfo"


def default_mpm(handler: str) -> str:
    known = handler_of(handler)
    return known.default_mpm if known else Mpm.EVENT


def combination_error(mpm: str, handler: str) -> str:
    """Why Apache cannot run this MPM with this handler ('' when it can)."""
    if mpm not in MPMS:
        return f"--mpm {mpm!r}: choose one of {', '.join(MPMS)}"
    known = handler_of(handler)
    if known is None:
        return f"--handler {handler!r}: choose one of {', '.join(HANDLERS)}"
    if mpm not in known.mpms:
        others = " or ".join(h for h in Handler if mpm in h.mpms)
        return (f"--handler {known} needs --mpm {'/'.join(known.mpms)}: Debian's PHP module is "
                f"not thread-safe, so Apache refuses it under mpm_{mpm}; use --handler {others} "
                f"with {mpm}")
    return ""


def check_architecture(server: str, mpm: str, handler: str, allow_override: str) -> None:
    """Only the architectures that run: nginx passes PHP to php-fpm (no MPM, no handler
    choice); Apache takes any MPM with fpm or fcgid, and prefork only with mod_php. An empty
    `mpm` or `allow_override` means the default."""
    if server != "apache":
        for flag, value, default in (("--mpm", mpm, ""), ("--handler", handler, "fpm"),
                                     ("--allow-override", allow_override, "")):
            if value != default:
                raise UsageError(f"{flag} applies to --server apache only (nginx passes PHP to "
                                 f"php-fpm): add --server apache or drop {flag}")
        return
    problem = combination_error(mpm or default_mpm(handler), handler)
    if problem:
        raise UsageError(problem)
    if allow_override and allow_override not in OVERRIDES:
        raise UsageError(f"--allow-override {allow_override!r}: choose one of {', '.join(OVERRIDES)}")


def _newest(pattern: str) -> str:
    found = sorted(glob.glob(pattern),
                   key=lambda p: tuple(int(x) for x in re.findall(r"\d+", Path(p).name)))
    return found[-1] if found else ""


def php_module() -> str:
    """Debian's mod_php (`libphpX.Y.so`), '' if libapache2-mod-php is not installed."""
    return _newest(str(MODULES / "libphp[0-9]*.so"))


def php_cgi_binary() -> str:
    """The newest `php-cgi` (`/usr/bin/php-cgiX.Y`), '' if php-cgi is not installed."""
    return _newest("/usr/bin/php-cgi[0-9]*")


@dataclass(frozen=True)
class HandlerConf:
    """What one handler adds to the lab's apache2.conf, and what it needs installed. The
    texts are `str.format` templates over socket, php_cgi, prefix and workers."""

    modules: tuple[str, ...]  # LoadModule'd besides the base ones (the last one's file needed)
    packages: str  # Debian's packages that carry it
    php_lines: str  # what makes `.php` files run, in a <Directory> or <Location> section
    server_lines: str = ""  # server-wide directives
    status_lines: str = ""  # the pool's status and ping pages
    options: str = ""  # added to Options where PHP runs
    load_php_module: bool = False  # LoadModule php_module (Debian's libphp)
    php_code: Callable[[], str] | None = None  # finds the code PHP runs from ('' if absent)
    php_code_wanted: str = ""  # named when it is absent


HANDLER_CONF: dict[Handler, HandlerConf] = {
    Handler.FPM: HandlerConf(
        ("proxy", "proxy_fcgi"), "apache2",
        'SetHandler "proxy:unix:{socket}|fcgi://localhost"\n',
        status_lines=('<LocationMatch "^/statstorm-fpm-(status|ping)$">\n'
                      "    Require ip 127.0.0.1\n"
                      '    SetHandler "proxy:unix:{socket}|fcgi://localhost/"\n'
                      "</LocationMatch>\n")),
    Handler.MOD_PHP: HandlerConf(
        (), f"libapache2-mod-php{HOST_VERSION}", "SetHandler application/x-httpd-php\n",
        load_php_module=True, php_code=lambda: php_module(),
        php_code_wanted=str(MODULES / f"libphp{HOST_VERSION}.so")),
    # error_log names the lab in php-cgi's command line, so `lab down` finds strays by it.
    Handler.FCGID: HandlerConf(
        ("fcgid",), f"libapache2-mod-fcgid php{HOST_VERSION}-cgi",
        'SetHandler fcgid-script\n'
        'FcgidWrapper "{php_cgi} -d error_log={prefix}/log/php-cgi.log"\n',
        server_lines=("FcgidIPCDir {prefix}/run/fcgid\n"
                      "FcgidProcessTableFile {prefix}/run/fcgid_shm\n"
                      "FcgidMaxProcesses {workers}\nFcgidMaxProcessesPerClass {workers}\n"
                      "FcgidMinProcessesPerClass {workers}\n"
                      "FcgidIdleTimeout 0\nFcgidProcessLifeTime 0\nFcgidMaxRequestsPerProcess 0\n"
                      "FcgidIOTimeout 60\nFcgidConnectTimeout 20\n"
                      'FcgidInitialEnv PHP_INI_SCAN_DIR ":{prefix}/conf/php"\n'
                      "FcgidInitialEnv PHP_FCGI_MAX_REQUESTS 0\n"),
        options=" ExecCGI", php_code=lambda: php_cgi_binary(),
        php_code_wanted=f"/usr/bin/php-cgi{HOST_VERSION}"),
}


def require_installed(handler: str) -> None:
    conf = HANDLER_CONF[Handler(handler)]
    needed = [Path(BINARY), MODULES / "mod_mpm_event.so"]
    needed += [MODULES / f"mod_{m}.so" for m in conf.modules[-1:]]
    missing = [str(p) for p in needed if not p.exists()]
    if conf.php_code is not None and not conf.php_code():
        missing.append(conf.php_code_wanted)
    if missing:
        raise DependencyError(f"Apache with --handler {handler} needs {', '.join(missing)}: "
                              f"run scripts/setup.sh --lab as root (packages {conf.packages})")


def check_path(path: Path) -> None:
    """Apache's configuration quotes the lab's paths; refuse the few that cannot be quoted."""
    if re.search(r'[\s"\\$%]', str(path)):
        raise UsageError(f"{path}: an Apache lab's state directory may not contain spaces, "
                         f"quotes, backslashes, $ or %: set STATSTORM_HOME to a plainer path")


def render_ini(overrides: Mapping[str, str]) -> str:
    """The lab's ini file: one `key=value` line each, as php-fpm reads a `-d` option."""
    return "; written by statstorm lab; PHP overrides of this lab\n" + "".join(
        f"{k}={v}\n" for k, v in overrides.items())


def _mpm_block(mpm: str, workers: int) -> str:
    if mpm == "prefork":
        # PHP concurrency = --workers, as php-fpm's pm=static: all start, none are retired.
        return (f"StartServers {workers}\nMinSpareServers 1\nMaxSpareServers {workers}\n"
                f"ServerLimit {workers}\nMaxRequestWorkers {workers}\nMaxConnectionsPerChild 0\n")
    # Debian's mpm_event.conf / mpm_worker.conf; PHP concurrency is the handler's.
    return ("StartServers 2\nMinSpareThreads 25\nMaxSpareThreads 75\nThreadLimit 64\n"
            "ThreadsPerChild 25\nMaxRequestWorkers 150\nMaxConnectionsPerChild 0\n")


def _indent(text: str, by: str) -> str:
    return "".join(by + line + "\n" for line in text.splitlines())


def render_conf(*, mpm: str, handler: str, port: int, docroot: str, prefix: Path,
                front_controller: str, workers: int, socket: str = "", php_cgi: str = "",
                allow_override: str = "None", user: str = "www-data") -> str:
    """The lab's whole apache2.conf: nothing from /etc/apache2, every path the lab's own."""
    conf = HANDLER_CONF[Handler(handler)]
    fields = {"socket": socket, "php_cgi": php_cgi, "prefix": prefix, "workers": workers}
    mods = ["authz_core", "authz_host", "dir", "mime", "alias", *conf.modules]
    load = [f"LoadModule mpm_{mpm}_module {MODULES}/mod_mpm_{mpm}.so"]
    load += [f"LoadModule {m}_module {MODULES}/mod_{m}.so" for m in mods]
    if conf.load_php_module:
        load.append(f"LoadModule php_module {php_module()}")
    php = conf.php_lines.format(**fields)
    extra = conf.server_lines.format(**fields)
    status = conf.status_lines.format(**fields)
    exec_cgi = conf.options
    return f"""\
# written by statstorm lab; the lab's own Apache master: mpm_{mpm}, PHP through {handler}
ServerRoot {prefix}
ServerName 127.0.0.1:{port}
Listen 127.0.0.1:{port}
PidFile {prefix}/run/apache2.pid
DefaultRuntimeDir {prefix}/run
Mutex file:{prefix}/run default
ErrorLog {prefix}/log/apache-error.log
LogLevel warn
User {user}
Group {user}
{chr(10).join(load)}
TypesConfig /etc/mime.types
Timeout 300
KeepAlive On
MaxKeepAliveRequests 100
KeepAliveTimeout 5
HostnameLookups Off
AccessFileName .htaccess
{_mpm_block(mpm, workers)}{extra}
<Directory />
    Options FollowSymLinks
    AllowOverride None
    Require all denied
</Directory>
<FilesMatch "^\\.ht">
    Require all denied
</FilesMatch>
DocumentRoot {docroot}
DirectoryIndex index.php index.html
<Directory {docroot}>
    Options FollowSymLinks{exec_cgi}
    AllowOverride {allow_override}
    Require all granted
    FallbackResource /{front_controller}
    <FilesMatch "\\.php$">
{_indent(php, "        ")}    </FilesMatch>
</Directory>
Alias {PHPINFO_PATH} {prefix}/conf/probe/phpinfo.php
<Directory {prefix}/conf/probe>
    Options FollowSymLinks{exec_cgi}
    Require ip 127.0.0.1
{_indent(php, "    ")}</Directory>
{status}"""


def write_probe(prefix: Path) -> None:
    """The page behind PHPINFO_PATH: phpinfo()'s configuration table, as `php -i` shows it."""
    probe = prefix / "conf/probe"
    probe.mkdir(parents=True, exist_ok=True)
    (probe / "phpinfo.php").write_text("<?php phpinfo();\n")


def lab_argv(conf: Path) -> list[str]:
    """apache2 in the foreground with the lab's configuration (add -t, -S, -M, …). The
    environment's PHP_INI_SCAN_DIR adds the lab's ini file for mod_php."""
    ini_dir = conf.parent / "php"
    return ["/usr/bin/env", f"PHP_INI_SCAN_DIR=:{ini_dir}", BINARY, "-f", str(conf),
            "-D", "FOREGROUND"]


def test_config(env: Env, conf: Path) -> None:
    res = env.run([*lab_argv(conf), "-t"], check=False, what="apache2 -t")
    if res.returncode != 0:
        lines = [ln for ln in (res.stderr + res.stdout).splitlines()
                 if ln.strip() and "Syntax OK" not in ln]
        raise ComponentError("Apache rejected the lab configuration: "
                             + (lines[-1].strip() if lines else res.first_error_line()))


def start(env: Env, conf: Path, prefix: Path, port: int, record: Callable[[int], None],
          timeout: float = 20) -> int:
    """Start the master in the foreground of its own session; wait until it listens and
    its children run."""
    log = prefix / "log/apache.out"
    pid = procs.spawn_daemon(lab_argv(conf), log, record)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not procs.alive(pid):
            raise ComponentError(f"Apache exited at start: {_last_error(prefix) or 'see ' + str(log)}")
        if procs.port_in_use(port) and procs.children(pid):
            return pid
        time.sleep(0.05)
    procs.terminate(pid)
    raise ComponentError(f"Apache did not listen on 127.0.0.1:{port} within {timeout:.0f} s: "
                         f"{_last_error(prefix) or 'see ' + str(log)}")


def graceful(master_pid: int, timeout: float = 30.0) -> list[int]:
    """Graceful restart (SIGUSR1): the master re-reads its configuration (and mod_php its ini
    files), running requests finish in the old children, new ones serve the next. Returns
    once no old child is left; ComponentError if the master exits (a configuration it
    cannot load) or the old children do not go."""
    return procs.replace_children(master_pid, signal.SIGUSR1, procs.children(master_pid),
                                  "Apache", timeout)


def _last_error(prefix: Path) -> str:
    for name in ("log/apache-error.log", "log/apache.out"):
        path = prefix / name
        lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
        if lines:
            return lines[-1].strip()
    return ""


def is_php_cgi(pid: int) -> bool:
    argv = procs.cmdline(pid)
    return bool(argv) and Path(argv[0]).name.startswith("php-cgi")


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children first, then theirs)."""
    out: list[int] = []
    todo = procs.children(pid)
    while todo:
        kid = todo.pop(0)
        out.append(kid)
        todo += procs.children(kid)
    return out


def effective_ini(url: str, keys: list[str], timeout: float = 60) -> dict[str, str]:
    """The local values of `keys` from the lab's phpinfo page: what the SAPI that serves the
    site runs with, shown as `php -i` shows them (On/Off, `no value`)."""
    status, body = http.fetch(url + PHPINFO_PATH, timeout)
    if status != 200 or "phpinfo()" not in body and 'class="e"' not in body:
        raise ComponentError(f"{url}{PHPINFO_PATH} answered {status} without PHP's settings")
    return parse_phpinfo(body, keys)


_ROW = re.compile(r'<tr><td class="e">\s*([^<]+?)\s*</td><td class="v">(.*?)</td>', re.S)


def parse_phpinfo(text: str, keys: list[str]) -> dict[str, str]:
    """`key => local value` of phpinfo()'s HTML table, for the `keys` it has."""
    wanted = set(keys)
    out: dict[str, str] = {}
    for key, value in _ROW.findall(text):
        key = html.unescape(key)
        if key in wanted and key not in out:
            out[key] = html.unescape(re.sub(r"<[^>]+>", "", value)).strip()
    return out

"""PHP run by processes the web server starts: Apache's prefork children with mod_php in them
(`ModPhpChildren`), or the `php-cgi` processes mod_fcgid forks (`FcgidPhpCgi`). Both are
`PhpTarget`s (`adapters/php/target.py`), beside php-fpm's `FpmPool`.

Their settings are the SAPI's php.ini and conf.d as Debian lays them out, then the lab's own
ini file (`<state dir>/conf/php/statstorm.ini`), read with the CLI; where the lab shows its
phpinfo page, the values the SAPI itself runs with override them. They reload with Apache's
graceful restart."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Self, TypeVar, Union

from statstorm.adapters.host import procs
from statstorm.adapters.labs import apache_lab
from statstorm.adapters.php import php_runtime
from statstorm.adapters.php.php_targets import PHP_BINARIES, Settings, parse_php_i
from statstorm.adapters.servers import apache_conf, apache_system
from statstorm.env import Env
from statstorm.errors import ComponentError
from statstorm.results.apache_sites import ApacheSite, SystemApache
from statstorm.results.lab import LabState
from statstorm.results.serving import Handler


@dataclass
class ServerPhp:
    """What mod_php's children and mod_fcgid's php-cgi share. The masters are the processes
    whose forks become new PHP processes (Apache's master; fcgid's process manager)."""

    handler: ClassVar[Handler]
    sapi_dir: ClassVar[str]  # /etc/php/X.Y/<sapi_dir>
    sapi: ClassVar[str]  # PHP_SAPI
    settings_source: ClassVar[str] = (
        "the SAPI's php.ini, conf.d and the lab's ini (php -c … -i), then the lab's "
        "phpinfo page")

    name: str
    workers: list[int]
    masters: list[int]
    binary: str  # the code PHP runs from: libphpX.Y.so or php-cgiX.Y
    ini_dir: str = ""  # the lab's own scan directory (its overrides), if any
    server_title: str = ""  # the Apache master's command line (its children carry it)
    probe_url: str = ""  # the lab's loopback phpinfo page (adapters.apache_lab), if any
    lab: str = ""
    docroot: str = ""
    server_pid: int = 0  # the Apache master (its graceful restart reloads PHP)
    mpm: str = ""  # Apache's MPM
    ctl: tuple[str, ...] = ()  # the system Apache's apache2ctl (its graceful restart); () in a lab
    sites: tuple[ApacheSite, ...] = ()  # the system Apache's sites whose PHP this is
    conf: str = ""  # the system Apache's apache2.conf ('' in a lab)

    @property
    def label(self) -> str:
        return f"Apache {self.mpm}, {self.handler}"

    @property
    def binaries(self) -> list[str]:
        return [self.binary]

    @property
    def runtime(self) -> php_runtime.PhpRuntime:
        """Its PHP's version (the one its binary names, else the host's)."""
        return php_runtime.of_binary(self.binary)

    def allow(self, title: str) -> bool:
        return title == self.server_title or not title

    def settled(self, title: str) -> bool:
        return bool(title)

    def settings(self, env: Env) -> Settings:
        """The SAPI's php.ini and conf.d, then the lab's scan directory, read with the CLI
        (`php -c … -i`): what these processes start with, as Debian lays the files out."""
        etc = self.runtime.etc(self.sapi_dir)
        scan = ":".join(d for d in (f"{etc}/conf.d", self.ini_dir) if d)
        php = shutil.which("php") or PHP_BINARIES[0]
        res = env.run([php, "-c", f"{etc}/php.ini", "-i"], check=False, what="php -i",
                      env={**os.environ, "PHP_INI_SCAN_DIR": scan})
        settings = parse_php_i(res.stdout)
        if self.probe_url:  # the values the SAPI itself runs with, where the lab shows them
            try:
                settings.update(apache_lab.effective_ini(self.probe_url, sorted(settings)))
            except (OSError, ComponentError) as exc:
                env.debug(f"phpinfo probe {self.probe_url}: {exc}")
        settings["sapi"] = self.sapi
        return settings

    def directives(self, env: Env) -> dict[str, str]:
        """The pool directives PHP runs with: none of php-fpm's (see FcgidPhpCgi)."""
        return {}

    def query_caveats(self, listen: str) -> list[str]:
        """Why check cannot ask these processes over FastCGI, or what it will not learn."""
        return []

    def reload(self, env: Env) -> None:
        """Apache's graceful restart: new children (and php-cgi) start with the new ini."""
        env.log(f"restarting Apache gracefully (master {self.server_pid})…")
        if self.ctl:
            graceful_ctl(env, self.ctl, self.server_pid)
        else:
            apache_lab.graceful(self.server_pid)

    # -- a lab's PHP of this kind -------------------------------------------------------------
    @staticmethod
    def lab_masters(state: LabState) -> list[int]:
        return []  # Apache's master is the lab's web server

    @staticmethod
    def lab_ini_file(state: LabState) -> Path:
        """The lab's own ini file, parsed after the SAPI's (apply writes settings there)."""
        return Path(state.state_dir) / "conf/php" / apache_lab.INI_FILE

    @classmethod
    def lab_binary(cls, state: LabState) -> str:
        raise NotImplementedError

    @classmethod
    def lab_masters_of(cls, state: LabState, workers: list[int]) -> list[int]:
        return [state.apache_pid]

    @classmethod
    def from_lab(cls, state: LabState) -> Self:
        """The PHP processes of an Apache lab, from its state (`worker_pids` filled)."""
        workers = list(state.worker_pids)
        title = " ".join(procs.cmdline(state.apache_pid)) if state.apache_pid else ""
        return cls(f"{state.handler} (lab {state.name})", workers,
                   cls.lab_masters_of(state, workers), cls.lab_binary(state),
                   str(Path(state.state_dir) / "conf/php"), title, state.url, state.name,
                   state.docroot, state.apache_pid, state.mpm)


@dataclass
class ModPhpChildren(ServerPhp):
    """Apache's prefork children with mod_php in them: each child is a PHP process."""

    handler: ClassVar[Handler] = Handler.MOD_PHP
    sapi_dir: ClassVar[str] = "apache2"
    sapi: ClassVar[str] = "apache2handler"

    def query_caveats(self, listen: str) -> list[str]:
        where = ("the lab's phpinfo page (the values the children run with)" if self.probe_url
                 else "Apache's php.ini and conf.d, read with the CLI (a child is not asked)")
        return [f"mod_php: settings are {where}; a child is not asked for its OPcache status "
                "or realpath cache use"]

    @staticmethod
    def lab_php_pids(state: LabState) -> list[int]:
        """Apache's children: every one carries PHP."""
        pid = state.apache_pid
        return procs.children(pid) if pid and procs.alive(pid) else []

    @staticmethod
    def cgi_binary() -> str:
        return ""  # PHP is a module of Apache's

    @classmethod
    def lab_binary(cls, state: LabState) -> str:
        return apache_lab.php_module()


@dataclass
class FcgidPhpCgi(ServerPhp):
    """The `php-cgi` processes mod_fcgid forks, one request at a time each; they answer
    FastCGI on sockets in the lab's `run/fcgid`."""

    handler: ClassVar[Handler] = Handler.FCGID
    sapi_dir: ClassVar[str] = "cgi"
    sapi: ClassVar[str] = "cgi-fcgi"

    socket_dir: str = ""  # mod_fcgid's socket directory

    def allow(self, title: str) -> bool:
        return "php-cgi" in title

    def settled(self, title: str) -> bool:
        return bool(title) and ("php-cgi" in title or title != self.server_title)

    def directives(self, env: Env) -> dict[str, str]:
        """Only the socket one of the php-cgi processes answers on."""
        return {"listen": fcgid_socket(self.socket_dir)} if self.socket_dir else {}

    @staticmethod
    def lab_php_pids(state: LabState) -> list[int]:
        """The php-cgi processes mod_fcgid started under the lab's Apache."""
        pid = state.apache_pid
        if not pid or not procs.alive(pid):
            return []
        return sorted(p for p in apache_lab.descendants(pid) if apache_lab.is_php_cgi(p))

    @staticmethod
    def cgi_binary() -> str:
        return apache_lab.php_cgi_binary()

    @classmethod
    def lab_binary(cls, state: LabState) -> str:
        return state.php_cgi_binary or apache_lab.php_cgi_binary()

    @classmethod
    def lab_masters_of(cls, state: LabState, workers: list[int]) -> list[int]:
        return sorted({procs.ppid(w) for w in workers} - {0})  # fcgid's process manager

    @classmethod
    def from_lab(cls, state: LabState) -> Self:
        php = super().from_lab(state)
        php.socket_dir = str(Path(state.state_dir) / "run/fcgid")
        return php


def graceful_ctl(env: Env, ctl: tuple[str, ...], master: int, timeout: float = 30.0) -> None:
    """`apache2ctl graceful` (its configtest, then SIGUSR1 to the master), returning once the
    master serves with new children; ComponentError if it refused or the master exited."""
    old = set(procs.children(master))
    res = env.run([*ctl, "graceful"], check=False, what="apache2ctl graceful")
    if res.returncode != 0:
        raise ComponentError(f"apache2ctl graceful failed ({res.first_error_line()})")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not procs.alive(master):
            raise ComponentError(f"the Apache master {master} exited while restarting")
        kids = set(procs.children(master))
        if kids and not kids & old:
            return
        time.sleep(0.1)
    raise ComponentError(f"Apache did not restart within {timeout:.0f} s (master {master})")


SYSTEM_NAME = "apache"  # the system Apache's PHP, as check, trace and apply name it


InServer = Union["ModPhpChildren", "FcgidPhpCgi"]  # a PHP target of the system Apache
P = TypeVar("P", bound="ServerPhp")


def from_system(server: SystemApache) -> InServer | None:
    """The PHP running in the system Apache's children (mod_php) or in the php-cgi processes
    its mod_fcgid starts, with the sites that use it; None when no site runs PHP that way."""
    sites = server.sites_in_children()
    if not sites:
        return None
    kind: type[ModPhpChildren] | type[FcgidPhpCgi] = (
        FcgidPhpCgi if sites[0].handler == Handler.FCGID else ModPhpChildren)
    sites = tuple(s for s in sites if s.handler == kind.handler)
    master = server.master_pid
    title = " ".join(procs.cmdline(master))
    cfg = apache_conf.read(Path(server.conf), server.server_root)
    if kind is ModPhpChildren:
        binary = apache_conf.loaded_modules(cfg).get("php_module") or apache_lab.php_module()
        workers, masters = procs.children(master), [master]
    else:
        binary = apache_lab.php_cgi_binary()
        workers = sorted(p for p in apache_lab.descendants(master) if apache_lab.is_php_cgi(p))
        masters = sorted({master, *(procs.ppid(w) for w in workers)} - {0})
    php = kind(SYSTEM_NAME, workers, masters, binary, "", title, "", "",
               next((s.docroot for s in sites if s.docroot), ""), master, server.mpm,
               server.ctl, sites, server.conf)
    if isinstance(php, FcgidPhpCgi):
        php.socket_dir = apache_conf.directive(cfg, "FcgidIPCDir") or "/var/lib/apache2/fcgid/sock"
    return php


def system_apache(env: Env) -> InServer | None:
    """The system Apache's PHP target (`from_system`), or None: no system Apache is running,
    or none of its sites runs PHP in processes it starts."""
    server = apache_system.discover(env)
    return from_system(server) if server is not None else None


def for_site(php: P, site: ApacheSite) -> P:
    """The same PHP, named and rooted for one of its sites (check gathers each site)."""
    return dataclasses.replace(php, name=f"{SYSTEM_NAME}:{site.name}:{site.vhost.port}",
                               docroot=site.docroot, sites=(site,))


def fcgid_socket(directory: str) -> str:
    """A socket of one of mod_fcgid's php-cgi processes ('' if none)."""
    socks = sorted(p for p in Path(directory).glob("**/*") if p.is_socket()) if directory else []
    return str(socks[0]) if socks else ""

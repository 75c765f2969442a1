"""One interface for the PHP processes that serve a site, whatever runs them.

A `PhpTarget` is a php-fpm pool (`FpmPool`, `adapters/php/php_targets.py`), Apache's children
with mod_php in them (`ModPhpChildren`) or the `php-cgi` processes mod_fcgid starts
(`FcgidPhpCgi`, both `adapters/php/server_php.py`). Each says which processes are its PHP
(workers now, masters whose forks become new ones, a title filter), which binary to probe,
what settings they run with and where they come from, and how to reload them gracefully;
for a lab of its kind, which processes to look for and where apply writes its settings.

`KINDS` maps each `Handler` (the way a lab runs PHP) to its class: the verbs ask the target,
never the handler's name. A new kind of target is one class here and one entry in `KINDS`.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Protocol, runtime_checkable

from statstorm.adapters.php import fpm_master, php_targets
from statstorm.adapters.php.php_targets import FpmPool, Settings
from statstorm.adapters.php.server_php import FcgidPhpCgi, ModPhpChildren, system_apache
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.results.lab import LabState
from statstorm.results.serving import Handler


@runtime_checkable
class PhpTarget(Protocol):
    """The PHP processes of one site, and what the verbs need to know of them."""

    name: str
    workers: list[int]  # the processes running PHP now
    masters: list[int]  # the processes whose forks become new PHP processes
    binary: str  # the code PHP runs from (php-fpm, libphp.so, php-cgi)
    lab: str  # the lab it belongs to ('' for a pool found running)
    docroot: str  # where the web server serves its code from, when known

    handler: ClassVar[Handler]  # the way of running PHP this kind is
    settings_source: ClassVar[str]  # where `settings` reads them (check prints it)

    @property
    def label(self) -> str:
        """How a description names it: `pool www`, `Apache prefork, mod_php`."""

    @property
    def binaries(self) -> list[str]:
        """The PHP binaries to probe."""

    def allow(self, title: str) -> bool:
        """Given a process title: is it one of these PHP processes?"""

    def settled(self, title: str) -> bool:
        """Is that title final (the answer of `allow` may be remembered)?"""

    def settings(self, env: Env) -> Settings:
        """The effective settings the processes start with (and "sapi")."""

    def directives(self, env: Env) -> dict[str, str]:
        """The pool directives (`listen`, `pm.*`, `chroot`): php-fpm's, or the one socket
        a php-cgi answers FastCGI on; {} when none."""

    def query_caveats(self, listen: str) -> list[str]:
        """Why the processes cannot be asked over FastCGI, or what they will not tell."""

    def reload(self, env: Env) -> None:
        """Reload gracefully: running requests finish, new processes read the settings."""

    # -- a lab of this kind (asked of the class) -----------------------------------------------
    @staticmethod
    def lab_php_pids(state: LabState) -> list[int]:
        """The processes running the lab's PHP (php-fpm's master included)."""

    @staticmethod
    def lab_masters(state: LabState) -> list[int]:
        """The masters the lab starts for PHP, besides its web server."""

    @staticmethod
    def lab_ini_file(state: LabState) -> Path:
        """Where apply writes the lab's PHP settings."""

    @staticmethod
    def cgi_binary() -> str:
        """The php-cgi binary the web server starts ('' when it starts none)."""

    @classmethod
    def from_lab(cls, state: LabState) -> PhpTarget:
        """The lab's PHP processes, from its state (live fields filled)."""


KINDS: dict[Handler, type[PhpTarget]] = {
    Handler.FPM: FpmPool,
    Handler.MOD_PHP: ModPhpChildren,
    Handler.FCGID: FcgidPhpCgi,
}


def kind_of(handler: str) -> type[PhpTarget]:
    """The class of the PHP processes a lab with this handler runs."""
    return KINDS[Handler(handler)]


def for_lab(state: LabState, then: str = "") -> PhpTarget:
    """The PHP processes of a lab that is up. Under mod_fcgid there are none before the first
    request: a one-line error naming the fix (`then`: what to do after)."""
    if Handler(state.handler).php_in_server and not state.worker_pids:
        raise UsageError(f"lab {state.name}: no PHP process is running yet (mod_fcgid starts "
                         f"php-cgi on the first request): load {state.url}{state.entry_path} "
                         f"once{then}")
    return kind_of(state.handler).from_lab(state)


def require_system_apache(env: Env) -> ModPhpChildren | FcgidPhpCgi:
    """The system Apache's PHP (`--apache`): UsageError naming the fix when there is none."""
    php = system_apache(env)
    if php is None:
        raise UsageError("--apache: no system Apache runs PHP in its children (no master in "
                         "envvars' APACHE_PID_FILE, or no site with mod_php or mod_fcgid): "
                         "start it with `apache2ctl start`, or name a pool with --pool NAME")
    return php


def running(env: Env) -> list[PhpTarget]:
    """Every PHP target running on this host, found as `sole` finds the one (doctor lists
    them all): each php-fpm pool by its workers' titles, then the system Apache's PHP
    (mod_php, mod_fcgid) if it runs any; [] when none. A pool whose workers are gone by the
    time it is looked at is left out."""
    found: list[PhpTarget] = []
    for name in fpm_master.running_pools():
        try:
            found.append(php_targets.find_pool(name))
        except UsageError:
            continue
    apache = system_apache(env)
    return found + ([apache] if apache is not None else [])


def sole(env: Env) -> PhpTarget:
    """The one PHP target running on this host when none is named: a php-fpm pool, or the
    system Apache's PHP (mod_php, mod_fcgid). UsageError naming the flag to give when there
    is none or more than one."""
    pools = fpm_master.running_pools()
    apache = system_apache(env)
    named = [f"--pool {p}" for p in pools] + (["--apache"] if apache is not None else [])
    if not named:
        raise UsageError("no PHP is running here (no php-fpm pool, no system Apache running "
                         "PHP): name a pool with --pool NAME, or a lab with --lab NAME")
    if len(named) > 1:
        raise UsageError(f"several PHP targets are running: name one with {', '.join(named)}")
    return apache if apache is not None else php_targets.find_pool(pools[0])

"""How a site is served: the web server, Apache's MPM and the way PHP runs under it (the
handler), with the strings the lab state, check's facts, the matrix and the CLI write.

`Handler` is also the one table of what each way of running PHP means on its own (no process
or file needed): whether PHP runs in processes the web server starts, whether Apache's own
children carry PHP, which MPMs can run it. What needs processes or files (finding the
processes, reading their settings, reloading them) is the PHP target's
(`adapters/php/target.py`)."""

from __future__ import annotations

from enum import StrEnum


class Server(StrEnum):
    """The web server in front of PHP."""

    NGINX = "nginx"
    APACHE = "apache"


class Mpm(StrEnum):
    """Apache's multi-processing module."""

    EVENT = "event"
    WORKER = "worker"
    PREFORK = "prefork"


class Handler(StrEnum):
    """How PHP runs behind the web server: a php-fpm pool (nginx, or Apache's mod_proxy_fcgi),
    inside Apache's children (mod_php) or in the `php-cgi` processes mod_fcgid starts."""

    FPM = "fpm"
    MOD_PHP = "mod_php"
    FCGID = "fcgid"

    @property
    def php_in_server(self) -> bool:
        """PHP runs in processes the web server starts (no php-fpm pool): its settings are
        the lab's ini file, applied by the server's graceful restart."""
        return self in _IN_SERVER

    @property
    def children_carry_php(self) -> bool:
        """Every child of the web server carries PHP (its memory is PHP's)."""
        return self in _IN_CHILDREN

    @property
    def mpms(self) -> tuple[Mpm, ...]:
        """The MPMs Apache runs this handler under (Debian's PHP module is not thread-safe)."""
        return _MPMS.get(self, tuple(Mpm))

    @property
    def default_mpm(self) -> Mpm:
        return Mpm.PREFORK if Mpm.EVENT not in self.mpms else Mpm.EVENT

    @property
    def process_limit_directive(self) -> str:
        """The Apache directive that bounds the PHP processes this handler starts ('' when
        the bound is elsewhere: php-fpm's pm.max_children, Apache's MaxRequestWorkers)."""
        return _PROCESS_LIMIT.get(self, "")


_IN_SERVER = frozenset({Handler.MOD_PHP, Handler.FCGID})
_IN_CHILDREN = frozenset({Handler.MOD_PHP})
_MPMS = {Handler.MOD_PHP: (Mpm.PREFORK,)}
_PROCESS_LIMIT = {Handler.FCGID: "FcgidMaxProcessesPerClass"}


def handler_of(text: str) -> Handler | None:
    """The handler named `text` (as a lab state or check's facts write it), None for any
    other text ('' when PHP is served some other way)."""
    try:
        return Handler(text)
    except ValueError:
        return None

"""A system Apache as its own tools describe it: its virtual hosts (`apache2ctl -S`), what
it runs with (`apache2ctl -t -D DUMP_RUN_CFG`, `-M`) and, for each site, where its code is
and how it runs PHP. Built by `adapters/servers/apache_system.py`; read by the PHP targets,
check and apply."""

from __future__ import annotations

from dataclasses import dataclass

from statstorm.results.jsontypes import JsonObject
from statstorm.results.serving import Handler


@dataclass(frozen=True)
class VirtualHost:
    """One line of `apache2ctl -S`: a virtual host, where it listens and where it is
    defined."""

    address: str  # `127.0.0.1:8081`, `*:80`
    port: int
    name: str  # its ServerName (or the address Apache chose for it)
    source: str  # file:line of its <VirtualHost>

    @property
    def file(self) -> str:
        return self.source.rpartition(":")[0]

    @property
    def line(self) -> int:
        return int(self.source.rpartition(":")[2] or 0)


@dataclass(frozen=True)
class ApacheSite:
    """A virtual host with what it serves: its DocumentRoot ('' when Apache's configuration
    does not say it statically; `docroot_note` then says why) and how it runs PHP
    (`handler` None: PHP is not run there; `listen`: the php-fpm socket or address a
    proxy_fcgi site passes to)."""

    vhost: VirtualHost
    docroot: str
    handler: Handler | None
    listen: str = ""
    handler_source: str = ""  # file:line of the directive that decides the handler
    docroot_note: str = ""

    @property
    def name(self) -> str:
        return self.vhost.name

    def to_json(self) -> JsonObject:
        return {"name": self.vhost.name, "address": self.vhost.address,
                "port": self.vhost.port, "source": self.vhost.source,
                "docroot": self.docroot or None, "docroot_note": self.docroot_note or None,
                "handler": self.handler.value if self.handler else None,
                "listen": self.listen or None, "handler_source": self.handler_source or None}


@dataclass(frozen=True)
class SystemApache:
    """The running system Apache: its master, configuration, MPM, modules and sites."""

    master_pid: int
    conf: str  # apache2.conf
    server_root: str
    pid_file: str
    user: str
    mpm: str  # prefork | worker | event
    modules: tuple[str, ...]
    sites: tuple[ApacheSite, ...]
    ctl: tuple[str, ...] = ("apache2ctl",)  # the tool that asks and reloads it

    @property
    def php_sites(self) -> tuple[ApacheSite, ...]:
        return tuple(s for s in self.sites if s.handler is not None)

    def sites_in_children(self) -> tuple[ApacheSite, ...]:
        """The sites whose PHP runs in processes Apache starts (mod_php, mod_fcgid)."""
        return tuple(s for s in self.sites if s.handler is not None and s.handler.php_in_server)

    def to_json(self) -> JsonObject:
        return {"master_pid": self.master_pid, "conf": self.conf,
                "server_root": self.server_root, "pid_file": self.pid_file, "user": self.user,
                "mpm": self.mpm, "modules": list(self.modules),
                "sites": [s.to_json() for s in self.sites]}

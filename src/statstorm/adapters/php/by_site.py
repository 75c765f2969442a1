"""The PHP target serving a site, found from the site's URL (`--site URL` of check, trace and
apply): the nginx server block or Apache virtual host listening on the URL's port (by its
server name when several do), then the php-fpm pool its PHP goes to (by the pool's `listen`
address) or the system Apache's own PHP (mod_php, mod_fcgid)."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

from statstorm.adapters.php import fpm_master, php_targets
from statstorm.adapters.servers import apache_system, nginx, nginx_conf
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.results.sites import Site


@dataclass(frozen=True)
class SiteTarget:
    """What serves a site: a php-fpm pool by name, or the system Apache's PHP (`apache`),
    and how that was found (for the verb's startup line)."""

    pool: str = ""
    apache: bool = False
    how: str = ""


def _port_of(listen: str) -> int | None:
    """The port of an nginx `listen` value (`127.0.0.1:8080`, `[::]:80`, `8080`, `80
    default_server`); None for a unix socket or a value with no port."""
    addr = listen.split()[0] if listen.split() else ""
    if addr.startswith("unix:"):
        return None
    tail = addr.rsplit("]:", 1)[1] if "]:" in addr else addr.rpartition(":")[2]
    if tail.isdigit():
        return int(tail)
    return None if ":" in addr or "." in addr else 80  # a host alone listens on 80


def split_url(url: str) -> tuple[str, int]:
    """The host and port of a site's URL; UsageError for anything but http(s)://HOST[:PORT]."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--site {url}: give the site's URL, e.g. http://127.0.0.1:8080/")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise UsageError(f"--site {url}: the port is not a number") from None
    return parts.hostname, port


def _pick(candidates: list[Site], host: str) -> Site | None:
    """The server block for `host` among those on the port: by server_name, then
    default_server, then the first (nginx's own choice for an unknown name)."""
    for site in candidates:
        if host in site.server_names:
            return site
    for site in candidates:
        if any("default_server" in x.split()[1:] for x in site.listen):
            return site
    return candidates[0] if candidates else None


def site_for(sites: tuple[Site, ...] | list[Site], url: str) -> Site | None:
    """Among `sites` (nginx server blocks), the one nginx would answer `url` with: on the
    URL's port, by server name, then default_server, then the first; None when none listens
    on that port."""
    host, port = split_url(url)
    return _pick([s for s in sites if port in {_port_of(x) for x in s.listen}], host)


def pool_listening(env: Env, address: str) -> str:
    """The running php-fpm pool whose `listen` is `address` ('' if none)."""
    for name in fpm_master.running_pools():
        listen = php_targets.find_pool(name).directives(env).get("listen", "")
        if nginx_conf.names_listen(address, listen) or address == listen:
            return name
    return ""


def _from_nginx(env: Env, host: str, port: int) -> SiteTarget | None:
    for _, argv in nginx.running_masters_by_pid():
        on_port = [s for s in nginx_conf.sites(nginx.read_master(argv))
                   if port in {_port_of(x) for x in s.listen}]
        site = _pick(on_port, host)
        if site is None:
            continue
        where = f"nginx's server at {site.config_file}:{site.config_line}"
        for address in site.passes_to:
            pool = pool_listening(env, address)
            if pool:
                return SiteTarget(pool=pool, how=f"{where} passes to pool {pool} ({address})")
        raise UsageError(f"{where} passes PHP to {', '.join(site.passes_to) or '(nothing)'}, "
                         "where no php-fpm pool listens: start the pool, or name it with "
                         "--pool NAME")
    return None


def _from_apache(env: Env, host: str, port: int) -> SiteTarget | None:
    server = apache_system.discover(env)
    if server is None:
        return None
    on_port = [s for s in server.php_sites if s.vhost.port == port]
    site = next((s for s in on_port if s.vhost.name == host), on_port[0] if on_port else None)
    if site is None or site.handler is None:
        return None
    where = f"Apache's virtual host {site.vhost.name} ({site.vhost.source})"
    if site.handler.php_in_server:
        return SiteTarget(apache=True, how=f"{where} runs PHP in Apache ({site.handler.value})")
    pool = pool_listening(env, site.listen)
    if not pool:
        raise UsageError(f"{where} passes PHP to {site.listen or '(nothing)'}, where no "
                         "php-fpm pool listens: start the pool, or name it with --pool NAME")
    return SiteTarget(pool=pool, how=f"{where} passes to pool {pool} ({site.listen})")


def serving(env: Env, url: str) -> SiteTarget:
    """The PHP target serving the site at `url`; UsageError naming what to give when no web
    server here serves PHP on that port."""
    host, port = split_url(url)
    found = _from_nginx(env, host, port) or _from_apache(env, host, port)
    if found is None:
        raise UsageError(f"--site {url}: no nginx server block or Apache virtual host here "
                         f"serves PHP on port {port}: name the target with --pool NAME or "
                         "--apache")
    return found

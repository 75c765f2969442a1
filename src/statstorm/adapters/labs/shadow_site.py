"""The site of a pool `statstorm tune` copies, and the shadow's URLs for the pool's pages:
which nginx site serves every URL given, the script the shadow falls back to."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from statstorm.adapters.php import by_site
from statstorm.errors import UsageError
from statstorm.results.sites import Site


def front_controller(url: str) -> str:
    """The script nginx falls back to in the shadow: the URL's own .php, else index.php."""
    name = Path(urllib.parse.urlsplit(url).path).name
    return name if name.endswith(".php") else "index.php"


def site_of(pool: str, listen: str, sites: tuple[Site, ...], urls: tuple[str, ...]) -> Site:
    """The one site among the pool's `sites` serving every URL; one-line errors otherwise."""
    if not sites:
        raise UsageError(f"no nginx site passes PHP to pool {pool} (listen = {listen or '?'}): "
                         "tune copies the code of the site a pool serves; give a pool an nginx "
                         "server passes to")
    chosen = []
    for url in urls:
        site = by_site.site_for(sites, url)
        if site is None:
            ports = sorted({x for s in sites for x in s.listen})
            raise UsageError(f"--url {url}: no site of pool {pool} serves it (its sites listen "
                             f"on {', '.join(ports) or '?'}): give a page of one of them")
        chosen.append(site)
    if len({(s.config_file, s.config_line) for s in chosen}) > 1:
        raise UsageError("--url: the pages belong to different sites of the pool; give pages "
                         "of one site (tune copies one docroot)")
    if not chosen[0].known_docroot:
        raise UsageError(f"the site at {chosen[0].config_file}:{chosen[0].config_line} sets its "
                         f"root with {chosen[0].docroot_unknown}: tune needs a fixed root to "
                         "copy; write the path in the server's root")
    return chosen[0]


def shadow_urls(shadow_url: str, urls: tuple[str, ...]) -> tuple[str, ...]:
    """The same paths and queries on the shadow."""
    out = []
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        out.append(shadow_url + (parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    return tuple(out)


__all__ = ["front_controller", "shadow_urls", "site_of"]

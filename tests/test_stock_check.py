"""check on a stock Debian host: Debian's www pool serving two sites through Debian's nginx,
one on local disk and one on a GlusterFS volume mounted by hand, in the styles admins write
(Debian's multi-line site files, one-line server blocks, an upstream): check names the
storage of every site, without being told which pool or docroot."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from conftest import run_cli
from stock_host import StockHost, stock_host

pytestmark = pytest.mark.root

PHP = "include snippets/fastcgi-php.conf; fastcgi_pass {to};"


def _multi_line(port: int, root: Path, to: str) -> str:
    return f"""server {{
	listen 127.0.0.1:{port};
	root {root};
	index doku.php index.php;
	server_name site{port}.example;

	location ~ \\.php$ {{
		include snippets/fastcgi-php.conf;
		fastcgi_pass {to};
	}}
}}
"""


def _one_line(port: int, root: Path, to: str) -> str:
    return (f"server {{ listen 127.0.0.1:{port}; server_name site{port}.example; root {root}; "
            f"index doku.php; location ~ \\.php$ {{ {PHP.format(to=to)} }} }}\n")


def _two_sites(host: StockHost, style: str) -> tuple[Path, Path]:
    """DokuWiki on local disk (port 18181) and on GlusterFS (18182), one pool for both."""
    local = host.copy_app("dokuwiki", host.scratch("local") / "dokuwiki")
    host.gluster_volume()
    net = host.mount_by_hand(host.scratch("net"))
    host.copy_app("dokuwiki", net / "dokuwiki")
    sock = "unix:/run/php/php8.2-fpm.sock"
    if style == "upstream":
        host.write("/etc/nginx/conf.d/php.conf", "upstream php { server " + sock + "; }\n")
        sock = "php"
    make = _one_line if style == "one-line" else _multi_line
    host.nginx_site("doku-local", make(18181, local, sock))
    host.nginx_site("doku-net", make(18182, net / "dokuwiki", sock))
    return local, net / "dokuwiki"


@pytest.mark.parametrize("style", ["multi-line", "one-line", "upstream"])
def test_check_names_the_storage_of_every_site(style: str, state_home: Path) -> None:
    with stock_host() as host:
        local, net = _two_sites(host, style)
        host.fpm_start("init")
        host.nginx_start()
        for port in (18181, 18182):
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/doku.php", timeout=20).read()
            assert b"DokuWiki" in body
        res = run_cli(["check", "--json"], state_home)
        assert res.returncode in (0, 1), res.stderr
        out = json.loads(res.stdout)
        [pool] = [p for p in out["pools"] if p["pool"] == "www"]
        assert {s["docroot"] for s in pool["sites"]} == {str(local), str(net)}
        held = {(m["role"], m["path"]): m["kind"] for m in pool["mounts"]}
        assert held[("docroot", str(net))] == "glusterfs-fuse"
        assert held[("docroot", str(local))] == "local"
        ids = {f["id"] for f in out["findings"]}
        assert "glusterfs-mount-caching" in ids, ids

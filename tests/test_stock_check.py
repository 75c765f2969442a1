"""check on a stock Debian host: Debian's www pool serving sites through Debian's nginx, one
on local disk and the others on a GlusterFS volume mounted by hand, in the styles admins write
(Debian's multi-line site files, one-line server blocks, an upstream): check names the
storage of every site, without being told which pool or docroot."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest

from conftest import run_cli
from stock_host import StockHost, stock_host

pytestmark = [pytest.mark.root, pytest.mark.alone]

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


def _three_sites(host: StockHost) -> tuple[Path, Path]:
    """One pool, three sites in the styles admins write: Debian's multi-line site with
    DokuWiki on local disk (port 18181), a one-line server block with DokuWiki on GlusterFS
    (18182), and a multi-line site on the same code passing through an `upstream` (18183)."""
    local = host.copy_app("dokuwiki", host.scratch("local") / "dokuwiki")
    host.gluster_volume()
    net = host.copy_app("dokuwiki", host.mount_by_hand(host.scratch("net")) / "dokuwiki")
    sock = "unix:/run/php/php8.2-fpm.sock"
    host.write("/etc/nginx/conf.d/php.conf", "upstream php { server " + sock + "; }\n")
    host.nginx_site("doku-local", _multi_line(18181, local, sock))
    host.nginx_site("doku-net", _one_line(18182, net, sock))
    host.nginx_site("doku-upstream", _multi_line(18183, net, "php"))
    return local, net


def test_check_names_the_storage_of_every_site(state_home: Path) -> None:
    with stock_host() as host:
        local, net = _three_sites(host)
        host.fpm_start("init")
        host.nginx_start()
        for port in (18181, 18182, 18183):
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/doku.php", timeout=20).read()
            assert b"DokuWiki" in body
        res = run_cli(["check", "--json"], state_home)
        assert res.returncode in (0, 1), res.stderr
        out = json.loads(res.stdout)
        [pool] = [p for p in out["pools"] if p["pool"] == "www"]
        assert sorted(s["docroot"] for s in pool["sites"]) == sorted(
            [str(local), str(net), str(net)])
        assert {n for s in pool["sites"] for n in s["names"]} == {
            "site18181.example", "site18182.example", "site18183.example"}
        held = {(m["role"], m["path"]): m["kind"] for m in pool["mounts"]}
        assert held[("docroot", str(net))] == "glusterfs-fuse"
        assert held[("docroot", str(local))] == "local"
        ids = {f["id"] for f in out["findings"]}
        assert "glusterfs-mount-caching" in ids, ids


def _load(url: str, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            urllib.request.urlopen(url, timeout=10).read()
        except OSError:
            pass


def test_a_docroot_from_variables_is_found_by_the_trace(state_home: Path) -> None:
    """`root` built from a variable: no configuration names the code's mount, so check says
    so in one note; with a trace, the GlusterFS mount the pool really reads (mounted from
    /etc/fstab) is checked, and apply keeps its new options in /etc/fstab, undone by
    --rollback. The site is named by its URL; a second pool no site passes to gets a note."""
    site = "http://127.0.0.1:18183/"
    with stock_host() as host:
        host.gluster_volume()
        net = host.mount_from_fstab(host.scratch("net"))
        host.copy_app("dokuwiki", net / "dokuwiki")
        host.nginx_site("doku-var", f"""server {{
	listen 127.0.0.1:18183;
	server_name doku.example;
	set $app dokuwiki;
	root {net}/$app;
	index doku.php;
	location ~ \\.php$ {{
		include snippets/fastcgi-php.conf;
		fastcgi_pass unix:/run/php/php8.2-fpm.sock;
	}}
}}
""")
        host.write("/etc/php/8.2/fpm/pool.d/lonely.conf",
                   "[lonely]\nuser = www-data\ngroup = www-data\n"
                   "listen = /run/php/statstorm-lonely.sock\npm = static\npm.max_children = 1\n")
        host.fpm_start("init")
        host.nginx_start()
        fstab_before = Path("/etc/fstab").read_bytes()

        res = run_cli(["check", "--site", site, "--json"], state_home)
        assert res.returncode in (0, 1), res.stderr
        [pool] = json.loads(res.stdout)["pools"]
        assert pool["pool"] == "www" and pool["sites"][0]["unknown"] == "$app"
        assert any("$app" in n and "--trace" in n for n in pool["notes"]), pool["notes"]
        assert not any(m["kind"] == "glusterfs-fuse" for m in pool["mounts"])

        lonely = json.loads(run_cli(["check", "--pool", "lonely", "--json"], state_home).stdout)
        assert any("no docroot found" in n for n in lonely["pools"][0]["notes"])

        trace = state_home / "var-docroot.sst.gz"
        stop = threading.Event()
        load = threading.Thread(target=_load, args=(site + "doku.php", stop))
        load.start()
        try:
            traced = run_cli(["trace", "--site", site, "-d", "6", "-o", str(trace)], state_home)
        finally:
            stop.set()
            load.join()
        assert traced.returncode == 0, traced.stderr

        res = run_cli(["check", "--site", site, "--trace", str(trace), "--json"], state_home)
        out = json.loads(res.stdout)
        kinds = {(m["role"], m["mount_point"]): m["kind"] for m in out["pools"][0]["mounts"]}
        assert kinds.get(("traced", str(net))) == "glusterfs-fuse", kinds
        assert "glusterfs-mount-caching" in {f["id"] for f in out["findings"]}

        res = run_cli(["apply", "--site", site, "glusterfs-mount-caching", "--yes", "--trace",
                       str(trace)], state_home)
        assert res.returncode == 0, res.stderr
        line = next(x for x in Path("/etc/fstab").read_text().splitlines()
                    if f" {net} " in f" {x} ")
        assert "attribute-timeout=" in line, line
        assert urllib.request.urlopen(site + "doku.php", timeout=20).status == 200
        res = run_cli(["apply", "--site", site, "--rollback"], state_home)
        assert res.returncode == 0, res.stderr
        assert Path("/etc/fstab").read_bytes() == fstab_before

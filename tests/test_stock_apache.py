"""Debian's Apache on a stock host (`stock_host.py`), run Debian's way: `apache2` from
/etc/apache2 started by `apache2ctl`, sites enabled with a2ensite, modules with a2enmod.
statstorm finds its PHP without being named (check), traces its children as they are
replaced (trace --apache), changes its PHP settings where Debian keeps them and undoes
them byte for byte (apply --apache, --rollback); and a pool behind Apache's proxy_fcgi is
checked with the docroot of the site that passes to it. Root; one stock-host test at a
time (the harness's lock)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import run_cli
from stock_host import StockHost, stock_host, tree_digest
from test_trace_lab import finish, start_trace, wait_attached

from statstorm.adapters.host.procs import free_port
from statstorm.adapters.php import php_targets

pytestmark = [pytest.mark.root, pytest.mark.alone]
PHP_ETC = Path("/etc/php/8.2")
PROBE = "<?php $k = $_GET['k'] ?? 'realpath_cache_size'; echo ini_get($k);\n"
PREFORK = """<IfModule mpm_prefork_module>
	StartServers 2
	MinSpareServers 1
	MaxSpareServers 3
	MaxConnectionsPerChild 2
</IfModule>
"""


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""


def vhost(port: int, name: str, root: Path) -> str:
    return (f"<VirtualHost 127.0.0.1:{port}>\n\tServerName {name}\n\tDocumentRoot {root}\n"
            f"\t<Directory {root}>\n\t\tRequire all granted\n\t\tAllowOverride All\n"
            f"\t</Directory>\n</VirtualHost>\n")


def mod_php_host(host: StockHost) -> tuple[dict[str, Path], dict[str, int]]:
    """prefork + mod_php, DokuWiki and phpMyAdmin on two loopback vhosts, a child replaced
    every two connections."""
    roots = {"wiki": host.copy_app("dokuwiki", host.scratch("wiki") / "dokuwiki"),
             "pma": host.copy_app("phpmyadmin", host.scratch("pma") / "phpmyadmin")}
    ports = {"wiki": free_port(18180), "pma": 0}
    ports["pma"] = free_port(ports["wiki"] + 1)
    for root in roots.values():
        (root / "statstorm-probe.php").write_text(PROBE)
    host.apache_listen(*ports.values())
    host.a2("a2dismod", "mpm_event", "mpm_worker")
    host.a2("a2enmod", "mpm_prefork", "php8.2")
    host.write("/etc/apache2/conf-available/statstorm-test.conf", PREFORK)
    host.a2("a2enconf", "statstorm-test")
    for name in roots:
        host.apache_site(f"{name}-test", vhost(ports[name], f"{name}.test", roots[name]))
    host.apache_start()
    for name in roots:
        status, body = fetch(f"http://127.0.0.1:{ports[name]}/statstorm-probe.php")
        assert status == 200 and body.strip(), (name, status, body)
    return roots, ports


def test_mod_php_two_vhosts_check_trace_apply(tmp_path: Path) -> None:
    with stock_host() as host:
        roots, ports = mod_php_host(host)
        # check, no target named: the system Apache's PHP, each site with its docroot
        res = run_cli(["check", "--json", "--no-query"], tmp_path, timeout=300)
        assert res.returncode == 0, res.stderr
        pools = {p["pool"]: p for p in json.loads(res.stdout)["pools"]}
        for name in roots:
            key = f"apache:{name}.test:{ports[name]}"
            assert key in pools, (key, list(pools))
            assert pools[key]["docroot"] == str(roots[name])
            assert pools[key]["php_files"] > 0
        if not php_targets.running_pools():  # no other helper's pool: the only PHP target
            res = run_cli(["apply", "--all", "--json"], tmp_path, timeout=300)
            assert res.returncode == 0, res.stderr
            assert json.loads(res.stdout)["target"]["apache"] is True

        # trace --apache while requests come and children are replaced
        out = tmp_path / "apache.sst.gz"
        proc = start_trace(tmp_path, ["--apache", "-d", "10", "-o", str(out), "--json"])
        wait_attached(proc)
        statuses = [fetch(f"http://127.0.0.1:{ports[n]}/statstorm-probe.php")[0]
                    for _ in range(6) for n in roots]
        statuses += [fetch(f"http://127.0.0.1:{ports['wiki']}/doku.php")[0]]
        assert set(statuses[:-1]) == {200}
        summary = finish(proc)  # exit 0: no "PID … is not running" for a replaced child
        assert summary["requests"] >= 6, summary
        # the trace of Apache's whole PHP is the trace of each of its sites
        res = run_cli(["check", "--apache", "--trace", str(out), "--json", "--no-query"],
                      tmp_path, timeout=300)
        assert res.returncode == 0, res.stderr
        for p in json.loads(res.stdout)["pools"]:
            assert p["trace"] and p["trace"]["path"] == str(out), p
            assert not any("not used" in n for n in p["notes"]), p["notes"]

        # apply one PHP setting where Debian keeps mod_php's, then roll it back byte for byte
        before = tree_digest(PHP_ETC)
        res = run_cli(["apply", "--apache", "--all", "--json"], tmp_path, timeout=300)
        assert res.returncode == 0, res.stderr
        plan = json.loads(res.stdout)
        ini_changes = [c for c in plan["changes"] if c["kind"] == "master-ini"]
        assert ini_changes, plan
        res = run_cli(["apply", "--apache", "--all", "--yes", "--json"], tmp_path, timeout=300)
        assert res.returncode == 0, res.stderr
        done = json.loads(res.stdout)
        assert done["mode"] == "applied", done
        ini = PHP_ETC / "apache2/conf.d/99-statstorm.ini"
        assert ini.is_file() and str(ini) in [f["path"] for f in done["files"]]
        change = ini_changes[0]
        status, body = fetch(f"http://127.0.0.1:{ports['wiki']}/statstorm-probe.php"
                             f"?k={change['key']}")
        assert status == 200 and body.strip() == change["value"], (change, body)
        res = run_cli(["apply", "--rollback", "--json"], tmp_path, timeout=300)
        assert res.returncode == 0, res.stderr
        assert not ini.exists() and tree_digest(PHP_ETC) == before
        assert fetch(f"http://127.0.0.1:{ports['wiki']}/statstorm-probe.php")[0] == 200


def test_pool_behind_apache_proxy_fcgi_finds_docroot(tmp_path: Path) -> None:
    with stock_host() as host:
        root = host.scratch("app")
        (root / "index.php").write_text("<?php echo 'ok';\n")
        port = free_port(18190)
        host.apache_listen(port)
        host.a2("a2dismod", "php8.2", "mpm_prefork", "mpm_worker")
        host.a2("a2enmod", "mpm_event", "proxy_fcgi", "setenvif")
        host.a2("a2enconf", "php8.2-fpm")  # Debian's SetHandler "proxy:unix:…|fcgi://localhost"
        host.apache_site("app-test", vhost(port, "app.test", root))
        host.fpm_start("init")
        host.apache_start()
        assert fetch(f"http://127.0.0.1:{port}/index.php") == (200, "ok")
        res = run_cli(["check", "--pool", "www", "--json"], tmp_path, timeout=300)
        assert res.returncode == 0, res.stderr
        pool = json.loads(res.stdout)["pools"][0]
        assert pool["docroot"] == str(root), pool
        assert pool["apache"] is not None and pool["apache"]["mpm"] == "event"

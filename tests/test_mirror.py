"""code-local-mirror on a stock Debian host: DokuWiki on a GlusterFS volume mounted by hand,
behind Debian's nginx and php-fpm's www pool. A trace taken under load makes check report
the mirror; apply copies the code to local disk and switches nginx's root to it (the site
still answers, and PHP runs the mirror's files); `statstorm mirror sync` picks up a changed
file; `apply --rollback` restores /etc/nginx byte for byte and removes the mirror. With
realpath_cache_ttl = 600 (as `apply --all` sets it) the sync's reload makes the very next
request run the new code, where `--no-reload` keeps serving the generation before."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest

from conftest import run_cli
from stock_host import StockHost, stock_host, tree_digest

from statstorm.adapters.storage import code_mirror
from statstorm.model.mirror import mirror_dir

pytestmark = pytest.mark.root

PORT = 18191
SITE = f"http://127.0.0.1:{PORT}/"


def _site(root: Path) -> str:
    return f"""server {{
	listen 127.0.0.1:{PORT};
	root {root};
	index doku.php;
	server_name mirror.example;

	location ~ \\.php$ {{
		include snippets/fastcgi-php.conf;
		fastcgi_pass unix:/run/php/php8.2-fpm.sock;
	}}
}}
"""


def _get(path: str) -> tuple[int, str]:
    with urllib.request.urlopen(SITE + path, timeout=20) as r:
        return r.status, r.read().decode(errors="replace")


def _load(stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            urllib.request.urlopen(SITE + "doku.php", timeout=10).read()
        except OSError:
            pass


def _stand_up(host: StockHost) -> Path:
    host.gluster_volume()
    net = host.mount_by_hand(host.scratch("net"))
    app = host.copy_app("dokuwiki", net / "dokuwiki")
    (app / "whereami.php").write_text("<?php echo 'v1 ', __FILE__;\n")
    (app / "stamp.txt").write_text("one\n")
    host.nginx_site("doku-mirror", _site(app))
    host.fpm_start("init")
    host.nginx_start()
    assert _get("doku.php")[0] == 200
    return app


def test_mirror_apply_sync_rollback(state_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with stock_host() as host:
        mirror_root = host.scratch("mirror")
        monkeypatch.setenv("STATSTORM_MIRROR_ROOT", str(mirror_root))
        app = _stand_up(host)
        nginx_before = tree_digest(Path("/etc/nginx"))

        trace = state_home / "www.sst.gz"
        stop = threading.Event()
        load = threading.Thread(target=_load, args=(stop,))
        load.start()
        try:
            traced = run_cli(["trace", "--pool", "www", "-d", "5", "-o", str(trace)], state_home)
        finally:
            stop.set()
            load.join()
        assert traced.returncode == 0, traced.stderr

        res = run_cli(["check", "--pool", "www", "--trace", str(trace), "--json"], state_home)
        found = {f["id"]: f for f in json.loads(res.stdout)["findings"]}
        assert "code-local-mirror" in found, sorted(found)
        assert found["code-local-mirror"]["change"][-1] == f"mirror {app}"

        dry = run_cli(["apply", "--pool", "www", "code-local-mirror", "--trace", str(trace),
                       "--json"], state_home)
        assert dry.returncode == 0, dry.stderr
        planned = json.loads(dry.stdout)
        (step,) = planned["storage"]
        assert step["kind"] == "mirror" and step["before"] == {"source": str(app),
                                                               "under": str(mirror_root)}
        assert int(step["after"]["bytes"]) > 0
        (edit,) = planned["files"]
        assert f"+\troot {step['where']}/current;" in edit["diff"], edit["diff"]
        assert tree_digest(Path("/etc/nginx")) == nginx_before

        res = run_cli(["apply", "--pool", "www", "code-local-mirror", "--yes", "--trace",
                       str(trace)], state_home)
        assert res.returncode == 0, res.stderr
        (mirror,) = [m.parent for m in mirror_root.glob("www/*/mirror.json")]
        dump = subprocess.run(["nginx", "-T"], capture_output=True, text=True).stdout
        assert f"root {mirror}/current;" in dump
        assert _get("doku.php")[0] == 200
        status, body = _get("whereami.php")
        assert status == 200 and body.startswith(f"v1 {mirror}/tree-"), body  # the mirror's code

        (app / "stamp.txt").write_text("two\n")
        (app / "whereami.php").write_text("<?php echo 'v2 ', __FILE__;\n")
        stale = run_cli(["check", "--pool", "www", "--json"], state_home)
        assert "mirror-stale" in {f["id"] for f in json.loads(stale.stdout)["findings"]}
        synced = run_cli(["mirror", "sync", "--pool", "www", "--json"], state_home)
        assert synced.returncode == 0, synced.stderr
        assert _get("stamp.txt") == (200, "two\n")
        assert (mirror / "current" / "whereami.php").read_text().startswith("<?php echo 'v2 '")
        fresh = run_cli(["check", "--pool", "www", "--json"], state_home)
        assert "mirror-stale" not in {f["id"] for f in json.loads(fresh.stdout)["findings"]}

        res = run_cli(["apply", "--pool", "www", "--rollback"], state_home)
        assert res.returncode == 0, res.stderr
        assert tree_digest(Path("/etc/nginx")).differences(nginx_before) == []
        assert not mirror.exists()
        assert _get("stamp.txt") == (200, "two\n")  # from the network copy again
        assert _get("doku.php")[0] == 200


POOL_CONF = Path("/etc/php/8.2/fpm/pool.d/www.conf")


def test_sync_reload_serves_the_new_code_at_once(state_home: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian's www pool with one worker (every request meets the same realpath cache) and
    realpath_cache_ttl = 600, serving a mirror of a tree of the test's own: `--no-reload`
    leaves the worker on the generation before (the fault), a plain sync's reload does not."""
    with stock_host() as host:
        mirror_root = host.scratch("mirror")
        monkeypatch.setenv("STATSTORM_MIRROR_ROOT", str(mirror_root))
        src = host.scratch("src")
        (src / "whereami.php").write_text("<?php echo 'v1 ', __FILE__;\n")
        mirror = Path(mirror_dir(str(mirror_root), "www", str(src)))
        code_mirror.make(mirror, src, "www")
        host.write("/etc/php/8.2/fpm/conf.d/98-statstorm-test.ini", "realpath_cache_ttl = 600\n")
        POOL_CONF.write_text(POOL_CONF.read_text().replace("\npm = dynamic\n", "\npm = static\n")
                             .replace("\npm.max_children = 5\n", "\npm.max_children = 1\n"))
        host.nginx_site("mirror-reload", _site(mirror / "current"))
        host.fpm_start("init")
        host.nginx_start()
        first = os.readlink(mirror / "current")
        assert _get("whereami.php") == (200, f"v1 {mirror}/{first}/whereami.php")

        (src / "whereami.php").write_text("<?php echo 'v2 ', __FILE__;\n")
        res = run_cli(["mirror", "sync", "--pool", "www", "--no-reload", "--json"], state_home)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        second = out["synced"][0]["marker"]["tree"]
        assert out["reloaded"] is False and "realpath_cache_ttl" in out["note"]
        assert (mirror / "current" / "whereami.php").read_text().startswith("<?php echo 'v2 '")
        # the fault: the worker still resolves current/ into the generation before
        assert _get("whereami.php") == (200, f"v1 {mirror}/{first}/whereami.php")
        assert (mirror / first).is_dir()  # kept: the worker still reads it

        (src / "whereami.php").write_text("<?php echo 'v3 ', __FILE__;\n")
        res = run_cli(["mirror", "sync", "--pool", "www", "--json"], state_home)
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        third = out["synced"][0]["marker"]["tree"]
        assert out["reloaded"] is True and out["removed"] == [str(mirror / second)], out
        assert _get("whereami.php") == (200, f"v3 {mirror}/{third}/whereami.php")
        assert sorted(p.name for p in mirror.glob("tree-*")) == [third]

        found = run_cli(["check", "--pool", "www", "--json"], state_home)
        ids = {f["id"] for f in json.loads(found.stdout)["findings"]}
        assert "symlink-deploy-stale" not in ids and "mirror-stale" not in ids, ids

"""`statstorm tune` on a stock Debian host with an app whose code sits above its docroot (the
layout of Laravel, Symfony and Roundcube: a front controller in `public/` that requires
`../src/…`). The shadow copies the docroot, so its front controller cannot reach the code
and answers an error: tune says which side answered another page than the site's, in one
line, before it measures a ratio or changes anything, and leaves no shadow behind."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from conftest import run_cli
from statstorm.adapters.host import procs
from stock_host import TREES, php_site, stock_host, tree_digest

pytestmark = pytest.mark.root

PORT = 18193
URL = f"http://127.0.0.1:{PORT}/index.php"
TITLE = "Above the docroot"


def test_a_shadow_that_cannot_reach_the_apps_code_is_no_reference(state_home: Path,
                                                                  tmp_path: Path) -> None:
    with stock_host() as host:
        app = host.scratch("app")
        (app / "src").mkdir()
        (app / "public").mkdir()
        (app / "src/page.php").write_text(
            "<?php function page(): string { return '<html><head><title>" + TITLE +
            "</title></head><body>' . str_repeat('<p>the app answers</p>', 300) . "
            "'</body></html>'; }\n")
        (app / "public/index.php").write_text(
            "<?php require __DIR__ . '/../src/page.php'; echo page();\n")
        host.nginx_site("above-docroot", php_site(PORT, app / "public", "index.php"))
        host.fpm_start("init")
        host.nginx_start()
        with urllib.request.urlopen(URL, timeout=20) as r:
            assert TITLE.encode() in r.read()
        before = {t: tree_digest(t) for t in TREES}
        out = tmp_path / "out"
        res = run_cli(["tune", "--pool", "www", "--url", URL, "-o", str(out), "--yes",
                       "--rounds", "1", "-d", "2", "--warmup", "1", "--views", "3"],
                      state_home, timeout=600)
        assert res.returncode == 1, res.stdout + res.stderr
        (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("statstorm: error:")]
        assert "before: the reference (lab tune-www" in line, line
        assert "answered another page (status 500" in line and f"titled {TITLE!r}" in line
        assert "no ratio taken" in line
        r = json.loads((out / "tune.json").read_text())
        assert r["before"] is None and r["applied"] == []
        assert {t: tree_digest(t) for t in TREES} == before, "tune changed /etc"
        shadow = state_home / "labs/tune-www"
        assert not shadow.exists() and not procs.find_pids([f"{shadow}/conf/"])

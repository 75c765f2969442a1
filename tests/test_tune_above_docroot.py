"""`statstorm tune` on a stock Debian host with an app whose code sits above its docroot (the
layout of Laravel, Symfony and Roundcube: a front controller in `public/` that requires
`../src/…`). Two traced page views show tune the tree the app runs from: its shadow copies
that tree, its docroot within it, and answers the site's page, so the run measures a ratio.
A reference that answers another page than the site's (here: the app answers its page on the
site's port only) ends the run in one line naming it, before any ratio or change, and leaves
no shadow behind."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import run_cli
from statstorm.adapters.host import procs
from stock_host import TREES, StockHost, php_site, stock_host, tree_digest

pytestmark = pytest.mark.root

PORT = 18193
URL = f"http://127.0.0.1:{PORT}/index.php"
TITLE = "Above the docroot"
SHORT = ["--rounds", "1", "-d", "2", "--warmup", "1", "--views", "3"]
PAGE = ("<?php function page(): string { return '<html><head><title>" + TITLE +
        "</title></head><body>' . str_repeat('<p>the app answers</p>', 300) . "
        "'</body></html>'; }\n")


@pytest.fixture(scope="module")
def app_host() -> Iterator[tuple[StockHost, Path]]:
    with stock_host() as host:
        app = host.scratch("app")
        (app / "src").mkdir()
        (app / "public").mkdir()
        (app / "src/page.php").write_text(PAGE)
        (app / "public/index.php").write_text(
            "<?php require __DIR__ . '/../src/page.php'; echo page();\n")
        host.nginx_site("above-docroot", php_site(PORT, app / "public", "index.php"))
        host.fpm_start("init")
        host.nginx_start()
        with urllib.request.urlopen(URL, timeout=20) as r:
            assert TITLE.encode() in r.read()
        yield host, app


def _no_shadow(home: Path) -> None:
    shadow = home / "labs/tune-www"
    assert not shadow.exists() and not procs.find_pids([f"{shadow}/conf/"])


def test_the_shadow_copies_the_tree_the_app_runs_from(
        app_host: tuple[StockHost, Path], state_home: Path, tmp_path: Path) -> None:
    _, app = app_host
    before = {t: tree_digest(t) for t in TREES}
    res = run_cli(["tune", "--pool", "www", "--url", URL, "-o", str(tmp_path / "out"),
                   "--json", *SHORT], state_home, timeout=600)
    assert res.returncode == 0, res.stderr
    r = json.loads(res.stdout)
    assert r["docroot"] == str(app / "public")
    assert any(f"{app} is copied, the docroot {app}/public within it" in n
               for n in r["notes"]), r["notes"]
    assert r["before"]["local"]["rps"] > 0 and r["before"]["network"]["rps"] > 0
    assert {t: tree_digest(t) for t in TREES} == before, "tune's dry run changed /etc"
    _no_shadow(state_home)


def test_a_reference_answering_another_page_ends_the_run_in_one_line(
        app_host: tuple[StockHost, Path], state_home: Path, tmp_path: Path) -> None:
    _, app = app_host
    page = app / "src/page.php"
    page.write_text(PAGE.replace("function page(): string { return",
                                 "function page(): string { if ($_SERVER['SERVER_PORT'] != "
                                 f"{PORT}) {{ http_response_code(500); return 'no'; }} return"))
    try:
        with urllib.request.urlopen(URL, timeout=20) as r:
            assert TITLE.encode() in r.read()
        before = {t: tree_digest(t) for t in TREES}
        out = tmp_path / "out"
        res = run_cli(["tune", "--pool", "www", "--url", URL, "-o", str(out), "--yes", *SHORT],
                      state_home, timeout=600)
        assert res.returncode == 1, res.stdout + res.stderr
        (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("statstorm: error:")]
        assert "before: the reference (lab tune-www" in line, line
        assert "answered another page (status 500, 2 bytes" in line
        assert "than the site's (200, " in line and f"titled {TITLE!r}" in line
        assert line.endswith("no ratio taken")
        r = json.loads((out / "tune.json").read_text())
        assert r["before"] is None and r["applied"] == []
        assert {t: tree_digest(t) for t in TREES} == before, "tune changed /etc"
        _no_shadow(state_home)
    finally:
        page.write_text(PAGE)

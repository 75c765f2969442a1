"""`statstorm tune`'s dry run on a stock host serving an app statstorm knows: MediaWiki
(Debian's package, installed with SQLite as an admin would) on a GlusterFS volume mounted by
hand, behind Debian's www pool and nginx. Beside the storage and PHP changes, the plan gives the
app its own object cache (APCu loaded into the pool, `$wgMainCacheType` in LocalSettings.php);
the prediction is printed before the plan; nothing under /etc or in the app's tree changes and
no shadow is left. (The unknown app, DokuWiki, and tune --yes: tests/test_tune.py.)"""

from __future__ import annotations

import hashlib
import json
import urllib.request
from pathlib import Path

import pytest

from conftest import run_cli
from statstorm.adapters.labs import lab_apps
from statstorm.apps import mediawiki
from statstorm.env import Env
from stock_host import TREES, php_site, stock_host, tree_digest

pytestmark = [pytest.mark.root, pytest.mark.slow]

PORT = 18192
URL = f"http://127.0.0.1:{PORT}{mediawiki.ENTRY}"
SHORT = ["--rounds", "1", "-d", "2", "--warmup", "1", "--views", "4"]


def test_a_dry_run_on_mediawiki_plans_its_object_cache_and_changes_nothing(
        state_home: Path, tmp_path: Path) -> None:
    with stock_host() as host:
        host.gluster_volume()
        code = host.mount_by_hand(host.scratch("net")) / "mediawiki"
        lab_apps.copy_mediawiki(Env(), code)
        mediawiki.install(Env(), "php8.2", code, host.scratch("data"), PORT)
        host.nginx_site("mw-tune", php_site(PORT, code))
        host.fpm_start("init")
        host.nginx_start()
        assert urllib.request.urlopen(URL, timeout=60).status == 200
        settings = hashlib.sha256((code / "LocalSettings.php").read_bytes()).hexdigest()
        before = {t: tree_digest(t) for t in TREES}
        out = tmp_path / "out"
        res = run_cli(["tune", "--pool", "www", "--url", URL, "-o", str(out), "--json",
                       *SHORT], state_home, timeout=900)
        assert res.returncode == 0, res.stderr
        r = json.loads(res.stdout)
        print(f"tune dry run on MediaWiki: before {r['before']['ratio_rps']}x; findings "
              f"{r['findings_before']}; planned {r['planned']}")
        assert r["dry_run"] is True and r["docroot"] == str(code)
        assert "warning: app-data-on-network" in r["findings_before"]
        assert "$wgMainCacheType = CACHE_ACCEL;" in r["planned"]
        assert any(line.startswith("extension = ") and line.endswith("apcu.so")
                   for line in r["planned"])
        assert any("LocalSettings.php" in d for d in r["diffs"])
        assert res.stderr.index("prediction (before any change)") < res.stderr.index("[5/5]")
        assert {t: tree_digest(t) for t in TREES} == before, "tune's dry run changed /etc"
        assert hashlib.sha256((code / "LocalSettings.php").read_bytes()).hexdigest() == settings
        assert not (state_home / "labs/tune-www").exists(), "the shadow was left behind"

"""`statstorm tune` on a stock Debian host (tests/stock_host.py): Debian's php-fpm www pool,
an nginx site serving DokuWiki from a GlusterFS volume mounted by hand. The dry run measures
the pool against its shadow, traces, checks and predicts, changes no file under /etc and
leaves no shadow behind; `--yes` applies and measures again."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from conftest import run_cli
from statstorm.adapters.host import procs
from stock_host import TREES, StockHost, stock_host, tree_digest

pytestmark = [pytest.mark.root, pytest.mark.slow]

PORT = 18191
URL = f"http://127.0.0.1:{PORT}/doku.php"
SHORT = ["--rounds", "1", "-d", "2", "--warmup", "1", "--views", "3"]


def _wiki_on_gluster(host: StockHost) -> Path:
    host.gluster_volume()
    net = host.mount_by_hand(host.scratch("net"))
    code = host.copy_app("dokuwiki", net / "dokuwiki")
    host.nginx_site("doku-tune", f"""server {{
	listen 127.0.0.1:{PORT};
	root {code};
	index doku.php index.php;

	location ~ \\.php$ {{
		include snippets/fastcgi-php.conf;
		fastcgi_pass unix:/run/php/php8.2-fpm.sock;
	}}
}}
""")
    host.fpm_start("init")
    host.nginx_start()
    assert b"DokuWiki" in urllib.request.urlopen(URL, timeout=20).read()
    return code


def _no_shadow_left(home: Path) -> None:
    shadow = home / "labs/tune-www"
    assert not shadow.exists(), f"{shadow} left behind"
    assert not procs.find_pids([f"{shadow}/conf/"]), "a shadow process left behind"


def test_a_dry_run_measures_predicts_and_changes_nothing(state_home: Path,
                                                          tmp_path: Path) -> None:
    with stock_host() as host:
        code = _wiki_on_gluster(host)
        before = {t: tree_digest(t) for t in TREES}
        out = tmp_path / "out"
        res = run_cli(["tune", "--pool", "www", "--url", URL, "-o", str(out), "--json", *SHORT],
                      state_home, timeout=900)
        assert res.returncode == 0, res.stderr
        r = json.loads(res.stdout)
        print(f"tune dry run: before ratio_rps={r['before']['ratio_rps']} "
              f"ratio_p99={r['before']['ratio_p99']} pool={r['before']['network']['rps']} "
              f"shadow={r['before']['local']['rps']} req/s; round trips/request "
              f"{r['round_trips_per_request']}; calls {r['metadata_calls_per_request']}; "
              f"findings {r['findings_before']}")
        assert r["dry_run"] is True and r["after"] is None and r["applied"] == []
        assert r["docroot"] == str(code)
        assert r["before"]["ratio_rps"] and r["before"]["local"]["rps"] > 0
        assert r["before"]["network"]["rps"] > 0
        assert r["findings_before"], r
        assert r["predicted"]["metadata_calls_per_request_now"] is not None
        assert r["planned"], r
        # the prediction was printed before the dry run's apply step
        err = res.stderr
        assert err.index("prediction (before any change)") < err.index("[5/5]")
        assert (out / "tune.json").exists() and (out / "apply-plan.json").exists()
        assert {t: tree_digest(t) for t in TREES} == before, "tune's dry run changed /etc"
        _no_shadow_left(state_home)


def test_yes_applies_and_measures_again(state_home: Path, tmp_path: Path) -> None:
    with stock_host() as host:
        _wiki_on_gluster(host)
        res = run_cli(["tune", "--pool", "www", "--url", URL, "-o", str(tmp_path / "out"),
                       "--yes", "--json", *SHORT], state_home, timeout=900)
        assert res.returncode == 0, res.stderr
        r = json.loads(res.stdout)
        print(f"tune --yes: ratio_rps {r['before']['ratio_rps']} -> {r['after']['ratio_rps']}; "
              f"round trips/request {r['round_trips_per_request']}; applied {r['applied']}")
        assert r["dry_run"] is False and r["after"]["ratio_rps"] and r["applied"]
        _no_shadow_left(state_home)

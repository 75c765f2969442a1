"""`statstorm demo` end to end on real components: two labs (the synthetic app, to keep it
short), measured, traced, checked, predicted, applied and measured again, then removed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import leftovers, run_cli, unique_name
from statstorm.results.trace import read_trace
from test_php_root_check import root_of

pytestmark = pytest.mark.root


def test_demo_predicts_before_it_applies_and_leaves_nothing(state_home: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """On PHP 8.4 from its root (the MediaWiki demo below runs the host's 8.2): both labs,
    the trace, check and apply work on another version's php-fpm."""
    out = tmp_path / "demo"
    name = unique_name("dm")
    monkeypatch.setenv("STATSTORM_PHP_ROOTS", str(root_of("8.4").parent))
    proc = run_cli(["demo", "--app", "synthetic", "--php", "8.4", "--rounds", "1",
                    "--duration", "2", "--views", "3", "--name", name, "-o", str(out),
                    "--json"], state_home, check=True)
    result = json.loads(proc.stdout)
    assert result == json.loads((out / "demo.json").read_text())
    assert result["schema"] == "statstorm.demo/1" and result["php"] == "8.4"
    assert "synthetic (PHP 8.4) on local disk" in (out / "report.html").read_text()
    for phase in ("before", "after"):
        for role in ("local", "network"):
            side = result[phase][role]
            assert side["rps"] > 0 and side["p99_ms"] >= side["p50_ms"] > 0
            assert side["errors"] == 0 and len(side["rounds"]) == 1
        assert result[phase]["ratio_rps"] > 0 and result[phase]["ratio_p99"] > 0
    rt = result["round_trips_per_request"]
    assert rt["before"] > 0 and rt["after"] is not None and rt["predicted"] is not None
    assert rt["after"] < rt["before"]  # the mount and volume caches answer what they can
    calls = result["metadata_calls_per_request"]
    assert calls["before"] > 0 and calls["after"] > 0 and calls["predicted"] is not None
    # the prediction is made and printed before anything is applied
    assert result["predicted_at"] <= result["applied_at"]
    err = proc.stderr
    assert err.index("prediction (before any change)") < err.index("[5/7]")
    assert "glusterfs-mount-caching" in result["applied"]
    assert any("attribute-timeout" in c for c in result["settings"]["network"]["changes"])
    assert "glusterfs-mount-caching" not in " ".join(result["findings_after"])
    for f in ("demo.json", "before.sst.gz", "after.sst.gz", "check-before.json", "apply.json",
              "check-after.json", "report.html"):
        assert (out / f).is_file(), f
    # the files it names are relative to demo.json, and carry the run's id
    assert result["files"]["report"] == "report.html"
    assert result["files"]["apply"] == "apply.json" and list(result)[:2] == ["schema", "run_id"]
    for f in ("check-before.json", "apply.json", "check-after.json"):
        assert json.loads((out / f).read_text())["run_id"] == result["run_id"], f
    for f in ("before.sst.gz", "after.sst.gz"):  # its traces too, in their headers
        assert read_trace(out / f).head.run_id == result["run_id"], f
    assert "local throughput before" in (out / "report.html").read_text()
    for role in ("local", "net"):
        lab = f"{name}-{role}"
        assert leftovers(str(state_home / "labs" / lab), f"statstorm-{lab}") == []
    assert not result["kept"]


def test_demo_bad_usage_is_one_line(state_home: Path, tmp_path: Path) -> None:
    p = run_cli(["demo", "--rounds", "0", "-o", str(tmp_path / "d")], state_home)
    assert p.returncode == 2 and "--rounds" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    f = tmp_path / "file"
    f.write_text("x")
    p = run_cli(["demo", "-o", str(f)], state_home)
    assert p.returncode == 2 and "is a file" in p.stderr


@pytest.mark.slow
def test_demo_on_mediawiki_gives_it_an_object_cache_and_ends_the_round_trips(
        state_home: Path, tmp_path: Path) -> None:
    """The built-in default, shortened: MediaWiki's data files re-read from GlusterFS are
    found, APCu is loaded into both labs' pools with $wgMainCacheType = CACHE_ACCEL, and the
    round trips per request fall by 95 % or more (counts, not timings). Run with --keep: the
    network lab it leaves is `lab up --app mediawiki --storage glusterfs`'s (4 workers, the
    default), and is checked here as test_lab checked its own (one MediaWiki copied onto
    GlusterFS fewer); the demo's removal of its labs is test_demo_predicts_before_it_applies'
    and test_faults'."""
    from test_lab import assert_down, assert_workers, get
    out = tmp_path / "mw"
    name = unique_name("mw")
    try:
        proc = run_cli(["demo", "--rounds", "1", "--duration", "3", "--views", "3", "--name",
                        name, "-o", str(out), "--keep", "--json"], state_home, check=True,
                       timeout=900)
        r = json.loads(proc.stdout)
        assert r["kept"]
        assert "warning: app-data-on-network" in r["findings_before"]
        # (network-bound, the share of request time spent on the network, is a timing: its
        # rule is tested on fixed facts in test_check_rules, not here)
        assert {"app-data-on-network", "glusterfs-mount-caching"} <= set(r["applied"])
        for role in ("network", "local"):
            changes = r["settings"][role]["changes"]
            assert "$wgMainCacheType = CACHE_ACCEL;" in changes
            assert any(c.startswith("extension = ") and c.endswith("apcu.so") for c in changes)
        assert not any("app-data-on-network" in f or "network-bound" in f
                       for f in r["findings_after"])
        rt = r["round_trips_per_request"]
        assert rt["before"] > 100 and rt["after"] <= 0.05 * rt["before"]
        assert r["metadata_calls_per_request"]["after"] < r["metadata_calls_per_request"]["before"]

        # MediaWiki on GlusterFS, from the lab (and serving with the demo's changes)
        state = json.loads(run_cli(["lab", "status", "--name", f"{name}-net", "--json"],
                                   state_home, check=True).stdout)
        assert state["storage"] == "glusterfs"
        assert Path(str(state["code_path"]), "includes").is_dir()
        assert str(state["code_path"]).startswith(str(state["mount_point"]))
        status, body = get(f"{state['url']}/index.php?title=Main_Page")
        assert status == 200 and 'id="mw-content-text"' in body
        status, body = get(f"{state['url']}/api.php?action=query&meta=siteinfo&format=json")
        assert status == 200 and json.loads(body)["query"]["general"]["sitename"] == "LabWiki"
        assert_workers(state, 4)
        assert_down(state_home, state)  # nothing left, and a second down is a no-op
        local = json.loads(run_cli(["lab", "status", "--name", f"{name}-local", "--json"],
                                   state_home, check=True).stdout)
        assert_down(state_home, local)
    finally:  # whatever failed, neither lab stays
        for role in ("local", "net"):
            run_cli(["lab", "down", "--name", f"{name}-{role}"], state_home)
    for role in ("local", "net"):
        lab = f"{name}-{role}"
        assert leftovers(str(state_home / "labs" / lab), f"statstorm-{lab}") == []

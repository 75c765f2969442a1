"""`statstorm tune` on a stock Debian host (tests/stock_host.py): Debian's php-fpm www pool,
an nginx site serving DokuWiki from a GlusterFS volume mounted by hand. The dry run measures
the pool against its shadow, traces, checks and predicts, changes no file under /etc and
leaves no shadow behind; `--yes` applies, measures again and runs the escalation (each change
tried alone, kept or rolled back), the page answering throughout."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import uuid
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from conftest import run_cli
from statstorm.adapters.host import procs
from statstorm.model import escalation
from stock_host import TREES, StockHost, php_site, stock_host, tree_digest

pytestmark = [pytest.mark.root, pytest.mark.slow]

PORT = 18191
URL = f"http://127.0.0.1:{PORT}/doku.php"
SHORT = ["--rounds", "1", "-d", "2", "--warmup", "1", "--views", "3"]


def _wiki_on_gluster(host: StockHost) -> Path:
    host.gluster_volume()
    net = host.mount_by_hand(host.scratch("net"))
    code = host.copy_app("dokuwiki", net / "dokuwiki")
    host.nginx_site("doku-tune", php_site(PORT, code))
    host.fpm_start("init")
    host.nginx_start()
    assert b"DokuWiki" in urllib.request.urlopen(URL, timeout=20).read()
    return code


@pytest.fixture(scope="module")
def wiki_host() -> Iterator[tuple[StockHost, Path]]:
    """One stock host with DokuWiki on GlusterFS for this file's tests (copying DokuWiki onto
    the volume is most of standing it up): the dry run changes nothing and --yes's test rolls
    every change back; the host is restored exactly at the end, even after a failure."""
    with stock_host() as host:
        yield host, _wiki_on_gluster(host)


def _no_shadow_left(home: Path) -> None:
    shadow = home / "labs/tune-www"
    assert not shadow.exists(), f"{shadow} left behind"
    assert not procs.find_pids([f"{shadow}/conf/"]), "a shadow process left behind"


def test_a_dry_run_measures_predicts_and_changes_nothing(
        state_home: Path, tmp_path: Path, wiki_host: tuple[StockHost, Path]) -> None:
    _, code = wiki_host
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
    assert (out / "report.html").exists() and r["files"]["report"] == "report.html"
    assert {t: tree_digest(t) for t in TREES} == before, "tune's dry run changed /etc"
    _no_shadow_left(state_home)


def _verify() -> str:
    """What `dpkg --verify` finds changed in the packages of the pool and its server."""
    return subprocess.run(["dpkg", "--verify", "php8.2-fpm", "php8.2-common", "php8.2-opcache",
                           "nginx-common"], capture_output=True, text=True).stdout


class Poller:
    """The pool's page asked every 0.2 s while tune runs: every answer's status kept."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.codes: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            try:
                with urllib.request.urlopen(self.url, timeout=20) as r:
                    self.codes.append(r.status)
            except urllib.error.HTTPError as exc:
                self.codes.append(exc.code)
            except OSError:
                self.codes.append(0)

    def __enter__(self) -> "Poller":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def test_yes_applies_measures_again_and_escalates(state_home: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  wiki_host: tuple[StockHost, Path]) -> None:
    """DokuWiki on GlusterFS stays far below its shadow after apply --all: tune's escalation
    tries the changes check proposed one at a time and tune.json records each trial; the page
    answers 200 throughout; rolled back afterwards, nothing of the run is left."""
    mirrors = Path(f"/var/tmp/statstorm-test-mirror-{uuid.uuid4().hex[:8]}")  # www-data enters
    monkeypatch.setenv("STATSTORM_MIRROR_ROOT", str(mirrors))
    try:
        assert b"DokuWiki" in urllib.request.urlopen(URL, timeout=20).read()
        etc = {t: tree_digest(t) for t in TREES}
        packaged = _verify()
        with Poller(URL) as poll:
            res = run_cli(["tune", "--pool", "www", "--url", URL, "-o", str(tmp_path / "out"),
                           "--yes", "--json", *SHORT], state_home, timeout=900)
        assert res.returncode == 0, res.stderr
        r = json.loads(res.stdout)
        trials = [(t["finding"], t["ratio_without"], t["ratio_with"], t["kept"])
                  for t in r["measure_first"]]
        print(f"tune --yes: ratio_rps {r['before']['ratio_rps']} -> {r['after']['ratio_rps']}; "
              f"round trips/request {r['round_trips_per_request']}; applied {r['applied']}; "
              f"trials {trials}; skipped {r['escalation_skipped']}; {len(poll.codes)} polls")
        assert r["dry_run"] is False and r["after"]["ratio_rps"] and r["applied"]
        assert r["after"]["ratio_rps"] < escalation.TARGET_RATIO  # settings alone stop short
        tried = [t["finding"] for t in r["measure_first"]]
        skipped = [x["finding"] for x in r["escalation_skipped"]]
        assert tried, r["escalation_skipped"]
        assert sorted(tried + skipped) == sorted(escalation.ESCALATION)
        assert tried == [i for i in escalation.ESCALATION if i in tried]  # in order
        for t in r["measure_first"]:
            assert t["why"] and t["phase"]["network"]["rps"] > 0
            assert ("kept" in t["why"]) == t["kept"]
            assert (tmp_path / "out" / f"apply-{t['finding']}.json").exists()
        # the prove step and the page: a second trace and check with every kept change made
        assert r["metadata_calls_per_request"]["after"] is not None
        assert isinstance(r["findings_after"], list)
        for f in ("after.sst.gz", "check-after.json", "report.html"):
            assert (tmp_path / "out" / f).is_file(), f
        assert r["files"]["report"] == "report.html"
        assert res.stderr.index("[7/8] escalation") < res.stderr.index("[8/8] prove")
        assert poll.codes and set(poll.codes) == {200}, poll.codes
        _no_shadow_left(state_home)
        # every change undone, newest first: apply --all's set and each kept trial's
        for _ in range(1 + sum(t["kept"] for t in r["measure_first"])):
            run_cli(["apply", "--rollback", "--pool", "www"], state_home, check=True)
        assert b"DokuWiki" in urllib.request.urlopen(URL, timeout=20).read()
        assert not any(mirrors.glob("www/*")), "a mirror left behind"
        # undone means undone: every file the run touched byte for byte as before it (the
        # pool's www.conf as Debian's package left it), every file it made gone
        assert {t: etc[t].differences(tree_digest(t)) for t in TREES} == {t: [] for t in TREES}
        assert _verify() == packaged  # Debian's own files, as dpkg --verify reads them
    finally:
        shutil.rmtree(mirrors, ignore_errors=True)

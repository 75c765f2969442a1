"""`statstorm tune` without root: its options, the pool's site chosen from its sites, the
shadow's configuration rendered from a pool's facts, tune.json's round trip, and the order of
its steps with the system's parts replaced by fakes (the real run: tests/test_tune.py)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import invoke
from statstorm.adapters.labs import shadow
from statstorm.adapters.labs import shadow_site
from statstorm.commands import apply as apply_cmd, check as check_cmd, tune as tune_cmd
from statstorm.commands.pair import Pair
from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.model import escalation
from statstorm.report.page import typed
from statstorm.results import result_files
from statstorm.results.check import CheckResult
from statstorm.results.demo import DemoResult, Lab, PerRequest, Phase, Prediction, Round, Side
from statstorm.results.lab import LabState
from statstorm.results.sites import Site
from statstorm.results.tune import TuneResult

URL = "http://127.0.0.1:8081/doku.php"


# -- options -------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (["--pool", "www", "--url", "http://192.0.2.7/doku.php"], "is not on loopback: tune loads"),
    (["--pool", "www", "--url", "ftp://127.0.0.1/x"], "is not an http(s) URL"),
    (["--pool", "www", "--url", URL, "--rounds", "0"], "--rounds must be between 1 and 10"),
    (["--pool", "www", "--url", URL, "-d", "0.5"], "--duration must be between 1 and 120 s"),
    (["--pool", "www", "--url", URL, "--views", "0"], "--views must be between 1 and 200"),
    (["--pool", "www"], "Missing option '--url'"),
])
def test_bad_options_get_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    res = invoke(["tune", *args], tmp_path)
    assert res.returncode == 2
    assert says in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 or "Usage" in res.stderr
    assert "Traceback" not in res.stderr


def test_an_output_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(UsageError, match="a file of that name exists"):
        tune_cmd.validate_options(tune_cmd.TuneOptions("www", (URL,), output_dir=tmp_path / "f"))


# -- the pool's site -----------------------------------------------------------------------------
def site(port: int, docroot: str = "/srv/wiki", names: tuple[str, ...] = ("_",),
         unknown: str = "", line: int = 3) -> Site:
    return Site(server_names=names, listen=(f"{port}",), docroot=docroot,
                docroot_unknown=unknown, passes_to=("/run/php/php8.2-fpm.sock",),
                config_file="/etc/nginx/sites-enabled/wiki", config_line=line)


def test_a_pool_no_site_passes_to_is_refused() -> None:
    with pytest.raises(UsageError, match="no nginx site passes PHP to pool www"):
        shadow_site.site_of("www", "/run/php/php8.2-fpm.sock", (), (URL,))


def test_a_url_no_site_of_the_pool_serves_is_refused() -> None:
    with pytest.raises(UsageError, match=r"--url http://127.0.0.1:9999/x.php: no site of pool www"):
        shadow_site.site_of("www", "x", (site(8081),), ("http://127.0.0.1:9999/x.php",))


def test_pages_of_two_sites_and_a_variable_root_are_refused() -> None:
    with pytest.raises(UsageError, match="different sites"):
        shadow_site.site_of("www", "x", (site(8081), site(8082, line=9)),
                         (URL, "http://127.0.0.1:8082/"))
    with pytest.raises(UsageError, match=r"sets its root with \$host"):
        shadow_site.site_of("www", "x", (site(8081, docroot="/srv/$host", unknown="$host"),), (URL,))


def test_the_site_on_the_urls_port_is_chosen() -> None:
    chosen = shadow_site.site_of("www", "x", (site(80, "/srv/a"), site(8081, "/srv/b", line=9)),
                              (URL, "http://127.0.0.1:8081/doku.php?id=start"))
    assert chosen.docroot == "/srv/b"
    assert shadow_site.front_controller(URL) == "doku.php"
    assert shadow_site.front_controller("http://127.0.0.1/") == "index.php"
    assert shadow_site.shadow_urls("http://127.0.0.1:9000", (URL, "http://127.0.0.1:8081/a?b=c")) \
        == ("http://127.0.0.1:9000/doku.php", "http://127.0.0.1:9000/a?b=c")


# -- the shadow's configuration ------------------------------------------------------------------
DIRECTIVES = {
    "user": "www-data", "group": "www-data", "listen": "/run/php/php8.2-fpm.sock",
    "pm": "dynamic", "pm.max_children": "5", "pm.start_servers": "2", "pm.max_requests": "0",
    "php_admin_value[open_basedir]": "/mnt/gv/wiki:/tmp",
    "php_value[include_path]": ".:/mnt/gv/wiki/inc:/usr/share/php",
    "php_value[memory_limit]": "128M", "env[TMP]": "/tmp", "slowlog": "/var/log/x.log",
    "php_admin_value[error_log]": "/mnt/gv/wikidata/log", "rlimit_files": "0",
    "php_admin_value[disable_functions]": "exec,system",
    "php_value[date.timezone]": "Europe/Berlin (x)",
}


def plan(**kw: Any) -> shadow.ShadowPlan:
    base: dict[str, Any] = dict(pool="www", lab="tune-www", source="/mnt/gv/wiki",
                                binary="/usr/sbin/php-fpm8.2", directives=DIRECTIVES,
                                workers=shadow.workers_of(DIRECTIVES))
    return shadow.ShadowPlan(**{**base, **kw})


def test_the_shadow_fpm_conf_keeps_the_pools_php_lines_with_paths_moved(tmp_path: Path) -> None:
    text = shadow.render_fpm_conf(plan(), tmp_path, tmp_path / "code")
    assert f"listen = {tmp_path}/run/php-fpm.sock" in text
    assert "/run/php/php8.2-fpm.sock" not in text  # never the pool's own socket
    assert "pm = static\npm.max_children = 5" in text
    assert f"php_admin_value[open_basedir] = {tmp_path}/code:/tmp" in text
    assert f"php_value[include_path] = .:{tmp_path}/code/inc:/usr/share/php" in text
    assert "php_admin_value[error_log] = /mnt/gv/wikidata/log" in text  # not under the tree
    assert "php_value[memory_limit] = 128M" in text and "env[TMP] = /tmp" in text
    assert "slowlog" not in text and "pm.start_servers" not in text and "rlimit" not in text
    assert "php_admin_value[disable_functions] = exec,system" in text
    assert 'php_value[date.timezone] = "Europe/Berlin (x)"' in text
    assert f"pid = {tmp_path}/run/php-fpm.pid" in text and "[statstorm-tune-www]" in text


def test_the_masters_options_and_names() -> None:
    ini, notes = shadow.master_ini(["-d", "realpath_cache_size=16K", "-dopcache.enable=0",
                                    "-y", "/etc/php/8.2/fpm/php-fpm.conf", "-c", "/x.ini"])
    assert ini == {"realpath_cache_size": "16K", "opcache.enable": "0"}
    assert notes == ["the master's -c /x.ini is not repeated in the shadow"]
    assert shadow.lab_name("www") == "tune-www"
    assert shadow.lab_name("My_Pool.x") == "tune-my-pool-x"
    assert shadow.workers_of({"pm.max_children": "500"}) == shadow.MAX_WORKERS
    assert shadow.workers_of({"pm.max_children": "x"}) == 5


def test_relative_links_out_of_the_tree_reach_the_same_files(tmp_path: Path) -> None:
    src, copy = tmp_path / "srv/wiki", tmp_path / "copy"
    for d in (src / "lib", copy / "lib"):
        d.mkdir(parents=True)
    for d in (src, copy):
        (d / "lib/out").symlink_to("../../etc")
        (d / "lib/in").symlink_to("../data")
        (d / "abs").symlink_to("/etc/x")
    assert shadow.pin_escaping_links(src, copy) == 1
    assert os.readlink(copy / "lib/out") == str(tmp_path / "srv/etc")
    assert os.readlink(copy / "lib/in") == "../data" and os.readlink(copy / "abs") == "/etc/x"


def test_a_tree_larger_than_the_free_space_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 1000)
    assert shadow.tree_bytes(tmp_path) >= 1000
    with pytest.raises(UsageError, match=r"/srv/wiki \(100 MiB\) does not fit .* STATSTORM_HOME"):
        shadow.check_space(100 << 20, 50 << 20, "/srv/wiki", tmp_path)
    shadow.check_space(1 << 20, 1 << 30, "/srv/wiki", tmp_path)


# -- tune.json ------------------------------------------------------------------------------------
def phase(local: float, network: float) -> Phase:
    return Phase(Side((Round(local, 10, 20, 0, 100),)), Side((Round(network, 30, 90, 0, 40, 800),)))


PREDICTION = Prediction(("realpath_cache_ttl=600",), 120.0, 300.0, 50.0, 4.0, 1.5,
                        ("realpath_cache_ttl = 600",))


def result(tmp_path: Path) -> TuneResult:
    return TuneResult("www", (URL,), str(tmp_path), run_id="abc123", docroot="/mnt/gv/wiki",
                      shadow=Lab("tune-www", "http://127.0.0.1:9000"), dry_run=False,
                      before=phase(100, 40), after=phase(100, 95), predicted=PREDICTION,
                      predicted_at="2026-01-01T00:00:00+00:00", planned=("a = 1",),
                      diffs=("--- a\n+++ b\n",), applied=("realpath-ttl",),
                      metadata_calls_per_request=PerRequest(300.0, 110.0, 120.0),
                      findings_before=("warn: realpath-ttl",), files={"tune": "tune.json"},
                      timings_s={"total": 3.0}, notes=("n",))


def test_tune_json_round_trips_and_the_report_reads_it(tmp_path: Path) -> None:
    r = result(tmp_path)
    data = json.loads(json.dumps(r.to_json()))
    assert data["schema"] == "statstorm.tune/1" and data["before"]["ratio_rps"] == 0.4
    assert data["round_trips_per_request"] == {"before": 20.0, "after": 20.0, "predicted": 1.5}
    assert TuneResult.from_json(data) == r
    (tmp_path / "tune.json").write_text(json.dumps(data))
    rf = result_files.load(tmp_path / "tune.json")
    assert rf.kind == "tune"
    demo = typed(rf)
    assert isinstance(demo, DemoResult) and demo.before == r.before
    assert demo.labs["local"].name == "tune-www"


# -- the order of the steps ---------------------------------------------------------------------
class RootEnv(Env):
    def is_root(self) -> bool:
        return True


class Fakes:
    """The system's parts, each call appended to `events`."""

    def __init__(self, tmp_path: Path, fail_in: str = "") -> None:
        self.events: list[str] = []
        self.tmp, self.fail_in = tmp_path, fail_in
        self.applied: list[apply_cmd.ApplyOptions] = []

    def event(self, what: str) -> None:
        self.events.append(what)
        if what == self.fail_in:
            raise ComponentError(f"{what} failed")

    def steps(self) -> tune_cmd.Steps:
        def resolve(env: Env, opts: tune_cmd.TuneOptions) -> tune_cmd.Resolved:
            self.event("resolve")
            return tune_cmd.Resolved(site(8081), plan())

        @contextmanager
        def running(env: Env, p: shadow.ShadowPlan, say: Any) -> Iterator[LabState]:
            self.event("shadow up")
            try:
                yield LabState("tune-www", "shadow", "local", 9000, 5, str(self.tmp / "s"),
                               url="http://127.0.0.1:9000", docroot=str(self.tmp / "s/code"))
            finally:
                self.events.append("shadow down")

        def measure(env: Env, local: Any, network: Any, load: Any, label: str,
                    say: Any) -> Phase:
            self.event(f"measure {label}")
            assert local.urls == ("http://127.0.0.1:9000/doku.php",)
            return phase(100, 40 if label == "before" else 95)

        def trace(env: Env, tracer: Any, **kw: Any) -> float:
            self.event("trace")
            assert kw["pool"] == "www" and kw["urls"] == (URL,)
            return 300.0

        def check(env: Env, opts: check_cmd.CheckOptions) -> CheckResult:
            self.event("check")
            return CheckResult(pools=(), findings=[])

        def predict(*args: Any) -> Prediction:
            self.event("predict")
            return PREDICTION

        def apply(env: Env, opts: apply_cmd.ApplyOptions) -> apply_cmd.ApplyResult:
            self.event("apply --yes" if opts.yes else "apply dry-run")
            self.applied.append(opts)
            return apply_cmd.ApplyResult(apply_cmd.ApplyMode.APPLIED if opts.yes
                                         else apply_cmd.ApplyMode.DRY_RUN, None)

        def mirror(env: Env, applied: Any, pair: Pair) -> list[str]:
            self.event("mirror")
            assert pair.reference.lab == "tune-www" and pair.target.pool == "www"
            assert pair.reference.code == str(self.tmp / "s/code")
            return []

        def report(rec: Any) -> None:
            self.events.append("report")

        return tune_cmd.Steps(resolve=resolve, shadow=running, measure=measure,
                              window=lambda env, path: None, trace=trace, check=check,
                              predict=predict, apply=apply, mirror=mirror, report=report,
                              pages=lambda urls: ())


def run(tmp_path: Path, fakes: Fakes, monkeypatch: pytest.MonkeyPatch, yes: bool) -> TuneResult:
    monkeypatch.setattr(tune_cmd.Wrk, "available", lambda self: "wrk 4")
    opts = tune_cmd.TuneOptions("www", (URL,), yes=yes, output_dir=tmp_path / "out")

    def say(line: str) -> None:
        fakes.events.append(f"say {line}")
    return tune_cmd.run(RootEnv(stderr=io.StringIO(), state_root=tmp_path), opts, say, fakes.steps())


def plain(events: list[str]) -> list[str]:
    return [e if not e.startswith("say ") else
            "PREDICTION" if e.startswith("say prediction") else "say" for e in events]


def test_a_dry_run_prints_the_prediction_then_stops_before_any_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = Fakes(tmp_path)
    r = run(tmp_path, fakes, monkeypatch, yes=False)
    ev = [e for e in plain(fakes.events) if e != "say"]
    assert ev == ["resolve", "shadow up", "measure before", "trace", "check", "predict",
                  "PREDICTION", "apply dry-run", "shadow down", "report"]
    assert [e for e in fakes.events if e.startswith("say [")][-1].startswith("say [5/5] fix")
    assert [o.yes for o in fakes.applied] == [False]
    assert r.dry_run and r.after is None and r.applied == () and r.predicted == PREDICTION
    written = json.loads((tmp_path / "out/tune.json").read_text())
    assert written["dry_run"] is True and written["before"]["ratio_rps"] == 0.4
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "apply-plan.json", "check-before.json", "tune.json"]


def test_with_yes_apply_comes_after_the_prediction_and_both_are_measured_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = Fakes(tmp_path)
    r = run(tmp_path, fakes, monkeypatch, yes=True)
    ev = [e for e in plain(fakes.events) if e != "say"]
    assert ev == ["resolve", "shadow up", "measure before", "trace", "check", "predict",
                  "PREDICTION", "apply --yes", "mirror", "measure after", "trace", "check",
                  "shadow down", "report"]
    assert r.after is not None and r.after.ratio_rps == 0.95 and not r.dry_run
    assert [e[4:9] for e in fakes.events if e.startswith("say [")] == [
        f"[{n}/8]" for n in range(1, 9)]
    for f in ("apply.json", "check-before.json", "check-after.json"):
        assert (tmp_path / "out" / f).exists(), f
    # the prove step: a second trace and check, their figures in tune.json
    assert r.metadata_calls_per_request.after == 300.0 and r.findings_after == ()
    assert r.files["trace_after"] == "after.sst.gz" and r.files["check_after"] == "check-after.json"
    assert {s.finding for s in r.skipped} == set(escalation.ESCALATION)


def test_the_shadow_goes_whatever_fails_and_the_json_keeps_what_was_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = Fakes(tmp_path, fail_in="trace")
    with pytest.raises(ComponentError, match="trace failed"):
        run(tmp_path, fakes, monkeypatch, yes=True)
    assert fakes.events[-2:] == ["shadow down", "report"]  # the report of what was measured
    assert "apply --yes" not in fakes.events
    written = TuneResult.from_json(json.loads((tmp_path / "out/tune.json").read_text()))
    assert written.before is not None and written.predicted is None


FPM = Path("/usr/sbin/php-fpm8.2")
DEBIAN_FPM_CONF = Path("/etc/php/8.2/fpm/php-fpm.conf")


@pytest.mark.skipif(not FPM.exists() or not DEBIAN_FPM_CONF.exists(), reason="no php-fpm 8.2")
def test_php_fpm_accepts_the_shadow_of_debians_www_pool(tmp_path: Path) -> None:
    """The www pool as Debian ships it, read with `php-fpm -tt`, plus php_admin_value lines:
    `php-fpm -t` accepts the shadow's configuration (nothing started)."""
    from statstorm.adapters.labs import phpfpm
    from statstorm.adapters.php import php_targets
    env = Env()
    directives = phpfpm.pool_directives(
        php_targets.fpm_tt(env, [str(FPM), "-y", str(DEBIAN_FPM_CONF)]), "www")
    assert directives["listen"].startswith("/run/php/")
    directives |= {"php_admin_value[open_basedir]": "/srv/wiki:/tmp",
                   "php_value[date.timezone]": "Europe/Berlin"}
    p = plan(directives=directives, workers=shadow.workers_of(directives), source="/srv/wiki")
    for sub in ("run", "log", "conf"):
        (tmp_path / sub).mkdir()
    conf = tmp_path / "conf/php-fpm.conf"
    conf.write_text(shadow.render_fpm_conf(p, tmp_path, tmp_path / "code"))
    phpfpm.test_config(env, str(FPM), conf, {"realpath_cache_size": "4096K"})
    text = conf.read_text()
    assert f"php_admin_value[open_basedir] = {tmp_path}/code:/tmp" in text
    assert "security.limit_extensions = .php .phar" in text


def test_report_html_is_written_beside_tune_json(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """As the demo does: the page `statstorm report tune.json` makes, from the files alone."""
    fakes = Fakes(tmp_path)
    monkeypatch.setattr(Fakes, "steps", lambda self, real=Fakes.steps: dataclasses.replace(
        real(self), report=tune_cmd.Steps().report))
    r = run(tmp_path, fakes, monkeypatch, yes=True)
    assert r.files["report"] == "report.html"
    page = (tmp_path / "out/report.html").read_text()
    assert "pool www" in page
    written = TuneResult.from_json(json.loads((tmp_path / "out/tune.json").read_text()))
    assert written.files["report"] == "report.html" and written == r

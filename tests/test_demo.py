"""`statstorm demo` end to end on real components: two labs (the synthetic app, to keep it
short), measured, traced, checked, predicted, applied and measured again, then removed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import leftovers, run_cli, unique_name
from statstorm.model import escalation
from statstorm.results.trace import read_trace
from test_php_root_check import root_of

pytestmark = [pytest.mark.root, pytest.mark.beside]


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
    assert err.index("prediction (before any change)") < err.index("[5/8]")
    assert err.index("[7/8] escalation") < err.index("[8/8] prove")
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
    # the escalation: every change of it tried or skipped, with why
    done = [t["finding"] for t in result.get("measure_first", [])] + [
        x["finding"] for x in result.get("escalation_skipped", [])]
    assert sorted(done) == sorted(escalation.ESCALATION)


def test_the_escalation_on_a_lab_applies_by_name_or_says_why_not(
        state_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's pipeline on real labs, trace, check and apply, its measurements held at
    0.5x (a fake: the point is the escalation, not the load) and the GlusterFS lab 1 ms away
    (so the traced requests are network-bound and check proposes the escalation's changes):
    each change check proposed is applied by name on the network lab (`lab=`) and rolled back
    (no gain; the mirror too, made in the lab's own directory), or recorded as skipped with
    why; nothing crashes, no lab is left."""
    from statstorm.commands import demo as demo_cmd
    from statstorm.env import Env
    from statstorm.results.demo import Phase, Round, Side
    monkeypatch.setenv("STATSTORM_HOME", str(state_home))
    labels: list[str] = []

    def measure(env: Env, local: object, network: object, load: object, label: str,
                say: object) -> Phase:
        labels.append(label)
        return Phase(Side((Round(100, 10, 20, 0, 100),)), Side((Round(50, 20, 40, 0, 50),)))

    name = unique_name("de")
    opts = demo_cmd.DemoOptions(name=name, app="synthetic", output_dir=tmp_path / "out",
                                rounds=1, duration_s=2, views=3, storage_delay_us=1000)
    try:
        r = demo_cmd.run(Env(state_root=state_home), opts,
                         steps=demo_cmd.DemoSteps(measure=measure))
    finally:
        for role in ("local", "net"):
            run_cli(["lab", "down", "--name", f"{name}-{role}"], state_home)
    print(f"escalation on a lab: findings {r.findings_before}; trials "
          f"{[(t.finding, t.why) for t in r.trials]}; skipped "
          f"{[(x.finding, x.why) for x in r.skipped]}")
    assert labels[:2] == ["before", "after"]
    assert sorted([t.finding for t in r.trials] + [x.finding for x in r.skipped]) == \
        sorted(escalation.ESCALATION)
    proposed = {f.split(": ", 1)[1] for f in r.findings_before}
    assert proposed & {escalation.MIRROR, "opcache-timestamps-off"}, r.findings_before
    why = {x.finding: x.why for x in r.skipped}
    if escalation.MIRROR in proposed:  # made in the network lab's own directory, undone
        assert escalation.MIRROR in [t.finding for t in r.trials], why
        assert not list((state_home / "labs" / f"{name}-net" / "mirror").glob("*/*"))
        made = json.loads((tmp_path / "out" / f"apply-{escalation.MIRROR}.json").read_text())
        inc = [c for c in made["changes"] if c["key"] == "include_path"]  # the synthetic's
        assert inc and all(e.startswith(str(state_home / "labs" / f"{name}-net" / "mirror"))
                           for e in inc[0]["value"].split(":")), made["changes"]
    for t in r.trials:  # applied on the lab, measured at the same 0.5x: rolled back
        assert not t.kept and f"with {t.finding}" in labels
        assert json.loads((tmp_path / "out" / f"apply-{t.finding}.json").read_text())[
            "mode"] == "applied"
    if "opcache-timestamps-off" in proposed:
        assert "opcache-timestamps-off" in [t.finding for t in r.trials], why
    assert (tmp_path / "out/check-after.json").is_file()
    for role in ("local", "net"):
        lab = f"{name}-{role}"
        assert leftovers(str(state_home / "labs" / lab), f"statstorm-{lab}") == []


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

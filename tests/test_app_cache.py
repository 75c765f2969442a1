"""The app's own data on network storage: the rules that find it (app-data-on-network,
network-bound), the changes apply makes for it (APCu for one pool, the app's cache setting),
the app recognised by its files, and the round-trip forecast of the demo. Pure, no root."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from statstorm.adapters.php import php_apps
from statstorm.model import applyplan
from statstorm.model.applyplan import APP, POOL_INI, Change, classify, edit_app, edit_pool
from statstorm.model.checkfacts import Facts, MountFact, TraceFacts, trace_facts
from statstorm.model.network_forecast import MountCaches, forecast
from statstorm.model.rules import evaluate
from statstorm.results.demo import Phase, Round, Side
from statstorm.results.trace import Request, Syscall, Trace
from statstorm.results.trace.summary import TraceSummary

GLUSTER = MountFact(role="docroot", path="/srv/w", mount_point="/srv/w", fstype="fuse.glusterfs",
                    kind="glusterfs-fuse", volume="v")
SO = "/opt/statstorm/php/20220829/apcu.so"


def trace(data_opens: float = 20.0, share: float | None = 0.1) -> TraceFacts:
    return TraceFacts(requests=10, detail="events", per_request={"total": 200.0},
                      data_opens_per_request=data_opens,
                      data_open_examples=(("/srv/w/extensions/Cite/extension.json", 1.0),),
                      network_time_share=share, network_ms_per_request=12.5)


def facts(**kw: object) -> Facts:
    base: dict[str, object] = dict(pool="www", settings={}, docroot="/srv/w", mounts=(GLUSTER,),
                                   trace=trace(), app="mediawiki",
                                   app_config="/srv/w/LocalSettings.php", extensions=("Core",),
                                   apcu_path=SO)
    base.update(kw)
    return Facts(**base)  # type: ignore[arg-type]


def found(f: Facts) -> dict[str, object]:
    return {x.id: x for x in evaluate(f)}


def test_mediawiki_gets_apcu_for_the_pool_and_its_cache_setting() -> None:
    f = found(facts())["app-data-on-network"]
    assert f.severity == "warning" and "extension.json" in f.evidence[0]  # type: ignore[attr-defined]
    changes = classify(f, {})  # type: ignore[arg-type]
    assert [(c.kind, c.key, c.value, c.where) for c in changes] == [
        (POOL_INI, "extension", SO, ""),
        (APP, "$wgMainCacheType", "CACHE_ACCEL", "/srv/w/LocalSettings.php")]
    # already loaded: only the app's setting
    again = found(facts(extensions=("Core", "apcu")))["app-data-on-network"]
    assert [c.key for c in classify(again, {})] == ["$wgMainCacheType"]  # type: ignore[arg-type]


def test_no_apcu_on_the_machine_is_a_manual_step_that_names_the_fix() -> None:
    f = found(facts(apcu_path=""))["app-data-on-network"]
    assert [c.kind for c in classify(f, {})] == ["manual"]  # type: ignore[arg-type]
    assert "setup.sh" in f.change[0]  # type: ignore[attr-defined]


def test_other_apps_get_the_finding_by_hand_and_quiet_cases_none() -> None:
    wp = found(facts(app="wordpress", app_config="/srv/w/wp-config.php"))["app-data-on-network"]
    assert all(c.kind == "manual" for c in classify(wp, {}))  # type: ignore[arg-type]
    assert "object-cache.php" in wp.change[0]  # type: ignore[attr-defined]
    unknown = found(facts(app="", app_config=""))["app-data-on-network"]
    assert "local copy" in " ".join(unknown.change)  # type: ignore[attr-defined]
    assert "app-data-on-network" not in found(facts(trace=trace(data_opens=1.0)))
    local = dataclasses.replace(GLUSTER, kind="local", fstype="ext4", mount_point="/")
    assert "app-data-on-network" not in found(facts(mounts=(local,)))
    assert "app-data-on-network" not in found(facts(trace=None))


def test_network_bound_fires_on_the_share_of_request_time() -> None:
    assert "network-bound" not in found(facts(trace=trace(share=0.2)))
    f = found(facts(trace=trace(share=0.62)))["network-bound"]
    assert "62%" in f.evidence[0] and "12.5 ms" in f.evidence[0]  # type: ignore[attr-defined]
    assert "network-bound" not in found(facts(trace=trace(share=None)))


def test_app_setting_appended_once_in_its_own_block() -> None:
    c = [Change("app-data-on-network", APP, "$wgMainCacheType", "CACHE_ACCEL", "", where="x")]
    text = "<?php\n$wgMainCacheType = CACHE_NONE;\n"
    once = edit_app(text, c)
    assert once == text + f"{applyplan.APP_MARK}\n$wgMainCacheType = CACHE_ACCEL;\n"
    assert edit_app(once, c) == once
    with pytest.raises(ValueError):
        edit_app("not php\n", c)


def test_extension_line_keeps_the_pools_other_extensions() -> None:
    c = [Change("a", POOL_INI, "extension", SO, "")]
    text = "[www]\nphp_admin_value[extension] = redis.so\n"
    out = edit_pool(text, "www", c)
    assert "php_admin_value[extension] = redis.so" in out
    assert f"php_admin_value[extension] = {SO}" in out
    assert edit_pool(out, "www", c) == out


def test_app_recognised_from_its_files(tmp_path: Path) -> None:
    (tmp_path / "includes").mkdir()
    (tmp_path / "includes/Defines.php").write_text("<?php\n")
    (tmp_path / "includes/WebStart.php").write_text("<?php\n")
    assert php_apps.recognise(str(tmp_path)) == ("mediawiki", "")
    (tmp_path / "LocalSettings.php").write_text("<?php\n")
    assert php_apps.recognise(str(tmp_path)) == ("mediawiki", str(tmp_path / "LocalSettings.php"))
    assert php_apps.recognise(str(tmp_path / "includes")) == (
        "mediawiki", str(tmp_path / "LocalSettings.php"))  # a public/ below the app root
    assert php_apps.recognise(str(tmp_path / "x" / "nope")) == ("", "")
    assert php_apps.recognise("") == ("", "")


def _trace() -> Trace:
    mounts = [("/", "ext4"), ("/srv/w", "fuse.glusterfs")]
    t = Trace(header={"mounts": mounts})
    for req in range(4):
        base = req * 1_000_000_000
        t.requests[req] = Request(req, 10, base, base + 100_000_000)
        calls = [("lstat", "/srv/w/index.php", 0), ("stat", "/srv/w/missing.php", -2),
                 ("open", "/srv/w/extension.json", 3), ("open", "/srv/w/a.php", 3)]
        for i, (call, path, ret) in enumerate(calls):
            t.syscalls.append(Syscall(base + i * 1000, 10, call, call, path, ret,
                                      lat_ns=10_000_000, req=req, mount=1))
    return t


def test_trace_facts_count_data_opens_and_network_time() -> None:
    tf = trace_facts(_trace(), TraceSummary.from_json({"requests": 4, "per_request": {},
                                                       "totals": {}}))
    assert tf.data_opens_per_request == 1.0
    assert tf.data_open_examples == (("/srv/w/extension.json", 1.0),)
    assert tf.network_time_share == 0.4  # 4 × 10 ms of 100 ms
    assert tf.network_ms_per_request == 40.0


def test_forecast_counts_what_the_caches_do_not_answer() -> None:
    t = _trace()
    now = forecast(t.syscalls, {1}, 4, MountCaches())  # 1 s timeouts, requests 1 s apart
    assert now.calls_per_request == 4.0
    assert now.reaching_per_request == 4.0  # nothing is still cached a second later
    tuned = forecast(t.syscalls, {1}, 4, MountCaches(600, 600, 600))
    assert tuned.reaching_per_request == 2.0  # the two opens
    cached = forecast(t.syscalls, {1}, 4, MountCaches(600, 600, 600), app_cache=True)
    assert cached.reaching_per_request == 1.0 and cached.data_opens_per_request == 0.0
    assert forecast([], {1}, 4, MountCaches()).reaching_per_request == 0.0


def test_demo_phase_medians_ratios_and_round_trips() -> None:
    ph = Phase(Side([Round(40, 20, 80, 0, 400), Round(44, 19, 70, 0, 440),
                     Round(42, 21, 90, 0, 420)]),
               Side([Round(12, 60, 400, 0, 120, 24_000), Round(13, 55, 380, 1, 130, 26_000),
                     Round(11, 70, 450, 0, 110, 22_000)]))
    rps, p99 = ph.ratios()
    assert rps == round(12 / 42, 3) and p99 == round(400 / 80, 3)
    j = ph.to_json()
    assert j["network"]["round_trips_per_request"] == 200.0
    assert j["network"]["errors"] == 1 and j["local"]["rps_range"] == [40.0, 44.0]
    assert j["local"]["round_trips_per_request"] is None

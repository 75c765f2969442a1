"""`statstorm tune --yes`'s escalation: after `apply --all`, while the pool stays below 0.90x of
its shadow, the changes check proposed that `apply --all` leaves out tried one at a time, least
invasive first (GlusterFS content caches, OPcache's timestamps off, the code mirror), each kept
only when the ratio rises by more than KEEP_MARGIN over the ratio without it, else rolled back;
tune.json records every trial and every change not tried, with why. Fakes for the system
(tests/test_tune_unit.py's), no root."""

from __future__ import annotations

import dataclasses
import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from test_app_cache import facts, found, trace
from test_tune_unit import URL, Fakes, RootEnv, phase, result

from statstorm.adapters.apply.mirror import unreachable
from statstorm.cli.tune import render
from statstorm.commands import apply as apply_cmd, check as check_cmd
from statstorm.commands import tune as tune_cmd
from statstorm.env import Env
from statstorm.errors import NotSamePage, RollbackFailed
from statstorm.model import escalation
from statstorm.model.applyplan import NAMED_ONLY, POOL_INI, classify
from statstorm.results.check import CheckResult, Finding, Severity
from statstorm.results.demo import Phase, Round, Side
from statstorm.results.page import Page
from statstorm.report.page import build
from statstorm.results.result_files import load_all
from statstorm.results.tune import Skipped, TuneResult, judge

CONTENT, OFF, MIRROR = escalation.ESCALATION
PAGES = (Page(URL, 200, 4000, "Main Page"),)


def reported_finding(rule_id: str) -> Finding:
    return Finding(id=rule_id, severity=Severity.INFO, title="t", evidence=("e",),
                   change=("x",), tradeoff="t", predicted_gain=None, gain_note="")


def run_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ratios: dict[str, float],
             reported: tuple[str, ...] = escalation.ESCALATION, mirror: bool = True,
             nothing: tuple[str, ...] = (), fakes: Fakes | None = None,
             raising: dict[str, Exception] | None = None,
             other_page: dict[str, str] | None = None) -> tuple[TuneResult, Fakes]:
    """tune --yes with check reporting `reported`; each phase's ratio from `ratios` (by its
    label: before, after, with ID); apply of an id in `nothing` makes nothing, of one in
    `raising` raises its error; the measurement of a label in `other_page` finds that side
    (local, network) answering another page than the site's."""
    fakes = fakes or Fakes(tmp_path)
    fakes.checked = []  # type: ignore[attr-defined]
    base = fakes.steps()

    def check(env: Env, opts: check_cmd.CheckOptions) -> CheckResult:
        fakes.event("check")
        fakes.checked.append(opts)
        return CheckResult(pools=(), findings=[reported_finding(i) for i in reported])

    def measure(env: Env, local: Any, network: Any, load: Any, label: str, say: Any) -> Phase:
        fakes.event(f"measure {label}")
        assert local.pages == network.pages == PAGES  # the site's, taken once
        if label in (other_page or {}):
            role = (other_page or {})[label]
            raise NotSamePage(f"{label}: the {role} side answered another page", role)
        return phase(100, 100 * ratios[label])

    def pages(urls: tuple[str, ...]) -> tuple[Page, ...]:
        fakes.event("pages")
        assert urls == (URL,)
        return PAGES

    def apply(env: Env, opts: apply_cmd.ApplyOptions) -> apply_cmd.ApplyResult:
        fakes.event("apply --rollback" if opts.rollback else
                    f"apply {','.join(opts.findings) or '--all'}")
        fakes.applied.append(opts)
        for rule_id in opts.findings:
            if rule_id in (raising or {}):
                raise (raising or {})[rule_id]
        mode = (apply_cmd.ApplyMode.ROLLED_BACK if opts.rollback else
                apply_cmd.ApplyMode.NOTHING if set(opts.findings) & set(nothing)
                else apply_cmd.ApplyMode.APPLIED)
        return apply_cmd.ApplyResult(mode, None)

    steps = dataclasses.replace(base, measure=measure, check=check, apply=apply, pages=pages)
    monkeypatch.setattr(tune_cmd.Wrk, "available", lambda self: "wrk 4")
    opts = tune_cmd.TuneOptions("www", (URL,), yes=True, output_dir=tmp_path / "out",
                                mirror=mirror)
    r = tune_cmd.run(RootEnv(stderr=io.StringIO(), state_root=tmp_path), opts,
                     lambda line: None, steps)
    return r, fakes


def after_all(fakes: Fakes) -> list[str]:
    """The events between the `after` measurement's re-check (the escalation's candidates, as
    check sees the pool after apply --all) and the prove step's trace and check."""
    ev = fakes.events
    assert ev[-4:] == ["trace", "check", "shadow down", "report"]
    start = ev.index("measure after") + 1
    return ev[start + (ev[start] == "check"):-4]


def test_the_candidates_are_checked_after_apply_all_with_the_measured_gap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The escalation asks check again once apply --all is in (GlusterFS's content caches wait
    for the metadata tier), giving it the ratio step 6 measured: a pool below 0.90x of its
    shadow is network-bound whatever its trace's share; apply by name gets the same ratio."""
    r, fakes = run_with(tmp_path, monkeypatch, {"before": 0.1, "after": 0.5,
                                                f"with {CONTENT}": 0.95})
    first, again, prove = fakes.checked  # type: ignore[attr-defined]
    assert (first.local_ratio, again.local_ratio, prove.local_ratio) == (None, 0.5, None)
    assert again.trace == first.trace  # the trace taken before, with the live settings
    (tried,) = [o for o in fakes.applied if o.findings]
    assert tried.local_ratio == 0.5
    assert (tmp_path / "out" / "check-escalation.json").is_file()


def test_the_order_is_least_invasive_first_and_none_is_in_apply_all() -> None:
    assert escalation.ESCALATION == ("glusterfs-content-caching", "opcache-timestamps-off",
                                     "code-local-mirror")
    assert all(i in NAMED_ONLY for i in escalation.ESCALATION)
    tried, skipped = escalation.plan(["code-local-mirror", "opcache-timestamps-off", "x"])
    assert tried == ["opcache-timestamps-off", "code-local-mirror"]
    assert skipped == [("glusterfs-content-caching", "check did not propose it for this pool")]
    assert escalation.plan([MIRROR], mirror=False) == (
        [], [(CONTENT, "check did not propose it for this pool"),
             (OFF, "check did not propose it for this pool"), (MIRROR, "left out by --no-mirror")])
    assert not escalation.reached(0.89) and escalation.reached(0.9)
    assert "statstorm mirror sync --pool www" in escalation.price(MIRROR, "--pool www")
    assert "statstorm opcache reset --pool www" in escalation.price(OFF, "--pool www")


def test_each_is_tried_alone_kept_or_rolled_back_until_the_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r, fakes = run_with(tmp_path, monkeypatch, {"before": 0.1, "after": 0.5,
                                                f"with {CONTENT}": 0.51,  # +2 %: rolled back
                                                f"with {OFF}": 0.6,  # +20 %: kept
                                                f"with {MIRROR}": 0.97})  # over 0.6: kept
    assert after_all(fakes) == [f"apply {CONTENT}", f"measure with {CONTENT}", "apply --rollback",
                                f"apply {OFF}", f"measure with {OFF}",
                                f"apply {MIRROR}", f"measure with {MIRROR}"]
    assert [(t.finding, t.kept) for t in r.trials] == [(CONTENT, False), (OFF, True),
                                                       (MIRROR, True)]
    content, off, mirror = r.trials
    assert content.ratio_without == 0.5 and "rolled back" in content.why
    assert off.ratio_without == 0.5 and mirror.ratio_without == 0.6  # judged on the last kept
    assert "statstorm mirror sync --pool www" in mirror.price
    assert r.applied[-2:] == (OFF, MIRROR) and CONTENT not in r.applied
    final = r.final()
    assert final is not None and final.phase is mirror.phase and r.skipped == ()
    assert final.kept == (OFF, MIRROR) and final.label == f"with {OFF} and {MIRROR} kept"
    data = json.loads((tmp_path / "out/tune.json").read_text())
    assert [t["finding"] for t in data["measure_first"]] == [CONTENT, OFF, MIRROR]
    assert data["measure_first"][2]["price"].startswith("a copy of the code")
    assert TuneResult.from_json(data).trials == r.trials
    assert data["final"] == {"ratio_rps": 0.97, "ratio_p99": mirror.phase.ratio_p99,
                             "round_trips_per_request": 20.0,
                             "label": f"with {OFF} and {MIRROR} kept", "kept": [OFF, MIRROR]}
    assert TuneResult.from_json(data).final() == final
    old = {k: v for k, v in data.items() if k != "final"}  # a tune.json written before the key
    assert TuneResult.from_json(old) == TuneResult.from_json(data)


def test_the_report_reads_tune_json_with_its_trials_and_final_figure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`statstorm report tune.json` draws the run as a demo: the trials and skipped changes
    carried over, the headline stating the ratio the pool ended at and what got it there."""
    r, _ = run_with(tmp_path, monkeypatch, {"before": 0.1, "after": 0.5,
                                            f"with {CONTENT}": 0.51, f"with {OFF}": 0.6,
                                            f"with {MIRROR}": 0.97}, mirror=False)
    demo = r.as_demo()
    assert demo.trials == r.trials and demo.skipped == r.skipped != ()
    assert demo.final() == r.final()
    page = build(load_all([tmp_path / "out/tune.json"]))
    verdict = page.headline.verdict
    assert "0.10x local throughput before, 0.60x at the end" in verdict
    assert f"by apply --all, then {OFF} kept by the escalation (0.50x after apply --all " \
        "alone)" in verdict
    (sec,) = [s for s in page.sections if s.id.startswith("demo-")]
    (esc,) = [t for t in sec.tables if "escalation" in t.caption]
    assert [(row[0], row[4]) for row in esc.rows] == [(CONTENT, "rolled back"), (OFF, "kept"),
                                                      (MIRROR, "not tried")]


def test_the_escalation_stops_once_the_pool_reaches_the_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r, fakes = run_with(tmp_path, monkeypatch, {"before": 0.1, "after": 0.5,
                                                f"with {CONTENT}": 0.95})
    assert after_all(fakes) == [f"apply {CONTENT}", f"measure with {CONTENT}"]
    assert [(s.finding, "reached 0.95x" in s.why) for s in r.skipped] == [(OFF, True),
                                                                         (MIRROR, True)]


def test_nothing_is_tried_when_apply_all_reached_it(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    r, fakes = run_with(tmp_path, monkeypatch, {"before": 0.3, "after": 0.92})
    assert after_all(fakes) == [] and r.trials == ()
    assert len(fakes.checked) == 2  # type: ignore[attr-defined]  # no re-check to escalate
    assert not (tmp_path / "out" / "check-escalation.json").exists()
    assert {s.finding for s in r.skipped} == set(escalation.ESCALATION)
    assert all("0.92x" in s.why for s in r.skipped)


def test_no_mirror_and_unproposed_and_empty_changes_are_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r, fakes = run_with(tmp_path, monkeypatch, {"before": 0.1, "after": 0.5}, mirror=False,
                        reported=(CONTENT, OFF, MIRROR), nothing=(CONTENT, OFF))
    assert after_all(fakes) == [f"apply {CONTENT}", f"apply {OFF}"]  # nothing made: not measured
    why = {s.finding: s.why for s in r.skipped}
    assert why[MIRROR] == "left out by --no-mirror"
    assert why[CONTENT].startswith("apply made nothing (nothing") and "not measured" in why[OFF]
    again = TuneResult.from_json(json.loads((tmp_path / "out/tune.json").read_text()))
    assert again.skipped == r.skipped


def test_opcache_timestamps_off_is_proposed_with_its_deploy_step_on_network_code() -> None:
    on = {"opcache.enable": "1"}
    revalidating = dataclasses.replace(trace(share=0.1), revalidate_per_request=3.0)
    f = found(facts(settings=on, trace=revalidating))[OFF]
    assert [(c.kind, c.key, c.value) for c in classify(f, {})] == [  # type: ignore[arg-type]
        (POOL_INI, "opcache.validate_timestamps", "0")]
    assert "statstorm opcache reset --pool www" in f.tradeoff  # type: ignore[attr-defined]
    assert "measure first" in f.gain_note  # type: ignore[attr-defined]
    assert OFF in found(facts(settings=on, trace=trace(share=0.7)))  # network-bound alone
    assert OFF not in found(facts(settings=on, trace=trace(share=0.1)))  # nothing to remove
    assert OFF not in found(facts(settings={**on, "opcache.validate_timestamps": "0"},
                                  trace=revalidating))
    assert OFF not in found(facts(settings={}, trace=revalidating))  # OPcache off
    assert OFF not in found(facts(settings=on, trace=None))


def test_a_change_that_makes_requests_fail_is_rolled_back_however_fast() -> None:
    broken = Phase(Side((Round(100, 10, 20, 0, 100),)), Side((Round(9000, 1, 2, 4000, 9000),)))
    t = judge(MIRROR, broken, phase(100, 50))
    assert not t.kept and "4000 more failed request(s)" in t.why


def test_a_mirror_root_other_users_cannot_enter_is_refused() -> None:
    base = Path(tempfile.mkdtemp(dir="/var/tmp"))  # /var/tmp: 1777, tmp_path: 0700
    try:
        base.chmod(0o755)
        closed = base / "closed"
        (closed / "open").mkdir(parents=True)
        closed.chmod(0o700)
        assert unreachable(closed / "open" / "www" / "x") == closed
        closed.chmod(0o755)
        assert unreachable(closed / "open" / "www" / "x") is None
    finally:
        shutil.rmtree(base)
    assert unreachable(Path("/var/tmp/statstorm-no-such/www/x")) is None  # /var/tmp: 1777


def test_the_text_output_shows_each_trial_its_price_and_what_was_not_tried(
        tmp_path: Path) -> None:
    mirror = judge(MIRROR, phase(100, 90), phase(100, 60), escalation.price(MIRROR, "--pool www"))
    content = judge(CONTENT, phase(100, 61), phase(100, 60), escalation.price(CONTENT, "--pool www"))
    r = dataclasses.replace(result(tmp_path), trials=(content, mirror),
                   skipped=(Skipped(OFF, "check did not propose it for this pool"),))
    out = io.StringIO()
    render(Env(stdout=out), r)
    text = out.getvalue()
    assert f"escalation: {CONTENT}: ratio 0.6x → 0.61x (+2%): rolled back" in text
    assert f"escalation: {MIRROR}: ratio 0.6x → 0.9x (+50%): kept" in text
    assert "its price: a copy of the code on local disk that every deploy must sync" in text
    assert f"escalation: {OFF}: check did not propose it for this pool" in text
    assert "the escalation's kept changes (code-local-mirror) were made after the prediction" \
        in text


def test_the_second_traces_figure_names_the_kept_changes_the_prediction_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prove step's trace is taken after the escalation: its metadata calls are no test of
    the prediction (made for apply --all), and the closing table says which kept change acted
    outside it."""
    r, _ = run_with(tmp_path, monkeypatch, {"before": 0.1, "after": 0.5,
                                            f"with {CONTENT}": 0.5, f"with {OFF}": 0.5,
                                            f"with {MIRROR}": 0.97})
    assert [t.finding for t in r.trials if t.kept] == [MIRROR]
    assert r.predicted is not None
    assert f"{MIRROR} (kept by the escalation, after the prediction)" in \
        (r.predicted.not_modelled_calls or ())
    again = TuneResult.from_json(json.loads((tmp_path / "out/tune.json").read_text()))
    assert again.predicted == r.predicted


def test_a_trial_whose_measurement_fails_is_rolled_back_before_the_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No trial change is left on the pool unrecorded: a measurement that fails (or is
    stopped) rolls its change back, then the error goes on."""
    fakes = Fakes(tmp_path)
    with pytest.raises(KeyError):  # no ratio for "with glusterfs-content-caching": it fails
        run_with(tmp_path, monkeypatch, {"before": 0.1, "after": 0.5}, fakes=fakes)
    ev = fakes.events
    tried = ev.index(f"apply {CONTENT}")
    assert ev[tried + 1:tried + 3] == [f"measure with {CONTENT}", "apply --rollback"]


def test_a_failed_rollback_ends_the_escalation(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A change whose own rollback failed leaves the pool neither as it was nor changed:
    nothing more is tried on top of it (the error ends the run, as apply's own would)."""
    fakes = Fakes(tmp_path)
    with pytest.raises(RollbackFailed):
        run_with(tmp_path, monkeypatch, {"before": 0.1, "after": 0.5}, fakes=fakes,
                 raising={CONTENT: RollbackFailed("the remount failed; the previous files "
                                                  "are back but the old client did not start")})
    assert f"apply {OFF}" not in fakes.events


def test_the_sites_pages_are_taken_once_before_the_first_measurement(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r, fakes = run_with(tmp_path, monkeypatch, {"before": 0.1, "after": 0.95})
    assert fakes.events.count("pages") == 1
    assert fakes.events.index("pages") < fakes.events.index("measure before")


def test_a_trial_that_changes_the_targets_page_is_rolled_back_and_not_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mirror of a docroot whose code sits above it turns the site into an error page:
    never a ratio, the change undone at once, the next step goes on."""
    r, fakes = run_with(tmp_path, monkeypatch, {"before": 0.1, "after": 0.5,
                                                f"with {CONTENT}": 0.52, f"with {OFF}": 0.55},
                        other_page={f"with {MIRROR}": "network"})
    ev = after_all(fakes)
    assert ev[ev.index(f"apply {MIRROR}") + 1:][:2] == [f"measure with {MIRROR}",
                                                        "apply --rollback"]
    (skip,) = [s for s in r.skipped if s.finding == MIRROR]
    assert skip.why.startswith("rolled back: it changed the target's page")
    assert MIRROR not in r.applied and all(t.finding != MIRROR for t in r.trials)


def test_apply_all_that_changes_the_targets_page_is_rolled_back_and_the_run_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(NotSamePage, match="apply --all changed pool www's page, so it was "
                                          "rolled back"):
        run_with(tmp_path, monkeypatch, {"before": 0.1}, other_page={"after": "network"})


def test_a_reference_that_serves_another_page_ends_the_run_before_any_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = Fakes(tmp_path)
    with pytest.raises(NotSamePage, match="the local side answered another page"):
        run_with(tmp_path, monkeypatch, {}, other_page={"before": "local"}, fakes=fakes)
    assert not [e for e in fakes.events if e.startswith("apply")]

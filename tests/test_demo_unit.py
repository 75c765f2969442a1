"""`statstorm demo` without root: the order of its steps with the system's parts replaced by
fakes (the labs, the load, the tracer, check, whatif, apply; the real run: tests/test_demo.py).
The prediction is made before anything is applied, the escalation runs on the network lab by
`lab=` (a change a lab cannot take is recorded as skipped, with why), a second trace and check
prove the fix, both labs go whatever fails, and report.html is written from demo.json."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest

from test_tune_escalation import reported_finding
from test_tune_unit import PREDICTION, RootEnv, phase

from statstorm.adapters.labs import lab_build
from statstorm.commands import apply as apply_cmd, check as check_cmd, demo as demo_cmd
from statstorm.commands import run_record
from statstorm.cli.demo import render
from statstorm.commands.pair import Pair
from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.model import escalation
from statstorm.model.applyplan import MANUAL, Change
from statstorm.results.check import CheckResult
from statstorm.results.demo import DemoResult, Phase, Round, Side
from statstorm.report.page import build
from statstorm.results.lab import LabState
from statstorm.results.result_files import load_all

CONTENT, OFF, MIRROR = escalation.ESCALATION


class DemoFakes:
    """The demo's labs and the pipeline's steps, each call appended to `events`."""

    def __init__(self, tmp_path: Path, fail_in: str = "", ratios: dict[str, float] | None = None,
                 reported: tuple[str, ...] = ()) -> None:
        self.events: list[str] = []
        self.tmp, self.fail_in = tmp_path, fail_in
        self.ratios = ratios or {"before": 0.4, "after": 0.95}
        self.reported = reported
        self.applied: list[apply_cmd.ApplyOptions] = []

    def event(self, what: str) -> None:
        self.events.append(what)
        if what == self.fail_in:
            raise ComponentError(f"{what} failed")

    def up(self, env: Env, opts: lab_build.LabOptions) -> LabState:
        self.event(f"up {opts.name}")
        return LabState(opts.name, opts.app, opts.storage, 9000, opts.workers,
                        str(self.tmp / opts.name), url="http://127.0.0.1:9000",
                        entry_path="/index.php", code_path=f"/srv/{opts.name}/code",
                        volume="v" if opts.storage != "local" else "")

    def down(self, env: Env, name: str, quiet: bool = False) -> bool:
        self.events.append(f"down {name}")
        return True

    def measure(self, env: Env, local: Any, network: Any, load: Any, label: str,
                say: Any) -> Phase:
        self.event(f"measure {label}")
        assert local.role == "local" and network.role == "network"
        return phase(100, 100 * self.ratios[label])

    def trace(self, env: Env, tracer: Any, **kw: Any) -> float:
        self.event("trace")
        assert kw["lab"] == "dm-net" and kw["pool"] is None
        return 300.0

    def check(self, env: Env, opts: check_cmd.CheckOptions) -> CheckResult:
        self.event("check")
        assert opts.lab == "dm-net" and opts.pools == ()
        return CheckResult(pools=(), findings=[reported_finding(i) for i in self.reported])

    def predict(self, *args: Any) -> Any:
        self.event("predict")
        return PREDICTION

    def apply(self, env: Env, opts: apply_cmd.ApplyOptions) -> apply_cmd.ApplyResult:
        assert opts.lab == "dm-net" and opts.pool is None  # the network lab, by lab=
        self.applied.append(opts)
        if opts.rollback:
            self.event("apply --rollback")
            return apply_cmd.ApplyResult(apply_cmd.ApplyMode.ROLLED_BACK, None)
        self.event(f"apply {','.join(opts.findings) or '--all'}")
        if MIRROR in opts.findings:  # as apply answers a lab behind Apache: nothing made
            return apply_cmd.ApplyResult(apply_cmd.ApplyMode.NOTHING, None, [Change(
                MIRROR, MANUAL, "", "", "copy the code", "Apache serves this pool: copy the "
                "code and switch its DocumentRoot by hand")])
        if CONTENT in opts.findings:
            raise UsageError("not on this lab's volume")
        return apply_cmd.ApplyResult(apply_cmd.ApplyMode.APPLIED, None)

    def mirror(self, env: Env, applied: Any, pair: Pair) -> list[str]:
        self.event("mirror")
        assert (pair.reference.lab, pair.target.lab) == ("dm-local", "dm-net")
        assert pair.reference.code == "/srv/dm-local/code"
        return ["realpath_cache_ttl = 600"]

    def report(self, rec: Any) -> None:
        self.events.append("report")

    def steps(self, **kw: Any) -> demo_cmd.DemoSteps:
        return demo_cmd.DemoSteps(up=self.up, down=self.down, trace=self.trace,
                                  check=self.check, predict=self.predict, apply=self.apply,
                                  mirror=self.mirror, **{"report": self.report,
                                                         "measure": self.measure,
                                                         "pages": lambda urls: (), **kw})


def run(tmp_path: Path, fakes: DemoFakes, monkeypatch: pytest.MonkeyPatch,
        **kw: Any) -> DemoResult:
    monkeypatch.setattr(demo_cmd.Wrk, "available", lambda self: "wrk 4")
    opts = demo_cmd.DemoOptions(name="dm", app="synthetic", output_dir=tmp_path / "out",
                                rounds=1, duration_s=2)

    def say(line: str) -> None:
        fakes.events.append("PREDICTION" if line.startswith("prediction") else f"say {line}")
    return demo_cmd.run(RootEnv(stderr=io.StringIO(), state_root=tmp_path), opts, say,
                        fakes.steps(**kw))


def test_the_prediction_comes_before_apply_and_a_second_trace_proves_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = DemoFakes(tmp_path)
    r = run(tmp_path, fakes, monkeypatch)
    assert [e for e in fakes.events if not e.startswith("say ")] == [
        "up dm-local", "up dm-net", "measure before", "trace", "check", "predict", "PREDICTION",
        "apply --all", "mirror", "measure after", "trace", "check", "down dm-net",
        "down dm-local", "report"]
    steps = [e[4:] for e in fakes.events if e.startswith("say [")]
    assert [s[:5] for s in steps] == [f"[{n}/8]" for n in range(1, 9)]
    assert steps[4].startswith("[5/8] fix: statstorm apply --all --yes on lab dm-net")
    assert steps[6] == "[7/8] escalation: no change to try"
    written = DemoResult.from_json(json.loads((tmp_path / "out/demo.json").read_text()))
    assert written == r
    assert r.predicted_at is not None and r.applied_at is not None
    assert r.predicted_at <= r.applied_at
    assert r.after is not None and r.after.ratio_rps == 0.95
    assert r.metadata_calls_per_request.after == 300.0
    assert r.settings["local"].changes == ("realpath_cache_ttl = 600",)
    assert {k: r.files[k] for k in ("trace_before", "check_before", "apply", "trace_after",
                                    "check_after")} == {
        "trace_before": "before.sst.gz", "check_before": "check-before.json",
        "apply": "apply.json", "trace_after": "after.sst.gz", "check_after": "check-after.json"}
    assert set(r.timings_s) >= {f"step{n}" for n in range(1, 9)} | {"total"}
    assert set(r.labs) == {"local", "network"} and not r.kept


def test_both_labs_go_whatever_fails_and_the_report_is_still_made(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = DemoFakes(tmp_path, fail_in="predict")
    with pytest.raises(ComponentError, match="predict failed"):
        run(tmp_path, fakes, monkeypatch)
    assert fakes.events[-3:] == ["down dm-net", "down dm-local", "report"]
    assert not any(e.startswith("apply") for e in fakes.events)
    written = DemoResult.from_json(json.loads((tmp_path / "out/demo.json").read_text()))
    assert written.before is not None and written.predicted is None
    assert written.findings_before == () and "total" in written.timings_s


def test_a_lab_that_fails_to_start_takes_the_other_down(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = DemoFakes(tmp_path, fail_in="up dm-net")
    with pytest.raises(ComponentError):
        run(tmp_path, fakes, monkeypatch)
    assert fakes.events[-2:] == ["down dm-local", "report"]  # dm-net never came up


def test_the_escalation_runs_on_the_network_lab_by_name(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Below 0.90x after apply --all, each proposed change is tried on the lab (lab=, never
    pool=); one the lab cannot take is skipped with why, the demo goes on."""
    fakes = DemoFakes(tmp_path, ratios={"before": 0.2, "after": 0.5, f"with {OFF}": 0.7},
                      reported=escalation.ESCALATION)
    r = run(tmp_path, fakes, monkeypatch)
    ev = fakes.events
    tried = [e for e in ev[ev.index("measure after") + 1:] if not e.startswith("say ")]
    assert tried.pop(0) == "check"  # the escalation's candidates, after apply --all
    assert tried[:5] == [f"apply {CONTENT}", f"apply {OFF}", f"measure with {OFF}",
                         f"apply {MIRROR}", "trace"]
    assert [(t.finding, t.kept) for t in r.trials] == [(OFF, True)]
    why = {s.finding: s.why for s in r.skipped}
    assert "apply could not make it here (not on this lab's volume)" in why[CONTENT]
    assert why[MIRROR].startswith("apply made nothing (nothing: Apache serves this pool")
    assert OFF in r.applied
    assert "statstorm opcache reset --lab dm-net" in r.trials[0].price
    data = json.loads((tmp_path / "out/demo.json").read_text())
    assert [t["finding"] for t in data["measure_first"]] == [OFF]
    assert DemoResult.from_json(data).skipped == r.skipped
    assert (tmp_path / "out" / f"apply-{OFF}.json").exists()


def test_report_html_is_written_from_demo_json(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = DemoFakes(tmp_path)
    r = run(tmp_path, fakes, monkeypatch, report=demo_cmd.Steps().report)
    assert r.files["report"] == "report.html"
    page = (tmp_path / "out/report.html").read_text()
    assert "synthetic" in page and "local throughput before" in page
    assert json.loads((tmp_path / "out/demo.json").read_text())["files"]["report"] == "report.html"


def test_demo_steps_are_the_pipelines_with_the_labs() -> None:
    names = {f.name for f in dataclasses.fields(demo_cmd.DemoSteps)}
    assert names == {f.name for f in dataclasses.fields(demo_cmd.Steps)} | {"up", "down"}


def test_step_7_is_said_and_its_fault_point_passed_before_its_re_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below 0.90x after apply --all, step 7 begins (its `[7/8]` line, saying it re-checks,
    and its fault point `demo/step-7`) before check runs again with the measured gap; the
    escalation's own line follows as a plain line, and the step is begun once."""
    fakes = DemoFakes(tmp_path, ratios={"before": 0.2, "after": 0.5, f"with {OFF}": 0.7},
                      reported=escalation.ESCALATION)
    monkeypatch.setattr(run_record.faults, "phase", lambda point: fakes.events.append(point))
    run(tmp_path, fakes, monkeypatch)
    ev = fakes.events
    at = ev.index("demo/step-7")
    assert ev[at + 1].startswith("say [7/8] escalation: re-checking lab dm-net with the ratio "
                                 "measured after apply --all (0.5x of lab dm-local, below 0.9x)")
    assert ev[at + 2] == "check" and "check" not in ev[ev.index("measure after") + 1:at]
    assert ev[at + 3].startswith(f"say escalation: {CONTENT}, {OFF}, {MIRROR} tried one at a "
                                 "time")
    assert ev.count("demo/step-7") == 1 and sum(e.startswith("say [7/8]") for e in ev) == 1
    assert [e for e in ev if e.startswith("demo/step-")] == [
        f"demo/step-{n}" for n in range(1, demo_cmd.STEPS + 1)]
    assert (tmp_path / "out" / "check-escalation.json").is_file()


def test_the_final_phase_is_in_demo_json_and_the_report_headline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A change kept by the escalation: demo.json's `final` is its phase, labelled by it; the
    report's headline states that figure, names apply --all and the kept change, and keeps
    the `after apply --all` figure beside it; demo.json reads back the same."""
    fakes = DemoFakes(tmp_path, ratios={"before": 0.2, "after": 0.5, f"with {OFF}": 0.7},
                      reported=escalation.ESCALATION)

    def measure(env: Env, local: Any, network: Any, load: Any, label: str, say: Any) -> Phase:
        p = fakes.measure(env, local, network, load, label, say)  # 20 round trips a request
        return Phase(p.local, Side((Round(70, 30, 90, 0, 40, 200),))) if OFF in label else p
    r = run(tmp_path, fakes, monkeypatch, report=demo_cmd.Steps().report, measure=measure)
    final = r.final()
    assert final is not None and final.phase is r.trials[0].phase and final.kept == (OFF,)
    assert final.label == f"with {OFF} kept"
    data = json.loads((tmp_path / "out/demo.json").read_text())
    assert data["final"] == {"ratio_rps": 0.7, "ratio_p99": 4.5, "round_trips_per_request": 5.0,
                             "label": f"with {OFF} kept", "kept": [OFF]}
    again = DemoResult.from_json(data)
    assert again == r and again.final() == final
    old = {k: v for k, v in data.items() if k != "final"}  # written before the key
    assert DemoResult.from_json(old) == r
    page = build(load_all([tmp_path / "out/demo.json"]))
    verdict = page.headline.verdict
    assert verdict.startswith("GlusterFS 0.20x local throughput before, 0.70x at the end")
    assert f"by apply --all, then {OFF} kept by the escalation" in verdict
    assert "(0.50x after apply --all alone)" in verdict
    assert f"75% fewer network round trips per request (20.0 → 5.00, with {OFF} kept)" in verdict
    html_text = (tmp_path / "out/report.html").read_text()
    assert "0.70x at the end" in html_text
    assert ("Ended at 0.70x local throughput, p99 4.50x local, by apply --all, then "
            f"{OFF} kept by the escalation (0.50x after apply --all alone)") in html_text
    assert final.line(20.0) == (f"in the end (with {OFF} kept): 0.7x local throughput, p99 "
                                f"4.5x local, network round trips per request 20 → 5 (75% "
                                f"fewer); by apply --all, then {OFF} kept by the escalation")
    out = io.StringIO()
    render(Env(stdout=out), r)  # the demo's closing table says it too
    assert final.line(20.0) in " ".join(out.getvalue().split())
    rows = {row[0]: row for row in page.outcome.rows}
    assert rows["throughput, network / local"][3] == "0.50x"  # after apply --all, still shown
    assert rows[f"throughput, network / local, with {OFF} kept"][3] == "0.70x"
    assert rows[f"network round trips per request, with {OFF} kept"][1:4] == ("20.0", "–", "5.00")


def test_without_a_kept_change_the_run_ends_after_apply_all(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = DemoFakes(tmp_path, ratios={"before": 0.2, "after": 0.5, f"with {OFF}": 0.51},
                      reported=escalation.ESCALATION)
    r = run(tmp_path, fakes, monkeypatch)
    final = r.final()
    assert [t.kept for t in r.trials] == [False]
    assert final is not None and final.phase == r.after and final.kept == ()
    data = json.loads((tmp_path / "out/demo.json").read_text())
    assert data["final"]["label"] == "after apply --all" and data["final"]["ratio_rps"] == 0.5
    verdict = build(load_all([tmp_path / "out/demo.json"])).headline.verdict
    assert "0.50x after apply --all" in verdict
    assert "the escalation kept none of the 1 change(s) it tried" in verdict


def test_a_final_phase_without_round_trips_keeps_the_after_figure_in_the_headline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = DemoFakes(tmp_path, ratios={"before": 0.2, "after": 0.5, f"with {OFF}": 0.7},
                      reported=escalation.ESCALATION)

    def measure(env: Env, local: Any, network: Any, load: Any, label: str, say: Any) -> Phase:
        p = fakes.measure(env, local, network, load, label, say)  # 20 round trips a request
        return Phase(p.local, Side((Round(70, 30, 90, 0, 40),))) if OFF in label else p
    r = run(tmp_path, fakes, monkeypatch, report=demo_cmd.Steps().report, measure=measure)
    final = r.final()
    assert final is not None and final.kept == (OFF,) and final.round_trips_per_request is None
    verdict = build(load_all([tmp_path / "out/demo.json"])).headline.verdict
    rt = r.round_trips()
    assert rt.before and rt.after is not None
    assert f"({rt.before:.1f} → " in verdict and ", after apply --all)" in verdict, verdict

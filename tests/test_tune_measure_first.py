"""`statstorm tune --yes` and a measure-first change (glusterfs-content-caching): applied alone
after the `after` measurement, both sides measured again, kept only when the pool's ratio to its
shadow rises by more than 5 %, else rolled back; tune.json keeps the trial. Fakes for the
system (tests/test_tune_unit.py's), no root."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest

from test_tune_unit import URL, Fakes, RootEnv, phase

from statstorm.commands import apply as apply_cmd, check as check_cmd
from statstorm.commands import tune as tune_cmd
from statstorm.env import Env
from statstorm.model.rules_gluster import RULE_ID
from statstorm.results.check import CheckResult, Finding, Severity
from statstorm.results.demo import Phase
from statstorm.results.tune import KEEP_MARGIN, TuneResult, judge

CONTENT = Finding(id=RULE_ID, severity=Severity.INFO, title="t", evidence=("e",),
                  change=("gluster volume set v performance.qr-cache-timeout 600",),
                  tradeoff="stale", predicted_gain=None, gain_note="measure first")


def run_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_ratio: float,
             ) -> tuple[TuneResult, Fakes]:
    fakes = Fakes(tmp_path)
    base = fakes.steps()

    def check(env: Env, opts: check_cmd.CheckOptions) -> CheckResult:
        fakes.event("check")
        return CheckResult(pools=(), findings=[CONTENT])

    def measure(env: Env, local: Any, network: Any, load: Any, label: str, say: Any) -> Phase:
        fakes.event(f"measure {label}")
        return phase(100, {"before": 40, "after": 80}.get(label, 80 * with_ratio))

    def apply(env: Env, opts: apply_cmd.ApplyOptions) -> apply_cmd.ApplyResult:
        fakes.event("apply --rollback" if opts.rollback else
                    f"apply {','.join(opts.findings) or '--all'} --yes")
        fakes.applied.append(opts)
        return apply_cmd.ApplyResult(apply_cmd.ApplyMode.ROLLED_BACK if opts.rollback
                                     else apply_cmd.ApplyMode.APPLIED, None)

    def predict(findings: list[Finding], *args: Any) -> Any:
        fakes.event(f"predict {len(findings)}")  # `after` is apply --all's: not this one
        return base.predict(findings, *args)

    steps = dataclasses.replace(base, measure=measure, check=check, predict=predict,
                                apply=apply)
    monkeypatch.setattr(tune_cmd.Wrk, "available", lambda self: "wrk 4")
    opts = tune_cmd.TuneOptions("www", (URL,), yes=True, output_dir=tmp_path / "out")
    r = tune_cmd.run(RootEnv(stderr=io.StringIO(), state_root=tmp_path), opts,
                     lambda line: None, steps)
    return r, fakes


def test_a_change_that_helps_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r, fakes = run_with(tmp_path, monkeypatch, 1.2)
    assert fakes.events[-8:] == ["measure after", "check", f"apply {RULE_ID} --yes",
                                 f"measure with {RULE_ID}", "trace", "check", "shadow down",
                                 "report"]
    assert fakes.applied[0].all and not fakes.applied[0].findings  # --all leaves it out
    assert "predict 0" in fakes.events
    (t,) = r.trials
    assert t.kept and t.ratio_without == 0.8 and t.ratio_with == 0.96 and "+20%" in t.why
    assert RULE_ID in r.applied
    again = TuneResult.from_json(json.loads((tmp_path / "out/tune.json").read_text()))
    assert again.trials == r.trials
    assert (tmp_path / "out" / f"apply-{RULE_ID}.json").exists()


def test_a_change_within_the_margin_is_rolled_back(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    r, fakes = run_with(tmp_path, monkeypatch, 1.0 + KEEP_MARGIN / 2)
    assert fakes.events[-6:] == [f"measure with {RULE_ID}", "apply --rollback", "trace",
                                 "check", "shadow down", "report"]
    (t,) = r.trials
    assert not t.kept and "rolled back" in t.why and RULE_ID not in r.applied


def test_judge_needs_both_ratios() -> None:
    assert not judge(RULE_ID, phase(100, 90), None).kept
    assert judge(RULE_ID, phase(100, 90), phase(100, 80)).kept  # +12.5 %
    assert not judge(RULE_ID, phase(100, 82), phase(100, 80)).kept  # +2.5 %

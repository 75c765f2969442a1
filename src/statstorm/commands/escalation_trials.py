"""The escalation past `apply --all`, for the demo and tune alike: while the target stays below
`model.escalation.TARGET_RATIO` of its reference, each change of the escalation that check
proposed (least invasive first) applied alone by name on the target, both sides measured again,
kept only when the ratio rose by more than `results.trials.KEEP_MARGIN` over the ratio without
it (`judge`); else rolled back at once. Every change not tried is recorded with why: check did
not propose it, `--no-mirror`, the ratio already reached, apply made nothing or could not make
it on this target (an Apache front: no mirror is switched for it).

The system is reached through `Tries` (apply by name, rollback, measure), which the pipeline
(commands/demo.py) fills; this module names no verb.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from statstorm.errors import NotSamePage, RollbackFailed, StatstormError
from statstorm.model import escalation
from statstorm.model.applyplan import Change
from statstorm.results.apply import ApplyMode
from statstorm.results.jsontypes import JsonObject
from statstorm.results.measurements import Phase
from statstorm.results.trials import KEEP_MARGIN, Skipped, judge


class Applied(Protocol):
    """What the escalation reads of apply's result."""

    mode: ApplyMode
    reason: str

    @property
    def manual(self) -> list[Change]: ...

    def to_json(self) -> JsonObject: ...


@dataclass(frozen=True)
class Tries:
    """The escalation's hands on the system."""

    apply: Callable[[str], Applied]  # the change of this rule id alone, on the target
    rollback: Callable[[], object]  # the last change undone
    measure: Callable[[str], Phase]  # both sides measured, under this label
    write: Callable[[str, Applied], None]  # apply's result kept beside the record


def not_made(tried: Applied) -> str:
    """Why apply made nothing, as a Skipped's reason."""
    why = tried.reason or "; ".join(dict.fromkeys(c.why for c in tried.manual if c.why))
    return (f"apply made nothing ({ApplyMode(tried.mode).value}"
            + (f": {why}" if why else "") + "); not measured")


def escalate(record: Any, reported: list[str], mirror: bool, target: str, after: Phase,
             tries: Tries, step: Callable[[str], None], log: Callable[[str], None]) -> None:
    """Step 7 of the pipeline: the trials and the changes skipped, saved in `record` (a
    run_record.Record of a result with `trials`, `skipped` and `applied`) as they come; `target`
    names the target in each change's price as the verbs take it (`--pool NAME`, `--lab
    NAME`: `statstorm opcache reset --pool NAME`). `step`
    says what is tried: step 7's `[7/8]` line, or a plain line when the pipeline began the
    step itself (its re-check of the target, said before it runs)."""
    todo, left_out = escalation.plan(reported, mirror)
    skipped = [Skipped(i, why) for i, why in left_out]
    baseline = after
    if escalation.reached(after.ratio_rps):
        skipped += [Skipped(i, f"the target was at {after.ratio_rps:g}x of its reference after "
                               f"apply --all: at or above {escalation.TARGET_RATIO:g}x, not "
                               "tried") for i in todo]
        todo = []
    step("escalation: " + (", ".join(todo) + " tried one at a time, least invasive first, "
                           f"while the ratio is below {escalation.TARGET_RATIO:g}x; each kept only "
                           f"when the ratio rises by more than {KEEP_MARGIN:.0%}…" if todo
                           else "no change to try"))
    record.save(skipped=tuple(skipped))
    for n, rule_id in enumerate(todo):
        if escalation.reached(baseline.ratio_rps):
            skipped += [Skipped(i, f"the target reached {baseline.ratio_rps:g}x of its "
                                   "reference: not tried") for i in todo[n:]]
            break
        price = escalation.price(rule_id, target)
        log(f"{rule_id}: trying it; its price: {price}")
        try:
            tried = tries.apply(rule_id)
        except RollbackFailed:
            raise  # the target is not as it was: nothing more is tried on top
        except StatstormError as exc:  # not a change this target takes: said, not fatal
            skipped.append(Skipped(rule_id, f"apply could not make it here ({exc}); "
                                            "not measured"))
            record.save(skipped=tuple(skipped))
            continue
        tries.write(rule_id, tried)
        if tried.mode != ApplyMode.APPLIED:
            skipped.append(Skipped(rule_id, not_made(tried)))
            record.save(skipped=tuple(skipped))
            continue
        try:
            phase = tries.measure(f"with {rule_id}")
        except NotSamePage as exc:  # the change broke the target's page: undone, not kept
            tries.rollback()
            if exc.role == "local":  # the reference's page: nothing can be judged
                raise
            log(f"{rule_id}: rolled back: {exc}")
            skipped.append(Skipped(rule_id, f"rolled back: it changed the target's page ({exc})"))
            record.save(skipped=tuple(skipped))
            continue
        except BaseException:  # a failed or stopped measurement leaves no trial change behind
            tries.rollback()
            raise
        trial = judge(rule_id, phase, baseline, price)
        if trial.kept:
            baseline = phase
        else:
            tries.rollback()
        log(f"{rule_id}: {trial.why}")
        record.save(trials=(*record.result.trials, trial), skipped=tuple(skipped),
                    applied=(*record.result.applied, rule_id) if trial.kept
                    else record.result.applied)
    record.save(skipped=tuple(skipped))

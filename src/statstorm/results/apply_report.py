"""What `statstorm apply --json` wrote, as the report reads it: the target, the changes made
or proposed, what is left to do by hand, each file's diff, --verify's measurement, why it
was rolled back and the notes. Tolerant: a key an older file lacks reads as empty."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from statstorm.results.apply_verify import Verify
from statstorm.results.jsontypes import JsonObject, JsonValue


def _obj(v: JsonValue) -> JsonObject:
    return v if isinstance(v, dict) else {}


def _objs(v: JsonValue) -> list[JsonObject]:
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _str(v: JsonValue) -> str:
    return "" if v is None else str(v)


@dataclass(frozen=True)
class AppliedChange:
    """One change: the finding it answers, its kind, the line and what was there."""

    finding: str
    kind: str
    line: str
    current: str


@dataclass(frozen=True)
class ApplyReport:
    # what report's registry (results/result_files.py KINDS) knows of its files
    KIND: ClassVar[str] = "apply"
    VERSIONS: ClassVar[tuple[int, ...]] = (1,)
    REQUIRED: ClassVar[tuple[str, ...]] = ("mode",)
    LEGACY: ClassVar[tuple[str, ...]] = ()

    mode: str
    pool: str | None  # the target's
    lab: str | None
    changes: tuple[AppliedChange, ...] = ()
    manual: tuple[str, ...] = ()
    diffs: tuple[tuple[str, str], ...] = ()  # (path, diff) of each file with a diff
    verify: Verify | None = None
    reason: str = ""
    notes: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: JsonObject) -> ApplyReport:
        t = _obj(d.get("target"))
        pool, lab, v = t.get("pool"), t.get("lab"), d.get("verify")
        manual, notes = d.get("manual"), d.get("notes")
        return cls(
            mode=_str(d.get("mode", "?")), pool=None if pool is None else str(pool),
            lab=str(lab) if lab else None,
            changes=tuple(AppliedChange(_str(c.get("finding", "")), _str(c.get("kind", "")),
                                        _str(c.get("line", "")), _str(c.get("current")))
                          for c in _objs(d.get("changes"))),
            manual=tuple(str(_obj(c).get("line", c)) for c in manual)
            if isinstance(manual, list) else (),
            diffs=tuple((_str(f.get("path")), str(f["diff"])) for f in _objs(d.get("files"))
                        if f.get("diff")),
            verify=Verify.from_json(v) if isinstance(v, dict) and v else None,
            reason=_str(d.get("reason")),
            notes=tuple(str(n) for n in notes) if isinstance(notes, list) else ())

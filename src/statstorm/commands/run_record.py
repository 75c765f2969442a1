"""The record of a demo or tune run as it grows: its result (demo.json or tune.json) rewritten
after every change, the result files written beside it (each carrying the run's id), the
progress lines `[n/N] …` with their fault points (`demo/step-N`, `tune/step-N`), each step's
time, and `report.html` made at the end from the files alone (as `statstorm report` would).
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Generic, TypeVar

from statstorm import faults
from statstorm.errors import StatstormError
from statstorm.results import result_files
from statstorm.results.common import write_atomic, write_json_atomic
from statstorm.results.demo import with_run_id
from statstorm.results.jsontypes import JsonObject

R = TypeVar("R", bound=Any)  # DemoResult or TuneResult: a frozen dataclass with `to_json`


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Record(Generic[R]):
    """`result` written to `path` after every change; `verb`'s steps numbered out of `total`."""

    def __init__(self, result: R, path: Path, verb: str, total: int,
                 log: Callable[[str], None]) -> None:
        self.result, self.path, self.verb, self.total, self.log = result, path, verb, total, log
        self.files: dict[str, str] = {verb: path.name}
        self.timings: dict[str, float] = {}
        self.t0 = self.mark = time.monotonic()
        self.last = 0

    @property
    def out(self) -> Path:
        return self.path.parent

    def save(self, **changes: object) -> None:
        """The result with `changes` (and the files and timings so far), written at once."""
        self.result = replace(self.result, **changes, files=dict(self.files),
                              timings_s=dict(self.timings))
        write_json_atomic(self.path, self.result.to_json())

    def write(self, key: str, name: str, data: JsonObject) -> str:
        """A result file of this run beside the record (carrying the run's id), linked under
        `key`; its name."""
        write_json_atomic(self.out / name, with_run_id(data, self.result.run_id or ""))
        self.files[key] = name
        return name

    def link(self, key: str, name: str) -> None:
        """A file written beside the record by someone else (a trace)."""
        self.files[key] = name

    def step(self, n: int, text: str) -> None:
        """Step `n` begins: the last one's time kept, the fault point passed, the line said."""
        self._lap()
        self.last = n
        faults.phase(f"{self.verb}/step-{n}")
        self.log(f"[{n}/{self.total}] {text}")

    def _lap(self) -> None:
        t = time.monotonic()
        if self.last:
            self.timings[f"step{self.last}"] = round(t - self.mark, 1)
        self.mark = t

    def close(self, **changes: object) -> None:
        """The last step's time and the total kept, the result written (if its directory is
        still there)."""
        self._lap()
        self.last = 0
        self.timings["total"] = round(time.monotonic() - self.t0, 1)
        if self.out.is_dir():
            self.save(**changes)

    def report(self) -> None:
        """`report.html` beside the record, rendered from the result files only; a page that
        cannot be made is a note in the result, not a failure."""
        if not self.out.is_dir():
            return
        page = self.out / "report.html"
        from statstorm.report import html  # matplotlib: loaded only when a page is drawn
        from statstorm.report.page import build
        try:
            files = result_files.load_all([self.path])
            write_atomic(page, html.render(build(files, generated=now())), new_mode=0o644)
        except (StatstormError, OSError, ValueError, KeyError, TypeError) as exc:
            self.save(notes=(*self.result.notes, f"report.html not written: {exc}"))
            return
        self.log(f"report: {page}")
        self.link("report", page.name)
        self.save()

"""Result files recognised by their content, for `statstorm report`.

A result file is a trace (`.sst`, `.sst.gz`: the `statstorm-trace` header line) or the JSON a
verb writes, named by its `schema` key (`statstorm.KIND/VERSION`). JSON written before a verb
had a schema key is recognised by its keys. Anything else (missing, truncated, a schema this
statstorm does not read) is a UsageError of one line naming the file and what to do.

The kinds are declared by the result classes (`KIND`, `VERSIONS`, `REQUIRED`, `LEGACY`; the
registry `KINDS` is a tuple of those classes). A demo.json names its run's files relative to
itself and carries its run's id: `load_all` follows those links from the demo.json's
directory only and leaves out, with a note, a file that is missing or from another run.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath
from typing import Any, Protocol

from statstorm.errors import UsageError
from statstorm.results.common import MAX_JSON_BYTES, read_bounded
from statstorm.results.apply_report import ApplyReport
from statstorm.results.check import CheckResult
from statstorm.results.demo import DemoResult
from statstorm.results.fsbench import FsbenchResult
from statstorm.results.jsontypes import JsonObject
from statstorm.results.matrix import MatrixResult
from statstorm.results.sweep import SweepResult
from statstorm.results.tune import TuneResult
from statstorm.results.trace import FORMAT, Trace, read_trace
from statstorm.results.trace.summary import TraceSummary
from statstorm.results.whatif import WhatifResult


class ResultKind(Protocol):
    """What a result class declares of its files: its kind (`statstorm.KIND/VERSION`), the
    schema versions this statstorm reads, the keys a file must hold (else it was cut short or
    edited) and, for files written before the verb had a schema key, the keys that tell it."""

    @property
    def KIND(self) -> str: ...
    @property
    def VERSIONS(self) -> tuple[int, ...]: ...
    @property
    def REQUIRED(self) -> tuple[str, ...]: ...
    @property
    def LEGACY(self) -> tuple[str, ...]: ...


# The result kinds the report reads, each declared by its class; files without a schema key
# are told by LEGACY, tried in this order.
KINDS: tuple[ResultKind, ...] = (Trace, WhatifResult, TraceSummary, CheckResult, SweepResult,
                                 FsbenchResult, ApplyReport, DemoResult, MatrixResult,
                                 TuneResult)
BY_KIND: dict[str, ResultKind] = {k.KIND: k for k in KINDS}
READABLE = ("trace files (.sst, .sst.gz) and the JSON of check --json, whatif --json, fsbench, "
            "sweep, apply, demo, matrix and tune")


@dataclass
class ResultFile:
    """One result file: its kind, version, path and content (a trace's records in `trace`);
    `notes`: what the report should say of it (a file it names that is missing or of another
    run)."""

    kind: str
    version: int
    path: Path
    data: JsonObject = field(default_factory=dict)
    trace: Trace | None = None
    notes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def run_id(self) -> str | None:
        """The id of the run that wrote it (a demo's files), None when it names none."""
        if self.trace is not None:
            return self.trace.head.run_id or None
        rid = self.data.get("run_id")
        return None if rid is None else str(rid)


def _is_trace(path: Path) -> bool:
    """Whether `path` starts like a trace file: gzip, or a first line naming the format."""
    try:
        if path.exists() and not path.is_dir() and not path.is_file():
            raise UsageError(f"{path}: not a regular file (a pipe, socket or device); save the "
                             "output to a file first and give that file")
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such result file") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a directory; give result files ({READABLE})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror})") from None
    if head[:2] == b"\x1f\x8b":
        try:
            with gzip.open(path, "rb") as fh:
                head = fh.read(4096)
        except (OSError, EOFError) as exc:
            raise UsageError(f"{path}: truncated or damaged gzip file ({exc}); re-create it") \
                from None
    return head.lstrip().startswith(b"{") and f'"format":"{FORMAT}"'.encode() in \
        head.split(b"\n", 1)[0].replace(b" ", b"")


def _schema(path: Path, data: Any) -> tuple[str, int]:
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a statstorm result (a JSON {type(data).__name__}); "
                         f"the report reads {READABLE}")
    schema = data.get("schema")
    if schema is None:
        for k in KINDS:
            if k.LEGACY and all(key in data for key in k.LEGACY):
                return k.KIND, 1
        raise UsageError(f"{path}: JSON without a statstorm schema key; the report reads "
                         f"{READABLE}")
    text = str(schema)
    kind, _, ver = text.partition("/")
    kind = kind.removeprefix("statstorm.")
    if not text.startswith("statstorm.") or kind not in BY_KIND or not ver.isdigit():
        raise UsageError(f"{path}: schema {text!r} is not a result this report reads; it reads "
                         f"{READABLE}")
    version = int(ver)
    versions = BY_KIND[kind].VERSIONS
    if version not in versions:
        raise UsageError(f"{path}: {text} is not supported (this statstorm reads "
                         f"statstorm.{kind}/{max(versions)}); re-create it with this statstorm "
                         "or upgrade statstorm")
    return kind, version


def load(path: Path) -> ResultFile:
    """Read one result file and tell its kind; one-line UsageError when it cannot be used."""
    if _is_trace(path):
        trace = read_trace(path)
        if not trace.trailer:
            raise UsageError(f"{path}: truncated trace (no end record); record it again or "
                             "leave it out")
        return ResultFile("trace", int(trace.header.get("version", 1)), path,
                          dict(trace.header), trace)
    try:
        data = json.loads(read_bounded(path, MAX_JSON_BYTES, "give a statstorm result file"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise UsageError(f"{path}: truncated or not JSON ({exc}); re-create it with the "
                         "command that wrote it") from None
    kind, version = _schema(path, data)
    missing = [k for k in BY_KIND[kind].REQUIRED if k not in data]
    if missing:
        raise UsageError(f"{path}: a statstorm.{kind} file without {missing[0]!r}: cut short "
                         "or edited; re-create it")
    if kind == DemoResult.KIND:
        read_demo(path, data)
    return ResultFile(kind, version, path, data)


def read_demo(path: Path, data: Any) -> DemoResult:
    """A demo.json's content as its class; a one-line UsageError when it is not one."""
    try:
        return DemoResult.from_json(data)
    except ValueError as exc:
        raise UsageError(f"{path}: not a demo result ({exc}); re-create it with statstorm "
                         "demo") from None


def linked_path(demo_path: Path, demo: DemoResult, link: str) -> Path:
    """Where a file a demo.json names is: relative to demo.json's directory, never to the
    current one. demo.json written before the run id named its files from the directory the
    demo ran in, and they were always beside it."""
    if demo.run_id is None:
        return demo_path.parent / PurePath(link).name
    return demo_path.parent / link


def load_all(paths: list[Path], follow_demo: bool = True) -> list[ResultFile]:
    """Every file in `paths`, in order; with `follow_demo`, the result files a demo.json names
    (its traces, check and apply results) too, found relative to the demo.json, when they were
    not given. A named file that is missing, or that carries another run's id, is left out
    and said so: in the demo's `notes` (on the page) and in its ResultFile's."""
    out = [load(p) for p in paths]
    if not follow_demo:
        return out
    seen = {p.resolve() for p in paths}
    for i, rf in enumerate(list(out)):
        if rf.kind != DemoResult.KIND:
            continue
        demo = read_demo(rf.path, rf.data)
        notes: list[str] = []
        for key, link in demo.links():
            cand = linked_path(rf.path, demo, link)
            what = key.replace("_", " ")
            if not cand.is_file():
                notes.append(f"{cand.name} ({what}), named by {rf.name}, is missing: left out "
                             "of this report")
                continue
            if cand.resolve() in seen:
                continue
            linked = load(cand)
            if demo.run_id and linked.run_id and linked.run_id != demo.run_id:
                notes.append(f"{cand.name} ({what}) is from another run (run {linked.run_id}, "
                             f"not {demo.run_id}): left out of this report")
                continue
            seen.add(cand.resolve())
            out.append(linked)
        if notes:
            out[i] = replace(rf, notes=tuple(notes),
                             data={**rf.data, "notes": [*demo.notes, *notes]})
    return out

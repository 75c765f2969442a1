"""The trace summary as a typed result: `TraceSummary.to_json()` gives the summary's JSON as
it has always been written, and `from_json` reads it back, on every trace fixture and on
summaries of imported strace logs and `strace -c` tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from statstorm.adapters.tracing.strace_log import import_file
from statstorm.model import sampling
from statstorm.model.tracestats import SummaryBuilder, diff, summarize, summarize_trace
from statstorm.results.trace import read_trace
from statstorm.results.trace.diff import TraceDiff
from statstorm.results.trace.header import TraceHeader, TraceTrailer
from statstorm.results.trace.summary import TraceSummary
from statstorm.results.trace.vocabulary import Trace, TracerBackend

FIXTURES = Path(__file__).parent / "fixtures"
TRACES = sorted(FIXTURES.rglob("*.sst*"))
STRACE = sorted(p for p in (FIXTURES / "strace").iterdir()
                if p.suffix in (".log", ".txt") and not p.name.startswith("malformed"))


def _round_trip(s: TraceSummary) -> None:
    j = s.to_json()
    text = json.dumps(j)
    back = TraceSummary.from_json(json.loads(text))
    assert back == s
    assert json.dumps(back.to_json()) == text  # same keys, same order, same values


def test_there_are_trace_fixtures() -> None:
    assert TRACES and STRACE


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_summary_of_a_trace_fixture_round_trips(path: Path) -> None:
    s = summarize_trace(read_trace(path))
    assert s.detail == "events" and s.by_mount is not None and not s.is_table
    assert s.to_json() == summarize(read_trace(path))
    _round_trip(s)


@pytest.mark.parametrize("path", STRACE, ids=lambda p: p.name)
@pytest.mark.parametrize("requests", [None, 10])
def test_summary_of_an_imported_strace_file_round_trips(path: Path, requests: int | None) -> None:
    try:
        tr = import_file(path, requests=requests)
    except Exception:  # noqa: BLE001 - a fixture that is not importable is another test's
        pytest.skip("not an importable strace file")
    s = summarize_trace(tr)
    assert s.source in (TracerBackend.STRACE_LOG, TracerBackend.STRACE_C)
    assert s.is_table == (s.source == TracerBackend.STRACE_C)
    _round_trip(s)


def _old_key_order(s: TraceSummary) -> list[str]:
    if s.is_table:
        return ["source", "requests", "per_request", "totals", "failed_share", "seconds",
                "other_calls", "notes", "settings", "targets", "trace"]
    return ["source", "detail", "requests", "per_request", "per_request_dist",
            "syscall_time_us", "totals", "in_requests", "outside_requests", "other_calls",
            "failed_share", "top_paths", "top_failed_paths", "top_dirs",
            "failed_by_include_path_entry", "by_mount", "by_operation", "settings",
            "targets", "trace"]


def test_key_order_is_the_summary_s_own() -> None:
    s = summarize_trace(read_trace(TRACES[0]))
    assert list(s.to_json()) == _old_key_order(s)
    table = next(p for p in STRACE if p.suffix == ".txt")
    t = summarize_trace(import_file(table))
    assert list(t.to_json()) == _old_key_order(t)


def test_unknown_figures_and_notes_survive_a_round_trip() -> None:
    """`trace show` marks what an excerpt of an `strace -c` table leaves unknown (None)."""
    table = next(p for p in STRACE if p.suffix == ".txt")
    j = summarize_trace(import_file(table)).to_json()
    assert isinstance(j["per_request"], dict) and isinstance(j["totals"], dict)
    j["per_request"]["readlink"] = j["totals"]["readlink"] = None
    j["failed_share"] = None
    j["unknown"] = ["readlink"]
    j["notes"] = ["an excerpt"]
    s = TraceSummary.from_json(j)
    assert s.per_request.readlink is None and s.unknown == ("readlink",)
    assert json.dumps(s.to_json()) == json.dumps(j)


def test_typed_readers_see_the_json_values() -> None:
    s = summarize_trace(read_trace(TRACES[0]))
    j: Any = s.to_json()
    assert s.per_request.total == j["per_request"]["total"]
    assert [m.mount for m in s.by_mount or ()] == [m["mount"] for m in j["by_mount"]]
    assert s.trace.to_json() == j["trace"]


def test_diff_is_typed_and_round_trips() -> None:
    a, b = (summarize_trace(read_trace(p)) for p in TRACES[:2])
    d = diff(a, b)
    assert set(d.per_request) == set(a.per_request.to_json())
    assert TraceDiff.from_json(json.loads(json.dumps(d.to_json()))) == d


def test_header_and_trailer_are_typed() -> None:
    tr = read_trace(TRACES[0])
    head = tr.head
    assert head.source == TracerBackend.BPFTRACE
    assert TracerBackend("bpftrace") is TracerBackend.BPFTRACE
    assert list(head.mounts) == tr.mounts
    assert tr.tail.to_json() == tr.trailer


def test_sampled_trace_notes_read_the_typed_header() -> None:
    counted = sampling.CountedRequests()
    counted.add({"stat": (4, 1, 1000)})
    stmt = counted.statement(3, [5, 7])
    assert stmt.to_json() == counted.trailer(3, [5, 7])
    tail = TraceTrailer.from_json({"sampling": stmt.to_json()})
    assert tail.sampling == stmt
    head = TraceHeader.from_json({"sampling": {"one_in": 3}})
    note = sampling.check_note(head, tail)
    assert note is not None and "2 recorded, 1 counted" in note
    assert sampling.check_note({"sampling": {"one_in": 3}}, {}) is not None
    assert "?" in (sampling.check_note({"sampling": {"one_in": 3}}, {}) or "")
    assert sampling.whatif_note({}) is None


def test_builder_returns_the_typed_summary() -> None:
    tr: Trace = read_trace(TRACES[0])
    b = SummaryBuilder(tr.header)
    tr.feed(b)
    s = b.build(tr.trailer)
    assert isinstance(s, TraceSummary) and s == summarize_trace(tr)


def test_the_trace_verb_says_an_excerpt_s_figures_are_unknown(tmp_path: Path) -> None:
    """An excerpt of an strace -c table: the verb's typed summary leaves the calls it cannot
    see as None (not 0) and says so; a diff against the whole table does not compare them."""
    from statstorm.commands import trace as trace_cmd
    from statstorm.results.trace import write_trace
    prose = FIXTURES / "strace" / "seed-systemadmin-es-prose.txt"
    paths = {}
    for name, tr in (("excerpt", import_file(prose, requests=1000, table=2)),
                     ("whole", import_file(prose, table=0))):
        paths[name] = tmp_path / f"{name}.sst.gz"
        write_trace(paths[name], tr)
    part, whole = trace_cmd.show(paths["excerpt"]), trace_cmd.show(paths["whole"])
    assert part.unknown and not whole.unknown and part.failed_share is None
    assert all(part.per_request[k] is None and part.totals[k] is None for k in part.unknown)
    assert any("unknown, not 0" in n for n in part.notes or ())
    d = trace_cmd.diff(paths["excerpt"], paths["whole"])
    assert d.not_compared == part.unknown
    assert all(d.per_request[k].delta is None for k in part.unknown)


def test_a_summary_file_with_only_its_figures_is_read() -> None:
    """`report` recognises a trace summary by per_request and totals alone."""
    s = TraceSummary.from_json({"per_request": {"total": 3.5}, "totals": {"total": 7}})
    assert s.requests == 0 and s.per_request.total == 3.5 and s.totals.stat == 0
    assert s.by_mount is None and s.trace.sampling is None

"""The demo's traced page views through adapters/tracing/trace_thread.py, with a fake tracer
and fake page fetches (the real ones: tests/test_demo.py, as root): views go on until the
tracer ends by itself at its request bound; a failed fetch detaches the tracer."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from statstorm.adapters.tracing import page_views
from statstorm.adapters.tracing.trace_thread import TraceThread
from statstorm.commands import demo as demo_cmd
from statstorm.env import Env
from statstorm.errors import ComponentError
from statstorm.results.lab import LabState
from statstorm.results.trace.summary import TraceSummary


@dataclass
class FakeTrace:
    output: Path
    summary: TraceSummary
    warnings: list[str] = field(default_factory=list)


class Pages:
    """Page fetches counted; the fake tracer ends once it has seen `views` of them."""

    def __init__(self, fail_at: int = 0) -> None:
        self.fetched = 0
        self.fail_at = fail_at
        self.seen = threading.Condition()

    def fetch(self, url: str, timeout: float = 0) -> bytes:
        with self.seen:
            self.fetched += 1
            self.seen.notify_all()
        if self.fetched == self.fail_at:
            raise OSError("connection refused")
        return b"ok"


def fake_run(pages: Pages, calls: list[Any]) -> Any:
    def run(env: Env, opts: Any, *, ready: threading.Event, stop: threading.Event) -> FakeTrace:
        calls.append(opts)
        ready.set()
        for _ in range(200):  # stop is an Event: look at it every 50 ms
            with pages.seen:
                if pages.seen.wait_for(lambda: pages.fetched > opts.requests or stop.is_set(),
                                       0.05):
                    break
        return FakeTrace(opts.output, TraceSummary.from_json(
            {"per_request": {"total": 42.5}, "totals": {},
             "trace": {"stopped": "stop" if stop.is_set() else "requests"}}))
    return run


def lab() -> LabState:
    return LabState(name="dm-net", app="synthetic", storage="glusterfs", port=1, workers=1,
                    state_dir="/nonexistent", url="http://127.0.0.1:1", entry_path="/index.php")


def test_views_go_on_until_the_tracer_has_its_requests(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    pages, calls = Pages(), []
    monkeypatch.setattr(page_views.http, "fetch", pages.fetch)
    monkeypatch.setattr(demo_cmd.trace_cmd, "run", fake_run(pages, calls))
    total = demo_cmd.trace_views(Env(), lab(), 3, tmp_path / "before.sst.gz", "run-a")
    assert total == 42.5
    (opts,) = calls
    assert (opts.lab, opts.requests, opts.output) == ("dm-net", 3, tmp_path / "before.sst.gz")
    assert opts.run_id == opts.recording().run_id == "run-a"  # the trace's header carries it
    assert pages.fetched >= 4  # one beyond the bound shows the last request over


def test_a_page_that_does_not_answer_detaches_the_tracer(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    pages, calls = Pages(fail_at=2), []
    monkeypatch.setattr(page_views.http, "fetch", pages.fetch)
    monkeypatch.setattr(demo_cmd.trace_cmd, "run", fake_run(pages, calls))
    with pytest.raises(ComponentError, match="no answer while tracing"):
        demo_cmd.trace_views(Env(), lab(), 5, tmp_path / "t.sst.gz")
    assert not [t for t in threading.enumerate() if t.name == "statstorm-demo-trace"]


def test_ended_waits_for_a_tracer_that_stops_by_itself(tmp_path: Path) -> None:
    go = threading.Event()

    def tracer(env: Env, *, lab: str | None, pool: str | None, duration_s: float,
               output: Path, ready: threading.Event, stop: threading.Event) -> FakeTrace:
        ready.set()
        go.wait(10)
        return FakeTrace(output, TraceSummary.from_json({"per_request": {"total": 1.0}, "totals": {}}))

    tt = TraceThread(Env(), tracer, lab="x", pool=None, duration_s=5, output=tmp_path / "t",
                     name="statstorm-test-trace")
    tt.start()
    assert tt.thread.name == "statstorm-test-trace" and not tt.ended()
    go.set()
    assert tt.ended(10)
    assert tt.finish().summary.per_request.total == 1.0

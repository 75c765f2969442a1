"""`statstorm demo`: the main job on the built-in default, end to end.

Today: a lab with MediaWiki on GlusterFS (default mount options), real page views timed from
outside while `statstorm trace` records the pool's file syscalls (the trace file lands in the
output directory), a short closed-model `sweep` (JSON and SVG there too), then the lab
removed — whatever happens. Each verb that lands (check, apply, report) adds its step here.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statstorm.adapters import http
from statstorm.commands import lab as lab_cmd
from statstorm.commands import sweep as sweep_cmd
from statstorm.commands import trace as trace_cmd
from statstorm.env import Env
from statstorm.results.lab import LabState


@dataclass(frozen=True)
class PageView:
    url: str
    status: int
    size: int
    seconds: float
    title: str


@dataclass
class DemoResult:
    lab: LabState
    views: list[PageView] = field(default_factory=list)
    sweep_json: Path | None = None
    sweep_plot: Path | None = None
    sweep_sentence: str = ""
    trace_file: Path | None = None
    trace_summary: dict[str, Any] = field(default_factory=dict)


def _title(body: str) -> str:
    start = body.find("<title>")
    end = body.find("</title>", start)
    return body[start + 7:end].strip() if start >= 0 and end > start else ""


def run(env: Env, *, name: str = "demo", app: str = "mediawiki", storage: str = "glusterfs",
        views: int = 5, keep: bool = False, output_dir: Path = Path("statstorm-demo"),
        concurrency: tuple[int, ...] = (1, 2, 4), duration_s: float = 5.0) -> DemoResult:
    output_dir.mkdir(parents=True, exist_ok=True)
    sweep_opts = sweep_cmd.SweepOptions(
        lab=name, concurrency=concurrency, duration_s=duration_s, warmup_s=2.0, repeats=2,
        output=output_dir / "sweep.json", plot=output_dir / "sweep.svg")
    opts = lab_cmd.LabOptions(name=name, app=app, storage=storage)
    state = lab_cmd.up(env, opts)
    result = DemoResult(lab=state)
    try:
        url = state.url + state.entry_path
        env.log(f"demo: tracing the pool while fetching {url} {views} times…")
        trace_opts = trace_cmd.TraceOptions(lab=name, requests=views, duration_s=120.0,
                                            output=output_dir / "trace.sst.gz")
        traced: list[trace_cmd.TraceRun] = []
        failed: list[BaseException] = []

        attached = threading.Event()

        def tracer() -> None:
            try:
                traced.append(trace_cmd.run(env, trace_opts, ready=attached))
            except Exception as exc:  # reported after the views; the demo goes on
                failed.append(exc)
            finally:
                attached.set()

        thread = threading.Thread(target=tracer, daemon=True)
        thread.start()
        attached.wait(timeout=180)
        for _ in range(views):
            t0 = time.monotonic()
            status, body = http.fetch(url)
            result.views.append(PageView(url, status, len(body.encode()), time.monotonic() - t0,
                                         _title(body)))
        thread.join()
        if traced:
            result.trace_file, result.trace_summary = traced[0].output, traced[0].summary
        for exc in failed:
            env.log(f"demo: trace failed: {exc}")
        plan = sweep_cmd.plan(env, sweep_opts)
        env.log(f"demo: sweep at concurrency {','.join(map(str, concurrency))} "
                f"(about {plan.estimated_s:.0f} s)…")
        sweep = sweep_cmd.run(env, plan, trace_with=trace_cmd.counting_tracer)
        result.sweep_json, result.sweep_plot = plan.output, plan.plot
        result.sweep_sentence = sweep.knee.sentence if sweep.knee else ""
    finally:
        if not keep:
            lab_cmd.down(env, name)
    return result

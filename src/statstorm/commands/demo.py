"""`statstorm demo`: the main job on the built-in default, end to end.

Today: a lab with MediaWiki on GlusterFS (default mount options), a real page view measured
from outside, then the lab removed — whatever happens. Each verb that lands (trace, sweep,
check, apply, report) adds its step here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from statstorm.commands import lab as lab_cmd
from statstorm.context import Env
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


def _title(body: str) -> str:
    start = body.find("<title>")
    end = body.find("</title>", start)
    return body[start + 7:end].strip() if start >= 0 and end > start else ""


def run(env: Env, *, name: str = "demo", app: str = "mediawiki", storage: str = "glusterfs",
        views: int = 5, keep: bool = False) -> DemoResult:
    opts = lab_cmd.LabOptions(name=name, app=app, storage=storage)
    state = lab_cmd.up(env, opts)
    result = DemoResult(lab=state)
    try:
        url = state.url + state.entry_path
        env.log(f"demo: fetching {url} {views} times…")
        for _ in range(views):
            t0 = time.monotonic()
            status, body = lab_cmd.fetch(url)
            result.views.append(PageView(url, status, len(body.encode()), time.monotonic() - t0,
                                         _title(body)))
    finally:
        if not keep:
            lab_cmd.down(env, name)
    return result

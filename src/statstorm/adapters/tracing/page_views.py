"""A trace of a PHP target while page views are fetched: the demo's and tune's "find" step.
The tracer (`statstorm trace` bounded by a number of requests, given by the composite verb)
runs in a background thread (adapters/tracing/trace_thread.py); the pages are fetched until it
has its requests and ends by itself."""

from __future__ import annotations

import time
from pathlib import Path

from statstorm.adapters.load import http
from statstorm.adapters.tracing.trace_thread import TraceThread, Tracer
from statstorm.env import Env
from statstorm.errors import ComponentError


def trace_views(env: Env, tracer: Tracer, *, lab: str | None, pool: str | None,
                urls: tuple[str, ...], output: Path, views: int = 0,
                name: str = "statstorm-trace-views") -> float:
    """Trace `lab` or `pool` with `tracer` while `urls` are fetched in turn; its metadata
    calls per request (the summary's per_request total). `views`: fetched before the loop
    starts asking whether the tracer is over (0: as many as the URLs)."""
    tt = TraceThread(env, tracer, lab=lab, pool=pool, duration_s=120.0, output=output,
                     name=name)
    tt.start()
    views = views or len(urls)
    try:
        deadline = time.monotonic() + 180
        fetched = 0
        # The tracer counts a request once later events show it over: views go on (beyond
        # `views`, not counted) until it has its finished requests and stops.
        while not tt.ended() and time.monotonic() < deadline:
            url = urls[fetched % len(urls)]
            try:
                http.fetch(url, timeout=60)
            except OSError as exc:
                raise ComponentError(f"{url}: no answer while tracing ({exc})") from None
            fetched += 1
            if fetched >= views:
                tt.ended(0.2)
        if not tt.ended(max(1.0, deadline - time.monotonic())):
            raise ComponentError("the trace did not finish within 180 s")
    except BaseException:  # Ctrl-C, SIGTERM, no answer: the tracer detaches before we go
        tt.abandon()
        raise
    return tt.finish().summary.per_request.total or 0.0

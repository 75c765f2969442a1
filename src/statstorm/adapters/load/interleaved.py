"""Two sides under the same closed-model load, rounds interleaved (reference, network,
reference, network, …), so their ratio is taken under the same machine conditions: the demo's
two labs and tune's shadow against the user's pool. Each network round also counts the round
trips its storage served (adapters/storage/round_trips.py), when it can be read.

Given the site's pages (`pages_of`, taken before the run changes anything), both sides must
answer them: each side's URL is fetched once and compared after the warm-up, and every
answer of every round is checked by wrk (status, length, the page's title:
adapters/load/wrk_checked.py); a side that answers another page ends the measurement with
NotSamePage, in one line, and no ratio."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from statstorm.adapters.load import http, wrk_checked
from statstorm.adapters.load.loadgen import RunSpec, load_lock
from statstorm.adapters.load.wrk import Wrk
from statstorm.adapters.storage.round_trips import Window
from statstorm.env import Env
from statstorm.errors import NotSamePage
from statstorm.model import same_page
from statstorm.results.demo import Phase, Round, Side
from statstorm.results.page import Page


@dataclass(frozen=True)
class Load:
    """How each side is loaded: `rounds` runs of `duration_s` at `concurrency` users per URL,
    after a warm-up of `warmup_s` per URL."""

    rounds: int = 3
    duration_s: float = 8.0
    warmup_s: float = 3.0
    concurrency: int = 4


@dataclass(frozen=True)
class Target:
    """One side: its role (`local`: the reference, `network`), the URLs loaded in turn, and
    the round-trip counter of its storage (None: not counted)."""

    role: str
    urls: tuple[str, ...]
    window: Callable[[], Window | None] = lambda: None
    pages: tuple[Page, ...] = ()  # the page each URL must answer (`pages_of`); () unchecked
    name: str = ""  # how a line names it: `lab tune-www`, `pool www`

    def says(self, url: str) -> str:
        who = "the reference" if self.role == "local" else "the target"
        return f"{who} ({self.name}, {url})" if self.name else f"{who} ({url})"


def pages_of(urls: tuple[str, ...], timeout: float = 60) -> tuple[Page, ...]:
    """The page each URL answers now (the site before the run changes anything); NotSamePage
    when one cannot be the measure (no answer, not 2xx, empty)."""
    out = []
    for url in urls:
        try:
            status, body = http.get(url, timeout)
        except OSError as exc:
            raise NotSamePage(f"{url} did not answer before anything changed ({exc}): give a "
                              "page of the site that answers 200") from None
        page = same_page.page_of(url, status, body)
        why = same_page.bad_site(page)
        if why:
            raise NotSamePage(f"{why}: give a page of the site that answers 200")
        out.append(page)
    return tuple(out)


def page_changed(page: Page) -> str:
    """Why the page its URL answers now is not `page`, taken before a change ('' it is)."""
    try:
        status, body = http.get(page.url, 60)
    except OSError as exc:
        return f"{page.url} does not answer after the change ({exc})"
    why = same_page.differs(page, status, body)
    return (f"{page.url} answers another page after the change ({why}; before: "
            f"{page.says()})") if why else ""


def _same_pages(side: Target, label: str) -> None:
    """Each URL of `side` answers its page once, after the warm-up, before the rounds."""
    for url, page in zip(side.urls, side.pages):
        try:
            status, body = http.get(url, 60)
        except OSError as exc:
            raise NotSamePage(f"{label}: {side.says(url)} did not answer ({exc}); no ratio "
                              "taken", side.role) from None
        why = same_page.differs(page, status, body)
        if why:
            raise NotSamePage(f"{label}: {side.says(url)} answered another page ({why}) than "
                              f"the site's ({page.says()}); no ratio taken", side.role)


def measure(env: Env, local: Target, network: Target, load: Load, label: str,
            say: Callable[[str], None]) -> Phase:
    """Both sides under `load`, rounds interleaved; one round per URL, round and side."""
    rounds: dict[str, list[Round]] = {"local": [], "network": []}
    wrk = Wrk()
    sides = (local, network)
    with tempfile.TemporaryDirectory(prefix="statstorm-load-") as tmp:
        work = Path(tmp)
        for side in sides:
            for url in side.urls:
                with load_lock(env):
                    wrk.run(env, RunSpec(url, load.warmup_s, 10.0, concurrency=load.concurrency,
                                         max_requests=100_000), work)
        for side in sides:  # warm: a cold start's first answers (an app's caches) are past
            _same_pages(side, label)
        for i in range(load.rounds):
            for n, _ in enumerate(local.urls):
                for side in sides:
                    url = side.urls[n]
                    say(f"{label}: round {i + 1}/{load.rounds}, {side.role} "
                        f"{'lab' if len(side.urls) == 1 else url}, {load.duration_s:g} s at "
                        f"{load.concurrency} users…")
                    page = side.pages[n] if n < len(side.pages) else None
                    rounds[side.role].append(_round(env, wrk, side, url, page, load, work,
                                                    label, say))
    return Phase(Side(tuple(rounds["local"])), Side(tuple(rounds["network"])))


def _round(env: Env, wrk: Wrk, side: Target, url: str, page: Page | None, load: Load,
           work: Path, label: str, say: Callable[[str], None]) -> Round:
    window = side.window()
    if window is not None:
        window.open()
    with load_lock(env):
        if page is not None:
            run = _checked(env, side, url, page, load, label)
        else:
            plain = wrk.run(env, RunSpec(url, load.duration_s, 10.0,
                                         concurrency=load.concurrency,
                                         max_requests=int(load.duration_s * 50_000)), work)
            run = _Run(plain.rps, plain.p50, plain.p99, plain.errors.total, plain.requests)
    rt = None
    if window is not None:
        window.close(run.requests)
        rt = window.round_trips
        if window.note:
            say(f"{label}: {window.note}")
    return Round(round(run.rps, 2), round(run.p50, 2), round(run.p99, 2), run.errors,
                 run.requests, rt)


@dataclass(frozen=True)
class _Run:
    rps: float
    p50: float
    p99: float
    errors: int
    requests: int


def _checked(env: Env, side: Target, url: str, page: Page, load: Load, label: str) -> _Run:
    """One round with every answer checked against `page`; NotSamePage when one is not it."""
    run = wrk_checked.run(env, wrk_checked.CheckSpec(
        url, load.concurrency, load.duration_s, 10.0, page.marker, page.length, page.tolerance))
    if run.failed:
        kinds = ", ".join(f"{n} {what}" for n, what in ((run.bad_status, "by status"),
                                                         (run.bad_length, "by length"),
                                                         (run.bad_marker, "without the title"))
                          if n)
        raise NotSamePage(f"{label}: {side.says(url)} answered {run.failed:,} of "
                          f"{run.requests:,} requests with another page than the site's "
                          f"({page.says()}; {kinds}); no ratio taken", side.role)
    pct = dict(run.percentiles)
    return _Run(run.rps, pct.get(50.0, 0.0), pct.get(99.0, 0.0), run.socket_errors,
                run.requests)

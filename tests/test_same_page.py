"""A measurement that judges counts only the site's page (model/same_page.py,
adapters/load/interleaved.py): the page is the site's status, length and title; a side that
answers another page, before the load or during a round, ends the measurement with one line
naming it, never a ratio. The rounds run real wrk (its Lua check) against a small server on
loopback."""

from __future__ import annotations

import http.server
import shutil
import threading
from collections.abc import Iterator

import pytest

from statstorm.adapters.load import interleaved
from statstorm.env import Env
from statstorm.errors import NotSamePage
from statstorm.model import same_page
from statstorm.results.page import Page

PAGE = (b"<html><head><title>\n  Main Page - Wiki\n</title></head><body>"
        + b"x" * 3000 + b"</body></html>")
ERROR = b"<html><head><title>Error</title></head><body>Class not found</body></html>"


def test_the_page_is_its_status_length_and_title() -> None:
    page = same_page.page_of("http://x/", 200, PAGE)
    assert page == Page("http://x/", 200, len(PAGE), "Main Page - Wiki")
    assert same_page.differs(page, 200, PAGE) == ""
    assert same_page.differs(page, 200, PAGE + b"y" * 100) == ""  # within 10 %
    assert same_page.differs(page, 200, ERROR) == (f"{len(ERROR):,} bytes, without "
                                                   "'Main Page - Wiki', titled 'Error'")
    assert same_page.differs(page, 500, PAGE).startswith("status 500")
    assert same_page.marker_of(b"no title here") == ""
    assert same_page.marker_of(b"<TITLE lang=en>\xff\xfe</TITLE>") == ""  # not UTF-8
    assert len(same_page.marker_of(b"<title>" + "é".encode() * 100 + b"</title>")) == 40
    assert same_page.bad_site(Page("u", 404, 10, "")) == "u answered 404 before anything changed"
    assert same_page.bad_site(Page("u", 200, 0, "")).startswith("u answered an empty page")


class _Site(http.server.BaseHTTPRequestHandler):
    """/page: the page; /flaky: the page to urllib (the check's GET), the error page to wrk
    (the warm-up and the rounds); anything else: the error page."""

    def do_GET(self) -> None:  # noqa: N802
        to_urllib = "Python-urllib" in self.headers.get("User-Agent", "")
        body = PAGE if self.path == "/page" or (self.path == "/flaky" and to_urllib) else ERROR
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # wrk closing its connections at the end of a run: not the test's concern


@pytest.fixture
def site() -> Iterator[str]:
    if shutil.which("wrk") is None:
        pytest.skip("wrk is not installed (scripts/setup.sh --lab)")
    server = _Server(("127.0.0.1", 0), _Site)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


LOAD = interleaved.Load(rounds=1, duration_s=1, warmup_s=1, concurrency=1)


def test_both_sides_answering_the_page_are_measured(site: str) -> None:
    pages = interleaved.pages_of((f"{site}/page",))
    assert pages[0].marker == "Main Page - Wiki"
    local = interleaved.Target("local", (f"{site}/page",), pages=pages, name="lab tune-www")
    network = interleaved.Target("network", (f"{site}/page",), pages=pages, name="pool www")
    phase = interleaved.measure(Env(), local, network, LOAD, "before", lambda line: None)
    assert phase.local.rounds[0].requests > 0 and phase.network.rounds[0].rps > 0


def test_a_side_answering_another_page_is_named_before_the_rounds(site: str) -> None:
    pages = interleaved.pages_of((f"{site}/page",))
    local = interleaved.Target("local", (f"{site}/error",), pages=pages, name="lab tune-www")
    network = interleaved.Target("network", (f"{site}/page",), pages=pages, name="pool www")
    with pytest.raises(NotSamePage) as got:
        interleaved.measure(Env(), local, network, LOAD, "before", lambda line: None)
    assert got.value.role == "local" and "\n" not in str(got.value)
    assert str(got.value).startswith(f"before: the reference (lab tune-www, {site}/error) "
                                     "answered another page (")
    assert "no ratio taken" in str(got.value) and "titled 'Main Page - Wiki'" in str(got.value)


def test_a_side_that_turns_into_another_page_during_a_round_fails_it(site: str) -> None:
    pages = interleaved.pages_of((f"{site}/page",))
    network = interleaved.Target("network", (f"{site}/flaky",), pages=pages)
    local = interleaved.Target("local", (f"{site}/page",), pages=pages)
    with pytest.raises(NotSamePage, match=r"answered [\d,]+ of [\d,]+ requests with another "
                                          r"page than the site's .*by length") as got:
        interleaved.measure(Env(), local, network, LOAD, "after", lambda line: None)
    assert got.value.role == "network"


def test_a_site_that_does_not_answer_its_page_is_no_measure(site: str) -> None:
    with pytest.raises(NotSamePage, match="did not answer before anything changed"):
        interleaved.pages_of(("http://127.0.0.1:9/",))


def test_apply_verifys_page_after_a_change(site: str) -> None:
    (page,) = interleaved.pages_of((f"{site}/page",))
    assert interleaved.page_changed(page) == ""
    moved = Page(f"{site}/error", page.status, page.length, page.marker)
    why = interleaved.page_changed(moved)
    assert why.startswith(f"{site}/error answers another page after the change (")
    assert "titled 'Error'" in why and "before: 200, " in why and "\n" not in why

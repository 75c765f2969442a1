"""Is an answer the site's page? The page is taken once from the site as it is before the run
changes anything (its status, its length, its title as the marker, as `statstorm matrix`
checks each answer: adapters/load/lua/matrix.lua); an answer is the same page when its status
is the same 2xx, its length is within the tolerance of the page's and it holds the marker.
A front controller that cannot reach its code answers a short error page fast: without
this, a broken side would count as a fast one."""

from __future__ import annotations

import re

from statstorm.results.page import Page

TITLE = re.compile(rb"<title[^>]*>([^<]*)</title>", re.IGNORECASE)
MARKER_MAX = 80


def marker_of(body: bytes) -> str:
    """The page's title, its first line stripped and cut to MARKER_MAX bytes at a character
    boundary ('' when it has none, or none that is UTF-8)."""
    m = TITLE.search(body)
    if m is None:
        return ""
    line = next((ln.strip() for ln in m.group(1).splitlines() if ln.strip()), b"")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return ""
    while len(text.encode()) > MARKER_MAX:
        text = text[:-1]
    return text


def page_of(url: str, status: int, body: bytes) -> Page:
    return Page(url, status, len(body), marker_of(body))


def differs(page: Page, status: int, body: bytes) -> str:
    """'' when the answer is `page`, else how it differs, in a few words."""
    got = []
    if status != page.status:
        got.append(f"status {status}")
    if abs(len(body) - page.length) > page.tolerance * page.length:
        got.append(f"{len(body):,} bytes")
    if page.marker and page.marker.encode() not in body:
        got.append(f"without {page.marker!r}")
        title = marker_of(body)
        if title:
            got.append(f"titled {title!r}")
    return ", ".join(got)


def bad_site(page: Page) -> str:
    """Why the site's own page cannot be the measure of the others ('' it can)."""
    if not 200 <= page.status <= 299:
        return f"{page.url} answered {page.status} before anything changed"
    if page.length == 0:
        return f"{page.url} answered an empty page before anything changed"
    return ""


__all__ = ["MARKER_MAX", "bad_site", "differs", "marker_of", "page_of"]

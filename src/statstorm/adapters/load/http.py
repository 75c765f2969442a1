"""One HTTP client for the verbs' own requests: a lab's page checks, apply's health check,
the demo's page views and sweep's check of the answer before load. Load itself goes
through the load generators (adapters/load/wrk.py, ab.py, vegeta.py).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import urllib.error
import urllib.parse
import urllib.request

from statstorm.errors import UsageError


def get(url: str, timeout: float = 60) -> tuple[int, bytes]:
    """GET `url`; its status and body (an HTTP error status is an answer, not an error).
    Raises OSError (urllib's URLError, ConnectionError, TimeoutError) when nothing answers,
    or when the answer breaks off (the server closed the connection mid-body: a PHP worker
    that died while answering, behind nginx)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except http.client.HTTPException as exc:  # IncompleteRead, a malformed status line, …
        raise ConnectionError(f"the answer broke off ({type(exc).__name__}: "
                              f"{_short(exc)})") from None


def _short(exc: Exception) -> str:
    if isinstance(exc, http.client.IncompleteRead):
        return f"{len(exc.partial)} bytes read"
    return str(exc)[:80]


def fetch(url: str, timeout: float = 60) -> tuple[int, str]:
    """`get` with the body as text (undecodable bytes replaced)."""
    status, body = get(url, timeout)
    return status, body.decode("utf-8", "replace")


def check_answer(url: str, expect_status: int, expect_text: str, timeout: float) -> str:
    """One GET; '' when status and text are as expected, else what was wrong."""
    try:
        status, body = get(url, timeout)
    except OSError as exc:
        return f"no answer ({getattr(exc, 'reason', exc)})"
    if status != expect_status:
        return f"status {status}, expected {expect_status}"
    if expect_text and expect_text.encode() not in body:
        return f"body ({len(body)} bytes) lacks the expected text {expect_text!r}"
    return ""


def check_loopback(url: str, allow_remote: bool,
                   fix: str = "sweep sends load only to 127.0.0.1/::1/localhost; pass "
                              "--allow-remote if you own that server") -> str:
    """Refuse targets that are not on loopback unless `allow_remote`; return the host.
    `fix`: what the refusal tells the user to do."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises on a port that is no number or out of range
    except ValueError as exc:
        raise UsageError(f"{url!r}: {exc}; pass e.g. http://127.0.0.1:8080/index.php") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{url!r} is not an http(s) URL: pass e.g. http://127.0.0.1:8080/index.php")
    host = parts.hostname
    try:
        infos = socket.getaddrinfo(host, port or 80, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError, ValueError):
        raise UsageError(f"cannot resolve {host!r}: check the URL") from None
    addrs = {str(info[4][0]) for info in infos}
    remote = sorted(a for a in addrs if not ipaddress.ip_address(a.split("%")[0]).is_loopback)
    if remote and not allow_remote:
        raise UsageError(f"{host} ({', '.join(remote)}) is not on loopback: {fix}")
    return host

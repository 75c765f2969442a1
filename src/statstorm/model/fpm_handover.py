"""A php-fpm reload that ends no request, where the running master would end them.

With `process_control_timeout = 0` (Debian's default) a php-fpm reload (SIGUSR2) sends its
workers SIGQUIT and, at once, SIGTERM: the requests running then are cut off (the web server
answers 502). The master reads the timeout only when it starts, so the reload that sets it is
itself such a reload. So apply hands the pool's traffic to a second php-fpm master, which runs
the pool's section (its new settings), until the pool has drained and reloaded
(adapters/apply/fpm_handover.py):

- a pool on a UNIX socket hands the socket's path over: the second master's socket is renamed
  over it while a hard link keeps the pool master's socket, then renamed back after the
  reload. Whatever connects to the path (nginx, Apache's proxy_fcgi) follows it, and no web
  server reloads, so no client connection is closed;
- a pool on TCP has nginx's passes pointed at the second master and nginx reloaded gracefully,
  then put back byte for byte and reloaded again (each nginx reload closes its idle keep-alive
  client connections).

This module holds the two texts that takes, as pure functions: the second master's
configuration and the nginx text with its passes pointed elsewhere.
"""

from __future__ import annotations

import re
from typing import Callable

from statstorm.model.config_edit import nginx_statements

_SECTION = re.compile(r"^\s*\[([^\]]+)\]\s*$")
_LISTEN = re.compile(r"^\s*listen\s*=")
_INCLUDE = re.compile(r"^\s*include\s*=")


def pool_section(text: str, pool: str) -> list[str]:
    """The lines of php-fpm's `[pool]` section in a pool file (its header excluded); [] when
    the file has no such section."""
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        m = _SECTION.match(line)
        if m:
            inside = m.group(1).strip() == pool
            continue
        if inside:
            out.append(line)
    return out


def handover_conf(pool_text: str, pool: str, listen: str, *, pid: str, error_log: str,
                  grace_s: int = 10) -> str:
    """The second master's whole configuration: a [global] of its own (pid file and log in
    statstorm's directory, in the foreground, a graceful stop) and the pool's section as the
    pool file has it, listening on `listen` instead. Raises ValueError when the file has no
    such section, or the section includes other files (their `listen` could not be moved)."""
    body = pool_section(pool_text, pool)
    if not body:
        raise ValueError(f"no [{pool}] section")
    if any(_INCLUDE.match(line) for line in body):
        raise ValueError(f"[{pool}] includes other files")
    kept = [line for line in body if not _LISTEN.match(line)]
    return "\n".join([
        "; statstorm: a php-fpm master of its own for the time of a reload (see `statstorm "
        "apply`); removed afterwards",
        "[global]", f"pid = {pid}", f"error_log = {error_log}", "daemonize = no",
        f"process_control_timeout = {grace_s}s", "",
        f"[{pool}]", f"listen = {listen}", *kept, ""])


def _address(arg: str) -> str:
    return arg.removeprefix("unix:")


def repoint(text: str, reaches: Callable[[str], bool], to: str) -> tuple[str, int]:
    """`text` (an nginx file) with every `fastcgi_pass ADDRESS` and every upstream's
    `server ADDRESS …;` that reaches the pool (`reaches(address) -> bool`) pointed at `to`
    (an nginx address: `unix:/path` or `host:port`); returns the text and how many were."""
    spans: list[tuple[int, int]] = []
    for st in nginx_statements(text):
        if len(st.words) < 2 or st.words[0] not in ("fastcgi_pass", "server"):
            continue
        if st.words[0] == "server" and text[st.end - 1] != ";":  # a server { … } block
            continue
        if "$" not in st.words[1] and reaches(_address(st.words[1])):
            spans.append(st.spans[1])
    for start, end in reversed(spans):
        text = text[:start] + to + text[end:]
    return text, len(spans)


__all__ = ["handover_conf", "pool_section", "repoint"]

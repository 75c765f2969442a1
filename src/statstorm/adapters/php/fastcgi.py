"""A minimal FastCGI client: ask a php-fpm pool itself (its settings, OPcache status, realpath
cache use) by running one small script in one of its workers, as a web server would."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from statstorm.errors import ComponentError

VERSION = 1
BEGIN_REQUEST, END_REQUEST, PARAMS, STDIN, STDOUT, STDERR = 1, 3, 4, 5, 6, 7
RESPONDER = 1
REQUEST_ID = 1


def _record(rtype: int, content: bytes) -> bytes:
    pad = -len(content) % 8
    return struct.pack("!BBHHBx", VERSION, rtype, REQUEST_ID, len(content), pad) + content \
        + b"\0" * pad


def _length(n: int) -> bytes:
    return bytes([n]) if n < 128 else struct.pack("!I", n | 0x80000000)


def encode_params(params: dict[str, str]) -> bytes:
    out = b""
    for k, v in params.items():
        kb, vb = k.encode(), v.encode("utf-8", "surrogateescape")
        out += _length(len(kb)) + _length(len(vb)) + kb + vb
    return out


def build_request(params: dict[str, str]) -> bytes:
    body = encode_params(params)
    out = _record(BEGIN_REQUEST, struct.pack("!HB5x", RESPONDER, 0))
    for i in range(0, len(body), 65535):
        out += _record(PARAMS, body[i:i + 65535])
    return out + _record(PARAMS, b"") + _record(STDIN, b"")


def parse_response(data: bytes) -> tuple[bytes, bytes, bool]:
    """(stdout, stderr, ended) from the records a server sent."""
    out, err, ended, i = b"", b"", False, 0
    while i + 8 <= len(data):
        _, rtype, _, clen, pad = struct.unpack("!BBHHBx", data[i:i + 8])
        content = data[i + 8:i + 8 + clen]
        if rtype == STDOUT:
            out += content
        elif rtype == STDERR:
            err += content
        elif rtype == END_REQUEST:
            ended = True
        i += 8 + clen + pad
    return out, err, ended


class AnsweredError(ComponentError):
    """The pool answered, but with an error instead of the script's output: it is alive."""


def connect(listen: str, timeout: float) -> socket.socket:
    """`listen` as in a pool's config: a socket path, `host:port` or a port."""
    if listen.startswith("/"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        addr: str | tuple[str, int] = listen
    else:
        host, _, port = listen.rpartition(":")
        host = (host or "127.0.0.1").strip("[]")
        if host in ("*", "0.0.0.0", "::", ""):
            host = "127.0.0.1"
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                             socket.SOCK_STREAM)
        addr = (host, int(port))
    sock.settimeout(timeout)
    try:
        sock.connect(addr)
    except (OSError, ValueError) as exc:
        sock.close()
        raise ComponentError(f"cannot connect to the php-fpm pool at {listen}: {exc}") from None
    return sock


# statstorm's own scripts: a directory of this prefix holding this file (the tracer and the
# exporter know a request of statstorm's own by its SCRIPT_FILENAME)
SCRIPT_DIR_PREFIX, SCRIPT_FILE = "statstorm-check-", "query.php"


@contextmanager
def script_file(text: str, root: str = "") -> Iterator[str]:
    """The PHP file `text` where a pool's workers can run it, removed afterwards: a fresh
    directory under /run (else the temp directory), 0755 and the file 0644, so that any
    pool user reads it; `.php`, so that the default `security.limit_extensions` allows it.
    A pool whose open_basedir leaves /run out refuses it (the caller says so). `root`: the
    PHP root the workers run chrooted in; the file is made under the root's /run (else its
    /tmp) and its path is given as the workers see it."""
    top = Path(root) if root else Path("/")
    run = top / "run"
    base = run if os.access(run, os.W_OK) else (top / "tmp" if root else
                                                Path(tempfile.gettempdir()))
    tmp = tempfile.mkdtemp(prefix=SCRIPT_DIR_PREFIX, dir=base)
    try:
        os.chmod(tmp, 0o755)
        script = Path(tmp, SCRIPT_FILE)
        script.write_text(text)
        script.chmod(0o644)
        yield "/" + str(script.relative_to(top)) if root else str(script)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def script_params(script: str, query: str = "") -> dict[str, str]:
    """The FastCGI parameters of a GET of the PHP file `script`, as a web server sends them."""
    return {"GATEWAY_INTERFACE": "FastCGI/1.0", "REQUEST_METHOD": "GET",
            "SCRIPT_FILENAME": script, "SCRIPT_NAME": "/" + script.rsplit("/", 1)[-1],
            "DOCUMENT_ROOT": script.rsplit("/", 1)[0], "REQUEST_URI": "/statstorm-check",
            "QUERY_STRING": query, "SERVER_SOFTWARE": "statstorm", "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1", "CONTENT_LENGTH": "0"}


def run_script(listen: str, script: str, timeout: float = 10.0,
               query: str = "") -> tuple[str, bytes]:
    """Run the PHP file `script` in the pool at `listen`; return (headers, body)."""
    params = script_params(script, query)
    sock = connect(listen, timeout)
    data = b""
    try:
        sock.sendall(build_request(params))
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
            if parse_response(data)[2]:
                break
    except OSError as exc:
        raise ComponentError(f"the php-fpm pool at {listen} did not answer: {exc}") from None
    finally:
        sock.close()
    out, err, _ = parse_response(data)
    head, _, body = out.partition(b"\r\n\r\n")
    if err and not body:
        raise AnsweredError(f"the php-fpm pool at {listen} failed the query: "
                             f"{err.decode(errors='replace').strip().splitlines()[0]}")
    return head.decode("latin-1"), body

"""The verbs' one HTTP client on a real socket: an answer that breaks off mid-body (a PHP
worker dying behind nginx closes the connection inside a chunked body) is an OSError its
callers handle (apply's health check retries), never a traceback."""

from __future__ import annotations

import socket
import threading

import pytest

from statstorm.adapters.load import http


def _serve_once(reply: bytes) -> str:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def run() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        conn.sendall(reply)
        conn.close()
        srv.close()
    threading.Thread(target=run, daemon=True).start()
    return f"http://127.0.0.1:{srv.getsockname()[1]}/index.php"


def test_a_chunked_body_broken_off_is_an_oserror() -> None:
    url = _serve_once(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"10\r\n0123456789abcdef\r\n")
    with pytest.raises(OSError, match=r"broke off \(IncompleteRead: 16 bytes read\)"):
        http.get(url, timeout=5)
    assert http.check_answer(_serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nab"),
                             200, "", 5).startswith("no answer (the answer broke off")


def test_a_whole_answer_is_read() -> None:
    url = _serve_once(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"5\r\nhello\r\n0\r\n\r\n")
    assert http.get(url, timeout=5) == (200, b"hello")

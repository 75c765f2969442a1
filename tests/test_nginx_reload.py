"""nginx.reload on a real nginx (no PHP): it returns only once no old worker still accepts,
so the very next request gets the new configuration, while an old worker that is still
sending a response (a slow client) finishes it. Its own prefix and a free loopback port;
nginx is stopped whatever happens."""

from __future__ import annotations

import os
import socket
import urllib.request
from pathlib import Path

from statstorm.adapters.host import listeners, procs
from statstorm.adapters.servers import nginx
from statstorm.env import Env


def _conf(prefix: Path, port: int, answer: str) -> str:
    user = "user root;\n" if os.geteuid() == 0 else ""  # the workers read the prefix
    return f"""{user}daemon off;
worker_processes 2;
pid {prefix}/nginx.pid;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/tmp;
    server {{
        listen 127.0.0.1:{port};
        root {prefix}/html;
        location = /which {{ return 200 "{answer}"; }}
        location /big {{ limit_rate 16k; }}
    }}
}}
"""


def test_reload_returns_once_no_old_worker_accepts(tmp_path: Path) -> None:
    prefix = tmp_path / "nginx"
    for d in ("log", "tmp", "html"):
        (prefix / d).mkdir(parents=True)
    (prefix / "html/big").write_bytes(b"x" * (4 << 20))
    port = procs.free_port(18300)
    conf = prefix / "nginx.conf"
    conf.write_text(_conf(prefix, port, "one"))
    pids: list[int] = []
    master = nginx.start(Env(state_root=tmp_path), conf, prefix, port, pids.append)
    slow = socket.create_connection(("127.0.0.1", port))
    try:
        slow.sendall(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        assert slow.recv(4096).startswith(b"HTTP/1.1 200")  # a worker is busy sending it
        old = procs.children(master)
        conf.write_text(_conf(prefix, port, "two"))
        nginx.reload(master)
        still = [p for p in old if procs.alive(p)]
        assert still, "the worker sending /big ended before its response did"
        assert not any(listeners.holds_listener(p) for p in still)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/which", timeout=10) as r:
            assert r.read() == b"two"
    finally:
        slow.close()
        procs.terminate(master)

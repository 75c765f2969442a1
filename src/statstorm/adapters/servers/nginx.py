"""nginx: the lab's own master, in front of the lab's php-fpm pool on 127.0.0.1; and what
running nginx servers pass to a php-fpm pool (read from `nginx -T`)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Callable

from statstorm.adapters.host import procs
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError

BINARY = "/usr/sbin/nginx"


def require_installed() -> None:
    if not Path(BINARY).exists():
        raise DependencyError("nginx is not installed: run scripts/setup.sh as root")


def render_conf(*, port: int, docroot: str, socket: str, prefix: Path,
                front_controller: str, user: str = "www-data") -> str:
    """One server block; PHP through FastCGI as Debian's snippets/fastcgi-php.conf does."""
    return f"""\
# written by statstorm lab; the lab's own nginx master
worker_processes 1;
daemon off;
user {user};
pid {prefix}/run/nginx.pid;
error_log {prefix}/log/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;
    client_body_temp_path {prefix}/tmp/client_body;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    proxy_temp_path {prefix}/tmp/proxy;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {docroot};
        index index.php;
        location / {{
            try_files $uri $uri/ /{front_controller}?$args;
        }}
        location ~ [^/]\\.php(/|$) {{
            fastcgi_split_path_info ^(.+?\\.php)(/.*)$;
            try_files $fastcgi_script_name =404;
            set $path_info $fastcgi_path_info;
            fastcgi_param PATH_INFO $path_info;
            fastcgi_index index.php;
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
            fastcgi_pass unix:{socket};
        }}
        location ~ ^/statstorm-fpm-(status|ping)$ {{
            allow 127.0.0.1;
            deny all;
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_NAME $uri;
            fastcgi_param SCRIPT_FILENAME $uri;
            fastcgi_pass unix:{socket};
        }}
    }}
}}
"""


def lab_argv(conf: Path, prefix: Path) -> list[str]:
    """nginx with a lab's own prefix, error log and configuration (add -t, -T, …)."""
    return [BINARY, "-p", str(prefix), "-e", str(prefix / "log/nginx-error.log"), "-c", str(conf)]


def test_config(env: Env, conf: Path, prefix: Path) -> None:
    res = env.run([*lab_argv(conf, prefix), "-t", "-q"], check=False, what="nginx -t")
    if res.returncode != 0:
        raise ComponentError(f"nginx rejected the lab configuration: {res.first_error_line()}")


def start(env: Env, conf: Path, prefix: Path, port: int, record: Callable[[int], None],
          timeout: float = 15) -> int:
    log = prefix / "log/nginx.out"
    pid = procs.spawn_daemon(lab_argv(conf, prefix), log, record)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not procs.alive(pid):
            err = (prefix / "log/nginx-error.log")
            tail = err.read_text(errors="replace").strip().splitlines()[-1:] if err.exists() else []
            raise ComponentError(f"nginx exited at start: {' '.join(tail) or 'see ' + str(log)}")
        if procs.port_in_use(port) and procs.children(pid):
            return pid
        time.sleep(0.05)
    procs.terminate(pid)
    raise ComponentError(f"nginx did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


def nginx_servers(text: str) -> list[dict[str, str]]:
    """The `root`, `fastcgi_pass` and SCRIPT_FILENAME of each server block in `nginx -T`."""
    servers: list[dict[str, str]] = []
    depth = 0
    server_depth = -1
    cur: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if re.match(r"server\s*\{", line):
            server_depth = depth
            cur = {}
        m = re.match(r"(root|fastcgi_pass)\s+([^;]+);", line)
        if m and server_depth >= 0:
            cur.setdefault(m.group(1), m.group(2).strip())
        m = re.match(r"fastcgi_param\s+SCRIPT_FILENAME\s+([^;]+);", line)
        if m and server_depth >= 0:
            # the PHP location's (built from $fastcgi_script_name) beats a status page's
            value = m.group(1).strip()
            if "script_filename" not in cur or ("fastcgi_script_name" in value
                                                and "fastcgi_script_name" not in cur["script_filename"]):
                cur["script_filename"] = value
        depth += line.count("{") - line.count("}")
        if server_depth >= 0 and depth <= server_depth:
            servers.append(cur)
            server_depth = -1
    return servers


def running_masters_by_pid() -> list[tuple[int, list[str]]]:
    """Each running nginx master's PID, binary and options (from its process title)."""
    out = []
    for pid in procs.find_pids(["nginx: master process"]):
        title = " ".join(procs.cmdline(pid)).split("nginx: master process", 1)[1].split()
        binary = title[0] if title and title[0].startswith("/") else "/usr/sbin/nginx"
        out.append((pid, [binary, *title[1:]]))
    return out


def running_masters() -> list[list[str]]:
    """The binary and options of every running nginx master (from its process title)."""
    return [argv for _, argv in running_masters_by_pid()]


def dump(env: Env, argv: list[str]) -> str:
    """`nginx -T` of the master started as `argv`: its whole configuration, file by file."""
    return env.run([*argv, "-T"], check=False, what="nginx -T").stdout


def server_passing_to(env: Env, argvs: list[list[str]] | None,
                      listen: str) -> dict[str, str] | None:
    """The first server block (of the nginx masters started as `argvs`, default every
    running one) whose `fastcgi_pass` names the pool's `listen` address."""
    for argv in argvs if argvs is not None else running_masters():
        for server in nginx_servers(dump(env, argv)):
            fp = server.get("fastcgi_pass", "").removeprefix("unix:")
            if fp and listen and (fp == listen or fp.endswith(":" + listen)):
                return server
    return None


def files_passing_to(dump: str, listen: str) -> list[str]:
    """The configuration files (from `nginx -T`) whose `fastcgi_pass` names the pool's
    `listen` address: the ones holding that pool's `fastcgi_param` lines."""
    out: list[str] = []
    current = ""
    for raw in dump.splitlines():
        m = re.match(r"# configuration file (.+):$", raw.strip())
        if m:
            current = m.group(1)
            continue
        line = raw.split("#", 1)[0].strip()
        p = re.match(r"fastcgi_pass\s+([^;]+);", line)
        if p and current and current not in out:
            target = p.group(1).strip().removeprefix("unix:")
            if listen and (target == listen or target.endswith(":" + listen)):
                out.append(current)
    return out


def reload(master_pid: int, timeout: float = 15.0) -> None:
    """Graceful reload (SIGHUP): new workers with the new configuration, old ones finish."""
    old = set(procs.children(master_pid))
    os.kill(master_pid, signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not procs.alive(master_pid):
            raise ComponentError(f"the nginx master {master_pid} exited while reloading")
        kids = set(procs.children(master_pid))
        if kids - old:
            return
        time.sleep(0.05)
    raise ComponentError(f"nginx did not reload within {timeout:.0f} s (master {master_pid})")

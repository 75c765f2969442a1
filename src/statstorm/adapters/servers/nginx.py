"""nginx: the lab's own master, in front of the lab's php-fpm pool on 127.0.0.1; the running
masters, their configuration files (read by `nginx_conf.py`) and the sites passing to a
php-fpm pool; nginx's reload."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable

from statstorm.adapters.host import listeners, procs
from statstorm.adapters.servers import nginx_conf
from statstorm.env import Env
from statstorm.errors import ComponentError, DependencyError
from statstorm.results.sites import Site

BINARY = "/usr/sbin/nginx"


def require_installed() -> None:
    if not Path(BINARY).exists():
        raise DependencyError("nginx is not installed: run scripts/setup.sh --lab as root")


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


def running_masters_by_pid() -> list[tuple[int, list[str]]]:
    """Each running nginx master's PID, binary and options (from its process title): the
    masters of this file system only. A master in another root (a chroot's nginx seen from
    the host, the host's seen from inside a chroot) names its configuration as that root
    sees it: read here, it would be another file, or none."""
    out = []
    for pid in procs.find_pids(["nginx: master process"]):
        if not procs.same_root(pid):
            continue
        title = " ".join(procs.cmdline(pid)).split("nginx: master process", 1)[1].split()
        binary = title[0] if title and title[0].startswith("/") else "/usr/sbin/nginx"
        out.append((pid, [binary, *title[1:]]))
    return out


def running_masters() -> list[list[str]]:
    """The binary and options of every running nginx master (from its process title)."""
    return [argv for _, argv in running_masters_by_pid()]


def master_config(argv: list[str]) -> tuple[Path, str]:
    """The configuration file and prefix of the master started as `argv` (its `-c` and `-p`,
    attached or not; a relative `-c` is under the prefix, as nginx reads it)."""
    opts: dict[str, str] = {}
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg in ("-c", "-p", "-e", "-g") and i + 1 < len(argv):
            opts[arg] = argv[i + 1]
            i += 2
            continue
        if arg[:2] in ("-c", "-p") and len(arg) > 2:
            opts[arg[:2]] = arg[2:]
        i += 1
    prefix = opts.get("-p", nginx_conf.DEFAULT_PREFIX)
    prefix = prefix if prefix.endswith("/") else prefix + "/"
    conf = opts.get("-c", nginx_conf.DEFAULT_CONF)
    return Path(conf if conf.startswith("/") else prefix + conf), prefix


def read_master(argv: list[str]) -> nginx_conf.Config:
    """The whole configuration of the master started as `argv`, read with crossplane."""
    conf, prefix = master_config(argv)
    return nginx_conf.read(conf, prefix)


def sites_passing_to(argvs: list[list[str]] | None, listen: str) -> tuple[Site, ...]:
    """Every server block (of the nginx masters started as `argvs`, default every running
    one) whose PHP location passes to the pool's `listen` address."""
    out: list[Site] = []
    for argv in argvs if argvs is not None else running_masters():
        out.extend(s for s in nginx_conf.sites_passing_to(read_master(argv), listen)
                   if s not in out)
    return tuple(out)


def reload(master_pid: int, timeout: float = 15.0) -> None:
    """Graceful reload (SIGHUP): new workers with the new configuration, old ones finish.
    Returns once the new workers run and no old one still accepts: an old worker closes
    its listening sockets when it takes the master's QUIT, which comes after the new
    workers start, so a request sent between the two could still be served with the old
    configuration."""
    old = set(procs.children(master_pid))
    os.kill(master_pid, signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not procs.alive(master_pid):
            raise ComponentError(f"the nginx master {master_pid} exited while reloading")
        kids = set(procs.children(master_pid))
        if kids - old and not any(listeners.holds_listener(p) for p in old & kids):
            return
        time.sleep(0.05)
    raise ComponentError(f"nginx did not reload within {timeout:.0f} s (master {master_pid})")

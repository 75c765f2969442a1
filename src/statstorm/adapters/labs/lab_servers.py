"""A lab's servers, each started by statstorm and recorded the moment it starts: its php-fpm
master (config tested, effective settings read back), nginx or Apache on the lab's port; and the
check that the app's pages really serve. Each start is a step of `lab up` (a fault point),
each thing started recorded through the lab's `LabRecord` (adapters/labs/state.py)."""

from __future__ import annotations

import time
from pathlib import Path

from statstorm import faults
from statstorm.adapters.host import procs
from statstorm.adapters.labs import apache_lab, phpfpm, state as labs
from statstorm.adapters.load import http
from statstorm.adapters.servers import nginx
from statstorm.apps import mediawiki, wordpress
from statstorm.env import Env
from statstorm.errors import ComponentError
from statstorm.results.lab import LabState

# The settings read back from every lab's PHP (with the ones the lab sets).
REPORTED_INI = [
    "realpath_cache_size", "realpath_cache_ttl", "open_basedir", "include_path",
    "opcache.enable", "opcache.validate_timestamps", "opcache.revalidate_freq",
    "user_ini.filename", "user_ini.cache_ttl",
]



def step(env: Env, state: LabState, message: str, point: str) -> None:
    faults.phase(f"lab-up/{point}")
    env.log(f"lab {state.name}: {message}")


def start_fpm(env: Env, rec: labs.LabRecord, fpm: str, ini: dict[str, str]) -> None:
    root = Path(rec.state.state_dir)
    state = rec.record(pool=f"statstorm-{rec.state.name}",
                       fpm_socket=str(root / "run/php-fpm.sock"))
    fpm_conf = root / "conf/php-fpm.conf"
    fpm_conf.write_text(phpfpm.render_conf(pool=state.pool, run_dir=root / "run",
                                           log_dir=root / "log", workers=state.workers))
    phpfpm.test_config(env, fpm, fpm_conf, ini)
    state = rec.record(effective_ini=phpfpm.effective_ini(env, fpm, fpm_conf, ini,
                                                          sorted({*REPORTED_INI, *ini})))
    step(env, state, f"starting php-fpm pool {state.pool} ({state.workers} workers)…", "fpm")

    def record_fpm(pid: int) -> None:
        rec.record(fpm_master_pid=pid)

    # conf/php: ini files the master reads at every start and reload (apply writes
    # settings only the master reads there, e.g. opcache.huge_code_pages)
    labs.php_ini_file(state).parent.mkdir(parents=True, exist_ok=True)
    phpfpm.start(env, fpm, fpm_conf, ini, root / "log/php-fpm.out", state.workers, record_fpm,
                 ini_dir=labs.php_ini_file(state).parent)
    rec.record(worker_pids=tuple(phpfpm.worker_pids(rec.state.fpm_master_pid)))


def _keep_port(rec: labs.LabRecord, fixed_port: bool) -> LabState:
    if not fixed_port and procs.port_in_use(rec.state.port):
        # Chosen at the start; another server took it while the app was being installed
        # (MediaWiki's $wgServer follows SERVER_PORT, so only the web server needs the new one).
        rec.record(port=procs.free_port())
    return rec.state


def start_apache(env: Env, rec: labs.LabRecord, docroot: Path, front: str, *,
                 fixed_port: bool) -> None:
    root = Path(rec.state.state_dir)
    state = _keep_port(rec, fixed_port)
    conf = labs.apache_conf(state)
    apache_lab.write_probe(root)
    conf.write_text(apache_lab.render_conf(
        mpm=state.mpm, handler=state.handler, port=state.port, docroot=str(docroot), prefix=root,
        front_controller=front, workers=state.workers, socket=state.fpm_socket,
        php_cgi=state.php_cgi_binary, allow_override=state.allow_override))
    apache_lab.test_config(env, conf)
    procs.check_port_free(state.port)
    step(env, state, f"starting Apache (mpm_{state.mpm}, PHP through {state.handler}) on "
                      f"127.0.0.1:{state.port}…", "server")

    def record_apache(pid: int) -> None:
        rec.record(apache_pid=pid)

    apache_lab.start(env, conf, root, state.port, record_apache)


def start_nginx(env: Env, rec: labs.LabRecord, docroot: Path, front: str, *,
                fixed_port: bool) -> None:
    root = Path(rec.state.state_dir)
    for sub in ("client_body", "fastcgi", "proxy", "uwsgi", "scgi"):
        (root / "tmp" / sub).mkdir(exist_ok=True)
    nginx_conf = root / "conf/nginx.conf"
    state = _keep_port(rec, fixed_port)
    nginx_conf.write_text(nginx.render_conf(port=state.port, docroot=str(docroot),
                                            socket=state.fpm_socket, prefix=root,
                                            front_controller=front))
    nginx.test_config(env, nginx_conf, root)
    procs.check_port_free(state.port)
    step(env, state, f"starting nginx on 127.0.0.1:{state.port}…", "server")

    def record_nginx(pid: int) -> None:
        rec.record(nginx_pid=pid)

    nginx.start(env, nginx_conf, root, state.port, record_nginx)


def check_pages(env: Env, state: LabState) -> str:
    """GET the app's page (and MediaWiki's API); raise unless they are real app output."""
    checks: list[tuple[str, tuple[str, ...]]]
    if state.app == "mediawiki":
        checks = [(mediawiki.ENTRY, mediawiki.PAGE_MARKERS),
                  (mediawiki.API, ('"generator":"MediaWiki', '"sitename"'))]
    elif state.app == "wordpress":
        checks = [(wordpress.ENTRY, wordpress.PAGE_MARKERS),
                  (wordpress.API, wordpress.API_MARKERS)]
    else:
        checks = [("/index.php?format=json", ('"app":"statstorm-synthetic"',))]
    first_body = ""
    for path, markers in checks:
        url = state.url + path
        status_code, body = 0, ""
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                status_code, body = http.fetch(url)
                break
            except OSError as exc:
                body = str(exc)
                time.sleep(0.5)
        if status_code != 200 or not all(m in body for m in markers):
            snippet = " ".join(body.split())[:160]
            raise ComponentError(f"{url} answered {status_code or 'nothing'} without the expected "
                                 f"content ({snippet!r}); see {state.state_dir}/log/")
        first_body = first_body or body
    return first_body

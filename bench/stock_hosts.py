#!/usr/bin/env python3
"""Benchmark: statstorm on stock Debian hosts, every harness case, ratios side by side.

Goals (issue "stock hosts"): on every case — Debian's php-fpm behind Debian's nginx, and
Debian's Apache with mod_php — `check` names the storage of every site of each PHP target
(0 missed), and `apply --all --yes` exits 0 and fails 0 requests under wrk at saturation;
after `check --trace` + `apply --all --yes`, each case's network/local ratio is at least what
the same changes reach on a lab with the same app and storage (`statstorm demo`'s lab pair).

Each case stands up the host with `tests/stock_host.py` (Debian's services from /etc, a
GlusterFS volume mounted by hand with default options, the app on local disk and on the
volume, one PHP target serving both sites) and restores it exactly afterwards. The sites are
measured with interleaved wrk rounds (local, network, local, …: ROUNDS × SECONDS at 4
connections), traced for 10 s while 4 clients load the network site (from before the tracer
attaches to its end), checked with the trace, changed with
`apply --all --yes` while wrk loads both sites at saturation (its socket errors and non-2xx
answers are the failed requests, each kind counted apart; the same load for as long with
nothing changed, just before, is the control: what the load alone fails), the app change
apply made on the network copy made on the local copy too (as the demo does on its local
lab), and measured again; then `apply --rollback` runs under the same load (its reload is by
the master apply left: graceful once process_control_timeout is set) and its failed
requests are counted apart. A statstorm command that fails has its last stderr line in the
printed row (and all its output in --keep DIR).

The saturating load is taken from what each server is configured to take, as Debian ships
it (the bench never tunes a server): behind nginx, 32 connections per site, which nginx
queues for the www pool's pm.max_children = 5 workers. Debian's Apache runs prefork +
mod_php with KeepAlive On: each connection holds a child running PHP, up to
MaxRequestWorkers 150, with no queue in front of PHP. At 32 per site Apache took all 64
(64 children busy, its listen backlog empty, nothing in error.log, no child recycled:
MaxConnectionsPerChild 0), and the control's failures were all wrk's `timeout` (14 + 64, no
connect, read or write error): 64 PHP requests at once on a 2-core machine, the network
site's each waiting on its FUSE round trips, answer after wrk's 10 s. So the Apache case's
load is half the MaxSpareServers its prefork keeps ready (10: 5 per site, 10 children busy,
5 per core): the CPU is saturated, Apache neither forks nor kills a child for the load, and
the control fails 0. wrk waits up to 60 s for an answer under these loads
(SATURATION_TIMEOUT_S, nginx's own fastcgi_read_timeout): behind nginx at 64 connections,
while apply's own work shared the 2 cores (its check, `php-fpm -t`, `gluster volume set`),
the pool answered about 3.5 MediaWiki pages a second in all (one diagnostic run, every
answer a 200), so a request waited up to about 18 s in nginx's queue: up to 90 of them went
past wrk's default 10 s in one run, wrk's cut-off, no error of the server's.

Run as root on a quiet machine (no tests, no other benchmark; it takes the load lock for its
measurements):  python3 bench/stock_hosts.py [--cases fpm-mediawiki,apache-mediawiki,fpm-dokuwiki]
[--lab] (--lab also runs `statstorm demo` for the lab's ratio with the same app and storage).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import urllib.request
from pathlib import Path
from typing import Any, Iterator

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE.parent / "src")]

from stock_host import StockHost, stock_host  # noqa: E402

from statstorm.adapters.labs import lab_apps  # noqa: E402
from statstorm.adapters.load.loadgen import load_lock  # noqa: E402
from statstorm.adapters.servers import apache_conf  # noqa: E402
from statstorm.apps import mediawiki  # noqa: E402
from statstorm.env import Env  # noqa: E402

LOCAL, NET = 18381, 18382
PAGES = {"mediawiki": mediawiki.ENTRY, "dokuwiki": "/doku.php"}
SOCK = "unix:/run/php/php8.2-fpm.sock"
KEEP: Path | None = None  # --keep DIR: wrk's socket errors and apply's output, for diagnosis


def statstorm(*args: str, home: Path, case: str,
              errors: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One statstorm command; a failure's last stderr line goes into `errors` (the printed
    row) under the command's name, and its whole output, with the command, into --keep."""
    proc = subprocess.run([sys.executable, "-m", "statstorm", *args], capture_output=True,
                          text=True, env=dict(os.environ, STATSTORM_HOME=str(home)))
    if proc.returncode != 0:
        name = args[0] + (" --rollback" if "--rollback" in args else "")
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        errors[name] = f"rc {proc.returncode}: " + (lines[-1].strip() if lines else "no stderr")
        if KEEP:
            (KEEP / f"{case}.{name.replace(' --', '-')}.err").write_text(
                f"$ statstorm {' '.join(args)}\nexit {proc.returncode}\n--- stderr\n"
                f"{proc.stderr}--- stdout\n{proc.stdout}")
    return proc


# a saturating load's answers may take longer than wrk's default cut-off while apply's own work
# (check, php-fpm -t, gluster volume set) shares the 2 cores: a request is failed when the
# server fails it, and nginx's fastcgi_read_timeout (60 s by default) is the server's limit
SATURATION_TIMEOUT_S = 60


def wrk(url: str, seconds: float, conns: int, timeout_s: float = 10) -> dict[str, float]:
    out = subprocess.run(["wrk", "-t2", f"-c{conns}", f"-d{seconds:g}s", "--timeout",
                          f"{timeout_s:g}s",
                          "--latency", url], capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errs = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if KEEP and errs:
        with open(KEEP / "wrk.log", "a") as log:
            log.write(f"{url} {errs.group(0)}\n")
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}
    kinds = dict(zip(("connect", "read", "write", "timeout"),
                     (int(x) for x in errs.groups()) if errs else (0, 0, 0, 0)))
    return {"rps": rps, "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "socket_errors": sum(kinds.values()), **kinds,
            "failed": (int(non2xx.group(1)) if non2xx else 0) + sum(kinds.values()),
            "p99_ms": float(p99.group(1)) * scale[p99.group(2)] if p99 else 0.0}


@contextlib.contextmanager
def views(url: str, clients: int = 4) -> Iterator[None]:
    """`clients` loops requesting `url` for as long as the block runs: a trace's page views
    whatever its start-up takes (a fixed wrk run may end before the tracer is attached, and
    a trace with no finished request cannot say how much of it goes to the network)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                with urllib.request.urlopen(url, timeout=30) as resp:
                    resp.read()
            except OSError:
                stop.wait(0.1)

    threads = [threading.Thread(target=loop) for _ in range(clients)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join()


def ratio(page: str, rounds: int, seconds: float) -> dict[str, float]:
    """Interleaved rounds: network/local throughput and p99, medians of the rounds."""
    loc, net = [], []
    with load_lock(Env()):
        for _ in range(rounds):
            loc.append(wrk(f"http://127.0.0.1:{LOCAL}{page}", seconds, 4))
            net.append(wrk(f"http://127.0.0.1:{NET}{page}", seconds, 4))
    return {"ratio_rps": statistics.median(n["rps"] / max(lo["rps"], 1e-9)
                                           for n, lo in zip(net, loc)),
            "ratio_p99": statistics.median(n["p99_ms"] / max(lo["p99_ms"], 1e-9)
                                           for n, lo in zip(net, loc)),
            "local_rps": statistics.median(x["rps"] for x in loc)}


def app_trees(host: StockHost, app: str, env: Env) -> tuple[Path, Path]:
    local = host.scratch("local") / app
    if app == "mediawiki":
        lab_apps.copy_mediawiki(env, local)
        mediawiki.install(env, "php8.2", local, host.scratch("data"), LOCAL)
    else:
        host.copy_app(app, local)
    host.gluster_volume()
    net = host.mount_by_hand(host.scratch("net")) / app
    subprocess.run(["cp", "-a", str(local), str(net)], check=True)
    return local, net


def same_app_settings(app: str, local: Path, net: Path) -> None:
    """The app change apply made on the network site's copy (MediaWiki's object cache in
    LocalSettings.php) made on the local copy too, as the demo does on its local lab: the ratio
    after measures the storage, not the app's own cache. The two copies' files are the same
    bytes (the network one is `cp -a` of the local one), so the file is copied."""
    if app == "mediawiki":
        shutil.copy2(net / "LocalSettings.php", local / "LocalSettings.php")


def nginx_site(port: int, root: Path) -> str:
    return (f"server {{\n\tlisten 127.0.0.1:{port};\n\troot {root};\n\tindex index.php doku.php;\n"
            f"\tlocation ~ \\.php$ {{\n\t\tinclude snippets/fastcgi-php.conf;\n"
            f"\t\tfastcgi_pass {SOCK};\n\t}}\n}}\n")


def apache_site(port: int, root: Path) -> str:
    return (f"<VirtualHost 127.0.0.1:{port}>\n\tDocumentRoot {root}\n"
            f"\t<Directory {root}>\n\t\tRequire all granted\n\t</Directory>\n</VirtualHost>\n")


def serve(host: StockHost, server: str, local: Path, net: Path) -> list[str]:
    """The two sites; returns the target flags for statstorm."""
    if server == "nginx":
        host.nginx_site("bench-local", nginx_site(LOCAL, local))
        host.nginx_site("bench-net", nginx_site(NET, net))
        host.fpm_start("init")
        host.nginx_start()
        return ["--pool", "www"]
    host.apache_listen(LOCAL, NET)
    host.apache_site("bench-local", apache_site(LOCAL, local))
    host.apache_site("bench-net", apache_site(NET, net))
    host.apache_start()
    return ["--apache"]


def saturating_conns(server: str) -> int:
    """wrk's connections per site for the saturating load (see the module's docstring): 32
    in front of nginx, which queues them for the www pool's pm.max_children workers; in front
    of Debian's Apache with prefork + mod_php, where each connection holds a child running
    PHP, half of the MaxSpareServers its configuration keeps ready (10: 5 per site)."""
    if server == "nginx":
        return 32
    cfg = apache_conf.read(Path("/etc/apache2/apache2.conf"))
    return max(1, int(apache_conf.directive(cfg, "MaxSpareServers") or 10) // 2)


def missed_storage(check: dict[str, Any], local: Path, net: Path) -> int:
    """Sites whose storage check did not name (0 when both are there with the right kind)."""
    held = {(m["role"], m["path"]): m["kind"] for p in check.get("pools", [])
            for m in p.get("mounts", [])}
    return int(held.get(("docroot", str(local))) != "local") \
        + int(held.get(("docroot", str(net))) != "glusterfs-fuse")


def run_case(case: str, rounds: int, seconds: float) -> dict[str, Any]:
    server_php, app = case.split("-", 1)
    server = "nginx" if server_php == "fpm" else "apache"
    env = Env()
    home = Path(tempfile.mkdtemp(prefix="statstorm-stock-bench-", dir="/var/tmp"))
    page = PAGES[app]
    errors: dict[str, str] = {}  # each statstorm command that failed: its last stderr line
    with stock_host() as host:
        local, net = app_trees(host, app, env)
        target = serve(host, server, local, net)
        conns = saturating_conns(server)
        before = ratio(page, rounds, seconds)
        check = json.loads(statstorm("check", *target, "--json", home=home, case=case,
                                     errors=errors).stdout or "{}")
        trace = home / "bench.trace"
        with views(f"http://127.0.0.1:{NET}{page}"):  # from before the trace to its end
            traced = statstorm("trace", *target, "--duration", "10", "-o", str(trace),
                               home=home, case=case, errors=errors)
        failed: dict[str, float] = {}

        def saturate(port: int, seconds: float = 40, into: dict[str, float] = failed) -> None:
            got = wrk(f"http://127.0.0.1:{port}{page}", seconds, conns, SATURATION_TIMEOUT_S)
            for kind in ("non2xx", "connect", "read", "write", "timeout"):  # wrk's socket
                if got[kind]:  # errors by kind: timeout: no answer within SATURATION_TIMEOUT_S
                    into[f"{port} {kind}"] = got[kind]

        # the same load with nothing changed: what the load alone fails (the control)
        control: dict[str, float] = {}
        loads = [threading.Thread(target=saturate, args=(p, 40, control)) for p in (LOCAL, NET)]
        for t in loads:
            t.start()
        for t in loads:
            t.join()
        loads = [threading.Thread(target=saturate, args=(p,)) for p in (LOCAL, NET)]
        for t in loads:
            t.start()
        applied = statstorm("apply", *target, "--all", "--yes", "--json",
                            *(["--trace", str(trace)] if traced.returncode == 0 else []),
                            "--url", f"http://127.0.0.1:{NET}{page}", home=home, case=case,
                            errors=errors)
        for t in loads:
            t.join()
        same_app_settings(app, local, net)
        if KEEP:
            (KEEP / f"{case}.apply.json").write_text(applied.stdout + applied.stderr)
        after = ratio(page, rounds, seconds)
        # the rollback's reload, by the master apply left (php-fpm: graceful now)
        back: dict[str, float] = {}
        loads = [threading.Thread(target=saturate, args=(p, 20, back)) for p in (LOCAL, NET)]
        for t in loads:
            t.start()
        rolled = statstorm("apply", "--rollback", home=home, case=case, errors=errors)
        for t in loads:
            t.join()
    shutil.rmtree(home, ignore_errors=True)
    return {"case": case, "before": before, "after": after,
            "missed": missed_storage(check, local, net),
            "trace_rc": traced.returncode, "apply_rc": applied.returncode,
            "errors": errors, "conns": conns,
            "failed_requests": sum(failed.values()), "failed_by": failed,
            "control_failed": sum(control.values()), "control_by": control,
            "rollback_rc": rolled.returncode, "rollback_failed": sum(back.values()),
            "rollback_by": back}


def lab_reference(app: str) -> float | None:
    out = Path(tempfile.mkdtemp(prefix="statstorm-stock-bench-demo-", dir="/var/tmp"))
    try:
        proc = subprocess.run([sys.executable, "-m", "statstorm", "demo", "--app", app, "-o",
                               str(out), "--json"], capture_output=True, text=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        print(f"statstorm demo: rc {proc.returncode}: {lines[-1] if lines else 'no stderr'}")
        if KEEP:
            (KEEP / "demo.err").write_text(proc.stderr + proc.stdout)
        return None
    return float(json.loads(proc.stdout)["after"]["ratio_rps"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="fpm-mediawiki,apache-mediawiki,fpm-dokuwiki")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--lab", action="store_true", help="also run the demo for the lab's ratio")
    ap.add_argument("--keep", type=Path, help="write wrk's socket errors and apply's output here")
    a = ap.parse_args()
    global KEEP
    KEEP = a.keep
    if KEEP:
        KEEP.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        sys.exit("bench/stock_hosts.py: run as root (it starts Debian's services)")
    print(f"{'case':18} {'before':>7} {'after':>7} {'p99 before':>10} {'p99 after':>9} "
          f"{'missed':>6} {'apply':>5} {'conns':>5} {'failed':>6} {'control failed':>14} "
          f"{'rollback failed':>15}")
    for case in a.cases.split(","):
        r = run_case(case, a.rounds, a.seconds)
        print(f"{case:18} {r['before']['ratio_rps']:7.3f} {r['after']['ratio_rps']:7.3f} "
              f"{r['before']['ratio_p99']:10.2f} {r['after']['ratio_p99']:9.2f} "
              f"{r['missed']:6d} {r['apply_rc']:5d} {r['conns']:5d} {r['failed_requests']:6.0f} "
              f"{r['control_failed']:14.0f} "
              f"{r['rollback_failed']:15.0f}"
              + "".join(f"  ({cmd} {why})" for cmd, why in r["errors"].items())
              + (f"  {r['failed_by']}" if r["failed_requests"] else "")
              + (f"  control {r['control_by']}" if r["control_failed"] else "")
              + (f"  rollback {r['rollback_by']}" if r["rollback_failed"] else ""), flush=True)
    if a.lab:
        print(f"lab (statstorm demo, mediawiki on glusterfs): after {lab_reference('mediawiki')}")


if __name__ == "__main__":
    main()

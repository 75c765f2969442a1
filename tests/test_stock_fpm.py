"""apply on Debian's own php-fpm, started the three ways Debian starts it (its init script with
`--daemonize`, its systemd unit's `--nodaemonize`, containers' `-F`), behind Debian's nginx
serving DokuWiki; and the logic that follows php-fpm's master across a reload, without root."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from statstorm.adapters.host import procs
from statstorm.adapters.host.procs import free_port
from statstorm.adapters.php import fpm_master, php_targets
from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError

sys.path.insert(0, str(Path(__file__).parent))
from conftest import invoke, run_cli  # noqa: E402
from test_apply_lab import Load  # noqa: E402
from stock_host import (FPM_PIDFILE, StockHost, stock_host, tree_digest,  # noqa: E402
                        wait_for)
from test_stock_apache import vhost  # noqa: E402

pytestmark = pytest.mark.alone  # the lane it runs in (tests/README.md); root per test

ETC = (Path("/etc/php/8.2"), Path("/etc/nginx"))
SOCK = "/run/php/php8.2-fpm.sock"
PORT = free_port(18089)  # labs take ports from 8080 up
OWN_INI = Path("/etc/php/8.2/fpm/conf.d/99-statstorm.ini")
# an admin's OPcache limit below DokuWiki's ~450 PHP files: check's opcache-max-files, a
# setting only the master reads (statstorm's own file in the FPM SAPI's conf.d)
ADMIN_INI = Path("/etc/php/8.2/fpm/conf.d/50-admin.ini")
SITE = """server {{
\tlisten 127.0.0.1:{port};
\troot {root};
\tindex doku.php index.php;

\tlocation ~ \\.php$ {{
\t\tinclude snippets/fastcgi-php.conf;
\t\tfastcgi_pass unix:/run/php/php8.2-fpm.sock;
\t}}
}}
"""


# -- without root: the master-following logic ----------------------------------------------------
TT = """[26-Nov-2026 15:17:59] NOTICE: [global]
[26-Nov-2026 15:17:59] NOTICE: \tpid = /run/php/php8.2-fpm.pid
[26-Nov-2026 15:17:59] NOTICE: \terror_log = /var/log/php8.2-fpm.log
[26-Nov-2026 15:17:59] NOTICE: [www]
[26-Nov-2026 15:17:59] NOTICE: \tlisten = /run/php/php8.2-fpm.sock
"""


def test_pid_file_from_the_global_section() -> None:
    assert fpm_master.pid_file(TT) == Path("/run/php/php8.2-fpm.pid")
    assert fpm_master.pid_file(TT.replace("pid = /run/php/php8.2-fpm.pid", "pid = undefined")
                               ) is None


@pytest.mark.parametrize("text,pid", [("1234\n", 1234), ("  77 ", 77), ("", 0), ("x\n", 0),
                                      ("0\n", 0), ("-5\n", 0)])
def test_pid_file_text(text: str, pid: int) -> None:
    assert fpm_master.parse_pid(text) == pid


def test_configuration_file_among_the_options() -> None:
    conf = "/etc/php/8.2/fpm/php-fpm.conf"
    assert fpm_master.conf_of(["/usr/sbin/php-fpm8.2", "-y", conf]) == conf
    assert fpm_master.conf_of(["php-fpm8.2", "--daemonize", "--fpm-config", conf]) == conf
    assert fpm_master.conf_of(["php-fpm8.2", "-F"]) == ""


def test_service_unit_from_cgroup() -> None:
    assert fpm_master.service_unit("0::/system.slice/php8.2-fpm.service\n") == "php8.2-fpm.service"
    assert fpm_master.service_unit(
        "12:pids:/system.slice/php8.2-fpm.service\n1:name=systemd:/init.scope\n"
    ) == "php8.2-fpm.service"
    assert fpm_master.service_unit("0::/docker/abc\n") == ""


def test_systemctl_only_for_the_units_main_pid_under_systemd() -> None:
    unit = "php8.2-fpm.service"
    assert fpm_master.reload_unit(100, True, unit, 100) == unit
    assert fpm_master.reload_unit(100, True, unit, 200) == ""  # another main PID: signal
    assert fpm_master.reload_unit(100, False, unit, 100) == ""  # no systemd: signal
    assert fpm_master.reload_unit(100, True, "", 100) == ""
    # no systemd: neither /proc nor systemctl is asked
    assert fpm_master.unit_of(Env(), os.getpid(), systemd=lambda: False) == ""


def test_a_pid_file_naming_no_master_is_refused(tmp_path: Path) -> None:
    pidfile = tmp_path / "php-fpm.pid"
    assert fpm_master.master_named(None, "") == 0
    assert fpm_master.master_named(pidfile, "") == 0  # not written: nothing to check
    pidfile.write_text(f"{os.getpid()}\n")  # a PID of another program
    with pytest.raises(UsageError, match=rf"the pid file {pidfile} names PID {os.getpid()}, "
                                         "which is not a php-fpm master.*restart php-fpm"):
        fpm_master.master_named(pidfile, "/etc/php/8.2/fpm/php-fpm.conf")
    proc = subprocess.Popen(["true"])
    proc.wait()
    pidfile.write_text(f"{proc.pid}\n")  # stale: its process is gone
    with pytest.raises(UsageError, match=rf"names PID {proc.pid}, which is not a php-fpm master"):
        fpm_master.master_named(pidfile, "")


def test_a_pool_no_master_serves(state_home: Path) -> None:
    res = invoke(["apply", "--pool", "statstorm-nosuch-pool", "--all"], state_home)
    assert res.returncode == 2
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "no php-fpm pool 'statstorm-nosuch-pool'" in err


# -- as root: Debian's php-fpm -----------------------------------------------------------------
def _serve_dokuwiki(host: StockHost, style: str) -> int:
    ADMIN_INI.write_text("opcache.max_accelerated_files = 200\n")
    app = host.copy_app("dokuwiki", host.scratch("doku") / "dokuwiki")
    (app / "slow.php").write_text(SLOW)
    host.nginx_site("statstorm-doku", SITE.format(port=PORT, root=app))
    master = host.fpm_start(style)
    host.nginx_start()
    assert _page() == 200
    return master


# a request still running when php-fpm reloads: it says when it has started, then sleeps
# (a signal cuts usleep short, php-fpm's SIGQUIT among them: the loop sleeps to the end)
SLOW = ("<?php file_put_contents(sys_get_temp_dir() . '/statstorm-slow.started', '1');\n"
        "$end = microtime(true) + (int) ($_GET['s'] ?? 5);\n"
        "while (microtime(true) < $end) { usleep(50000); }\necho 'slept';\n")
STARTED = Path("/tmp/statstorm-slow.started")


class SlowRequest:
    """/slow.php requested in a thread, started before the caller goes on; `status()` is its
    HTTP status once answered (nginx's 502 when php-fpm ended the worker serving it)."""

    def __init__(self, seconds: int = 5) -> None:
        self.seconds = seconds
        STARTED.unlink(missing_ok=True)
        self.code, self.error = 0, ""
        self.thread = threading.Thread(target=self._get)
        self.thread.start()
        for _ in range(200):  # until PHP runs it (the file it writes), at most 20 s
            if STARTED.exists():
                return
            time.sleep(0.1)
        raise AssertionError("slow.php did not start")

    def _get(self) -> None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/slow.php?s={self.seconds}",
                                        timeout=60) as r:
                self.code = int(r.status) if r.read() == b"slept" else -1
        except urllib.error.HTTPError as exc:
            self.code = exc.code
        except OSError as exc:  # not an HTTP answer at all: said in the assertion
            self.code, self.error = -2, str(exc)

    def status(self) -> int:
        self.thread.join(60)
        STARTED.unlink(missing_ok=True)
        return self.code


class KeepAlive:
    """Clients each keeping one HTTP/1.1 connection to nginx and sending request after request
    on it, as wrk does; every request that fails (an exception, a status but 200) is counted.
    A connection nginx closes while idle (its reload does) fails the request sent on it next."""

    def __init__(self, path: str, clients: int = 4, port: int = PORT) -> None:
        self.path, self.ok, self.failed = path, [0] * clients, []  # type: ignore[var-annotated]
        self.port = port
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._go, args=(i,), daemon=True)
                        for i in range(clients)]

    def _go(self, i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            while not self.stop.is_set():
                try:
                    conn.request("GET", self.path)
                    resp = conn.getresponse()
                    resp.read()
                    if resp.status == 200:
                        self.ok[i] += 1
                    else:
                        self.failed.append(f"HTTP {resp.status}")
                except (OSError, http.client.HTTPException) as exc:
                    self.failed.append(repr(exc))
                    conn.close()  # the next request opens a new connection
                time.sleep(0.01)
        finally:
            conn.close()

    def __enter__(self) -> "KeepAlive":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()


def _reload_with_a_request_running(host: StockHost) -> int:
    """SIGUSR2 to the master while /slow.php runs: that request's HTTP status. Returns once
    the pool serves again."""
    slow = SlowRequest()
    os.kill(host.fpm_master(), signal.SIGUSR2)
    code = slow.status()
    assert code != -2, slow.error
    wait_for("the reloaded pool serves", lambda: _serving_again(host))
    return code


def _serving_again(host: StockHost) -> bool:
    try:
        return (fpm_master.is_master(host.fpm_master())
                and bool(fpm_master.pool_workers("www")) and _page() == 200)
    except OSError:  # between two masters
        return False


def _read_or_empty(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # gone meanwhile
        return b""


def _page() -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/doku.php", timeout=30) as r:
        return int(r.status)


def _ask(*keys: str) -> php_targets.PoolAnswer:
    return php_targets.ask_pool(Env(), SOCK, 1, keys)[0]


def _manifest(backup: str) -> dict[str, object]:
    data = json.loads(Path(backup, "manifest.json").read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.root
@pytest.mark.parametrize("style", ["init", "systemd", "container"])
def test_apply_and_rollback_on_debians_php_fpm(style: str, state_home: Path) -> None:
    home = state_home / f"stock-fpm-{style}"
    home.mkdir()
    with stock_host() as host:
        old = _serve_dokuwiki(host, style)
        before = {t: tree_digest(t) for t in ETC}
        # no --pool: the one pool running is www (unless another test's lab runs one too)
        alone = fpm_master.running_pools() == ["www"]
        # Debian's process_control_timeout = 0: a reload ends the request running
        code = _reload_with_a_request_running(host)
        assert code == 502, f"the request running through the reload: {code}"
        old = host.fpm_master()
        nginx_before = tree_digest(Path("/etc/nginx"))
        nginx_workers = sorted(procs.children(host.nginx_pids[0]))
        # this first reload cannot wait for the requests running (the master's timeout is 0):
        # the pool's socket leads to a second master while the pool drains and reloads, so
        # none is ended, a long one running through the whole apply included; nginx is not
        # reloaded, so no keep-alive connection of its clients is closed
        slow = SlowRequest(12)
        with Load(f"http://127.0.0.1:{PORT}/doku.php") as load, \
                KeepAlive("/doku.php") as kept:
            res = run_cli(["apply", "--all", "--yes", "--json",
                           *([] if alone else ["--pool", "www"])], home)
        assert res.returncode == 0, res.stderr
        assert min(kept.ok) > 0 and not kept.failed, (len(kept.failed), kept.failed[:3])
        assert slow.status() == 200, slow.error
        assert load.ok > 0 and not load.failed, load.failed[:3]
        assert "second php-fpm master" in res.stderr
        assert sorted(procs.children(host.nginx_pids[0])) == nginx_workers  # not reloaded
        assert tree_digest(Path("/etc/nginx")) == nginx_before  # never changed
        assert not [p.name for p in Path("/run/php").iterdir() if "statstorm-handover" in p.name]
        assert os.path.exists(SOCK)
        assert not [p for p in Path("/proc").glob("[0-9]*/cmdline")  # the second master: gone
                    if b"/handover/" in _read_or_empty(p)]
        out = json.loads(res.stdout)
        assert out["mode"] == "applied" and out["target"]["pool"] == "www"
        files = {f["path"]: f["created"] for f in out["files"]}
        assert files == {"/etc/php/8.2/fpm/pool.d/www.conf": False, str(OWN_INI): True,
                         "/etc/php/8.2/fpm/php-fpm.conf": False}
        assert any("the pool's socket is handed to a second php-fpm master" in n
                   for n in out["notes"])
        new = host.fpm_master()
        if style == "init":  # re-executed and daemonized again: another PID, in the pid file
            assert new != old and int(FPM_PIDFILE.read_text()) == new
        else:
            assert new == old
        answer = _ask("realpath_cache_ttl", "opcache.max_accelerated_files")
        assert answer.ini["realpath_cache_ttl"] == "600"
        assert int(answer.ini["opcache.max_accelerated_files"]) > 200
        assert php_targets.pool_of_worker(answer.pid) == "www"
        assert Path(f"/proc/{answer.pid}/stat").read_text().split(") ")[1].split()[1] == str(new)
        assert _page() == 200
        assert _manifest(out["backup"])["status"] == "applied"

        # the master now waits up to 10 s for it (fpm-reload-ends-requests): kept
        code = _reload_with_a_request_running(host)
        assert code == 200, f"the request running through the reload: {code}"
        res = run_cli(["apply", "--rollback"], home)
        assert res.returncode == 0, res.stderr
        assert {t: tree_digest(t) for t in ETC} == before  # byte for byte, created file gone
        assert not OWN_INI.exists()
        assert _manifest(out["backup"])["status"] == "rolled-back"
        answer = _ask("realpath_cache_ttl", "opcache.max_accelerated_files")
        assert answer.ini["realpath_cache_ttl"] == "120"
        assert answer.ini["opcache.max_accelerated_files"] == "200"
        assert _page() == 200


@pytest.mark.root
def test_a_pool_on_tcp_is_handed_over_through_nginx(state_home: Path) -> None:
    """A pool listening on TCP has no path to hand over: nginx's passes lead to the second
    master while the pool drains and reloads, then come back byte for byte."""
    home = state_home / "stock-fpm-tcp"
    home.mkdir()
    address = f"127.0.0.1:{free_port(19100)}"
    with stock_host() as host:
        pool = Path("/etc/php/8.2/fpm/pool.d/www.conf")
        host.write(pool, pool.read_text().replace(f"listen = {SOCK}", f"listen = {address}"))
        app = host.copy_app("dokuwiki", host.scratch("doku") / "dokuwiki")
        (app / "slow.php").write_text(SLOW)
        host.nginx_site("statstorm-doku", SITE.format(port=PORT, root=app)
                        .replace(f"unix:{SOCK}", address))
        host.fpm_start("container")
        host.nginx_start()
        assert _page() == 200
        nginx_before = tree_digest(Path("/etc/nginx"))
        slow = SlowRequest(8)
        with Load(f"http://127.0.0.1:{PORT}/doku.php") as load:
            res = run_cli(["apply", "--all", "--yes", "--pool", "www"], home)
        assert res.returncode == 0, res.stderr
        assert slow.status() == 200, slow.error
        assert load.ok > 0 and not load.failed, load.failed[:3]
        assert res.stderr.count("reloading nginx gracefully") == 2, res.stderr
        assert "its requests go to a second php-fpm master" in res.stderr
        assert tree_digest(Path("/etc/nginx")) == nginx_before  # its passes put back
        assert not [p for p in Path("/proc").glob("[0-9]*/cmdline")
                    if b"/handover/" in _read_or_empty(p)]
        assert _page() == 200


@pytest.mark.root
def test_a_pool_behind_apaches_proxy_fcgi_is_handed_over(state_home: Path) -> None:
    """Apache passes to the pool's socket (Debian's php8.2-fpm conf): its path is handed over
    as behind nginx, and Apache is not restarted."""
    home = state_home / "stock-fpm-apache"
    home.mkdir()
    with stock_host() as host:
        app = host.copy_app("dokuwiki", host.scratch("doku") / "dokuwiki")
        (app / "slow.php").write_text(SLOW)
        host.apache_listen(PORT)
        host.a2("a2dismod", "php8.2", "mpm_prefork", "mpm_worker")
        host.a2("a2enmod", "mpm_event", "proxy_fcgi", "setenvif")
        host.a2("a2enconf", "php8.2-fpm")  # SetHandler "proxy:unix:/run/php/php8.2-fpm.sock|…"
        host.apache_site("statstorm-doku", vhost(PORT, "doku.test", app))
        host.fpm_start("init")
        apache = host.apache_start()
        assert _page() == 200
        apache_before = tree_digest(Path("/etc/apache2"))
        slow = SlowRequest(8)
        with KeepAlive("/doku.php") as kept:
            res = run_cli(["apply", "--all", "--yes", "--json", "--pool", "www"], home)
        assert res.returncode == 0, res.stderr
        assert slow.status() == 200, slow.error
        assert min(kept.ok) > 0 and not kept.failed, (len(kept.failed), kept.failed[:3])
        assert "leads to a second php-fpm master" in res.stderr
        assert "Apache" not in res.stderr  # neither restarted nor changed
        assert tree_digest(Path("/etc/apache2")) == apache_before and procs.alive(apache)
        assert not [p.name for p in Path("/run/php").iterdir() if "statstorm-handover" in p.name]
        assert _ask("realpath_cache_ttl").ini["realpath_cache_ttl"] == "600"
        assert _page() == 200


@pytest.mark.root
@pytest.mark.parametrize("stale", ["gone", "other-program"])
def test_a_stale_pid_file_changes_nothing(stale: str, state_home: Path) -> None:
    home = state_home / f"stock-fpm-stale-{stale}"
    home.mkdir()
    with stock_host() as host:
        master = _serve_dokuwiki(host, "init")
        if stale == "gone":
            proc = subprocess.Popen(["true"])
            proc.wait()
            pid = proc.pid
        else:
            pid = os.getpid()
        before = {t: tree_digest(t) for t in ETC}
        FPM_PIDFILE.write_text(f"{pid}\n")
        try:
            res = run_cli(["apply", "--pool", "www", "--all", "--yes"], home)
        finally:
            FPM_PIDFILE.write_text(f"{master}\n")
        assert res.returncode == 2
        err = res.stderr.strip().splitlines()[-1]
        assert err.startswith(f"statstorm: error: the pid file {FPM_PIDFILE} names PID {pid}, "
                              "which is not a php-fpm master")
        assert "restart php-fpm" in err
        assert {t: tree_digest(t) for t in ETC} == before
        assert not (home / "apply").exists() or not any((home / "apply").iterdir())
        assert host.fpm_master() == master and _page() == 200


@pytest.mark.root
def test_several_pools_ask_for_one(state_home: Path) -> None:
    home = state_home / "stock-fpm-two"
    home.mkdir()
    with stock_host() as host:
        host.write("/etc/php/8.2/fpm/pool.d/second.conf",
                   "[second]\nuser = www-data\ngroup = www-data\n"
                   "listen = /run/php/statstorm-second.sock\npm = static\npm.max_children = 1\n")
        _serve_dokuwiki(host, "container")
        pools = fpm_master.running_pools()  # other tests' labs may run pools too
        assert {"second", "www"} <= set(pools)
        res = run_cli(["apply", "--all"], home)
        assert res.returncode == 2
        assert res.stderr.strip().splitlines()[-1] == (
            "statstorm: error: several PHP targets are running: name one with "
            + ", ".join(f"--pool {p}" for p in pools))
        res = run_cli(["check", "--json"], home)  # no --pool: every pool running
        assert res.returncode == 0, res.stderr
        assert {"second", "www"} <= {p["pool"] for p in json.loads(res.stdout)["pools"]}


@pytest.mark.parametrize("running,expect", [
    (["a", "b"], "several PHP targets are running: name one with --pool a, --pool b"),
    ([], "no PHP is running here"),
])
def test_trace_without_a_target(running: list[str], expect: str, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    from statstorm.adapters.php import target

    monkeypatch.setattr(fpm_master, "running_pools", lambda: running)
    monkeypatch.setattr(target, "system_apache", lambda env: None)
    res = invoke(["trace", "-o", str(tmp_path / "t.sst.gz")], tmp_path)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and expect in lines[0], res.stderr


class _Procs:
    """A deterministic process table for `follow`: each `sleep` is one step of a reload."""

    def __init__(self, steps: list[dict[int, tuple[str, list[int]]]], pidfile: Path,
                 pids: list[int]) -> None:
        self.steps, self.pidfile, self.pids, self.at = steps, pidfile, pids, 0
        pidfile.write_text(f"{pids[0]}\n")

    def now(self) -> dict[int, tuple[str, list[int]]]:
        return self.steps[min(self.at, len(self.steps) - 1)]

    def sleep(self, _: float) -> None:
        self.at += 1
        self.pidfile.write_text(f"{self.pids[min(self.at, len(self.pids) - 1)]}\n")


def _fake(monkeypatch: pytest.MonkeyPatch, table: _Procs) -> None:
    procs = fpm_master.procs
    monkeypatch.setattr(procs, "alive", lambda pid: pid in table.now())
    monkeypatch.setattr(procs, "children", lambda pid: table.now().get(pid, ("", []))[1])
    monkeypatch.setattr(procs, "cmdline", lambda pid: [table.now().get(pid, ("", []))[0]])


CONF = "/etc/php/8.2/fpm/php-fpm.conf"
MASTER = f"php-fpm: master process ({CONF})"
WWW = "php-fpm: pool www"


def test_follow_a_daemonized_master_to_its_new_pid(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[dict[int, tuple[str, list[int]]]] = [
        {100: ("/usr/sbin/php-fpm8.2 --daemonize", [])},  # re-executed, not yet forked
        {100: (MASTER, [200]), 200: (MASTER, [])},  # forked: its child is no worker
        {200: (MASTER, [201]), 201: (MASTER, [])},  # the old PID gone; a worker just forked
        {200: (MASTER, [201, 202]), 201: (WWW, []), 202: (WWW, [])},
        {200: (MASTER, [201, 202]), 201: (WWW, []), 202: (WWW, [])},
    ]
    table = _Procs(steps, tmp_path / "pid", [100, 100, 100, 200])
    _fake(monkeypatch, table)
    assert fpm_master.follow(100, [101, 102], "www", CONF, table.pidfile, 5, table.sleep) == 200


def test_follow_a_master_that_stays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[dict[int, tuple[str, list[int]]]] = [
        {100: (MASTER, [101, 102]), 101: (WWW, []), 102: (WWW, [])},  # old workers finishing
        {100: (MASTER, [103, 104]), 103: (WWW, []), 104: (WWW, [])},
    ]
    table = _Procs(steps, tmp_path / "pid", [100])
    _fake(monkeypatch, table)
    assert fpm_master.follow(100, [101, 102], "www", CONF, table.pidfile, 5, table.sleep) == 100


def test_a_master_not_seen_to_settle_is_an_error(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[dict[int, tuple[str, list[int]]]] = [{300: ("/usr/bin/python3", [])}]
    table = _Procs(steps, tmp_path / "pid", [300])  # the pid file names another program
    _fake(monkeypatch, table)
    with pytest.raises(ComponentError, match="no php-fpm master with new workers of pool www"):
        fpm_master.follow(100, [101], "www", CONF, table.pidfile, 0.3, lambda s: None)

"""`statstorm lab --server apache`: the lab's own Apache for every MPM × handler it runs,
against the real apache2, mod_php, mod_fcgid + php-cgi and php-fpm from Debian."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import interrupt_up, leftovers, run_cli, unique_name

from statstorm.adapters.labs import apache_lab

pytestmark = pytest.mark.beside  # the lane it runs in (tests/README.md); root per test

SAPI = {"fpm": "FPM/FastCGI", "mod_php": "Apache 2.0 Handler", "fcgid": "CGI/FastCGI"}
COMBOS = [("event", "fpm"), ("worker", "fpm"), ("prefork", "fpm"), ("event", "fcgid"),
          ("worker", "fcgid"), ("prefork", "fcgid"), ("prefork", "mod_php")]
# Every MPM and every handler serve in the first three; the other pairings repeat them and
# run with STATSTORM_FULL_LABS=1 (event + fcgid also in test_allow_override_all_reads_htaccess
# and test_apache_check.py, worker + fcgid in test_killed_master_...).
EVERY_ONCE = {("event", "fpm"), ("worker", "fcgid"), ("prefork", "mod_php")}


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def down_clean(state_home: Path, state: dict[str, object]) -> None:
    run_cli(["lab", "down", "--name", str(state["name"])], state_home, check=True)
    assert leftovers(str(state["state_dir"])) == []


# -- the valid combinations, each serving a page through the SAPI it names ----------------

@pytest.mark.root
@pytest.mark.parametrize("mpm,handler", [
    pytest.param(m, h, marks=() if (m, h) in EVERY_ONCE else pytest.mark.full_labs)
    for m, h in COMBOS])
def test_every_mpm_and_handler_serves(lab, state_home: Path, mpm: str, handler: str) -> None:
    state = lab("--server", "apache", "--mpm", mpm, "--handler", handler, "--app", "synthetic",
                "--workers", "2", "--touch", "11", "--php-ini", "realpath_cache_size=16K")
    assert (state["server"], state["mpm"], state["handler"]) == ("apache", mpm, handler)
    assert state["allow_override"] == "None"
    status, body = get(f"{state['url']}/index.php?format=json")
    assert status == 200 and json.loads(body)["classes"] == 11
    # The SAPI serving PHP is the one asked for, and it runs with the lab's override.
    status, info = get(f"{state['url']}{apache_lab.PHPINFO_PATH}")
    assert status == 200
    assert apache_lab.parse_phpinfo(info, ["Server API"]) == {"Server API": SAPI[handler]}
    ini = state["effective_ini"]
    assert isinstance(ini, dict)
    assert ini["realpath_cache_size"] == "16K" and ini["opcache.enable"] == "On"
    assert ini["include_path"].endswith("/code/lib")
    # The MPM is the one asked for.
    log = Path(str(state["state_dir"]), "log/apache-error.log").read_text()
    assert f"[mpm_{mpm}:notice]" in log
    master = int(str(state["apache_pid"]))
    assert f"{state['state_dir']}/conf/apache2.conf" in cmdline(master)
    # The processes running PHP, by handler.
    workers = [int(p) for p in state["worker_pids"]]  # type: ignore[union-attr]
    if handler == "mod_php":
        assert len(workers) == 2
        assert all(Path(f"/proc/{p}/stat").read_text().split()[3] == str(master) for p in workers)
    elif handler == "fcgid":
        assert 1 <= len(workers) <= 2  # mod_fcgid starts them on demand
        assert all("php-cgi" in cmdline(p) for p in workers)
        assert state["pool"] == "" and state["php_cgi_binary"]
    else:
        assert len(workers) == 2 and all(f"pool {state['pool']}" in cmdline(p) for p in workers)
        assert get(f"{state['url']}/statstorm-fpm-ping") == (200, "pong")
    down_clean(state_home, state)


@pytest.mark.root
def test_mediawiki_under_mod_php(lab, state_home: Path) -> None:
    state = lab("--server", "apache", "--handler", "mod_php", "--app", "mediawiki",
                "--workers", "2")
    assert state["mpm"] == "prefork"  # the default that mod_php runs under
    status, body = get(f"{state['url']}/index.php?title=Main_Page")
    assert status == 200 and "MediaWiki has been installed" in body
    status, body = get(f"{state['url']}/api.php?action=query&meta=siteinfo&format=json")
    assert status == 200 and json.loads(body)["query"]["general"]["sitename"] == "LabWiki"
    down_clean(state_home, state)


@pytest.mark.root
def test_allow_override_all_reads_htaccess(lab, state_home: Path) -> None:
    """With AllowOverride All a .htaccess in the docroot takes effect; with the default
    None the same file is never read."""
    on = lab("--server", "apache", "--handler", "fcgid", "--app", "synthetic", "--workers", "1",
             "--allow-override", "All")
    off = lab("--server", "apache", "--handler", "fcgid", "--app", "synthetic", "--workers", "1")
    for state in (on, off):
        Path(str(state["docroot"]), ".htaccess").write_text("Require all denied\n")
    assert get(f"{on['url']}/index.php")[0] == 403
    assert get(f"{off['url']}/index.php")[0] == 200
    assert "AllowOverride All" in Path(str(on["state_dir"]), "conf/apache2.conf").read_text()
    down_clean(state_home, on)
    down_clean(state_home, off)


# -- cleanup: nothing of an Apache lab survives, whatever happened to it --------------------

@pytest.mark.root
def test_killed_master_is_degraded_and_down_ends_the_orphans(lab, state_home: Path) -> None:
    """SIGKILL to Apache's master orphans its children and mod_fcgid's php-cgi processes;
    `status` says degraded and `down` still ends every one of them, by PID."""
    state = lab("--server", "apache", "--mpm", "worker", "--handler", "fcgid",
                "--app", "synthetic", "--workers", "2")
    os.kill(int(str(state["apache_pid"])), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{state['apache_pid']}").exists():
        time.sleep(0.05)  # reaped by init once its parent, the test's CLI, is gone
    status = json.loads(run_cli(["lab", "status", "--name", str(state["name"]), "--json"],
                                state_home, check=True).stdout)
    assert status["phase"] == "degraded"
    down_clean(state_home, state)


@pytest.mark.root
def test_sigterm_while_apache_starts_leaves_nothing(state_home: Path) -> None:
    rc, err, state = interrupt_up(state_home, ["--app", "synthetic", "--server", "apache",
                                               "--handler", "mod_php"], "apache_pid",
                                  signal.SIGTERM)
    assert rc == 130, err
    assert "Traceback" not in err
    assert leftovers(str(state["state_dir"])) == []


@pytest.mark.root
def test_broken_php_after_apache_started_leaves_nothing(state_home: Path) -> None:
    """The page check fails (a missing auto_prepend_file breaks every request) after Apache
    and its php-cgi started; `up` fails with one line and leaves nothing."""
    name = unique_name()
    proc = run_cli(["lab", "up", "--app", "synthetic", "--server", "apache", "--handler", "fcgid",
                    "--name", name, "--php-ini", "auto_prepend_file=/nonexistent/statstorm.php"],
                   state_home)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("statstorm: error:") and "without the expected content" in last
    assert leftovers(str(state_home / "labs" / name)) == []


# -- combinations that do not run: one line naming the fix, before anything starts -------

@pytest.mark.parametrize("flags,expected", [
    (["--server", "apache", "--handler", "mod_php", "--mpm", "event"], "needs --mpm prefork"),
    (["--server", "apache", "--handler", "mod_php", "--mpm", "worker"], "not thread-safe"),
    (["--mpm", "worker"], "--mpm applies to --server apache only"),
    (["--handler", "fcgid"], "--handler applies to --server apache only"),
    (["--allow-override", "All"], "--allow-override applies to --server apache only"),
])
def test_invalid_combination_is_one_line(flags: list[str], expected: str, state_home: Path,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """In-process: refused by validation, before the privilege check and any process."""
    from statstorm.cli import main

    monkeypatch.setenv("STATSTORM_HOME", str(state_home))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    name = unique_name()
    with pytest.raises(SystemExit) as exc:
        main(["lab", "up", "--app", "synthetic", "--name", name, *flags])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]
    assert not (state_home / "labs" / name).exists()


def test_default_mpm_follows_the_handler() -> None:
    assert apache_lab.default_mpm("mod_php") == "prefork"
    assert apache_lab.default_mpm("fpm") == apache_lab.default_mpm("fcgid") == "event"
    assert all(apache_lab.combination_error(m, h) == "" for m, h in COMBOS)


def test_parse_phpinfo_local_values() -> None:
    page = ('<tr><td class="e">Server API </td><td class="v">Apache 2.0 Handler </td></tr>\n'
            '<tr><td class="e">open_basedir</td><td class="v"><i>no value</i></td>'
            '<td class="v"><i>no value</i></td></tr>\n'
            '<tr><td class="e">realpath_cache_size</td><td class="v">16K</td>'
            '<td class="v">4096K</td></tr>\n'
            '<tr><td class="e">include_path</td><td class="v">.:/usr/share/php&amp;x</td>'
            '<td class="v">.:/usr/share/php</td></tr>\n')
    assert apache_lab.parse_phpinfo(page, ["open_basedir", "realpath_cache_size",
                                           "include_path", "Server API", "absent"]) == {
        "Server API": "Apache 2.0 Handler", "open_basedir": "no value",
        "realpath_cache_size": "16K", "include_path": ".:/usr/share/php&x"}

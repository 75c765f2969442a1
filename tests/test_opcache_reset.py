"""`statstorm opcache reset`: the FastCGI request it sends, the worker's JSON read into figures,
the reset's flow on canned answers, the one-line errors; and, as root, a real lab: a page's
scripts cached, the reset empties OPcache for the whole pool, and a changed file is served
with its new content after the reset, not before (the deploy story)."""

from __future__ import annotations

import json
import os
import stat
import struct
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import invoke, run_cli
from statstorm.adapters.php import fastcgi, opcache_reset, php_targets
from statstorm.adapters.php.php_targets import FpmPool
from statstorm.adapters.php.server_php import FcgidPhpCgi, ModPhpChildren
from statstorm.commands import opcache as opcache_cmd
from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.results.opcache_reset import OpcacheFigures, OpcacheReset

POOL = FpmPool("www", [11, 12], [10], "/usr/sbin/php-fpm8.2", ["/usr/sbin/php-fpm8.2"])
LISTEN = {"listen": "/run/php/php8.2-fpm.sock"}


def _status(scripts: int, pending: bool = False) -> dict[str, Any]:
    return {"opcache_enabled": True, "restart_pending": pending,
            "memory_usage": {"used_memory": 9 << 20, "free_memory": 119 << 20,
                             "wasted_memory": 0},
            "opcache_statistics": {"num_cached_scripts": scripts, "num_cached_keys": scripts + 3,
                                   "hits": 40}}


def _answer(pid: int, status: dict[str, Any] | None, reset: bool | None = None,
            **kw: Any) -> tuple[str, bytes]:
    body = {"pid": pid, "reset": reset, "status": status, "restrict_api": "", "error": "", **kw}
    return "Content-Type: application/json", json.dumps(body).encode()


def _params(request: bytes) -> dict[str, str]:
    """The FastCGI parameters in a request as build_request makes it."""
    out: dict[str, str] = {}
    i, body = 0, b""
    while i + 8 <= len(request):
        _, rtype, _, clen, pad = struct.unpack("!BBHHBx", request[i:i + 8])
        if rtype == fastcgi.PARAMS:
            body += request[i + 8:i + 8 + clen]
        i += 8 + clen + pad
    j = 0
    while j < len(body):
        kl, vl = body[j], body[j + 1]  # short names and values only
        out[body[j + 2:j + 2 + kl].decode()] = body[j + 2 + kl:j + 2 + kl + vl].decode()
        j += 2 + kl + vl
    return out


# -- the request and the script ----------------------------------------------------------------
def test_the_reset_request_runs_statstorms_script_with_reset() -> None:
    script = "/run/statstorm-check-abc/query.php"
    req = fastcgi.build_request(fastcgi.script_params(script, opcache_reset.RESET_QUERY))
    assert req[1] == fastcgi.BEGIN_REQUEST
    p = _params(req)
    assert p["SCRIPT_FILENAME"] == script and p["QUERY_STRING"] == "reset=1"
    assert p["REQUEST_METHOD"] == "GET" and p["DOCUMENT_ROOT"] == "/run/statstorm-check-abc"
    assert php_targets.is_query_script(script.encode())  # a trace leaves it out, as check's


def test_the_script_file_is_readable_by_any_pool_user_and_removed() -> None:
    with fastcgi.script_file(opcache_reset.RESET_PHP) as script:
        path = Path(script)
        assert path.read_text() == opcache_reset.RESET_PHP and path.suffix == ".php"
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
        assert path.parent.name.startswith(fastcgi.SCRIPT_DIR_PREFIX)
    assert not path.parent.exists()
    assert "opcache_reset()" in opcache_reset.RESET_PHP


# -- the answer ---------------------------------------------------------------------------------
def test_the_answer_is_read_into_figures() -> None:
    figures, reset, _ = opcache_reset.decode(*_answer(77, _status(125), True))
    assert reset is True
    assert figures == OpcacheFigures(77, True, 125, 128, 9 << 20, 119 << 20, 0, False, 40)
    off, reset, _ = opcache_reset.decode(*_answer(78, None))
    assert reset is None and not off.enabled and off.cached_scripts == 0
    with pytest.raises(fastcgi.AnsweredError, match="No input file"):
        opcache_reset.decode("Status: 404 Not Found", b"No input file specified.\n")


def test_the_result_round_trips_through_json() -> None:
    before = OpcacheFigures(1, True, 125, 128, 9, 119, 0, False, 40)
    after = OpcacheFigures(2, True, 0, 3, 8, 120, 0, False, 0)
    r = OpcacheReset("pool www", "www", "", "/run/x.sock", True, before, after)
    data = json.loads(json.dumps(r.to_json()))
    assert data["schema"] == "statstorm.opcache-reset/1" and data["after"]["cached_scripts"] == 0
    assert OpcacheReset.from_json(data) == r


# -- the flow on canned answers ---------------------------------------------------------------
def _fake_pool(monkeypatch: pytest.MonkeyPatch,
               answers: list[tuple[str, bytes]]) -> list[tuple[str, str, str]]:
    sent: list[tuple[str, str, str]] = []

    def run_script(listen: str, script: str, timeout: float = 10.0,
                   query: str = "") -> tuple[str, bytes]:
        sent.append((listen, script, query))
        return answers.pop(0)

    monkeypatch.setattr(fastcgi, "run_script", run_script)
    monkeypatch.setattr(opcache_reset, "POLL_S", 0.0)
    return sent


def test_reset_then_status_until_the_pending_reset_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = _fake_pool(monkeypatch, [_answer(11, _status(125), True),
                                    _answer(12, _status(125, pending=True)),
                                    _answer(11, _status(0))])
    r = opcache_reset.reset(Env(), POOL, LISTEN)
    assert [q for _, _, q in sent] == ["reset=1", "", ""]
    assert {lst for lst, _, _ in sent} == {LISTEN["listen"]}
    assert r.reset and r.before.cached_scripts == 125 and r.after.cached_scripts == 0
    assert r.pool == "www" and r.target == "pool www" and not r.after.restart_pending


def test_a_reset_still_pending_after_the_wait_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pool(monkeypatch, [_answer(11, _status(125), True)]
               + [_answer(12, _status(125, pending=True))] * 3)
    r = opcache_reset.reset(Env(), POOL, LISTEN, wait=0.0)
    assert r.after.restart_pending


def test_a_pool_that_refuses_the_script_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pool(monkeypatch, [("Status: 404 Not Found", b"No input file specified.")])
    with pytest.raises(ComponentError) as exc:
        opcache_reset.reset(Env(), POOL, LISTEN)
    msg = str(exc.value)
    assert "\n" not in msg and "open_basedir" in msg and "reload php-fpm" in msg


def test_restrict_api_and_opcache_off_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_pool(monkeypatch, [_answer(11, _status(5), False, restrict_api="/srv/admin",
                                     error="Zend OPcache API is restricted")])
    with pytest.raises(ComponentError, match="restrict_api = /srv/admin.*reload php-fpm"):
        opcache_reset.reset(Env(), POOL, LISTEN)
    _fake_pool(monkeypatch, [_answer(11, None, False)])
    with pytest.raises(UsageError, match="OPcache is off"):
        opcache_reset.reset(Env(), POOL, LISTEN)


def test_targets_without_a_pool_socket_say_what_to_do() -> None:
    chroot = opcache_reset.refusal(POOL, {**LISTEN, "chroot": "/srv/jail"})
    assert "chroot" in chroot and "/srv/jail" in chroot and "reload" in chroot
    assert "listen address is unknown" in opcache_reset.refusal(POOL, {})
    assert opcache_reset.refusal(POOL, LISTEN) == ""
    mod_php = ModPhpChildren("apache", [21], [20], "/usr/lib/apache2/modules/libphp8.2.so",
                             mpm="prefork", ctl=("apache2ctl",))
    assert "`apache2ctl graceful`" in opcache_reset.refusal(mod_php, {})
    fcgid = FcgidPhpCgi("fcgid (lab t)", [31], [30], "/usr/bin/php-cgi8.2", lab="t", mpm="event")
    assert "own OPcache" in (why := opcache_reset.refusal(fcgid, {})) and "kill -USR1 30" in why
    with pytest.raises(UsageError, match="apache2ctl graceful"):
        opcache_reset.reset(Env(), mod_php, {})


# -- the CLI -----------------------------------------------------------------------------------
def test_cli_one_line_errors(tmp_path: Path) -> None:
    proc = invoke(["opcache", "reset", "--pool", "statstorm-no-such-pool"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "no php-fpm pool 'statstorm-no-such-pool' is running" in proc.stderr
    proc = invoke(["opcache", "reset", "--pool", "www", "--lab", "demo", "--json"], tmp_path)
    assert proc.returncode == 2 and "not both" in proc.stderr
    assert json.loads(proc.stdout) == {"error": "give --pool NAME or --lab NAME, not both",
                                       "exit": 2}
    proc = invoke(["opcache", "reset", "--lab", "nolab"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


def test_cli_prints_the_figures_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = OpcacheReset("pool www", "www", "", "/run/php/php8.2-fpm.sock", True,
                     OpcacheFigures(11, True, 125, 128, 9 << 20, 119 << 20, 0, False, 40),
                     OpcacheFigures(12, True, 0, 3, 8 << 20, 120 << 20, 0, False, 0))
    got: list[opcache_cmd.ResetOptions] = []

    def run(env: Env, opts: opcache_cmd.ResetOptions) -> OpcacheReset:
        got.append(opts)
        return r

    monkeypatch.setattr(opcache_cmd, "run", run)
    text = invoke(["opcache", "reset", "--pool", "www"], tmp_path, check=True).stdout
    assert "OPcache of pool www reset" in text and "125 cached scripts" in text
    assert "after : 0 cached scripts" in text
    out = invoke(["opcache", "reset", "--lab", "--json"], tmp_path, check=True).stdout
    assert OpcacheReset.from_json(json.loads(out)) == r
    assert got == [opcache_cmd.ResetOptions(pool="www"), opcache_cmd.ResetOptions(lab="lab")]


# -- a real lab (root) -------------------------------------------------------------------------
def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as res:
        return str(res.read().decode())


@pytest.mark.root
def test_reset_on_a_lab_serves_the_deploy(lab: Callable[..., dict[str, object]],
                                          state_home: Path) -> None:
    workers = 2
    state = lab("--app", "synthetic", "--workers", str(workers),
                "--php-ini", "opcache.validate_timestamps=0")
    name, docroot, url = str(state["name"]), str(state["docroot"]), str(state["url"])
    old = time.time() - 120  # the lab's scripts are seconds old: file_update_protection (2 s)
    for script in Path(docroot).rglob("*.php"):  # would keep them out of the cache
        os.utime(script, (old, old))
    _get(url + str(state.get("entry_path") or "/index.php"))  # the app's scripts cached
    page = Path(docroot, "statstorm-deploy.php")
    page.write_text("<?php echo 'release-1';\n")
    os.utime(page, (time.time() - 60, time.time() - 60))  # past file_update_protection
    os.chmod(page, 0o644)
    for _ in range(2 * workers):  # every worker has seen release 1
        assert _get(url + "/statstorm-deploy.php") == "release-1"
    page.write_text("<?php echo 'release-2';\n")  # the deploy
    os.utime(page, (time.time() - 30, time.time() - 30))
    for _ in range(2 * workers):  # validate_timestamps = 0: the old code is still served
        assert _get(url + "/statstorm-deploy.php") == "release-1"
    proc = run_cli(["opcache", "reset", "--lab", name, "--json"], state_home, check=True)
    r = OpcacheReset.from_json(json.loads(proc.stdout))
    assert r.reset and r.lab == name and r.before.cached_scripts >= 2
    assert r.after.cached_scripts <= 1 and not r.after.restart_pending
    for _ in range(2 * workers):  # every worker: one reset emptied the pool's shared OPcache
        assert _get(url + "/statstorm-deploy.php") == "release-2"

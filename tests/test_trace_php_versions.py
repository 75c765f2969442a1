"""`statstorm trace --lab` on labs of PHP 8.4 and 7.4 (php-fpm chrooted in its Debian root):
the compiled tracer probes the root's own binary with the layout of that version's headers
(unpacked in the root), and strace, tracing the same requests at the same time, sees the same
calls request by request, for the synthetic app and for MediaWiki; a PHP whose layout is not known is counted, not attributed, with
one line saying why."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest

from statstorm.adapters.host import elf
from statstorm.adapters.labs import debootstrap, php_roots
from statstorm.adapters.tracing import count_stream, php_layouts, trace_targets
from statstorm.adapters.tracing.count_lines import Counted, ScriptStart
from statstorm.env import Env
from statstorm.errors import DependencyError
from statstorm.results.php_root import release
from statstorm.results.trace import read_trace
from test_trace_lab import TraceProc, get, send, start_trace, wait_attached

pytestmark = [pytest.mark.root, pytest.mark.slow]

# The synthetic labs (one per version) are shared by the file's tests (conftest.shared_lab;
# 7.4's by the run, conftest.session_lab: test_php_root_check.py checks it): tracing changes
# nothing in them; the layout cache one test fakes is removed after it.
# Shared by every test session, as in tests/test_php_root_lab.py: built once, reused after.
ROOTS = Path("/var/tmp/statstorm-php-roots")
KEYS = ("lstat", "stat", "fstat", "access", "open", "readlink", "getcwd", "total", "failed")


@pytest.fixture
def roots(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    ROOTS.mkdir(mode=0o755, exist_ok=True)
    monkeypatch.setenv("STATSTORM_PHP_ROOTS", str(ROOTS))
    yield ROOTS


def need_root(version: str) -> None:
    """Skipped only when the root is not built and the Debian mirror cannot be reached."""
    if php_roots.load(ROOTS / version) is None:
        try:
            debootstrap.check_mirror(debootstrap.mirror(), release(version))
        except DependencyError as exc:
            pytest.skip(f"PHP {version}'s root is not built and {exc}")


def finish(proc: TraceProc) -> dict[str, Any]:
    """The trace's summary, with its warnings (stderr's `warning:` lines, as one line each
    whatever the width they were wrapped to)."""
    out, _ = proc.communicate(timeout=300)
    err = proc.err_text()
    assert proc.returncode == 0, err
    warnings = " ".join(err.split()).replace(" warning: ", "\nwarning: ").split("\n")
    return {**json.loads(out), "warnings": [w.removeprefix("warning: ") for w in warnings
                                            if w.startswith("warning: ")]}


def calls_by_request(path: Path) -> dict[int, list[list[tuple[str, str, int]]]]:
    """Each worker's complete requests in order, each its metadata calls in order (call,
    path, result)."""
    tr = read_trace(path)
    done = {r.id: r for r in tr.requests.values() if r.end_ns >= 0}
    calls: dict[int, list[tuple[str, str, int]]] = {rid: [] for rid in done}
    for s in sorted(tr.syscalls, key=lambda s: s.ts_ns):
        if s.req in calls:
            calls[s.req].append((s.syscall, s.path, s.ret))
    by_pid: dict[int, list[list[tuple[str, str, int]]]] = {}
    for r in sorted(done.values(), key=lambda r: r.start_ns):
        by_pid.setdefault(r.pid, []).append(calls[r.id])
    return by_pid


def ops_of(path: Path) -> Counter[tuple[str, str]]:
    tr = read_trace(path)
    return Counter((o.kind, str(o.args.get("name", o.args.get("path", ""))))
                   for o in tr.operations.values() if o.req >= 0)


def trace_with_strace(state_home: Path, tmp_path: Path, st: dict[str, Any],
                      n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The compiled tracer and strace on the same lab at once, `n` requests sent once both
    are attached: their summaries (the traces in tmp_path, ebpf.sst.gz and strace.sst.gz)."""
    url = str(st["url"]) + str(st.get("entry_path") or "/")
    for _ in range(4):  # OPcache and the realpath cache warm
        assert get(url) == 200
    runs = {b: start_trace(state_home, ["--lab", str(st["name"]), "--backend", b, "-d", "120",
                                        "-o", str(tmp_path / f"{b}.sst.gz"), "--json"])
            for b in ("ebpf", "strace")}
    for p in runs.values():
        wait_attached(p)
    time.sleep(2)
    send(url, n).join()
    time.sleep(1)
    for p in runs.values():
        p.send_signal(signal.SIGINT)
    return finish(runs["ebpf"]), finish(runs["strace"])


@pytest.mark.parametrize("version, source", [("8.4", "table"), ("7.4", "headers")])
def test_trace_equals_strace_on_php_version(version: str, source: str, roots: Path,
                                             shared_lab, session_lab, state_home: Path,
                                             tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """On a `--php VERSION` lab the compiled tracer probes the root's php-fpm (8.4 in Debian
    13 has no USDT probe: its request start is php_request_startup's) with that version's
    layout: the same calls as strace, request by request and call by call, and the same PHP
    operations as on the host's 8.2 (the synthetic app's includes, from PHP's table). 8.4's
    layout is the tracer's table's; 7.4's, with a table that lacks it, its root's headers'."""
    need_root(version)
    if source == "headers":
        empty = tmp_path / "no-layouts.json"
        empty.write_text('{"layouts": []}')
        monkeypatch.setenv(php_layouts.TABLE_ENV, str(empty))
    # 7.4's is the run's (test_php_root_check.py checks it), 8.4's this file's
    st = (session_lab if version == "7.4" else shared_lab)("--app", "synthetic", "--workers",
                                                           "2", "--php", version)
    binary = str(st["fpm_binary"])
    assert php_roots.root_of(binary) is not None
    layout = php_layouts.for_binaries(Env(state_root=state_home), [binary])
    assert layout.attributes and layout.version == version and layout.source == source, layout
    full, ref = trace_with_strace(state_home, tmp_path, st, 12)
    assert full["source"] == "ebpf" and ref["source"] == "strace"
    assert full["requests"] == ref["requests"] == 12
    assert full["trace"]["dropped"] == 0
    assert not [w for w in full["warnings"] if "not attributed" in w]
    assert {k: full["totals"][k] for k in KEYS} == {k: ref["totals"][k] for k in KEYS}
    # Call by call: each worker's requests, in order, hold the same calls with the same
    # paths and results.
    ebpf, strace = (calls_by_request(tmp_path / f) for f in ("ebpf.sst.gz", "strace.sst.gz"))
    assert ebpf == strace
    assert sum(len(c) for reqs in ebpf.values() for c in reqs) >= full["totals"]["total"]
    # Attributed as on 8.2: every request's includes (each of the app's files, read from
    # PHP's included-files table), its file probes and its script.
    ops = ops_of(tmp_path / "ebpf.sst.gz")
    code = str(st["code_path"])
    includes = {name: n for (kind, name), n in ops.items() if kind == "include"}
    assert sum(includes.values()) >= 12 * 20 and all(n == 12 for n in includes.values())
    assert all(name.startswith(code + "/") and name.endswith(".php") for name in includes)
    assert ops[("main_script", f"{st['docroot']}/index.php")] >= 12
    assert sum(n for (kind, _), n in ops.items() if kind == "file_probe") >= 12
    tr = read_trace(tmp_path / "ebpf.sst.gz")
    assert {r.script for r in tr.requests.values()} == {f"{st['docroot']}/index.php"}
    assert tr.header["php_layout"] == {"version": version, "attributed": True, "note": "",
                                       "source": source}


@pytest.mark.parametrize("version", ["8.4", "7.4"])
def test_mediawiki_trace_equals_strace_on_php_version(version: str, roots: Path, lab,
                                                       state_home: Path, tmp_path: Path) -> None:
    """A typical complete MediaWiki request (Main_Page, its SQLite database and caches on
    local disk) on a `--php VERSION` lab: the compiled tracer and strace, tracing the same
    page views at once, see the same calls, request by request and call by call; the
    tracer attributes MediaWiki's includes to PHP operations with that version's layout."""
    need_root(version)
    st = lab("--app", "mediawiki", "--workers", "2", "--php", version)
    assert st["php_version"] == version
    full, ref = trace_with_strace(state_home, tmp_path, st, 8)
    assert full["source"] == "ebpf" and ref["source"] == "strace"
    assert full["requests"] == ref["requests"] == 8
    assert full["trace"]["dropped"] == 0
    assert not [w for w in full["warnings"] if "not attributed" in w]
    assert {k: full["totals"][k] for k in KEYS} == {k: ref["totals"][k] for k in KEYS}
    assert full["totals"]["total"] > 8 * 20  # a real page view, not an error page
    ebpf, strace = (calls_by_request(tmp_path / f) for f in ("ebpf.sst.gz", "strace.sst.gz"))
    assert ebpf == strace
    ops = ops_of(tmp_path / "ebpf.sst.gz")
    code = str(st["code_path"])
    includes = [name for (kind, name) in ops if kind == "include"]
    assert len(includes) > 50 and all(n.startswith(code + "/") for n in includes)
    tr = read_trace(tmp_path / "ebpf.sst.gz")
    assert {r.script for r in tr.requests.values()} == {f"{st['docroot']}/index.php"}
    assert tr.header["php_layout"] == {"version": version, "attributed": True, "note": "",
                                       "source": "table"}


def test_unknown_php_build_is_counted_not_attributed(roots: Path, shared_lab,
                                                     state_home: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A PHP whose layout the tracer cannot know (here: a table without 8.4, and the 8.4
    root's headers giving none, as a layout cached without fields says) still gets its
    requests and their calls, strace's to the call, no PHP operation, and one line saying
    what is not attributed and why."""
    need_root("8.4")
    empty = tmp_path / "no-layouts.json"
    empty.write_text('{"layouts": []}')
    monkeypatch.setenv(php_layouts.TABLE_ENV, str(empty))
    st = shared_lab("--app", "synthetic", "--workers", "2", "--php", "8.4")
    binary = str(st["fpm_binary"])
    root = php_roots.root_of(binary)
    assert root is not None and php_roots.headers(root) is not None
    cache = php_layouts.cache_path(state_home, binary)
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("/* no layout */\n")
    try:
        full, ref = trace_with_strace(state_home, tmp_path, st, 8)
    finally:
        cache.unlink()  # the state root's next trace computes the real layout
    assert full["requests"] == ref["requests"] == 8
    assert {k: full["totals"][k] for k in KEYS} == {k: ref["totals"][k] for k in KEYS}
    assert full["per_request"] == ref["per_request"]
    tr = read_trace(tmp_path / "ebpf.sst.gz")
    assert not tr.operations  # never a wrong operation
    assert tr.header["php_layout"]["attributed"] is False
    assert tr.header["php_layout"]["source"] == "none"
    notes = [w for w in full["warnings"] if "not attributed to PHP operations" in w]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert binary in notes[0] and "give no layout" in notes[0]
    assert elf.build_id(binary) in cache.name


def test_a_root_built_before_gets_its_headers_on_next_use(roots: Path, state_home: Path
                                                          ) -> None:
    """A root without PHP's headers (made before they were part of a root) gets them the
    next time it is used, reused as it is: phpV-dev downloaded by the root's apt, unpacked
    into usr/include/php/<API>, not installed; once there, nothing is fetched again."""
    need_root("7.4")
    env = Env(state_root=state_home)
    root = ROOTS / "7.4"
    php_roots.build(env, "7.4")
    headers = php_roots.headers(root)
    assert headers is not None and (headers / "main/php.h").is_file()
    aside = root / "var/tmp" / f"statstorm-test-headers-{state_home.name}"
    headers.rename(aside)
    try:
        try:
            debootstrap.check_mirror(debootstrap.mirror(), release("7.4"))
        except DependencyError as exc:
            pytest.skip(f"the headers cannot be fetched again: {exc}")
        got, reused = php_roots.build(env, "7.4")
        assert reused and got.php_version.startswith("7.4.")
        assert php_roots.headers(root) == headers and (headers / "main/php.h").is_file()
        status = subprocess.run(["chroot", str(root), "dpkg-query", "-W", "-f", "${Status}",
                                 "php7.4-dev"], capture_output=True, text=True, check=False)
        assert "installed" not in status.stdout.replace("not-installed", "")
        assert php_roots.unpack_headers(env, release("7.4"), root) == headers  # no fetch
    finally:
        if php_roots.headers(root) is None:
            aside.rename(headers)
        else:
            shutil.rmtree(aside, ignore_errors=True)


def test_counting_stream_names_php_84_scripts(roots: Path, shared_lab, state_home: Path
                                              ) -> None:
    """The exporter's counting tracer on a PHP 8.4 lab (no USDT probe): given the state
    root, it reads each request's script from the SAPI's globals with 8.4's layout, so every
    counted request names its script (the exporter tells its own queries apart by it)."""
    need_root("8.4")
    st = shared_lab("--app", "synthetic", "--workers", "2", "--php", "8.4")
    url = str(st["url"]) + str(st.get("entry_path") or "/")
    target = trace_targets.resolve(Env(state_root=state_home), lab=str(st["name"]))
    seen: list[object] = []
    stream = count_stream.new_stream("ebpf", [target], seen.append,
                                     env=Env(state_root=state_home))
    assert isinstance(stream, count_stream.CompiledCountStream)
    assert stream.layout[:1] == ("--layout",)
    stream.start()
    try:
        sender = send(url, 6)
        deadline = time.monotonic() + 30
        while sender.is_alive() and time.monotonic() < deadline:
            stream.pump(0.2)
        time.sleep(0.5)
        stream.pump(0.2)
    finally:
        stream.stop()
    scripts = [e.script for e in seen if isinstance(e, ScriptStart)]
    assert scripts == [f"{st['docroot']}/index.php".encode()] * 6
    assert sum(1 for e in seen if isinstance(e, Counted) and e.start_ns) == 6

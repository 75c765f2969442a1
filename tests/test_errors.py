"""Missing components and bad input give one-line errors that name the fix (no root needed)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from statstorm.adapters.labs import phpfpm
from statstorm.adapters.servers import nginx
from statstorm.adapters.storage import gluster
from statstorm.errors import DependencyError, UsageError
from statstorm.results.common import read_json, write_json_atomic


def test_missing_packages_name_the_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nginx, "BINARY", "/nonexistent/nginx")
    with pytest.raises(DependencyError, match="setup.sh"):
        nginx.require_installed()
    monkeypatch.setattr(gluster, "GLUSTERD", "/nonexistent/glusterd")
    with pytest.raises(DependencyError, match="glusterfs-server"):
        gluster.require_installed()
    monkeypatch.setattr(phpfpm.glob, "glob", lambda pattern: [])
    with pytest.raises(DependencyError, match="php-fpm"):
        phpfpm.find_binary()


def test_ini_overrides_are_checked() -> None:
    assert phpfpm.parse_ini_overrides(["realpath_cache_size = 16K", "opcache.enable=0"]) == {
        "realpath_cache_size": "16K", "opcache.enable": "0"}
    for bad in ["novalue", "=1", "bad key=1", "x=a\nb"]:
        with pytest.raises(UsageError):
            phpfpm.parse_ini_overrides([bad])


def test_state_files_are_written_whole(tmp_path: Path) -> None:
    target = tmp_path / "s.json"
    write_json_atomic(target, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"a": object()})
    assert read_json(target, "state") == {"a": 1}  # the old file survived the failed write
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]  # no temp file left
    target.write_bytes(b"\xff{not json")
    with pytest.raises(UsageError, match="not a valid state file"):
        read_json(target, "state")


def test_unknown_lab_and_bad_name_exit_2(tmp_path: Path) -> None:
    from conftest import invoke
    for args, needle in ([["lab", "status", "--name", "nope"], "no lab named"],
                         [["lab", "down", "--name", "../etc"], "--name"]):
        proc = invoke(args, tmp_path)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0]


@pytest.mark.parametrize("args", [["trace", "show", "/nonexistent.sst.gz", "--json"],
                                  ["check", "--no-such-flag", "--json"],
                                  ["exporter", "--listen", "nowhere", "--json"]])
def test_json_errors_are_a_json_object_on_stdout(tmp_path: Path, args: list[str]) -> None:
    """A tool scripting statstorm with --json reads a result even when the verb fails."""
    import json

    from conftest import invoke
    proc = invoke(args, tmp_path)
    assert proc.returncode == 2
    out = json.loads(proc.stdout)
    assert out["exit"] == 2 and out["error"] and "\n" not in out["error"]
    assert proc.stderr.strip()  # the one-line message is still on stderr


# -- issue #20: a startup line out of a terminal; whatif on an old trace; unreadable inputs ------
FIX = Path(__file__).parent / "fixtures"
OLD_TRACE = FIX / "report" / "demo" / "before.sst.gz"  # written before traces were sealed


def test_a_verb_says_what_it_does_on_stderr_out_of_a_terminal(tmp_path: Path) -> None:
    """stderr captured (not a tty), as in cron or CI: one plain startup line naming the verb,
    its input and its output; --json keeps stdout to the JSON alone."""
    import json

    from conftest import invoke
    src, out = FIX / "strace" / "real-cli-f.log", tmp_path / "t.sst.gz"
    p = invoke(["trace", "import", str(src), "-o", str(out), "--json"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [f"statstorm trace import: {src} → {out}"]
    assert json.loads(p.stdout)["file"] == str(out)
    p = invoke(["trace", "import", str(src), "-o", str(out)], tmp_path)
    assert p.stderr.splitlines() == [f"statstorm trace import: {src} → {out}"]
    assert "\x1b" not in p.stderr + p.stdout  # no colour out of a terminal
    # a usage error found before the work starts stays the only line
    for args in (["trace", "import", str(tmp_path / "none.log")],
                 ["trace", "import", str(src), "-o", str(tmp_path / "no" / "t.sst")],
                 ["trace", "import", str(tmp_path)],
                 ["trace", "--cmd", "php -v", "-d", "0"],
                 ["lab", "down", "--name", "../etc"]):
        p = invoke(args, tmp_path)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
        assert "statstorm: error:" in p.stderr


@pytest.mark.root
def test_trace_says_what_it_traces_once_attached(tmp_path: Path) -> None:
    import shutil

    from conftest import run_cli
    if not shutil.which("php"):
        pytest.skip("php is not installed")
    out = tmp_path / "cmd.sst"
    p = run_cli(["trace", "--cmd", "php -r 'file_exists(\"/nonexistent\");'", "-o", str(out),
                 "--json"], tmp_path)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("statstorm trace:")]
    assert lines == [f"statstorm trace: command php -r 'file_exists(\"/nonexistent\");', until it "
                     f"exits, full events → {out}. Ctrl-C to stop."], p.stderr
    assert p.stderr.splitlines()[0] == lines[0]  # before anything else it says


def test_whatif_notes_a_trace_written_before_traces_were_sealed(tmp_path: Path) -> None:
    import json
    import shutil

    from conftest import invoke
    from statstorm.cli.whatif import UNSEALED
    from statstorm.results.trace import read_trace, write_trace
    old = tmp_path / "old.sst.gz"
    shutil.copy(OLD_TRACE, old)
    p = invoke(["whatif", str(old), "--set", "realpath_cache_size=16K", "--json"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert UNSEALED in json.loads(p.stdout)["notes"]
    p = invoke(["whatif", str(old), "--set", "realpath_cache_size=16K"], tmp_path)  # cached
    assert p.returncode == 0 and f"note: {UNSEALED}" in p.stdout, p.stderr
    shown = invoke(["trace", "show", str(old), "--json"], tmp_path).stdout
    assert UNSEALED in json.loads(shown)["notes"]  # the words trace show uses
    sealed = tmp_path / "sealed.sst.gz"
    write_trace(sealed, read_trace(old))
    p = invoke(["whatif", str(sealed), "--json"], tmp_path)
    assert p.returncode == 0 and UNSEALED not in json.loads(p.stdout).get("notes", []), p.stderr


def test_file_arguments_fail_in_one_line(tmp_path: Path) -> None:
    """A missing input or a directory where a file is meant: one line, exit 2, not click's
    usage block; a JSON error object under --json."""
    import json

    from conftest import invoke
    for args, needle in ((["matrix", "import", str(tmp_path / "none.txt")], "no such file"),
                         (["check", "--trace", str(tmp_path)], "is a directory"),
                         (["trace", "--cmd", "php -v", "-o", str(tmp_path)], "is a directory"),
                         (["fsbench", str(tmp_path), "-o", str(tmp_path)], "is a directory")):
        p = invoke([*args, "--json"] if args[0] == "check" else args, tmp_path)
        assert p.returncode == 2, (args, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and str(tmp_path) in lines[0], p.stderr
        if args[0] == "check":
            assert json.loads(p.stdout) == {"error": lines[0].split("error: ", 1)[1], "exit": 2}


@pytest.mark.root
def test_an_unreadable_input_as_another_user_is_one_line(state_home: Path) -> None:
    """A root-only 0600 file read as nobody: one line that names the fix, exit 2, for every
    verb that reads a file (click's own check gave its multi-line usage block)."""
    import json
    import os
    import pwd
    import shutil

    d = state_home / "unreadable"
    d.mkdir(mode=0o755, exist_ok=True)
    path = d / "t.sst.gz"
    shutil.copy(OLD_TRACE, path)
    path.chmod(0o600)
    gid = pwd.getpwnam("nobody").pw_gid
    for args in (["trace", "show", str(path)], ["whatif", str(path)],
                 ["trace", "diff", str(path), str(path)], ["trace", "import", str(path)],
                 ["check", "--trace", str(path)], ["apply", "--all", "--trace", str(path)],
                 ["matrix", "import", str(path)], ["report", str(path)],
                 ["trace", "show", str(path), "--json"]):
        p = subprocess.run(["setpriv", "--reuid=nobody", f"--regid={gid}", "--clear-groups",
                            sys.executable, "-m", "statstorm", *args], capture_output=True,
                           text=True, env=dict(os.environ, STATSTORM_HOME=str(state_home)))
        assert p.returncode == 2, (args, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0], (args, p.stderr)
        assert "permission denied" in lines[0] and "chmod o+r" in lines[0]
        if "--json" in args:
            assert json.loads(p.stdout)["exit"] == 2


def test_json_inputs_are_bounded_and_fifos_refused(tmp_path: Path) -> None:
    """A JSON input (a result for report, a latency profile, a lab state) larger than
    statstorm reads, or a FIFO, is one line naming the fix, read no further."""
    import os
    import re

    from conftest import invoke
    from statstorm.results import common
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:  # sparse: no disk used
        fh.truncate(common.MAX_JSON_BYTES + 1)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    trace = tmp_path / "before.sst.gz"  # a copy: whatif writes its input cache beside it
    shutil.copy(OLD_TRACE, trace)
    for bad, needle in ((big, "more than the"), (fifo, "not a regular file|nor a file")):
        for args in (["report", str(bad), "-o", str(tmp_path / "r.html")],
                     ["whatif", str(trace), "--profile", str(bad)]):
            p = invoke(args, tmp_path)
            assert p.returncode == 2, (args, p.stderr)
            lines = p.stderr.strip().splitlines()
            assert len(lines) == 1 and re.search(needle, lines[0]), (args, p.stderr)
        with pytest.raises(UsageError, match=needle):
            read_json(bad, "lab state")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UsageError, match="not a valid lab state file"):
        read_json(deep, "lab state")


def test_a_process_gone_mid_read_is_gone_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading /proc of a process that is exiting fails with ESRCH, not ENOENT (found by
    fault injection: a lab stopped while its volume was being made died in its clean-up)."""
    from statstorm.adapters.host import procs

    def gone(self: Path, *a: object) -> bytes:
        raise ProcessLookupError(3, "No such process")
    monkeypatch.setattr(Path, "read_bytes", gone)
    monkeypatch.setattr(Path, "read_text", gone)
    assert procs.cmdline(1) == [] and procs.children(1) == [] and not procs.alive(1)
    assert procs.find_pids(["anything"]) == []

"""Missing components and bad input give one-line errors that name the fix (no root needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from statstorm.adapters import gluster, nginx, phpfpm
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
    env = {"STATSTORM_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for args, needle in ([["lab", "status", "--name", "nope"], "no lab named"],
                         [["lab", "down", "--name", "../etc"], "--name"]):
        proc = subprocess.run([sys.executable, "-m", "statstorm", *args], capture_output=True,
                              text=True, env=env)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0]


@pytest.mark.parametrize("args", [["trace", "show", "/nonexistent.sst.gz", "--json"],
                                  ["check", "--no-such-flag", "--json"],
                                  ["exporter", "--listen", "nowhere", "--json"]])
def test_json_errors_are_a_json_object_on_stdout(tmp_path: Path, args: list[str]) -> None:
    """A tool scripting statstorm with --json reads a result even when the verb fails."""
    import json
    import os
    proc = subprocess.run([sys.executable, "-m", "statstorm", *args], capture_output=True,
                          text=True, env=dict(os.environ, STATSTORM_HOME=str(tmp_path)))
    assert proc.returncode == 2
    out = json.loads(proc.stdout)
    assert out["exit"] == 2 and out["error"] and "\n" not in out["error"]
    assert proc.stderr.strip()  # the one-line message is still on stderr

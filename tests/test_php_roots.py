"""PHP versions and PHP roots without building one: version parsing, the root's layout and
marker (finished, half-built), the mirror read from apt's sources, the chroot a root's
php-fpm runs under, and the CLI's one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import invoke
from statstorm.adapters.labs import debootstrap, php_roots, phpfpm
from statstorm.env import Env
from statstorm.errors import DependencyError, UsageError
from statstorm.results.lab import LabState
from statstorm.results.php_root import (HOST_VERSION, MARKER, PhpRoot, other_releases,
                                        release)


@pytest.mark.parametrize("given, version, debian", [
    ("8.4", "8.4", "trixie"), ("7.4", "7.4", "bullseye"), ("8.2", "8.2", ""),
    ("8.4.11", "8.4", "trixie"), ("php7.4", "7.4", "bullseye"), (" 7.4.33 ", "7.4", "bullseye"),
])
def test_release_of_a_version(given: str, version: str, debian: str) -> None:
    rel = release(given)
    assert (rel.version, rel.release, rel.host) == (version, debian, not debian)
    assert rel.fpm == f"/usr/sbin/php-fpm{version}"


@pytest.mark.parametrize("given", ["9.9", "8", "", "8.x", "latest", "5.6"])
def test_an_unknown_version_names_the_ones_there_are(given: str) -> None:
    with pytest.raises(UsageError) as err:
        release(given)
    assert "7.4, 8.2, 8.4" in str(err.value) and "\n" not in str(err.value)


def test_roots_are_for_the_other_versions_and_carry_opcache() -> None:
    assert [r.version for r in other_releases()] == ["7.4", "8.4"]
    assert HOST_VERSION == "8.2"
    pkgs = release("8.4").packages()
    assert {"php8.4-fpm", "php8.4-cli", "php8.4-opcache", "php8.4-mysql", "php8.4-mbstring",
            "php8.4-xml", "php8.4-intl", "php8.4-sqlite3"} == set(pkgs)


def _root(tmp: Path, version: str = "8.4", *, binary: bool = True) -> PhpRoot:
    path = tmp / version
    (path / "usr/sbin").mkdir(parents=True)
    if binary:
        (path / f"usr/sbin/php-fpm{version}").write_text("")
    return PhpRoot(version=version, release=release(version).release, path=str(path),
                   php_version=f"{version}.27", mirror="http://mirror.invalid/debian",
                   packages=release(version).packages(), build_seconds=75.2,
                   built_at="2026-11-26T19:20:17Z")


def test_a_root_is_finished_only_with_its_marker(tmp_path: Path) -> None:
    root = _root(tmp_path)
    assert php_roots.load(Path(root.path)) is None  # half-built: no marker yet
    (Path(root.path) / MARKER).write_text(json.dumps(root.to_json()))
    assert php_roots.load(Path(root.path)) == root
    # a marker whose php-fpm is gone (a damaged tree) is not a finished root either
    (Path(root.path) / "usr/sbin/php-fpm8.4").unlink()
    assert php_roots.load(Path(root.path)) is None


def test_a_damaged_marker_reads_as_half_built(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (Path(root.path) / MARKER).write_text('{"schema": "statstorm.php-root/1"')
    assert php_roots.load(Path(root.path)) is None


def test_marker_round_trip_leaves_live_fields_out() -> None:
    root = PhpRoot("7.4", "bullseye", "/r/7.4", "7.4.33", "m", ("php7.4-fpm",), 102.0, "t",
                   size_bytes=5, in_use_by=("lab",))
    back = PhpRoot.from_json(json.loads(json.dumps(root.to_json())))
    assert back.in_use_by == () and back.packages == ("php7.4-fpm",)
    assert back.php_version == "7.4.33" and back.size_bytes == 5


def test_layout_under_the_state_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATSTORM_PHP_ROOTS", raising=False)
    env = Env(state_root=tmp_path)
    assert php_roots.root_dir(env, release("8.4")) == tmp_path / "php-roots/8.4"
    monkeypatch.setenv("STATSTORM_PHP_ROOTS", str(tmp_path / "shared"))
    assert php_roots.root_dir(env, release("7.4")) == tmp_path / "shared/7.4"


def test_list_tells_finished_from_half_built(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATSTORM_PHP_ROOTS", str(tmp_path))
    done = _root(tmp_path, "8.4")
    (Path(done.path) / MARKER).write_text(json.dumps(done.to_json()))
    _root(tmp_path, "7.4")  # no marker: a build that did not finish
    roots, half = php_roots.list_roots(Env(state_root=tmp_path / "home"))
    assert [r.version for r in roots] == ["8.4"] and half == ["7.4"]
    assert roots[0].in_use_by == ()


def test_php_fpm_of_a_root_runs_chrooted(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (Path(root.path) / MARKER).write_text(json.dumps(root.to_json()))
    inside = f"{root.path}/usr/sbin/php-fpm8.4"
    assert phpfpm.command(inside) == ["chroot", root.path, "/usr/sbin/php-fpm8.4"]
    assert phpfpm.command("/usr/sbin/php-fpm8.2") == ["/usr/sbin/php-fpm8.2"]
    assert php_roots.root_of(inside) == Path(root.path)
    assert phpfpm.version_of(inside) == "8.4" and phpfpm.version_of("/usr/bin/php") == ""


def test_mirror_from_apt_sources() -> None:
    deb822 = ("Types: deb\n# http://snapshot.example/archive\nURIs: http://deb.example.org/debian\n"
              "Suites: bookworm\n\nTypes: deb\nURIs: http://deb.example.org/debian-security\n")
    assert debootstrap.sources_mirror([deb822]) == "http://deb.example.org/debian"
    one_line = ("# deb http://old.example/debian bookworm main\n"
                "deb http://security.example/debian-security bookworm-security main\n"
                "deb [arch=amd64] http://ftp.example.net/debian/ bookworm main\n")
    assert debootstrap.sources_mirror([one_line]) == "http://ftp.example.net/debian"
    assert debootstrap.sources_mirror(["deb http://ppa.example/ubuntu jammy main\n"]) == ""


def test_an_unreachable_mirror_is_one_line() -> None:
    with pytest.raises(DependencyError) as err:  # nothing listens on port 1 of loopback
        debootstrap.check_mirror("http://127.0.0.1:1/debian", release("8.4"), timeout=5)
    message = str(err.value)
    assert "cannot be reached" in message and "trixie" in message and "\n" not in message


def test_old_lab_state_reads_without_a_php_version() -> None:
    state = LabState.from_json({"name": "a", "app": "synthetic", "storage": "local", "port": 1,
                                "workers": 1, "state_dir": "/x"})
    assert (state.php_version, state.php_root, state.root_mounts) == ("", "", [])
    new = LabState.from_json(json.loads(json.dumps(
        LabState("a", "synthetic", "local", 1, 1, "/x", php_version="8.4", php_root="/r",
                 root_mounts=["/r/proc"]).to_json())))
    assert new.php_version == "8.4" and new.root_mounts == ["/r/proc"]


def test_cli_lab_up_with_an_unknown_php_is_one_usage_line(tmp_path: Path) -> None:
    proc = invoke(["lab", "up", "--php", "9.9", "--app", "synthetic"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "statstorm: error: --php '9.9': statstorm runs PHP 7.4, 8.2, 8.4; pick one of those"]


def test_cli_another_php_needs_php_fpm(tmp_path: Path) -> None:
    proc = invoke(["lab", "up", "--php", "8.4", "--server", "apache", "--handler", "mod_php"],
                  tmp_path)
    assert proc.returncode == 2 and "--handler fpm" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args, needle", [
    (["lab", "php-root", "build", "8.2"], "host's own"),
    (["lab", "php-root", "build", "9.1"], "7.4, 8.2, 8.4"),
    (["lab", "php-root", "remove", "5.6"], "7.4, 8.2, 8.4"),
])
def test_cli_php_root_usage_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    proc = invoke(args, tmp_path)
    assert proc.returncode == 2 and needle in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_php_root_list_and_remove_when_there_is_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATSTORM_PHP_ROOTS", str(tmp_path / "roots"))
    proc = invoke(["lab", "php-root", "list"], tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("no PHP roots")
    data = json.loads(invoke(["lab", "php-root", "list", "--json"], tmp_path).stdout)
    assert data == {"roots": [], "half_built": [], "building": False}
    proc = invoke(["lab", "php-root", "remove", "8.4"], tmp_path)
    assert proc.returncode == 0 and "nothing to do" in proc.stdout

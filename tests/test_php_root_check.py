"""check, apply and opcache reset on labs of another PHP version (`lab up --php 8.4|7.4`),
against the real components: php-fpm chrooted in its Debian root behind the lab's nginx.
The settings are read from the root's own PHP (its version, its php.ini, its defaults), a
PHP setting applied is read by the root's php-fpm and served by the pool, rollback puts it
back; and the per-version table (model/php_versions.py) agrees with each root's binary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from conftest import invoke
from statstorm.adapters.labs import debootstrap, php_roots
from statstorm.errors import DependencyError
from statstorm.results.php_root import release
from statstorm.model import php_versions

pytestmark = [pytest.mark.root, pytest.mark.beside, pytest.mark.slow]

# Shared by every test session, as in tests/test_php_root_lab.py: built once per machine.
ROOTS = Path("/var/tmp/statstorm-php-roots")


def root_of(version: str) -> Path:
    """The version's shared root, built first when it is not (a few minutes, once per
    machine); skipped only when it is not built and the Debian mirror cannot be reached."""
    path = ROOTS / version
    if php_roots.load(path) is None:
        ROOTS.mkdir(mode=0o755, exist_ok=True)
        try:
            debootstrap.check_mirror(debootstrap.mirror(), release(version))
        except DependencyError as exc:
            pytest.skip(f"PHP {version}'s root is not built and {exc}")
        env = dict(os.environ, STATSTORM_PHP_ROOTS=str(ROOTS))
        subprocess.run([sys.executable, "-m", "statstorm", "lab", "php-root", "build",
                        version], env=env, check=True, capture_output=True, timeout=1500)
    return path


@pytest.fixture
def roots(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("STATSTORM_PHP_ROOTS", str(ROOTS))
    yield ROOTS


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as resp:
        assert resp.status == 200
        return str(resp.read().decode("utf-8", "replace"))


def check(state_home: Path, name: str) -> dict[str, object]:
    proc = invoke(["check", "--lab", name, "--json"], state_home)
    assert proc.returncode in (0, 1), proc.stderr
    return dict(json.loads(proc.stdout))


def test_check_apply_and_reset_on_php_84(roots: Path, lab, state_home: Path) -> None:
    root = root_of("8.4")
    state = lab("--app", "synthetic", "--workers", "2", "--php", "8.4")
    name, docroot = str(state["name"]), Path(str(state["docroot"]))
    (docroot / "ttl.php").write_text(
        "<?php echo ini_get('realpath_cache_ttl'), ' ', PHP_VERSION;\n")

    result = check(state_home, name)
    pool = result["pools"][0]  # type: ignore[index]
    # read from the root's PHP: its version, its php.ini, its own defaults (8.4's JIT
    # buffer is 64M where the host's 8.2 has 0)
    assert f"chrooted in the PHP root {root}" in pool["settings_source"]
    assert "PHP 8.4." in pool["settings_source"]
    assert any(n.startswith("PHP 8.4.") and "php.ini /etc/php/8.4/fpm/php.ini" in n
               for n in pool["notes"]), pool["notes"]
    assert pool["settings"]["opcache.jit_buffer_size"] == "64M"
    assert str(pool["php_binary"]).startswith(f"{root}/")
    ids = [f["id"] for f in result["findings"]]  # type: ignore[union-attr]
    assert "realpath-cache-ttl" in ids

    # apply one PHP setting: the lab's pool file changes, the root's php-fpm reads it, the
    # pool serves with it
    conf = Path(str(state["state_dir"])) / "conf/php-fpm.conf"
    before = conf.read_text()
    done = invoke(["apply", "--lab", name, "realpath-cache-ttl", "--yes"], state_home)
    assert done.returncode == 0, done.stderr
    assert "php_admin_value[realpath_cache_ttl] = 600" in conf.read_text()
    tt = subprocess.run(["chroot", str(root), "/usr/sbin/php-fpm8.4", "-tt", "-y", str(conf)],
                        capture_output=True, text=True, check=False)
    assert "php_admin_value[realpath_cache_ttl] = 600" in tt.stderr + tt.stdout
    ttl, version = get(f"{state['url']}/ttl.php").split()
    assert ttl == "600" and version.startswith("8.4.")

    # opcache reset through the chrooted pool (its script written in the root)
    reset = invoke(["opcache", "reset", "--lab", name, "--json"], state_home)
    assert reset.returncode == 0, reset.stderr
    assert json.loads(reset.stdout)["reset"] is True

    back = invoke(["apply", "--lab", name, "--rollback"], state_home)
    assert back.returncode == 0, back.stderr
    assert conf.read_text() == before
    assert get(f"{state['url']}/ttl.php").split()[0] == "120"


def test_check_on_php_74_proposes_nothing_it_lacks(roots: Path, session_lab,
                                                   state_home: Path) -> None:
    """On the run's 7.4 lab (conftest.session_lab; test_trace_php_versions.py traces it):
    check only reads it."""
    root = root_of("7.4")
    state = session_lab("--app", "synthetic", "--workers", "2", "--php", "7.4")
    result = check(state_home, str(state["name"]))
    pool = result["pools"][0]  # type: ignore[index]
    assert f"chrooted in the PHP root {root}" in pool["settings_source"]
    assert any(n.startswith("PHP 7.4.") and "/etc/php/7.4/fpm/php.ini" in n
               for n in pool["notes"]), pool["notes"]
    settings = pool["settings"]
    assert "opcache.enable" in settings and not any(k.startswith("opcache.jit") for k in settings)
    for f in result["findings"]:  # type: ignore[union-attr]
        for key in php_versions.settings_named(f["change"]):
            assert php_versions.has_setting("7.4", key), (f["id"], key)


@pytest.mark.parametrize("version", ["7.4", "8.2", "8.4"])
def test_the_version_table_agrees_with_the_roots_php(roots: Path, version: str) -> None:
    """Each version's own binary, without any ini (-n): which settings it has, their
    defaults. 8.2 is the host's."""
    host = version == "8.2"
    chroot = [] if host else ["chroot", str(root_of(version))]
    if host and not Path("/usr/bin/php8.2").exists():
        pytest.skip("the host's PHP 8.2 CLI is not installed")
    script = ("foreach (ini_get_all(null, false) as $k => $v) "
              "{ echo $k, '=', $v, PHP_EOL; }")
    res = subprocess.run([*chroot, f"/usr/bin/php{version}", "-n", "-d",
                          "zend_extension=opcache", "-r", script],
                         capture_output=True, text=True, check=True)
    real = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
    facts = php_versions.VERSIONS[version]
    for key in php_versions.TRACKED:
        assert (key in real) == facts.has(key), key
        if key in real and key in facts.defaults:
            assert real[key] == facts.defaults[key], (key, real[key])


def test_a_mount_apply_stacks_is_the_one_the_roots_php_reads(roots: Path, lab,
                                                            state_home: Path) -> None:
    """apply's GlusterFS mount change stacks a new client on the lab's mount point: the
    root's php-fpm must read through it too (its copy of the lab's directory follows later
    mounts), and rollback takes it away in both views; lab down leaves no mount behind."""
    from conftest import leftovers
    from statstorm.adapters.storage import gluster
    root = root_of("8.4")
    state = lab("--app", "synthetic", "--workers", "2", "--php", "8.4", "--storage",
                "glusterfs")
    name, d = str(state["name"]), str(state["state_dir"])
    mnt, seen = Path(d, "mnt"), Path(str(root) + d, "mnt")
    assert gluster.mount_depth(mnt) == 1 and gluster.mount_depth(seen) == 1
    done = invoke(["apply", "--lab", name, "glusterfs-mount-caching", "--yes"], state_home)
    assert done.returncode == 0, done.stderr
    assert gluster.mount_depth(mnt) == 2 and gluster.mount_depth(seen) == 2
    assert get(f"{state['url']}/index.php")
    back = invoke(["apply", "--lab", name, "--rollback"], state_home)
    assert back.returncode == 0, back.stderr
    assert gluster.mount_depth(mnt) == 1 and gluster.mount_depth(seen) == 1
    down = invoke(["lab", "down", "--name", name], state_home)
    assert down.returncode == 0, down.stderr
    assert leftovers(d, str(state.get("volume") or "")) == []
    assert not [m for m in Path("/proc/self/mounts").read_text().splitlines() if d in m]

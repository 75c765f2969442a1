"""A lab on PHP 8.4 from its Debian root, against the real components: the root built once
(or reused), php-fpm chrooted in it behind the lab's nginx, PHP_VERSION read over loopback,
and after `lab down` nothing mounted in the root and nothing running in it."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import invoke, run_cli
from statstorm.adapters.labs import php_roots
from statstorm.results.php_root import MARKER

pytestmark = [pytest.mark.root, pytest.mark.beside]

# Shared by every test session (each has a state root of its own), so the root is built
# once per machine and reused after, as a user's is under their state root.


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return resp.status, resp.read().decode("utf-8", "replace")


def mounts_under(path: Path) -> list[str]:
    return [line for line in Path("/proc/self/mounts").read_text().splitlines()
            if f" {path}/" in line or f" {path} " in line]


def running_in(path: Path) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            root = os.readlink(entry / "root") if entry.name.isdigit() else ""
        except OSError:
            continue
        if root == str(path) or root.startswith(f"{path}/"):
            found.append(f"{entry.name}: {(entry / 'cmdline').read_bytes()!r}")
    return found


def test_lab_on_php_84_from_its_root(roots: Path, lab, state_home: Path) -> None:
    # Built once (a few minutes) or reused; a second build reuses it in seconds.
    first = json.loads(run_cli(["lab", "php-root", "build", "8.4", "--json"], state_home,
                               check=True, timeout=1500).stdout)
    assert first["php_version"].startswith("8.4.") and first["release"] == "trixie"
    assert (Path(first["path"]) / MARKER).is_file()
    started = time.monotonic()
    again = json.loads(run_cli(["lab", "php-root", "build", "8.4", "--json"], state_home,
                               check=True).stdout)
    assert again["reused"] is True and time.monotonic() - started < 10
    root = Path(again["path"])
    # APCu unpacked beside its extensions (a root made before gets it on this reuse),
    # enabled for no pool, and loadable by the root's own PHP
    so = php_roots.apcu(root)
    assert so is not None and not list(root.glob("etc/php/8.4/*/conf.d/*apcu*"))
    inside = "/" + str(so.relative_to(root))
    loaded = subprocess.run(["chroot", str(root), "php8.4", "-n", "-d", f"extension={inside}",
                             "-r", "echo function_exists('apcu_fetch') ? 'apcu' : 'none';"],
                            capture_output=True, text=True, timeout=60)
    assert loaded.stdout == "apcu", loaded.stderr

    shared = mounts_under(root)  # another lab's, if one uses the root now
    state = lab("--app", "synthetic", "--workers", "2", "--php", "8.4")
    assert state["php_version"] == "8.4" and state["php_root"] == str(root)
    assert str(state["fpm_binary"]).startswith(f"{root}/")
    assert Path(f"/proc/{state['fpm_master_pid']}/root").resolve() == root
    # The lab's own page, and PHP_VERSION from a script in its docroot.
    status, body = get(f"{state['url']}/index.php?format=json")
    assert status == 200 and json.loads(body)["app"] == "statstorm-synthetic"
    Path(str(state["docroot"]), "version.php").write_text("<?php echo PHP_VERSION;\n")
    status, body = get(f"{state['url']}/version.php")
    assert status == 200 and body.startswith("8.4."), body
    listing = invoke(["lab", "list"], state_home).stdout
    assert "php8.4" in listing
    assert "PHP 8.4 (php-fpm chrooted in" in invoke(
        ["lab", "status", "--name", str(state["name"])], state_home).stdout
    # A root in use is not removed.
    busy = invoke(["lab", "php-root", "remove", "8.4"], state_home)
    assert busy.returncode == 5 and str(state["name"]) in busy.stderr

    run_cli(["lab", "down", "--name", str(state["name"])], state_home, check=True)
    # another lab may share the root (its /proc and /dev mounts, its php-fpm): only this
    # lab's mounts and processes count, unless the root is free
    own = (str(state["name"]), str(state["state_dir"]))
    assert [m for m in mounts_under(root) if any(o in m for o in own)] == []
    assert [p for p in running_in(root) if any(o in p for o in own)] == []
    assert len(mounts_under(root)) <= len(shared)  # its /proc and /dev came off too
    assert not Path(str(state["state_dir"])).exists()


def test_lab_up_with_an_unknown_php(state_home: Path) -> None:
    proc = run_cli(["lab", "up", "--app", "synthetic", "--php", "9.9"], state_home)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "statstorm: error: --php '9.9': statstorm runs PHP 7.4, 8.2, 8.4; pick one of those"]

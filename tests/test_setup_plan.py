"""scripts/setup.sh's modes (issue #54): without a flag it installs only what a server needs (no
compiler, none of the lab's services); --lab the lab's packages and the tracer's toolchain;
--dev, --afs and --ceph add theirs to --lab's. Read from the script's own `--print-plan` (the
Debian packages a mode installs, one a line), run as this user with apt, dpkg and pip replaced
by stand-ins that record being called: the dry mode must install and build nothing."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[1] / "scripts/setup.sh"
COMPILERS = {"gcc", "clang", "cc", "g++", "llvm", "cpp"}
LAB = {"glusterfs-server", "mariadb-server", "apache2", "mediawiki", "wordpress", "composer"}
SERVER = {"python3", "python3-venv", "strace", "procps", "iproute2", "util-linux"}
# what a dry run must never start
STAND_INS = ("apt-get", "apt", "dpkg", "dpkg-query", "debconf-set-selections", "pip", "go",
             "clang", "cc", "gcc", "bpftool", "install")


def plan(tmp_path: Path, *flags: str) -> list[str]:
    bin_dir = tmp_path / "bin"
    called = tmp_path / "called"
    if not bin_dir.exists():
        bin_dir.mkdir()
        for name in STAND_INS:
            (bin_dir / name).write_text(f'#!/bin/sh\necho {name} >> "{called}"\nexit 1\n')
            (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    proc = subprocess.run(["bash", str(SETUP), *flags, "--print-plan"], capture_output=True,
                          text=True, env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert not called.exists(), f"--print-plan ran {called.read_text().split()}"
    lines = proc.stdout.splitlines()
    assert lines and all(line and line == line.strip() and " " not in line for line in lines), lines
    assert len(lines) == len(set(lines)), "a package named twice"
    return lines


def test_without_a_flag_it_installs_what_a_server_needs_and_no_compiler(tmp_path: Path) -> None:
    server = set(plan(tmp_path))
    assert SERVER <= server
    assert not server & COMPILERS
    assert not server & LAB
    # no headers or static libraries to build against, no PHP, no load generator, no bpftrace
    assert not [p for p in server if p.endswith("-dev") or p.startswith(("php", "clang", "llvm",
                                                                          "gcc"))]
    assert not server & {"wrk", "apache2-utils", "bpftrace", "nginx", "bpftool"}


def test_lab_adds_the_labs_packages_and_the_tracers_toolchain(tmp_path: Path) -> None:
    server, lab = set(plan(tmp_path)), set(plan(tmp_path, "--lab"))
    assert server < lab
    assert LAB <= lab
    assert {"gcc", "clang", "libbpf-dev", "bpftool", "wrk", "bpftrace", "php8.2-fpm",
            "nginx"} <= lab


@pytest.mark.parametrize("flag, extra", [("--dev", {"chromium", "prometheus", "debootstrap",
                                                    "openafs-fuse", "ceph-fuse"}),
                                         ("--afs", {"openafs-fileserver", "openafs-fuse"}),
                                         ("--ceph", {"ceph-mon", "ceph-fuse"})])
def test_dev_afs_and_ceph_imply_lab(tmp_path: Path, flag: str, extra: set[str]) -> None:
    lab, more = set(plan(tmp_path, "--lab")), set(plan(tmp_path, flag))
    assert lab < more and extra <= more
    assert set(plan(tmp_path, "--lab", flag)) == more


def test_an_unknown_flag_is_refused_before_anything_runs(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(SETUP), "--labs", "--print-plan"], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2 and "--labs" in proc.stderr and proc.stdout == ""

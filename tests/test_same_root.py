"""Which processes share this process's file system root (`procs.same_root`): a process
chrooted elsewhere does not, so the paths in its title (an nginx master's `-c`) are not read
here; and nginx's running masters are those of this root only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from statstorm.adapters.host import procs
from statstorm.adapters.servers import nginx


def test_this_process_and_its_children_share_its_root() -> None:
    assert procs.same_root(os.getpid())
    child = subprocess.Popen(["sleep", "5"])
    try:
        assert procs.same_root(child.pid)
    finally:
        child.kill()
        child.wait()


def test_a_root_that_cannot_be_read_is_taken_as_this_one() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert procs.same_root(gone.pid)


def test_nginx_masters_of_another_root_are_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    titles = {10: "nginx: master process /usr/sbin/nginx -c /etc/nginx/nginx.conf",
              20: "nginx: master process /usr/sbin/nginx -g daemon off;"}
    monkeypatch.setattr(procs, "find_pids", lambda needles: sorted(titles))
    monkeypatch.setattr(procs, "cmdline", lambda pid: [titles[pid]])
    monkeypatch.setattr(procs, "same_root", lambda pid: pid == 20)  # 10: chrooted elsewhere
    assert nginx.running_masters_by_pid() == [(20, ["/usr/sbin/nginx", "-g", "daemon", "off;"])]


@pytest.mark.root
def test_a_chrooted_process_does_not_share_the_root(tmp_path: Path) -> None:
    """A real chroot (Python chroots itself, then only sleeps: no file of the root needed)."""
    code = ("import os, sys, time; os.chroot(sys.argv[1]); os.chdir('/'); "
            "print('in', flush=True); time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "in\n"
        assert not procs.same_root(child.pid)
        assert procs.same_root(os.getpid())
    finally:
        child.kill()
        child.wait()

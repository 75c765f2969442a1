"""A running ceph-fuse's settings read from its admin socket (adapters/storage/ceph_admin.py),
without a cluster: real answers of a lab's ceph-fuse (Ceph 16.2) as golden files, the socket
found from a process's fds and /proc/net/unix, and the command line as the fallback. The
admin socket of a live lab: tests/test_lab_fuseclients.py."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from statstorm.adapters.host import unix_sockets
from statstorm.adapters.storage import ceph_admin
from statstorm.env import Env
from statstorm.errors import ComponentError
from statstorm.model import ceph_fuse
from statstorm.model.storage_kinds import CEPHFS_CACHE_KEYS

FIXTURES = Path(__file__).parent / "fixtures" / "ceph"
LAB_ARGV = ["/usr/bin/ceph-fuse", "-f", "-c", "/lab/cluster/ceph.conf", "--admin-socket",
            "/lab/cluster/run/client.asok", "/lab/cluster/mnt"]


def running(case: str) -> dict[str, str]:
    config = ceph_admin.parse_config((FIXTURES / f"{case}.json").read_text())
    return ceph_fuse.running_options(config, CEPHFS_CACHE_KEYS)


@pytest.mark.parametrize("case", ["config-show-fuse-lab", "config-show-fuse-conf"])
def test_config_show_golden(case: str) -> None:
    """`ceph --admin-daemon client.asok config show` of the lab's ceph-fuse as started (Ceph's
    defaults) and with the settings in ceph.conf's [client] section (the command line the
    same): the options check judges."""
    want = json.loads((FIXTURES / f"{case}.expected.json").read_text())
    assert running(case) == want


def test_settings_made_in_ceph_conf_leave_nothing_to_change() -> None:
    assert ceph_fuse.changes(running("config-show-fuse-lab")) == {
        "fuse-set-user-groups": "false", "debug-client": "0/0"}
    assert ceph_fuse.changes(running("config-show-fuse-conf")) == {}


def test_config_get_answers_are_read_alike() -> None:
    got = {**ceph_admin.parse_config((FIXTURES / "config-get-fuse-set-user-groups.json")
                                     .read_text()),
           **ceph_admin.parse_config((FIXTURES / "config-get-debug-client.json").read_text())}
    assert got == {"fuse_set_user_groups": "true", "debug_client": "0/5"}
    assert ceph_fuse.running_options(got) == ceph_fuse.DEFAULTS


def test_what_is_not_a_config_show_is_refused() -> None:
    for text in ("", "[]", "{}", '{"diff": {}}', "admin_socket: exception"):
        with pytest.raises(ComponentError):
            ceph_admin.parse_config(text)
    assert ceph_admin.parse_config('{"fuse_set_user_groups": false, "client_cache_size": 1}') \
        == {"fuse_set_user_groups": "false", "client_cache_size": "1"}


def test_the_client_named_on_its_command_line() -> None:
    assert ceph_admin.identity(LAB_ARGV) == ("*", "client.admin")
    assert ceph_admin.identity(["ceph-fuse", "--id", "web", "--cluster=prod", "/m"]) == (
        "prod", "client.web")
    assert ceph_admin.identity(["ceph-fuse", "-n", "client.php", "/m"]) == ("*", "client.php")
    assert ceph_admin.expand(ceph_admin.DEFAULT_ASOK, ["ceph-fuse", "--id=web", "/m"], 42) == \
        "/var/run/ceph/*-client.web.42.*.asok"
    assert ceph_admin.expand("/r/$type.$id.$pid.asok", LAB_ARGV, 7) == "/r/client.admin.7.asok"


def fake_proc(tmp: Path, pid: int, sockets: dict[str, int], held: list[int]) -> Path:
    """A /proc with one process: fds on socket inodes and its network namespace's table."""
    proc = tmp / "proc"
    (proc / str(pid) / "fd").mkdir(parents=True)
    (proc / str(pid) / "net").mkdir()
    for fd, inode in enumerate(held):
        os.symlink(f"socket:[{inode}]", proc / str(pid) / "fd" / str(fd))
    lines = ["Num       RefCount Protocol Flags    Type St Inode Path"]
    lines += [f"0000000000000000: 00000002 00000000 00010000 0001 01 {inode} {path}"
              for path, inode in sockets.items()]
    lines.append("0000000000000000: 00000003 00000000 00000000 0001 03 999 ")
    (proc / str(pid) / "net" / "unix").write_text("\n".join(lines) + "\n")
    return proc


def test_the_socket_the_client_holds_comes_first(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for name in ("client.asok", "mds.a.asok", "other.sock"):
        (run / name).touch()
    argv = [*LAB_ARGV[:5], str(run / "client.asok"), LAB_ARGV[-1]]
    proc = fake_proc(tmp_path, 77, {str(run / "mds.a.asok"): 10, str(run / "client.asok"): 11,
                                    str(run / "other.sock"): 12}, held=[11, 12])
    assert unix_sockets.held(77, proc) == [str(run / "client.asok"), str(run / "other.sock")]
    assert ceph_admin.candidates(77, argv, proc) == [str(run / "client.asok")]
    # its fds unreadable (another user's process): the path its command line names
    assert ceph_admin.candidates(78, argv, proc) == [str(run / "client.asok")]
    assert ceph_admin.candidates(78, [argv[0], "/m"], proc) == []


def test_a_real_listening_socket_is_found_from_this_process(tmp_path: Path) -> None:
    path = tmp_path / "x.asok"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))
        s.listen(1)
        assert str(path) in unix_sockets.held(os.getpid())
        assert ceph_admin.candidates(os.getpid(), ["ceph-fuse", "/m"])[0] == str(path)
    assert str(path) not in unix_sockets.held(os.getpid())


def test_no_socket_falls_back_on_the_command_line_and_says_so(tmp_path: Path) -> None:
    argv = ["/usr/bin/ceph-fuse", "--admin-socket", str(tmp_path / "gone.asok"),
            "--fuse_set_user_groups=false", "/m"]
    got = ceph_admin.cache_options(os.getpid(), argv)
    assert got[ceph_fuse.SET_GROUPS] == "false" and got[ceph_fuse.DEBUG_CLIENT] == "0/5"
    assert got[ceph_fuse.SOURCE].startswith(ceph_fuse.FROM_ARGV)
    assert "no admin socket found" in got[ceph_fuse.SOURCE]
    assert ceph_fuse.from_socket(got) == ""
    assert "command line (no admin socket found" in ceph_fuse.source_line(got)


def test_a_socket_that_does_not_answer_is_named_in_the_reason(tmp_path: Path) -> None:
    """A socket file nobody listens on (a client that died): `ceph` fails on it, and the
    reason says which socket (or that the ceph tool is missing)."""
    path = tmp_path / "dead.asok"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(path))  # bound, never listening: connect is refused
    got = ceph_admin.running_config(Env(), os.getpid(),
                                    ["ceph-fuse", "--admin-socket", str(path), "/m"])
    assert isinstance(got, str) and got.startswith("no admin socket answered")
    assert str(path) in got or "not installed" in got

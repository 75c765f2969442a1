"""`statstorm lab` against the real components: php-fpm, nginx, GlusterFS, MediaWiki."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from pathlib import Path

import pytest

from conftest import interrupt_up, leftovers, run_cli, unique_name

pytestmark = pytest.mark.root


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return resp.status, resp.read().decode("utf-8", "replace")


def assert_down(state_home: Path, state: dict[str, object]) -> None:
    proc = run_cli(["lab", "down", "--name", str(state["name"])], state_home, check=True)
    assert "down" in proc.stderr
    assert leftovers(str(state["state_dir"]), str(state.get("volume") or "")) == []
    # Idempotent: a second down is a no-op that succeeds.
    again = run_cli(["lab", "down", "--name", str(state["name"])], state_home, check=True)
    assert "nothing to do" in again.stderr


def assert_workers(state: dict[str, object], expected: int) -> None:
    pids = state["worker_pids"]
    assert isinstance(pids, list) and len(pids) == expected
    for pid in pids:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
        assert f"pool {state['pool']}" in title


def test_synthetic_on_local_disk(lab, state_home: Path) -> None:
    state = lab("--app", "synthetic", "--storage", "local", "--workers", "2", "--touch", "37",
                "--php-ini", "realpath_cache_size=16K")
    for key in ("url", "pool", "worker_pids", "code_path", "storage"):
        assert key in state
    assert state["storage"] == "local"
    assert_workers(state, 2)
    status, body = get(f"{state['url']}/index.php?format=json")
    assert status == 200
    page = json.loads(body)
    assert page["classes"] == 37 and page["legacy"] == 20
    # The override is what the FPM SAPI reads back; the rest are Debian's FPM defaults.
    ini = state["effective_ini"]
    assert isinstance(ini, dict)
    assert ini["realpath_cache_size"] == "16K"
    assert ini["realpath_cache_ttl"] == "120"
    assert ini["include_path"].endswith("/code/lib")
    assert_down(state_home, state)


def test_synthetic_on_glusterfs_tuned_mount(lab, state_home: Path) -> None:
    state = lab("--app", "synthetic", "--storage", "glusterfs",
                "--mount-opt", "attribute-timeout=600,entry-timeout=600,negative-timeout=600")
    assert state["storage"] == "glusterfs"
    code = str(state["code_path"])
    assert code.startswith(str(state["mount_point"]))
    mounts = Path("/proc/self/mounts").read_text()
    assert f" {state['mount_point']} fuse.glusterfs " in mounts
    client = Path(f"/proc/{state['fuse_client_pid']}/cmdline").read_bytes().decode()
    assert "--attribute-timeout=600" in client and "--negative-timeout=600" in client
    assert Path(code, "public/index.php").exists()
    status, body = get(f"{state['url']}/index.php")
    assert status == 200 and 'id="classes">classes=100<' in body
    assert_down(state_home, state)


def test_mediawiki_on_local_disk(session_lab, state_home: Path) -> None:
    """On the run's MediaWiki lab (conftest.session_lab: test_trace_lab.py and
    test_whatif_real.py trace it): its pages only read here; its down, and that it leaves
    nothing, are checked when the run's last test using it ends."""
    state = session_lab("--app", "mediawiki", "--storage", "local", "--workers", "2")
    status, body = get(f"{state['url']}/index.php?title=Main_Page")
    assert status == 200
    assert 'id="mw-content-text"' in body and "MediaWiki has been installed" in body
    status, body = get(f"{state['url']}/api.php?action=query&meta=siteinfo&format=json")
    assert status == 200
    assert json.loads(body)["query"]["general"]["generator"].startswith("MediaWiki 1.")


# MediaWiki on GlusterFS (the lab's default workers, Main_Page and the API served from the
# volume, down leaving nothing) is checked on the network lab test_demo's MediaWiki demo
# keeps: copying MediaWiki onto GlusterFS takes over a minute, made once in the suite.


def test_two_labs_side_by_side(lab, state_home: Path) -> None:
    a = lab("--app", "synthetic", "--storage", "local", "--workers", "1")
    b = lab("--app", "synthetic", "--storage", "glusterfs", "--workers", "1")
    assert a["url"] != b["url"] and a["pool"] != b["pool"]
    listing = json.loads(run_cli(["lab", "list", "--json"], state_home, check=True).stdout)
    assert {a["name"], b["name"]} <= {s["name"] for s in listing}
    assert get(f"{a['url']}/index.php")[0] == 200
    assert_down(state_home, a)
    # Stopping one leaves the other serving.
    assert get(f"{b['url']}/index.php")[0] == 200
    assert_down(state_home, b)


def test_sigint_during_up_leaves_nothing(state_home: Path) -> None:
    # Interrupt once the volume is mounted: the middle of `up`.
    rc, err, state = interrupt_up(state_home, ["--app", "synthetic", "--storage", "glusterfs"],
                                  "fuse_client_pid", signal.SIGINT)
    assert rc == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert leftovers(str(state["state_dir"]), str(state["volume"])) == []


def test_sigterm_during_up_leaves_nothing(state_home: Path) -> None:
    # Terminate while php-fpm is starting its workers.
    rc, err, state = interrupt_up(state_home, ["--app", "synthetic"], "fpm_master_pid",
                                  signal.SIGTERM)
    assert rc == 130, err
    assert "Traceback" not in err
    assert leftovers(str(state["state_dir"])) == []


def test_busy_port_is_a_one_line_error(state_home: Path) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = run_cli(["lab", "up", "--app", "synthetic", "--port", str(port),
                        "--name", unique_name()], state_home)
    assert proc.returncode == 5
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "--port" in lines[0]


def test_port_taken_during_up_moves_to_a_free_one(state_home: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process: the port chosen at the start is taken (here: by us) before nginx starts;
    `up` picks another free port instead of failing."""
    import socket

    from statstorm.adapters.host import procs
    from statstorm.commands import lab as lab_cmd
    from statstorm.env import Env

    real_free_port = procs.free_port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        calls: list[int] = []

        def first_taken(*args: int) -> int:
            calls.append(1)
            return taken if len(calls) == 1 else real_free_port(*args)

        monkeypatch.setattr(procs, "free_port", first_taken)
        env = Env(state_root=state_home)
        name = unique_name()
        try:
            st = lab_cmd.up(env, lab_cmd.LabOptions(name=name, app="synthetic", workers=1))
            assert st.port != taken and len(calls) == 2
            with urllib.request.urlopen(st.url + st.entry_path, timeout=30) as resp:
                assert resp.status == 200
        finally:
            lab_cmd.down(env, name, quiet=True)
    assert leftovers(str(state_home / "labs" / name)) == []


def test_existing_name_and_bad_flags(lab, state_home: Path) -> None:
    state = lab("--app", "synthetic", "--workers", "1")
    again = run_cli(["lab", "up", "--app", "synthetic", "--name", str(state["name"])], state_home)
    assert again.returncode == 5 and "lab down" in again.stderr
    bad = run_cli(["lab", "up", "--php-ini", "no-equals-sign", "--name", unique_name()], state_home)
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr
    bad = run_cli(["lab", "up", "--mount-opt", "attribute-timeout=1", "--name", unique_name()],
                  state_home)
    assert bad.returncode == 2 and "glusterfs" in bad.stderr
    bad = run_cli(["lab", "up", "--storage", "glusterfs", "--mount-opt", "bogus=1",
                   "--name", unique_name()], state_home)
    assert bad.returncode == 2 and "unknown GlusterFS FUSE option" in bad.stderr
    assert_down(state_home, state)


def test_failure_after_servers_started_leaves_nothing(state_home: Path) -> None:
    """A page that fails its check (here: a missing auto_prepend_file makes PHP fail every
    request) fails `up` after php-fpm and nginx started; both are stopped, nothing stays."""
    name = unique_name()
    proc = run_cli(["lab", "up", "--app", "synthetic", "--storage", "glusterfs", "--name", name,
                    "--php-ini", "auto_prepend_file=/nonexistent/statstorm.php"], state_home)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("statstorm: error:") and "without the expected content" in last
    assert "Traceback" not in proc.stderr
    assert leftovers(str(state_home / "labs" / name), f"statstorm-{name}") == []


def test_not_root_is_refused(state_home: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    """In-process: the real main() with the privilege check seeing a non-root user."""
    from statstorm.cli import main

    monkeypatch.setenv("STATSTORM_HOME", str(state_home))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(SystemExit) as exc:
        main(["lab", "up", "--app", "synthetic", "--name", unique_name()])
    assert exc.value.code == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs root" in err[0] and "sudo" in err[0]

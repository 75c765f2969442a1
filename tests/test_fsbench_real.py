"""fsbench against real trees: a local directory and the lab's GlusterFS volume.

These tests assert behaviour (counts, outcomes, cache state), never timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from statstorm.adapters.labs import state as labs
from statstorm.adapters.storage import fsbench_ops, mounts
from statstorm.apps import synthetic
from statstorm.commands import fsbench as cmd
from statstorm.commands import lab as lab_cmd
from statstorm.env import Env
from statstorm.errors import PrivilegeError, UsageError

SPEC = dict(packages=10, classes=8, depth=2, touch=20, legacy_files=5, missing=5)
STATSTORM = [sys.executable, "-m", "statstorm"]
is_root = os.geteuid() == 0
have_gluster = Path("/usr/sbin/glusterd").exists()


@pytest.fixture(scope="module")
def local_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fsb") / "app"
    synthetic.generate(Env(), d, synthetic.AppSpec(**SPEC))  # type: ignore[arg-type]
    return d


def _lab(name: str, port: int, mount_opts: dict[str, str]) -> lab_cmd.LabState:
    env = Env()
    opts = lab_cmd.LabOptions(name=name, app="synthetic", storage="glusterfs",
                              mount_options=mount_opts, php_ini={}, workers=1, port=port,
                              app_spec=synthetic.AppSpec(**SPEC))  # type: ignore[arg-type]
    return lab_cmd.up(env, opts)


@pytest.fixture(scope="module")
def lab_default() -> object:
    if not (is_root and have_gluster):
        pytest.skip("needs root and GlusterFS")
    state = _lab("fbt1", 8171, {})
    yield state
    lab_cmd.down(Env(), "fbt1", quiet=True)


@pytest.fixture(scope="module")
def lab_tuned() -> object:
    if not (is_root and have_gluster):
        pytest.skip("needs root and GlusterFS")
    t = "600"
    state = _lab("fbt2", 8172, {"attribute-timeout": t, "entry-timeout": t, "negative-timeout": t})
    yield state
    lab_cmd.down(Env(), "fbt2", quiet=True)


def _check_counts(result: object, iterations: int, clients: int = 1) -> None:
    for c in result.cells:  # type: ignore[attr-defined]
        # every operation runs the number of times it reports
        assert c.passes == iterations
        assert c.stats.count == c.calls_per_pass * iterations * clients, c
        assert c.ok + c.enoent + c.other_errors == c.stats.count
        assert sum(n for _, n in c.stats.histogram) == c.stats.count
        if c.op == "negative":
            assert c.enoent == c.stats.count and c.ok == 0  # lookups really fail
        else:
            assert c.enoent == 0 and c.other_errors == 0


def test_local_warm_counts_and_json(local_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    prof = tmp_path / "p.json"
    opts = cmd.FsbenchOptions(paths=(str(local_tree), str(local_tree)), iterations=2,
                              output=out, profile_out=prof)
    r = cmd.run(Env(), opts)
    _check_counts(r, 2)
    data = json.loads(out.read_text())
    assert data["schema"] == "statstorm.fsbench/2" and data["complete"]
    assert len(data["results"]) == 2 * len(cmd.fsworkload.OPS)
    first = {(row["op"], row["state"]): row for row in data["results"] if row["path_index"] == 0}
    for row in data["results"]:
        assert ("ratio_to_first" in row) == (row["path_index"] > 0)
        if row["path_index"] > 0 and row["ratio_to_first"] is not None:
            # time per call relative to the first PATH: its throughput over this one's
            ref = first[(row["op"], row["state"])]["stats"]["ops_per_s"]
            # (written to 3 decimals: 0.271 for 0.27063)
            assert row["ratio_to_first"] == pytest.approx(ref / row["stats"]["ops_per_s"],
                                                          rel=1e-3, abs=5e-4)
    p = json.loads(prof.read_text())
    assert p["schema"] == "statstorm.latency-profile/1"
    (entry,) = p["mounts"].values()
    assert {"lstat", "stat", "access", "open", "fstat", "readlink"} <= set(entry)
    assert entry["lstat"]["enoent"] > 0 and entry["open"]["hit"] > 0


def test_clients_multiply_calls(local_tree: Path) -> None:
    r = cmd.run(Env(), cmd.FsbenchOptions(paths=(str(local_tree),), ops=("stat", "negative"),
                                          clients=2, iterations=1))
    _check_counts(r, 1, clients=2)


def test_errors_are_typed(local_tree: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        cmd.run(Env(), cmd.FsbenchOptions(paths=(str(tmp_path / "nope"),)))
    with pytest.raises(UsageError):
        cmd.parse_ops("walk,bogus")
    with pytest.raises(UsageError):
        cmd.validate(Env(), cmd.FsbenchOptions(paths=(str(local_tree),), iterations=1, duration_s=1))
    if not is_root:
        with pytest.raises(PrivilegeError):
            cmd.validate(Env(), cmd.FsbenchOptions(paths=(str(local_tree),), states=("cold",)))


def test_cli_error_is_one_line(tmp_path: Path) -> None:
    p = subprocess.run([*STATSTORM, "fsbench", str(tmp_path / "missing")], capture_output=True,
                       text=True)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "no such directory" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.root
def test_cold_really_drops_caches(local_tree: Path) -> None:
    if not is_root:
        pytest.skip("needs root")
    f = next(local_tree.rglob("*.php"))
    f.read_bytes()  # now in the page cache
    assert fsbench_ops.resident_pages(str(f))[0] > 0
    fsbench_ops.drop_caches(3)
    assert fsbench_ops.resident_pages(str(f))[0] == 0
    r = cmd.run(Env(), cmd.FsbenchOptions(paths=(str(local_tree),), ops=("open",),
                                          states=("cold",), iterations=1))
    (cold,) = r.cold
    assert cold.check is not None
    assert cold.check.resident_pages_after == 0
    assert cold.check.dentries_after < cold.check.dentries_before
    assert not cold.check.remounted
    _check_counts(r, 1)


@pytest.mark.root
def test_gluster_default_vs_tuned_vs_local(local_tree: Path, lab_default: lab_cmd.LabState,
                                           lab_tuned: lab_cmd.LabState, tmp_path: Path) -> None:
    paths = (str(local_tree), lab_default.code_path, lab_tuned.code_path)
    out = tmp_path / "g.json"
    r = cmd.run(Env(), cmd.FsbenchOptions(paths=paths, states=("warm", "cold"), iterations=1,
                                          max_files=40, output=out))
    _check_counts(r, 1)
    kinds = [m["kind"] for m in r.mounts]
    assert kinds[0] in ("local", "other") and kinds[1:] == ["glusterfs-fuse", "glusterfs-fuse"]
    assert r.mounts[1]["cache_options"]["negative-timeout"] == "0"
    assert r.mounts[2]["cache_options"]["attribute-timeout"] == "600"
    assert r.mounts[2]["cache_options"]["negative-timeout"] == "600"
    assert "performance.md-cache-timeout" in r.mounts[1]["volume_options"]
    # cold on a lab mount: the FUSE client was really restarted and the lab record follows it
    for i, lab in ((1, lab_default), (2, lab_tuned)):
        c = r.cold[i]
        assert c.check is not None and c.check.remounted
        assert c.check.client_pid_after != c.check.client_pid_before
        assert any("FUSE client cache reset" in x for x in c.reached)
        now = labs.load(Env(), lab.name).fuse_client_pid
        assert now and mounts.fuse_client(lab.mount_point, "glusterfs")[0] == now  # type: ignore[index]
    data = json.loads(out.read_text())
    assert all("ratio_to_first" in row for row in data["results"] if row["path_index"] > 0)


@pytest.mark.root
def test_unowned_fuse_mount_says_not_reset(lab_default: lab_cmd.LabState) -> None:
    info = mounts.detect(lab_default.code_path)
    reached, missing = cmd._cold_levels(info, None)
    assert "FUSE client cache: not reset (not a statstorm mount)" in missing


def test_cli_json_in_process(local_tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from statstorm.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["fsbench", str(local_tree), "--ops", "stat,find", "--iterations", "1", "--json"])
    assert exc.value.code == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["op"] for r in data["results"]] == ["stat", "find"]
    assert data["results"][1]["stats"]["count"] == 1


def test_duration_runs_whole_rounds(local_tree: Path) -> None:
    r = cmd.run(Env(), cmd.FsbenchOptions(paths=(str(local_tree), str(local_tree)),
                                          ops=("negative",), duration_s=0.2))
    a, b = r.cells
    assert a.passes == b.passes >= 1
    _check_counts(r, a.passes)


class _NotRoot(Env):
    def is_root(self) -> bool:
        return False


def test_cold_needs_root(local_tree: Path) -> None:
    with pytest.raises(PrivilegeError, match="run as root"):
        cmd.validate(_NotRoot(), cmd.FsbenchOptions(paths=(str(local_tree),), states=("cold",)))


def test_cli_clients_clean_stderr(local_tree: Path) -> None:
    p = subprocess.run([*STATSTORM, "fsbench", str(local_tree), "--ops", "stat", "--clients", "2",
                        "--iterations", "1"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr and "stat" in p.stdout

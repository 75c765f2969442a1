"""`--storage-delay`: the duration's text, the GlusterFS options that make it, the options read
back, and where the delay shows (lab state, lab status/list, fsbench results, the report).
Pure: no root, no server (the real brick's delay: tests/test_storage_delay_lab.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import invoke
from statstorm.adapters.storage import gluster
from statstorm.errors import UsageError
from statstorm.model import storage_delay
from statstorm.report.environment import environment
from statstorm.report.sections import fsbench as fsbench_section
from statstorm.results.fsbench import FsbenchResult
from statstorm.results.lab import LabState

FIXTURES = Path(__file__).parent / "fixtures" / "gluster"


@pytest.mark.parametrize("text,us", [
    ("0", 0), ("0us", 0), ("200us", 200), ("200µs", 200), ("1ms", 1000), ("1.5ms", 1500),
    ("0.002s", 2000), ("1s", 1_000_000), (" 5 ms ", 5000),
])
def test_durations_parse(text: str, us: int) -> None:
    assert storage_delay.parse(text) == us


@pytest.mark.parametrize("text,says", [
    ("5", "with its unit"), ("1xs", "with its unit"), ("-1ms", "with its unit"), ("", "unit"),
    ("ms", "unit"), ("0.5us", "smallest step is 1us"), ("2s", "at most 1s"),
    ("1e3us", "unit"),
])
def test_malformed_durations_are_one_line(text: str, says: str) -> None:
    with pytest.raises(UsageError) as e:
        storage_delay.parse(text)
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("us,text", [(0, "0"), (200, "200us"), (1000, "1ms"), (1500, "1.5ms"),
                                     (1_000_000, "1s"), (999, "999us")])
def test_durations_format_as_they_parse(us: int, text: str) -> None:
    assert storage_delay.format_us(us) == text
    assert storage_delay.parse(text) == us


def test_labels() -> None:
    assert storage_delay.label("glusterfs", 0) == "glusterfs"
    assert storage_delay.label("glusterfs", 1000) == "glusterfs +1ms"


def test_only_network_storages_can_be_delayed() -> None:
    storage_delay.check("glusterfs", 1000)
    storage_delay.check("cephfs", 1000)
    storage_delay.check("openafs", 1000)
    storage_delay.check("local", 0)
    assert not storage_delay.by_path("glusterfs")  # its brick's own translator
    assert storage_delay.by_path("cephfs") and storage_delay.by_path("openafs")
    assert not storage_delay.by_path("local")
    with pytest.raises(UsageError, match="--storage glusterfs only through its own delay "
                       "translator, cephfs and openafs through a delayed network path"):
        storage_delay.check("local", 200)


def test_volume_options_delay_every_metadata_call() -> None:
    assert gluster.delay_options(0) == {}
    opts = gluster.delay_options(1000)
    assert list(opts) == ["debug.delay-gen", "delay-gen.enable", "delay-gen.delay-percentage",
                          "delay-gen.delay-duration"]
    assert opts["debug.delay-gen"] == "posix"
    assert opts["delay-gen.delay-percentage"] == "100"
    assert opts["delay-gen.delay-duration"] == "1000"
    fops = opts["delay-gen.enable"].split(",")
    for fop in ("lookup", "stat", "fstat", "open", "opendir", "readdirp", "access", "getxattr"):
        assert fop in fops
    assert "read" not in fops and "write" not in fops  # data is not delayed


def test_delay_read_back_from_volume_get() -> None:
    """`gluster volume get VOL all` of a real lab, with and without the delay."""
    on = gluster.parse_volume_get((FIXTURES / "volume-get-delay-1ms.txt").read_text())
    off = gluster.parse_volume_get((FIXTURES / "volume-get-no-delay.txt").read_text())
    assert on["debug.delay-gen"] == "posix"
    assert gluster.delay_in_effect(on) == 1000
    assert off["debug.delay-gen"] == "off"
    assert gluster.delay_in_effect(off) == 0
    # not every metadata call, or not every time: not the delay asked
    assert gluster.delay_in_effect({**on, "delay-gen.enable": "lookup"}) == 0
    assert gluster.delay_in_effect({**on, "delay-gen.delay-percentage": "10%"}) == 0


def _lab_json(home: Path, name: str, **fields: object) -> None:
    state = LabState(name=name, app="synthetic", storage="glusterfs", port=8099, workers=1,
                     state_dir=str(home / "labs" / name), phase="up",
                     url="http://127.0.0.1:8099", entry_path="/index.php")
    data = {**state.to_json(), **fields}
    (home / "labs" / name).mkdir(parents=True)
    (home / "labs" / name / "lab.json").write_text(json.dumps(data))


def test_lab_state_keeps_the_delay_and_reads_old_files(tmp_path: Path) -> None:
    st = LabState(name="a", app="synthetic", storage="glusterfs", port=1, workers=1,
                  state_dir="/x", storage_delay_us=1500)
    assert LabState.from_json(st.to_json()).storage_delay_us == 1500
    old = st.to_json()
    del old["storage_delay_us"]
    assert LabState.from_json(old).storage_delay_us == 0


def test_lab_status_and_list_show_the_delay(tmp_path: Path) -> None:
    _lab_json(tmp_path, "far", storage_delay_us=1000)
    _lab_json(tmp_path, "near")
    out = invoke(["lab", "status", "--name", "far"], tmp_path, check=True).stdout
    assert "delay      1ms added to each round trip to the storage" in out
    assert "delay" not in invoke(["lab", "status", "--name", "near"], tmp_path).stdout
    listing = invoke(["lab", "list"], tmp_path, check=True).stdout
    assert "glusterfs +1ms" in listing
    js = json.loads(invoke(["lab", "status", "--name", "far", "--json"], tmp_path).stdout)
    assert js["storage_delay_us"] == 1000


@pytest.mark.parametrize("args,says", [
    (["--storage", "local", "--storage-delay", "1ms"], "--storage glusterfs only"),
    (["--storage-delay", "200us"], "--storage glusterfs only"),  # local is the default
    (["--storage", "glusterfs", "--storage-delay", "1 ms x"], "with its unit"),
    (["--storage", "glusterfs", "--storage-delay", "3"], "with its unit"),
])
def test_lab_up_refuses_a_bad_delay_in_one_line(tmp_path: Path, args: list[str],
                                                says: str) -> None:
    proc = invoke(["lab", "up", "--name", "x", *args], tmp_path)
    assert proc.returncode == 2
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "labs" / "x").exists()  # nothing started


def _fsbench(delays: list[int] | None) -> dict[str, object]:
    mount = {"mount_point": "/m", "fstype": "fuse.glusterfs", "source": "vm:/v",
             "cache_options": {}, "volume_options": {}, "meanings": [], "notes": []}
    data: dict[str, object] = {
        "schema": "statstorm.fsbench/2", "started_at": "2026-01-01T00:00:00+00:00",
        "complete": True, "paths": ["/l", "/m/app"], "ops": ["negative"], "states": ["warm"],
        "clients": 1, "iterations": 1, "duration_s": None, "max_files": None,
        "overhead_p50_us": 0.1, "mounts": [{**mount, "mount_point": "/", "fstype": "ext4"},
                                           mount],
        "workload": [], "cold": [], "caveats": [], "results": []}
    if delays is not None:
        data["storage_delay_us"] = delays
    return data


def test_fsbench_result_carries_the_delay() -> None:
    r = FsbenchResult.from_json(_fsbench([0, 1000]))
    assert r.storage_delay_us(1) == 1000 and r.storage_delay_us(0) == 0
    assert r.to_json()["storage_delay_us"] == [0, 1000]
    old = FsbenchResult.from_json(_fsbench(None))  # a file from before the option
    assert old.storage_delay_us(1) == 0 and old.storage_delays_us == ()


def test_report_shows_the_delay_beside_the_storage() -> None:
    r = FsbenchResult.from_json(_fsbench([0, 1000]))
    env = environment([("fsbench", "fsbench.json", _fsbench([0, 1000]), r)])
    table = env.tables[0]
    assert table.headers[-1] == "lab delay per metadata call"
    assert [row[-1] for row in table.rows] == ["none", "1ms"]
    assert "+1ms per metadata call" in " ".join(fsbench_section("f", r).intro)
    plain = FsbenchResult.from_json(_fsbench(None))
    env = environment([("fsbench", "fsbench.json", _fsbench(None), plain)])
    assert "lab delay per metadata call" not in env.tables[0].headers


def test_demo_result_keeps_the_delay() -> None:
    from statstorm.report.environment import command
    from statstorm.results.demo import DemoResult

    r = DemoResult("mediawiki", "glusterfs", "out", storage_delay_us=200)
    back = DemoResult.from_json(r.to_json())
    assert back.storage_delay_us == 200
    plain = DemoResult("mediawiki", "glusterfs", "out")
    assert "storage_delay_us" not in plain.to_json()  # none: as demo.json was before
    assert DemoResult.from_json(plain.to_json()).storage_delay_us == 0
    env = environment([("demo", "demo.json", r.to_json(), back)])
    assert "200us added to each round trip to the storage" in " ".join(env.intro)
    assert "--storage-delay 200us" in command("demo", "demo.json", r.to_json(), back)


def test_demo_refuses_a_malformed_delay_in_one_line(tmp_path: Path) -> None:
    proc = invoke(["demo", "--storage-delay", "fast"], tmp_path)
    assert proc.returncode == 2
    assert "--storage-delay 'fast'" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_bench_table_has_seed_001s_shape() -> None:
    """bench/storage_delay.py's table from two fsbench results (find; the warm calls)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "storage_delay_bench", Path(__file__).parent.parent / "bench" / "storage_delay.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def cell(op: str, state: str, i: int, p50: float) -> dict[str, object]:
        stats = {"count": 3, "errors": 0, "wall_s": 1.0, "ops_per_s": 1e6 / p50, "min_us": p50,
                 "mean_us": p50, "p50_us": p50, "p95_us": p50, "p99_us": p50, "max_us": p50,
                 "stdev_us": 0.0, "histogram": []}
        return {"op": op, "state": state, "path_index": i, "path": f"/p{i}", "clients": 1,
                "passes": 3, "calls_per_pass": 1, "ok": 1, "enoent": 0, "other_errors": 0,
                "stats": stats, "ratio_to_first": p50 / 10 if i else None}

    def result(ops: list[str], states: list[str], p50s: list[float]) -> FsbenchResult:
        d = _fsbench([0, 0, 200, 1000])
        d.update(ops=ops, states=states, paths=[f"/p{i}" for i in range(4)], max_files=2000,
                 mounts=[d["mounts"][0]] * 4,  # type: ignore[index]
                 workload=[{"path": "/p0", "files": 9, "php_files": 8, "dirs": 3, "max_depth": 2,
                            "walk_lstats_per_pass": 20, "negative_names_per_pass": 9}] * 4,
                 results=[cell(op, st, i, p) for op in ops for st in states
                          for i, p in enumerate(p50s)])
        return FsbenchResult.from_json(d)

    lines = bench.table(result(["find"], ["cold", "warm"], [10.0, 100.0, 300.0, 1000.0]),
                        result(["stat", "negative"], ["warm"], [10.0, 20.0, 30.0, 40.0]))
    text = "\n".join(lines)
    assert "first (cold)" in text and "later (warm)" in text and "seed 001" in text
    assert "glusterfs +1ms" in text and "glusterfs +200us" in text
    assert "100.0x" in text  # 1ms lab's find against local disk's
    # the warm find's ratios in one line: 0, 200us and 1ms side by side
    assert "warm find against local disk: glusterfs 10.0x, glusterfs +200us 30.0x, glusterfs +1ms 100.0x" in text


def test_bench_checks_its_arguments_before_any_lab(tmp_path: Path) -> None:
    import subprocess
    import sys

    bench = Path(__file__).parent.parent / "bench" / "storage_delay.py"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent / "src")}
    for args, says in ((["--iterations", "0"], "must be 1 or more"),
                       (["-o", str(tmp_path / "no" / "x.json")], "not a writable directory")):
        proc = subprocess.run([sys.executable, str(bench), "--check-only", *args], env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1 and says in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    proc = subprocess.run([sys.executable, str(bench), "--help"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "--storage-delay" in proc.stdout


def test_a_glusterfs_without_the_translator_is_one_usage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gluster, "XLATOR_DIRS", (str(tmp_path),))
    with pytest.raises(UsageError) as e:
        gluster.require_delay_translator()
    assert "delay-gen" in str(e.value) and "drop --storage-delay" in str(e.value)
    (tmp_path / "10.3/xlator/debug").mkdir(parents=True)
    (tmp_path / "10.3/xlator/debug/delay-gen.so").write_bytes(b"")
    gluster.require_delay_translator()


def test_cephfs_and_openafs_delays_pass_the_verbs_checks(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """A delayed CephFS or OpenAFS lab is valid for lab, demo and matrix, and carried in their
    results (the path itself: tests/test_storage_delay_path*.py)."""
    from statstorm.cli import main
    from statstorm.commands import demo as demo_cmd
    from statstorm.results.demo import DemoResult

    for storage in ("cephfs", "openafs"):
        storage_delay.check(storage, 1000)
        assert storage_delay.axis((storage,), (0, 1000)) == (storage, f"{storage}+1ms")
        assert storage_delay.split(f"{storage}+1ms") == (storage, 1000)
    assert storage_delay.check(demo_cmd.storage_of("afs"), 5000) is None
    r = DemoResult("synthetic", "cephfs", "out", storage_delay_us=1000)
    assert DemoResult.from_json(r.to_json()).storage_delay_us == 1000
    with pytest.raises(SystemExit) as exc:
        main(["matrix", "--arch", "nginx-fpm", "--opcache", "on", "--storage", "cephfs",
              "--storage-delay", "0,1ms", "--dry-run", "-o", str(tmp_path / "m.json")])
    out, err = capsys.readouterr()
    assert exc.value.code in (0, None), err
    for cell in ("nginx-fpm/opcache-on/cephfs", "nginx-fpm/opcache-on/cephfs+1ms"):
        assert f" {cell}\n" in out

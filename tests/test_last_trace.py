"""The last trace of a pool: the record `statstorm trace` leaves in the state root, `check`
without --trace judging the pool by it, a trace older than apply's last change said stale, no
trace said, and check's last line stating the network share. No root: the trace files are
written here, and check's live gathering is replaced by fixed facts."""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from conftest import invoke
from statstorm.adapters.php import pool_facts
from statstorm.adapters.tracing import last_trace
from statstorm.env import Env
from statstorm.model.checkfacts import Facts, MountFact
from statstorm.results.apply import BackupTarget, Manifest
from statstorm.results.last_trace import LastTrace
from statstorm.results.trace import Request, Syscall, Trace, new_header, write_trace

GLUSTER = MountFact(role="docroot", path="/mnt/gv/www", mount_point="/mnt/gv",
                    fstype="fuse.glusterfs", kind="glusterfs-fuse", volume="gv",
                    cache_options={"attribute-timeout": "600", "entry-timeout": "600",
                                   "negative-timeout": "600"},
                    volume_options={"performance.md-cache-timeout": "600",
                                    "performance.nl-cache": "on"})  # tuned: no finding
SETTINGS = {"realpath_cache_size": "4096K", "realpath_cache_ttl": "600",
            "opcache.enable": "On", "opcache.validate_timestamps": "Off",
            "opcache.max_accelerated_files": "10000", "opcache.memory_consumption": "128",
            "opcache.enable_file_override": "On", "opcache.file_update_protection": "2",
            "include_path": ".:/usr/share/php", "open_basedir": "", "user_ini.filename": ""}


def network_trace(path: Path, net_ns: int, pool: str = "www",
                  created: str = "2025-01-01T10:00:00+00:00") -> Path:
    """A trace of `pool`: 4 requests of 10 ms, each with `net_ns` of calls on GlusterFS."""
    h = new_header("ebpf", created=created, host="h", targets={"mode": "pool", "pool": pool},
                   settings={}, mounts=[("/", "ext4"), ("/mnt/gv", "fuse.glusterfs")])
    tr = Trace(header=h)
    for req in range(4):
        start = req * 20_000_000
        tr.requests[req] = Request(req, 10, start, start + 10_000_000, "/index.php", "/")
        tr.syscalls.append(Syscall(start + 1, 10, "stat", "newfstatat", "/mnt/gv/www/a.php", 0,
                                   lat_ns=net_ns, req=req, mount=1))
        tr.syscalls.append(Syscall(start + 2, 10, "lstat", "newfstatat", "/etc/hosts", 0,
                                   lat_ns=1000, req=req, mount=0))
    write_trace(path, tr)
    return path


def env_at(home: Path) -> Env:
    return Env(state_root=home)


def test_the_record_a_trace_leaves_is_read_back(tmp_path: Path) -> None:
    t = network_trace(tmp_path / "t.sst.gz", 6_000_000)
    rec = last_trace.record(t, "www", "", "2025-01-01T10:00:20+00:00")
    assert rec.network_time_share == 0.6 and rec.network_ms_per_request == 6.0
    assert rec.requests == 4 and rec.detail == "events" and rec.path == str(t.resolve())
    facts = last_trace.load(t).facts  # check's figures from the whole trace: the same
    assert (rec.network_time_share, rec.network_ms_per_request) == (
        facts.network_time_share, facts.network_ms_per_request)
    env = env_at(tmp_path / "home")
    out = last_trace.remember(env, rec)
    assert out == tmp_path / "home/traces/pool-www.json"
    assert json.loads(out.read_text())["schema"] == "statstorm.last-trace/1"
    assert last_trace.recall(env, "www") == rec
    assert last_trace.recall(env, "other") is None
    assert LastTrace.from_json(rec.to_json()) == rec
    # a lab's record is the lab's; a site of the system Apache takes the trace of its PHP
    last_trace.remember(env, LastTrace("lab-x", str(t), "2025-01-01T10:00:20+00:00", 0.1,
                                       lab="x"))
    assert last_trace.recall(env, "lab-x", "x") is not None
    assert last_trace.recall(env, "lab-x") is None
    last_trace.remember(env, LastTrace("apache", str(t), "2025-01-01T10:00:20+00:00", 0.2))
    got = last_trace.recall(env, "apache:site:80")
    assert got is not None and got.pool == "apache"
    # a record whose trace is gone, or that cannot be read, is no record
    t.unlink()
    assert last_trace.recall(env, "www") is None
    out.write_text("{not json")
    assert last_trace.recall(env, "www") is None


def test_a_trace_of_apaches_php_covers_each_of_its_sites() -> None:
    assert last_trace.covers("www", "www")
    assert last_trace.covers("apache", "apache:wiki.test:8080")
    assert not last_trace.covers("www", "www2")
    assert not last_trace.covers("www", "apache:wiki.test:8080")
    assert not last_trace.covers("", "apache:wiki.test:8080")


def test_times() -> None:
    assert last_trace.epoch("2025-01-01T00:00:01+00:00") == 1735689601.0
    assert last_trace.epoch("2025-01-01T00:00:01") == 1735689601.0  # no zone: UTC
    assert last_trace.epoch("") is None and last_trace.epoch("yesterday") is None
    assert last_trace.epoch(last_trace.now()) is not None


@pytest.fixture
def one_pool(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """check sees one php-fpm pool, www, serving code from GlusterFS; the trace facts it was
    given are collected."""
    given: list[Any] = []
    pool = types.SimpleNamespace(name="www", pool=types.SimpleNamespace(
        handler=types.SimpleNamespace(php_in_server=False)))

    def gather(env: Env, p: Any, *, docroot: Any, query_pool: bool, trace: Any,
               fsb: Any) -> pool_facts.Gathered:
        given.append(trace)
        return pool_facts.Gathered(Facts(
            pool="www", settings=dict(SETTINGS), pm={"pm": "static", "pm.max_children": "2"},
            docroot="/mnt/gv/www", php_files=10, mounts=(GLUSTER,), trace=trace), "test")

    monkeypatch.setattr(pool_facts, "targets", lambda env, **kw: [pool])
    monkeypatch.setattr(pool_facts, "gather", gather)
    return given


def remembered(home: Path, trace: Path, ended: str) -> LastTrace:
    rec = last_trace.record(trace, "www", "", ended)
    last_trace.remember(env_at(home), rec)
    return rec


def backup_set(home: Path, created: str, pool: str = "www", status: str = "applied") -> Path:
    d = home / "apply" / f"20250101-120000-000000-{pool}"
    d.mkdir(parents=True)
    m = Manifest(BackupTarget.from_json({"pool": pool, "lab": None, "url": None}), status,
                 created=created)
    (d / "manifest.json").write_text(json.dumps(m.to_json()))
    return d


def check_json(home: Path, *args: str) -> dict[str, Any]:
    r = invoke(["check", "--pool", "www", "--json", *args], home, check=True)
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def ids(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["id"]: f for f in data["findings"]}


def last_line(home: Path, *args: str) -> str:
    r = invoke(["check", "--pool", "www", *args], home, check=True)
    return " ".join(r.stdout.split("\n\n")[-1].split())  # unwrapped


def test_check_without_trace_uses_the_pools_last_trace(tmp_path: Path,
                                                       one_pool: list[Any]) -> None:
    home = tmp_path / "home"
    t = network_trace(tmp_path / "after.sst.gz", 6_000_000)
    remembered(home, t, "2025-01-01T10:00:20+00:00")
    data = check_json(home)
    assert one_pool[-1] is not None and one_pool[-1].network_time_share == 0.6
    pool = data["pools"][0]
    assert (f"evidence from the last trace of this pool, {t.resolve()}, taken at "
            "2025-01-01T10:00:20+00:00") in pool["notes"]
    assert pool["trace"]["path"] == str(t.resolve()) and pool["trace_remembered"] is True
    f = ids(data)
    assert f["network-bound"]["severity"] == "warning"
    assert any("the last trace of this pool" in e for e in f["network-bound"]["evidence"])
    assert "no-trace" not in f and "trace-predates-change" not in f
    line = last_line(home)
    assert "pool www: 60% of request time on network storage (6 ms per request, " \
        "network-bound: not healthy, last trace" in line
    # a trace given on the command line is the evidence instead, not said remembered
    other = network_trace(tmp_path / "given.sst.gz", 1_000_000)
    data = check_json(home, "--trace", str(other))
    assert data["pools"][0]["trace_remembered"] is False
    assert data["pools"][0]["trace"]["network_time_share"] == 0.1
    assert not any("last trace" in n for n in data["pools"][0]["notes"])


def test_only_info_findings_still_state_the_network_share(tmp_path: Path,
                                                          one_pool: list[Any]) -> None:
    home = tmp_path / "home"
    remembered(home, network_trace(tmp_path / "t.sst.gz", 2_000_000), last_trace.now())
    data = check_json(home)
    assert all(f["severity"] == "info" for f in data["findings"]), data["findings"]
    line = last_line(home)
    assert "pool www: 20% of request time on network storage (2 ms per request, last trace" \
        in line
    assert "not healthy" not in line


def test_a_trace_older_than_the_last_apply_is_stale(tmp_path: Path,
                                                    one_pool: list[Any]) -> None:
    home = tmp_path / "home"
    t = network_trace(tmp_path / "before.sst.gz", 6_000_000)
    remembered(home, t, "2025-01-01T10:00:20+00:00")
    d = backup_set(home, "2025-01-01T11:00:00+00:00")
    f = ids(check_json(home))
    stale = f["trace-predates-change"]
    assert stale["severity"] == "warning"
    assert any("taken at 2025-01-01T10:00:20+00:00" in e for e in stale["evidence"])
    assert any(f"at 2025-01-01T11:00:00+00:00 (backup set {d})" in e for e in stale["evidence"])
    assert stale["change"] == ["statstorm trace --pool www -d 20 -o after.sst.gz",
                               "statstorm check --pool www --trace after.sst.gz"]
    assert "network-bound" in f  # still said: it is what the last trace measured
    assert "taken before the last change" in last_line(home)
    # a set rolled back is no change in effect; one older than the trace, none either
    (d / "manifest.json").write_text(json.dumps(Manifest(
        BackupTarget.from_json({"pool": "www"}), "rolled-back",
        created="2025-01-01T11:00:00+00:00").to_json()))
    assert "trace-predates-change" not in ids(check_json(home))
    backup_set(home / "x", "2025-01-01T09:00:00+00:00")
    assert "trace-predates-change" not in ids(check_json(home / "x", "--trace", str(t)))
    # a trace file given without a record: its own start time
    backup_set(home / "y", "2025-01-01T10:30:00+00:00")
    assert "trace-predates-change" in ids(check_json(home / "y", "--trace", str(t)))


def test_code_on_network_without_a_trace(tmp_path: Path, one_pool: list[Any]) -> None:
    home = tmp_path / "home"
    data = check_json(home)
    f = ids(data)["no-trace"]
    assert f["severity"] == "info"
    assert f["change"] == ["statstorm trace --pool www -d 20 -o after.sst.gz",
                           "statstorm check --pool www --trace after.sst.gz"]
    assert data["pools"][0]["trace"] is None
    assert "pool www: time on network storage not measured (no trace)" in last_line(home)
    # a record whose trace file is gone is no trace
    t = network_trace(tmp_path / "gone.sst.gz", 6_000_000)
    remembered(home, t, last_trace.now())
    t.unlink()
    assert "no-trace" in ids(check_json(home))


def test_a_counts_trace_records_no_network_share(tmp_path: Path) -> None:
    from statstorm.results.trace import RequestCounts
    h = new_header("ebpf", created="", host="", targets={"mode": "pool", "pool": "www"},
                   settings={}, mounts=[], detail="counts")
    tr = Trace(header=h)
    for req in range(3):
        tr.requests[req] = Request(req, 10, req * 100, req * 100 + 50)
        tr.request_counts.append(RequestCounts(req, 10, {"lstat": (40, 2, 0)}))
    t = tmp_path / "c.sst.gz"
    write_trace(t, tr)
    rec = last_trace.record(t, "www", "", last_trace.now())
    assert rec.detail == "counts" and rec.network_time_share is None and rec.requests == 3


def test_apply_judges_by_the_trace_given_only(tmp_path: Path, one_pool: list[Any]) -> None:
    """apply's check (remembered=False) does not read the pool's last trace."""
    import io
    from statstorm.commands import check as check_cmd
    home = tmp_path / "home"
    remembered(home, network_trace(tmp_path / "t.sst.gz", 6_000_000), last_trace.now())
    env = Env(stdout=io.StringIO(), stderr=io.StringIO(), state_root=home)
    res = check_cmd.run(env, check_cmd.CheckOptions(pools=("www",), remembered=False))
    assert one_pool[-1] is None and res.pools[0].trace is None
    assert "no-trace" in {f.id for f in res.findings}
    res = check_cmd.run(env, check_cmd.CheckOptions(pools=("www",)))
    assert one_pool[-1] is not None and res.pools[0].trace_remembered

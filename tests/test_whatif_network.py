"""whatif down to the network: the mount layer (FUSE and NFS caches, `mount:` keys, round
trips per request), the trace's own latencies as the default profile, the what-if input
cache's key, and apply --verify's prediction beside its measurement.

The model tests are pure; the CLI tests run whatif on a real trace of a GlusterFS lab (a
MediaWiki lab traced by `statstorm trace` before traces recorded their mount options); the
lab test (root) records a trace on a real GlusterFS lab and applies with --verify."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from statstorm.commands import whatif as whatif_cmd
from statstorm.errors import UsageError
from statstorm.model import latency_profile as lp
from statstorm.model import network_forecast as nf
from statstorm.model import round_trip_forecast as round_trips
from statstorm.model.network_forecast import FUSE, NFS, MountCaches
from statstorm.adapters.tracing import whatif_input
from statstorm.results.apply import compare
from statstorm.results.trace.raw import read_records
from statstorm.results.trace.vocabulary import CALLS

from conftest import invoke, leftovers, run_cli, unique_name

FIXTURE = Path(__file__).parent / "fixtures" / "report" / "demo" / "before.sst.gz"
S = 1_000_000_000
STAT, OPEN, LSTAT = CALLS.index("stat"), CALLS.index("open"), CALLS.index("lstat")


def calls(*spec: tuple[float, str, str, bool]) -> list[nf.NetCall]:
    """(second, call, path, found) on mount 1."""
    return [(int(t * S), 1, CALLS.index(c), p, ok, c == "open" and ok and
             not p.endswith(".php")) for t, c, p, ok in spec]


def reaching(t: nf.Tally, call: int, failed: bool = False) -> int:
    return t.reaching.get((1, call, failed), 0)


# -- the mount layer ----------------------------------------------------------------------------
def test_fuse_answers_repeats_within_the_timeout_and_every_open_reaches() -> None:
    # 4 requests 1 s apart, each: stat of a file, stat of a missing file, open of a data file
    cs = calls(*[x for r in range(4) for x in ((r, "stat", "/m/a.php", True),
                                                (r + .1, "stat", "/m/no.php", False),
                                                (r + .2, "open", "/m/d.json", True))])
    now = nf.simulate(cs, 4, {1: MountCaches()})  # 1 s timeouts, no negative cache
    assert reaching(now, STAT) == 4 and reaching(now, STAT, True) == 4
    tuned = nf.simulate(cs, 4, {1: MountCaches(600, 600, 600)})
    assert reaching(tuned, STAT) == 0 and reaching(tuned, STAT, True) == 0
    assert reaching(tuned, OPEN) == 4  # a FUSE open always reaches the client
    # entry-timeout alone is not enough: a found path needs both
    assert reaching(nf.simulate(cs, 4, {1: MountCaches(600, 1, 0)}), STAT) == 4
    cached = nf.simulate(cs, 4, {1: MountCaches(600, 600, 600)}, app_cache=True)
    assert reaching(cached, OPEN) == 0 and cached.data_opens == 0


def test_nfs_lookupcache_cto_and_growing_attribute_timeout() -> None:
    cs = calls(*[x for r in range(6) for x in ((r * 10, "stat", "/n/a.php", True),
                                                (r * 10 + 1, "stat", "/n/gone.php", False),
                                                (r * 10 + 2, "open", "/n/a.php", True))])
    default = nf.simulate(cs, 6, {1: nf.NFS_DEFAULT})
    # acregmin 3 s grows to acregmax 60 s for an unchanged file: in the steady state one
    # revalidation a minute, one of these 6 requests 10 s apart
    assert reaching(default, STAT) == 1
    assert reaching(default, OPEN) == 6  # close-to-open: every open revalidates
    # a negative entry lives as long as its directory's attributes (acdirmin 30 → 60)
    assert reaching(default, STAT, True) == 1
    long = nf.with_changes(nf.NFS_DEFAULT, [("acregmin", "600"), ("acdirmin", "600")])
    assert reaching(nf.simulate(cs, 6, {1: long}), STAT) == 0
    nocto = nf.with_changes(nf.NFS_DEFAULT, [("nocto", "")])
    assert reaching(nf.simulate(cs, 6, {1: nocto}), OPEN) == 0
    pos = nf.with_changes(nf.NFS_DEFAULT, [("lookupcache", "pos")])
    assert reaching(nf.simulate(cs, 6, {1: pos}), STAT, True) == 6
    none = nf.with_changes(nf.NFS_DEFAULT, [("lookupcache", "none")])
    t = nf.simulate(cs, 6, {1: none})
    assert reaching(t, STAT) == 6 and reaching(t, STAT, True) == 6
    short = nf.with_changes(nf.NFS_DEFAULT, [("actimeo", "5")])  # min = max = 5 s < 10 s apart
    assert reaching(nf.simulate(cs, 6, {1: short}), STAT) == 6
    assert reaching(nf.simulate(cs, 6, {1: nf.with_changes(nf.NFS_DEFAULT,
                                                             [("noac", "")])}), STAT) == 6


def test_mount_keys_are_split_off_checked_and_applied_by_kind() -> None:
    php, mount = nf.parse_mount_sets(["realpath_cache_size=16K", "mount:attribute-timeout=600",
                                      "mount:nocto"])
    assert php == ["realpath_cache_size=16K"]
    assert mount == [("attribute-timeout", "600"), ("nocto", "")]
    assert nf.with_changes(MountCaches(), [("attribute-timeout", "600")]).attribute_s == 600
    for bad, words in ((["mount:bogus=1"], "unknown mount:bogus"),
                       (["mount:attribute-timeout"], "mount:attribute-timeout=VALUE")):
        with pytest.raises(UsageError, match=words):
            nf.parse_mount_sets(bad)
    for caches, change, words in (
            (MountCaches(), ("acregmin", "60"), "NFS option"),
            (nf.NFS_DEFAULT, ("entry-timeout", "60"), "FUSE/GlusterFS option"),
            (MountCaches(), ("attribute-timeout", "-1"), "number of seconds"),
            (nf.NFS_DEFAULT, ("lookupcache", "some"), "none, pos or all"),
            (nf.NFS_DEFAULT, ("nocto", "maybe"), "on or off")):
        with pytest.raises(UsageError, match=words) as exc:
            nf.with_changes(caches, [change])
        assert "\n" not in str(exc.value)


def test_recorded_options_give_the_current_caches() -> None:
    g = nf.caches_of("fuse.glusterfs", {"attribute-timeout": "600", "entry-timeout": "30",
                                        "negative-timeout": "0", "volume": "v"})
    assert (g.kind, g.attribute_s, g.entry_s, g.negative_s) == (FUSE, 600, 30, 0)
    assert nf.caches_of("fuse.glusterfs", None) == MountCaches()  # older trace: defaults
    n = nf.caches_of("nfs4", {"acregmin": "3", "acregmax": "60", "acdirmin": "30",
                              "acdirmax": "60", "noac": "no", "cto": "no",
                              "lookupcache": "pos", "vers": "4.2"})
    assert (n.kind, n.cto, n.lookupcache, n.attribute_max_s) == (NFS, False, "pos", 60)
    assert nf.kind_of("ext4") is None and nf.kind_of("nfs") == NFS


def test_round_trips_are_calibrated_on_what_the_trace_measured() -> None:
    by_mount = {(1, STAT, False): 300, (1, OPEN, False): 20}
    reach = {(1, STAT, False): 0.5, (1, OPEN, False): 1.0}  # 150 path calls, 20 opens reach
    measured = {"round_trips": 1000, "per_request": 100.0,
                "by_fop": {"LOOKUP": 750, "OPEN": 100, "FLUSH": 75, "RELEASE": 75}}
    f = round_trips.round_trip_factors(measured, by_mount, 10, reach)
    # per request: 25 FOPs of opens over 2 reaching opens; 75 others over 15 path calls
    assert (f.open_ops, f.path_ops) == (12.5, 5.0)
    side = round_trips.network_side(by_mount, 10, reach, f, {1: MountCaches()}, [("/", "ext4"),
                                                                        ("/m", "fuse")])
    assert side["round_trips_per_request"] == 100.0  # the measured figure, reproduced
    assert side["reaching_per_request"] == 17.0 and side["calls_per_request"] == 32.0
    none = round_trips.round_trip_factors(None, by_mount, 10, reach)
    assert (none.open_ops, none.path_ops, none.measured_per_request) == (1.0, 1.0, None)


def test_opens_answered_by_quick_read_go_to_the_brick_once_lookups_stop() -> None:
    """GlusterFS: the brick saw an OPEN (and FLUSH, RELEASE) for 16 of 20 reaching opens; the
    client answered the other 4 from content a LOOKUP brought. Without lookups reaching, every
    open costs its three operations (the MediaWiki lab: 81 % of opens before 600 s
    timeouts, all after)."""
    by_mount = {(1, STAT, False): 300, (1, OPEN, False): 200}
    reach = {(1, STAT, False): 0.5, (1, OPEN, False): 1.0}  # 15 path calls, 20 opens
    measured = {"round_trips": 630, "per_request": 63.0,
                "by_fop": {"LOOKUP": 150, "OPEN": 160, "FLUSH": 160, "RELEASE": 160}}
    f = round_trips.round_trip_factors(measured, by_mount, 10, reach)
    assert f.open_share == 0.8 and f.paths_now == 15.0
    caches, mounts = {1: MountCaches()}, [("/", "ext4"), ("/m", "fuse")]
    now = round_trips.network_side(by_mount, 10, reach, f, caches, mounts)
    assert now["round_trips_per_request"] == 63.0  # the measured figure, reproduced
    # lookups no longer reach: 20 opens × 3 operations
    none_reach = {(1, STAT, False): 0.0, (1, OPEN, False): 1.0}
    assert round_trips.network_side(by_mount, 10, none_reach, f, caches, mounts)[
        "round_trips_per_request"] == 60.0
    # half the lookups: half the quick-read answers (2 opens of 20 without an OPEN)
    half = {(1, STAT, False): 0.25, (1, OPEN, False): 1.0}
    assert round_trips.network_side(by_mount, 10, half, f, caches, mounts)[
        "round_trips_per_request"] == round(18 * 3 + 7.5 * 1.0, 2)


# -- measured latency ---------------------------------------------------------------------------
def test_latencies_split_into_cache_answers_and_round_trips() -> None:
    lats = {("stat", "hit"): [4.0, 5.0, 6.0] * 10 + [900.0, 1100.0] * 5,
            ("stat", "enoent"): [1000.0] * 4, ("open", "hit"): [3000.0] * 3}
    sp = lp.split_modes(lats)
    assert 6 < sp["threshold_us"] < 900
    assert sp["cached_us"]["stat"]["hit"] == 5.0
    assert sp["round_trip_us"]["stat"] == {"hit": 1000.0, "enoent": 1000.0}
    assert "open" not in sp["cached_us"] and sp["round_trip_share"] == round(17 / 47, 4)
    # one mode only: round trips when slow, cache answers when fast
    assert lp.split_modes({("stat", "hit"): [800.0, 900.0]})["round_trip_share"] == 1.0
    assert lp.split_modes({("stat", "hit"): [3.0, 4.0]})["round_trip_share"] == 0.0
    prof = {"mounts": {"/m": {"stat": {"hit": 99.0}}}, "split": {"/m": sp}}
    key = (1, STAT, False)
    cost = lp.split_cost_us(lp.LatencyProfile.from_json(prof), [("/", "ext4"), ("/m", "fuse")], {key: 10}, {key: 0.5})
    assert cost == 5 * 1000.0 + 5 * 5.0


# -- the CLI on a real trace --------------------------------------------------------------------
@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "before.sst.gz"
    shutil.copyfile(FIXTURE, path)
    return path


def whatif(path: Path, *sets: str, profile: str | None = None,
           code: int = 0) -> dict[str, Any]:
    args = ["whatif", str(path), *[x for s in sets for x in ("--set", s)], "--json"]
    proc = invoke(args + (["--profile", profile] if profile else []), path.parent)
    assert proc.returncode == code, proc.stderr
    return dict(json.loads(proc.stdout))


def test_whatif_prices_with_the_traces_latencies_and_predicts_round_trips(trace: Path) -> None:
    d = whatif(trace, "mount:attribute-timeout=600", "mount:entry-timeout=600",
               "mount:negative-timeout=600")
    assert d["profile_kind"] == "trace" and d["profile"] == "the trace's own latencies"
    cur, prop = d["current"]["network"], d["proposed"]["network"]
    assert cur["mounts"] == {"/var/lib/statstorm/labs/rps-net/mnt": {
        "kind": "fuse", "attribute-timeout": 1.0, "entry-timeout": 1.0,
        "negative-timeout": 0.0}}  # an older trace: the client's defaults, and a note says so
    assert any("does not record its mount options" in n for n in d["notes"])
    assert cur["calls_per_request"] == prop["calls_per_request"] > 0
    # OPcache serves the scripts (no open): with 600 s timeouts nothing reaches the storage
    assert prop["reaching_per_request"] == prop["reaching_opens_per_request"] == 0
    assert cur["reaching_per_request"] > 10
    # no round trips measured in this trace: one per reaching call
    assert d["network"]["measured_per_request"] is None
    assert cur["round_trips_per_request"] == cur["reaching_per_request"]
    assert d["proposed"]["metadata_time_us_per_request"] < d["current"][
        "metadata_time_us_per_request"] / 2
    local = whatif(trace, "mount:attribute-timeout=600", profile="local")
    assert local["profile_kind"] == "built-in" and "local ext4" in local["profile"]
    assert any("does not tell cache answers" in n for n in local["notes"])
    plain = whatif(trace)
    assert plain["proposed"]["network"] == {**plain["current"]["network"]}
    assert plain["current"]["metadata_time_us_per_request"] == d["current"][
        "metadata_time_us_per_request"]


def test_mount_keys_of_the_wrong_kind_are_one_line_errors(trace: Path) -> None:
    for sets, words in ((["mount:acregmin=60"], "is an NFS option"),
                        (["mount:attribute-timeout=soon"], "number of seconds"),
                        (["app:data-cache=maybe"], "app:data-cache=on")):
        proc = invoke(["whatif", str(trace), *[x for s in sets for x in ("--set", s)]],
                      trace.parent)
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_mount_keys_on_a_trace_without_network_mounts_are_an_error(tmp_path: Path) -> None:
    from test_trace_speed import varied_trace
    path = varied_trace(tmp_path / "v.sst")
    with pytest.raises(UsageError, match="no network mount"):
        whatif_cmd.run(whatif_cmd.WhatifOptions(path, sets=("mount:attribute-timeout=600",)))


def test_a_cached_run_does_not_read_the_records(trace: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    opts = whatif_cmd.WhatifOptions(trace, sets=("mount:attribute-timeout=600",
                                                 "mount:entry-timeout=600"))
    first = whatif_cmd.run(opts).to_json()  # builds the cache
    assert whatif_input.cache_path(trace).exists()

    def no(*a: Any, **k: Any) -> None:
        raise AssertionError("the records were read")
    monkeypatch.setattr(whatif_cmd, "read_records", no)
    second = whatif_cmd.run(opts).to_json()
    assert second == first and second["profile_kind"] == "trace"


def test_the_input_cache_follows_the_traces_content_and_inode(trace: Path) -> None:
    whatif_cmd.run(whatif_cmd.WhatifOptions(trace))
    assert whatif_input.load(trace) is not None
    st = trace.stat()
    data = bytearray(trace.read_bytes())
    data[len(data) // 2] ^= 0x01  # a same-size edit, mtime put back
    trace.write_bytes(bytes(data))
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert trace.stat().st_size == st.st_size and trace.stat().st_mtime_ns == st.st_mtime_ns
    assert whatif_input.load(trace) is None
    shutil.copyfile(FIXTURE, trace)  # the same bytes again: the cache matches
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    whatif_cmd.run(whatif_cmd.WhatifOptions(trace))
    assert whatif_input.load(trace) is not None
    other = trace.with_name("other.sst.gz")  # the same bytes and mtime under another inode
    shutil.copyfile(trace, other)
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    ino = trace.stat().st_ino
    os.replace(other, trace)
    assert trace.stat().st_ino != ino and whatif_input.load(trace) is None


def test_verify_puts_the_prediction_beside_the_measurement() -> None:
    before = {"rps": 10.0, "syscalls_per_request": 400.0, "round_trips_per_request": 280.0,
              "errors": 0}
    after = {"rps": 40.0, "syscalls_per_request": 300.0, "round_trips_per_request": 40.0,
             "errors": 0}
    pred = {"current": {"calls_per_request": 390.0, "round_trips_per_request": 276.0},
            "proposed": {"calls_per_request": 290.0, "round_trips_per_request": 44.0},
            "each": [], "not_modelled": ["performance.nl-cache=on"]}
    v = compare(before, after, pred)
    assert v["predicted"]["measured"] == {"calls_per_request": 300.0,
                                          "round_trips_per_request": 40.0}
    assert v["predicted"]["error"] == {"calls_per_request": round(-10 / 300, 4),
                                       "round_trips_per_request": 0.1}
    assert "predicted" not in compare(before, after) and not v["worse"]


# -- a real GlusterFS lab (root) ----------------------------------------------------------------
@pytest.mark.root
def test_lab_trace_records_mount_options_and_apply_verify_predicts(lab, state_home: Path,
                                                                  tmp_path: Path) -> None:
    from test_apply_lab import Load
    name = unique_name("wn")
    st = lab("--app", "synthetic", "--storage", "glusterfs", "--workers", "2", name=name)
    mnt = f"{st['state_dir']}/mnt"
    out = tmp_path / "t.sst.gz"
    with Load(str(st["url"]) + str(st["entry_path"])):
        run_cli(["trace", "--lab", name, "--requests", "20", "-o", str(out)], state_home,
                check=True, timeout=300)
    rec = read_records(out)
    opts = dict(zip([m[0] for m in rec.header["mounts"]], rec.header["mount_options"]))
    assert opts[mnt]["attribute-timeout"] == "1" and opts[mnt]["negative-timeout"] == "0"
    assert opts["/"] == {}
    d = whatif(out, "mount:attribute-timeout=600", "mount:entry-timeout=600",
               "mount:negative-timeout=600")
    assert d["profile_kind"] == "trace"
    assert not any("mount options" in n for n in d.get("notes", []))
    measured = d["network"]["measured_per_request"]
    assert measured == rec.trailer["network"]["per_request"] > 0
    cur, prop = d["current"]["network"], d["proposed"]["network"]
    assert cur["mounts"][mnt]["attribute-timeout"] == 1.0
    assert prop["mounts"][mnt]["attribute-timeout"] == 600.0
    assert prop["round_trips_per_request"] < cur["round_trips_per_request"]
    sp = json.loads(json.dumps(whatif_input.load(out).latency))["split"][mnt]  # type: ignore
    assert sp["round_trip_share"] > 0 and sp["round_trip_mean_us"] > sp["cached_mean_us"]
    # measured once after the change (--verify-settle 0): the prediction's figures are
    # compared with that run; the settling loop is test_apply_lab's
    proc = run_cli(["apply", "--lab", name, "--all", "--yes", "--verify", "--verify-duration",
                    "3", "--verify-settle", "0", "--json"], state_home, timeout=600)
    assert proc.returncode == 0, proc.stderr
    v = json.loads(proc.stdout)["verify"]
    p = v["predicted"]
    assert any(s.startswith("mount:attribute-timeout=") for s in p["sets"])
    assert [e["setting"] for e in p["each"]] == p["sets"]
    assert p["measured"]["round_trips_per_request"] == v["after"]["round_trips_per_request"]
    assert p["proposed"]["round_trips_per_request"] < p["current"]["round_trips_per_request"]
    assert p["error"]["calls_per_request"] is not None
    run_cli(["lab", "down", "--name", name], state_home, check=True)
    assert leftovers(str(st["state_dir"]), str(st.get("volume") or "")) == []


def test_the_input_cache_depends_on_every_model_module_it_runs() -> None:
    """A change to any model module the cached input's code imports must invalidate old
    caches: the list of modules hashed holds every statstorm.model module they reach."""
    import ast
    import importlib
    from pathlib import Path as P

    def model_imports(mod: str) -> set[str]:
        tree = ast.parse(P(importlib.import_module(mod).__file__ or "").read_text())
        out = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module == "statstorm.model":
                out |= {f"statstorm.model.{a.name}" for a in n.names}
            elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("statstorm.model."):
                out.add(str(n.module))
        return out

    hashed = {m.__name__ for m in whatif_input._CODE}
    todo = [m for m in hashed if m.startswith("statstorm.model.")]
    reached: set[str] = set()
    while todo:
        m = todo.pop()
        if m not in reached:
            reached.add(m)
            todo += sorted(model_imports(m) - reached)
    assert reached <= hashed, sorted(reached - hashed)

"""Network round trips as a measured figure: GlusterFS brick profiles and NFS mountstats.

Golden files: `fixtures/gluster/profile-info-*.txt` are real `gluster volume profile VOL info`
outputs taken on a lab volume (one brick, and a two-brick distribute volume), with the
state-root prefix of the brick paths replaced by the default state root; `before`/`after`
bracket known file activity. `profile-refusals.json` holds gluster's real replies to
profile commands it refuses. `fixtures/nfs/mountstats-*.txt` are constructed by hand from
the kernel's documented mountstats format (there is no NFS client here): an NFSv3 mount
whose path has an escaped space, an NFSv4.2 mount, and non-NFS devices. Each `.txt` has
its expected parse (or the expected error) in the sibling `.json`.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from statstorm import errors
from statstorm.adapters.storage import gluster_profile as gp
from statstorm.adapters.storage import nfs_mountstats as nm
from statstorm.adapters.storage import round_trips
from statstorm.env import Env, RunResult
from statstorm.errors import ComponentError, UsageError

FIXTURES = Path(__file__).parent / "fixtures"
GLUSTER = sorted((FIXTURES / "gluster").glob("profile-info-*.txt"))
NFS = sorted((FIXTURES / "nfs").glob("mountstats-*.txt"))


def _expected(txt: Path) -> Any:
    return json.loads(txt.with_suffix(".json").read_text())


def _snapshot(name: str) -> gp.ProfileSnapshot:
    return gp.parse_info((FIXTURES / "gluster" / f"profile-info-{name}.txt").read_text())


# ---------------------------------------------------------------- golden files


@pytest.mark.parametrize("txt", GLUSTER, ids=lambda p: p.stem)
def test_gluster_profile_golden(txt: Path) -> None:
    want = _expected(txt)
    if "error" in want:
        with pytest.raises(getattr(errors, want["error"])) as exc:
            gp.parse_info(txt.read_text())
        assert str(exc.value) == want["message"]
    else:
        assert gp.parse_info(txt.read_text()).to_json() == want


@pytest.mark.parametrize("txt", NFS, ids=lambda p: p.stem)
def test_nfs_mountstats_golden(txt: Path) -> None:
    assert nm.parse(txt.read_text()) == _expected(txt)


def test_golden_files_are_there() -> None:
    assert len(GLUSTER) >= 4 and len(NFS) >= 2
    assert all(p.with_suffix(".json").exists() for p in GLUSTER + NFS)


# ---------------------------------------------------------------- GlusterFS arithmetic


def test_gluster_plain_info_reads_only_the_cumulative_sections() -> None:
    assert _snapshot("2bricks") == _snapshot("cumulative-2bricks")


def test_gluster_total_sums_bricks() -> None:
    snap = _snapshot("2bricks")
    assert len(snap.bricks) == 2
    assert snap.total["LOOKUP"] == 175 + 159
    assert snap.total["ENTRYLK"] == 2  # on one brick only
    assert snap.calls == sum(sum(f.values()) for f in snap.bricks.values()) == 439


def test_gluster_delta_and_round_trips() -> None:
    before, after = _snapshot("cumulative-before"), _snapshot("cumulative-after")
    d = gp.delta(before, after)
    # The activity between the two: mkdir, create/write/read, setxattr, chmod, truncate,
    # symlink, rename, unlink, rmdir, fsync, ten missing-path stats and one PHP request.
    assert d == {
        "CREATE": 4, "FLUSH": 12, "FORGET": 2, "FSTAT": 1, "FSYNC": 1, "FTRUNCATE": 1,
        "GETXATTR": 2, "LOOKUP": 440, "MKDIR": 2, "OPEN": 4, "OPENDIR": 2, "READ": 5,
        "READDIRP": 2, "READLINK": 2, "RELEASE": 8, "RELEASEDIR": 2, "RENAME": 1, "RMDIR": 1,
        "SETATTR": 1, "SETXATTR": 1, "STAT": 1, "STATFS": 1, "SYMLINK": 1, "UNLINK": 1,
        "WRITE": 6,
    }
    assert sum(d.values()) == after.calls - before.calls == 504
    assert gp.round_trips(d) == 504 - 2  # FORGET is brick-local
    assert gp.round_trips(d, waited_only=True) == 504 - 2 - 8 - 2  # nor RELEASE(DIR)
    assert gp.delta(after, after) == {}


def test_gluster_delta_refuses_restarted_or_missing_bricks() -> None:
    before, after = _snapshot("cumulative-before"), _snapshot("cumulative-after")
    with pytest.raises(ComponentError, match="went down.*restarted"):
        gp.delta(after, before)
    with pytest.raises(ComponentError, match="missing from the second.*volume status"):
        gp.delta(_snapshot("2bricks"), gp.ProfileSnapshot({}))
    # A brick that appears later counts from zero.
    assert gp.delta(gp.ProfileSnapshot({}), before) == before.total


@pytest.mark.parametrize("text, message", [
    ("", "empty GlusterFS profile output"),
    ("  \n\n", "empty GlusterFS profile output"),
    ("hello world\n", "not GlusterFS profile output"),
    ("Profile on Volume gv0 is not started\n", "gluster volume profile gv0 start"),
    ("Volume gv0 does not exist\n", "gluster volume list"),
    ("Brick: h:/b\n-----------\nCumulative Stats:\n %-latency   Avg-latency   Min-Latency   "
     "Max-Latency   No. of calls         Fop\n ---------\n      1.00   2.00 us   1.00 us   "
     "3.00 us   many   LOOKUP\n", "line 6: not a FOP row"),
    ("Brick: h:/b\n----\nCumulative Stats:\n\nBrick: h:/b\n----\nCumulative Stats:\n",
     "appears twice"),
])
def test_gluster_bad_text_is_one_line_error(text: str, message: str) -> None:
    with pytest.raises(errors.StatstormError) as exc:
        gp.parse_info(text)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_gluster_idle_brick_has_no_fops() -> None:
    text = ("Brick: h:/b\n-----------\nCumulative Stats:\n \n    Duration: 1 seconds\n"
            "   Data Read: 0 bytes\nData Written: 0 bytes\n \n")
    assert gp.parse_info(text).to_json() == {"bricks": {"h:/b": {}}, "total": {}, "calls": 0}


# ---------------------------------------------------------------- the gluster CLI, replayed


class ReplayEnv(Env):
    """Answers `env.run` with recorded replies of the real gluster CLI."""

    def __init__(self, replies: Sequence[RunResult]) -> None:
        super().__init__(sleep=lambda s: None)
        self.replies = list(replies)
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], **kwargs: Any) -> RunResult:  # type: ignore[override]
        self.calls.append(list(argv))
        return self.replies.pop(0)


def _reply(case: str) -> RunResult:
    for r in json.loads((FIXTURES / "gluster" / "profile-refusals.json").read_text()):
        if r["case"] == case:
            return RunResult(("gluster",), r["returncode"], r["stdout"], r["stderr"])
    raise KeyError(case)


def test_start_and_stop_are_idempotent() -> None:
    env = ReplayEnv([_reply("start"), _reply("start-twice"), _reply("stop"),
                     _reply("stop-twice")])
    gp.start(env, "statstorm-rt")
    gp.start(env, "statstorm-rt")
    gp.stop(env, "statstorm-rt")
    gp.stop(env, "statstorm-rt")
    assert env.calls[0] == ["gluster", "--mode=script", "volume", "profile", "statstorm-rt",
                            "start"]
    assert env.calls[3][-1] == "stop"


@pytest.mark.parametrize("case, call, error, fix", [
    ("info-off", gp.info, ComponentError, "`gluster volume profile statstorm-rt start`"),
    ("no-volume", gp.info, UsageError, "`gluster volume list`"),
    ("volume-stopped", gp.info, ComponentError, "`gluster volume start statstorm-rt2`"),
    ("glusterd-down", gp.info, ComponentError, "glusterd is not answering"),
    ("no-volume", gp.start, UsageError, "`gluster volume list`"),
    ("glusterd-down", gp.stop, ComponentError, "glusterd is not answering"),
])
def test_refusals_name_the_fix(case: str, call: Callable[[Env, str], object],
                               error: type[Exception], fix: str) -> None:
    with pytest.raises(error) as exc:
        call(ReplayEnv([_reply(case)]), "statstorm-rt")
    assert fix in str(exc.value) and "\n" not in str(exc.value)


def test_info_parses_and_retries_while_locked() -> None:
    text = (FIXTURES / "gluster" / "profile-info-cumulative-before.txt").read_text()
    busy = RunResult(("gluster",), 1, "", "Another transaction is in progress for gv0.\n")
    env = ReplayEnv([busy, RunResult(("gluster",), 0, text, "")])
    assert gp.info(env, "gv0") == _snapshot("cumulative-before")
    assert env.calls[-1][-2:] == ["info", "cumulative"] and len(env.calls) == 2
    with pytest.raises(ComponentError, match="printed nothing"):
        gp.info(ReplayEnv([RunResult(("gluster",), 0, "", "")]), "gv0")


# ---------------------------------------------------------------- NFS


def test_nfs_parse_details() -> None:
    stats = nm.parse((FIXTURES / "nfs" / "mountstats-before.txt").read_text())
    assert sorted(stats) == ["/srv/php sites", "/var/www/app"]  # \040 undone, non-NFS skipped
    assert stats["/srv/php sites"]["GETATTR"] == 18240
    assert stats["/var/www/app"]["SETCLIENTID_CONFIRM"] == 0  # a name wider than the column
    assert len(stats["/var/www/app"]) == 69 and len(stats["/srv/php sites"]) == 22
    assert nm.unescape(r"/a\040b\134c") == "/a b\\c"


def test_nfs_delta_and_round_trips() -> None:
    before = nm.parse((FIXTURES / "nfs" / "mountstats-before.txt").read_text())
    after = nm.parse((FIXTURES / "nfs" / "mountstats-after.txt").read_text())
    d3 = nm.delta(before["/srv/php sites"], after["/srv/php sites"])
    assert d3 == {"ACCESS": 5, "GETATTR": 41, "LOOKUP": 12, "READ": 2}
    assert nm.round_trips(d3) == 60
    d4 = nm.delta(before["/var/www/app"], after["/var/www/app"])
    assert d4 == {"ACCESS": 4, "CLOSE": 30, "GETATTR": 77, "LOOKUP": 25, "OPEN": 30, "READ": 3,
                  "SEQUENCE": 1}
    assert nm.round_trips(d4) == 170
    with pytest.raises(ComponentError, match="remounted"):
        nm.delta(after["/var/www/app"], before["/var/www/app"])


def test_nfs_snapshot_reads_a_file(tmp_path: Path) -> None:
    src = tmp_path / "mountstats"
    src.write_text((FIXTURES / "nfs" / "mountstats-after.txt").read_text())
    assert nm.snapshot("/srv/php sites/", source=src)["LOOKUP"] == 5132
    with pytest.raises(UsageError, match="no NFS mount at /mnt/gv0: check it with `findmnt"):
        nm.snapshot("/mnt/gv0", source=src)
    with pytest.raises(ComponentError, match="cannot read"):
        nm.snapshot("/x", source=tmp_path / "absent")


def test_nfs_window_measures_between_open_and_close(tmp_path: Path) -> None:
    src = tmp_path / "mountstats"
    src.write_text((FIXTURES / "nfs" / "mountstats-before.txt").read_text())
    w = round_trips.nfs("/var/www/app", source=src)
    w.open()
    src.write_text((FIXTURES / "nfs" / "mountstats-after.txt").read_text())
    got = w.close(17)
    assert got is not None and got["round_trips"] == 170 and got["per_request"] == 10.0
    assert list(got["by_op"])[0] == "GETATTR" and w.note == ""  # type: ignore[call-overload]
    gone = round_trips.nfs("/not/nfs", source=src)
    gone.open()
    assert gone.close(3) is None and "no NFS mount at /not/nfs" in gone.note


def test_nfs_stacked_mount_keeps_the_top_one() -> None:
    block = ("device s:/e mounted on /m with fstype nfs statvers=1.1\n\tper-op statistics\n"
             "\t     GETATTR: {n} {n} 0 0 0 0 0 0 0\n\n")
    assert nm.parse(block.format(n=1) + block.format(n=7)) == {"/m": {"GETATTR": 7}}
    # The example line of the brief's format, blanks instead of a tab, 8 counters (older).
    text = ("device s:/e mounted on /m with fstype nfs4 statvers=1.0\n    per-op statistics\n"
            "        GETATTR: 100 100 0 13200 11200 7 50 60\n")
    assert nm.parse(text) == {"/m": {"GETATTR": 100}}


@pytest.mark.parametrize("text, message", [
    ("", "empty mountstats"),
    ("GETATTR: 1 1 0 0 0 0 0 0 0\n", "line 1: text before the first `device` line"),
    ("device s:/e mounted on /m\n", "line 1: malformed device line"),
    ("device s:/e mounted on /m with fstype nfs statvers=1.1\n\tper-op statistics\n"
     "\t     GETATTR: 1 x 0\n", "line 3: malformed per-op line"),
    ("device s:/e mounted on /m with fstype nfs statvers=1.1\n\tper-op statistics\n"
     "\t     GETATTR: 1 1 0\n", "line 3: GETATTR has 3 counters"),
])
def test_nfs_bad_text_is_one_line_error(text: str, message: str) -> None:
    with pytest.raises(UsageError) as exc:
        nm.parse(text)
    assert message in str(exc.value) and "\n" not in str(exc.value)


# ---------------------------------------------------------------- a real GlusterFS lab


# One small GlusterFS lab, its FUSE caches off, for both tests (conftest.shared_lab): the
# first turns the volume's profiling on and off again, the second only traces.
SMALL_GLUSTER = ("--app", "synthetic", "--storage", "glusterfs", "--workers", "1",
                 "--packages", "2", "--classes", "2", "--touch", "2", "--legacy-files", "1",
                 "--missing", "1",
                 "--mount-opt", "attribute-timeout=0,entry-timeout=0,negative-timeout=0")


@pytest.mark.root
def test_missing_path_stats_are_round_trips_on_a_real_volume(
        shared_lab: Callable[..., dict[str, object]]) -> None:
    """N stats of distinct missing paths, caches off: the bricks see at least N more LOOKUPs."""
    if not Path("/usr/sbin/glusterd").exists():
        pytest.skip("needs GlusterFS")
    state = shared_lab(*SMALL_GLUSTER)
    env, volume, mount = Env(), str(state["volume"]), Path(str(state["mount_point"]))
    n, tag = 50, uuid.uuid4().hex[:8]
    gp.start(env, volume)
    gp.start(env, volume)  # already on: fine
    before = gp.info(env, volume)
    assert list(before.bricks) and all(b.endswith("/brick") for b in before.bricks)
    for i in range(n):
        with pytest.raises(FileNotFoundError):
            os.stat(mount / f"rt-{tag}-{i}.php")
    after = gp.info(env, volume)
    d = gp.delta(before, after)
    assert d.get("LOOKUP", 0) >= n
    assert gp.round_trips(d) >= gp.round_trips(d, waited_only=True) >= n
    gp.stop(env, volume)
    gp.stop(env, volume)  # already off: fine
    with pytest.raises(ComponentError, match=f"gluster volume profile {volume} start"):
        gp.info(env, volume)
    with pytest.raises(UsageError, match="does not exist"):
        gp.info(env, f"{volume}-absent")


@pytest.mark.root
def test_a_pool_trace_finds_its_volume_and_counts_round_trips(
        shared_lab: Callable[..., dict[str, object]], tmp_path: Path) -> None:
    """`trace --pool` (not --lab): the code's storage is found from the nginx server that
    passes to the pool, and the trace's trailer holds that volume's round trips."""
    import subprocess
    import sys
    import threading
    import urllib.request
    if not Path("/usr/sbin/glusterd").exists():
        pytest.skip("needs GlusterFS")
    state = shared_lab(*SMALL_GLUSTER)
    url = str(state["url"]) + str(state["entry_path"])
    out = tmp_path / "p.sst.gz"
    proc = subprocess.Popen([sys.executable, "-m", "statstorm", "trace", "--pool",
                             str(state["pool"]), "--requests", "3", "-d", "60", "-o", str(out),
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            urllib.request.urlopen(url, timeout=30).read()
            stop.wait(0.3)
    t = threading.Thread(target=load, daemon=True)
    t.start()
    try:
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        stop.set()
        t.join()
    assert proc.returncode == 0, stderr
    net = json.loads(stdout)["trace"]["network"]
    assert net["volume"] == state["volume"] and net["round_trips"] > 0

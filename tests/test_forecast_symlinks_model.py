"""The round-trip forecast's walks through symlinks on a FUSE mount: one READLINK per walk
through each symlink, whatever the timeouts (model/network_forecast.py,
model/round_trip_forecast.py), and the closing note naming that cause
(model/prediction_fit.py). Pure unit tests; the real thing is tests/test_forecast_symlinks.py."""

from __future__ import annotations

from statstorm.model import network_forecast as nf
from statstorm.model import prediction_fit
from statstorm.model import round_trip_forecast as rt
from statstorm.results.trace.vocabulary import CALLS

STAT, LSTAT, OPEN, READLINK = (CALLS.index(c) for c in ("stat", "lstat", "open", "readlink"))
ROOT = "/mnt/gv/app"
LINKS = frozenset({f"{ROOT}/lib/plugins", f"{ROOT}/conf"})


def test_walks_count_each_symlink_directory_and_a_followed_last_component() -> None:
    assert nf.walks(f"{ROOT}/lib/plugins/a/b.php", STAT, LINKS) == 1
    assert nf.walks(f"{ROOT}/lib/plugins", STAT, LINKS) == 1  # stat follows it
    assert nf.walks(f"{ROOT}/lib/plugins", LSTAT, LINKS) == 0  # lstat does not
    assert nf.walks(f"{ROOT}/lib/plugins", READLINK, LINKS) == 1  # readlink reads it
    assert nf.walks(f"{ROOT}/lib/pluginsx/a", STAT, LINKS) == 0
    assert nf.walks(f"{ROOT}/index.php", OPEN, LINKS) == 0
    assert nf.walks(f"{ROOT}/lib/plugins/x", OPEN, frozenset()) == 0


def test_symlinks_are_read_from_the_trace_readlinks_on_fuse_mounts_only() -> None:
    got = nf.symlinks_of_calls([(0, READLINK, f"{ROOT}/conf", True),
                                (0, READLINK, f"{ROOT}/gone", False),
                                (1, READLINK, "/srv/nfs/link", True),
                                (0, STAT, f"{ROOT}/x", True)], {0})
    assert got == {0: frozenset({f"{ROOT}/conf"})}


def _calls(walk: bool) -> list[nf.NetCall]:
    """Ten requests, each stat()ing three plugin files through the symlink and opening one
    script: 1.5 s apart (past the default 1 s timeouts)."""
    links = LINKS if walk else frozenset()
    out: list[nf.NetCall] = []
    for r in range(10):
        t = r * 1_500_000_000
        for i in range(3):
            p = f"{ROOT}/lib/plugins/p{i}/action.php"
            out.append((t + i, 0, STAT, p, True, False, nf.walks(p, STAT, links)))
        out.append((t + 5, 0, OPEN, f"{ROOT}/doku.php", True, False, 0))
    return out


def test_simulate_counts_readlinks_whatever_the_timeouts() -> None:
    for caches in (nf.MountCaches(), nf.MountCaches(600.0, 600.0, 600.0)):
        t = nf.simulate(_calls(True), 10, {0: caches})
        assert sum(t.readlinks.values()) == 30  # 3 per request, the last pass
    long = nf.simulate(_calls(True), 10, {0: nf.MountCaches(600.0, 600.0, 600.0)})
    assert sum(long.reaching.values()) == 10  # only the opens: the stats are cached
    assert not nf.simulate(_calls(False), 10, {0: nf.MountCaches()}).readlinks
    # an NFS mount keeps its symlinks in the page cache: no READLINK per walk
    nfs = nf.simulate(_calls(True), 10, {0: nf.NFS_DEFAULT})
    assert not nfs.readlinks


def test_older_six_field_calls_still_simulate() -> None:
    old = [c[:6] for c in _calls(True)]
    t = nf.simulate(old, 10, {0: nf.MountCaches()})  # type: ignore[arg-type]
    assert sum(t.calls.values()) == 40 and not t.readlinks


def test_walks_per_call_by_kind() -> None:
    rows = nf.walks_per_call(_calls(True))
    assert rows == [(0, STAT, False, 1.0)]


def test_round_trips_price_readlinks_apart_and_keep_them_after_long_timeouts() -> None:
    calls = _calls(True)
    requests = 10
    by_mount = {(0, STAT, False): 30, (0, OPEN, False): 10}
    now = nf.simulate(calls, requests, {0: nf.MountCaches()})
    then = nf.simulate(calls, requests, {0: nf.MountCaches(600.0, 600.0, 600.0)})

    def reach(t: nf.Tally) -> dict[tuple[int, int, bool], float]:
        return {k: t.fraction(k) or 0.0 for k in by_mount}

    # measured now: 3 LOOKUP + 3 READLINK + OPEN/READ/FLUSH/RELEASE per request
    measured = {"per_request": 10.0, "round_trips": 100,
                "by_fop": {"LOOKUP": 30, "READLINK": 30, "OPEN": 10, "READ": 10,
                           "FLUSH": 10, "RELEASE": 10},
                "symlink_walks": nf.walks_per_call(calls)}
    f = rt.round_trip_factors(measured, by_mount, requests, reach(now))
    assert f.readlink_ops == 1.0 and f.path_ops == 1.0
    cur = rt.network_side(by_mount, requests, reach(now), f, {}, [])
    prop = rt.network_side(by_mount, requests, reach(then), f, {}, [])
    assert cur["round_trips_per_request"] == 10.0
    # after: the stats are cached, the READLINKs are not, the opens still reach
    assert prop["round_trips_per_request"] == 7.0
    assert prop["symlink_walks_per_request"] == 3.0
    # without the symlinks known, the READLINKs would ride on the lookups and vanish
    blind = rt.round_trip_factors({k: v for k, v in measured.items() if k != "symlink_walks"},
                                  by_mount, requests, reach(now))
    assert rt.network_side(by_mount, requests, reach(then), blind, {},
                           [])["round_trips_per_request"] == 4.0


def test_walks_without_measured_round_trips_cost_one_each() -> None:
    f = rt.round_trip_factors({"symlink_walks": [[0, STAT, False, 1.0]]},
                              {(0, STAT, False): 30}, 10, {(0, STAT, False): 0.0})
    side = rt.network_side({(0, STAT, False): 30}, 10, {(0, STAT, False): 0.0}, f, {}, [])
    assert side["round_trips_per_request"] == 3.0


def test_forecast_counts_walks_through_symlinks_the_trace_read() -> None:
    class S:
        def __init__(self, ts: int, call: str, path: str) -> None:
            self.ts_ns, self.mount, self.call, self.path, self.ret, self.req = (
                ts, 0, call, path, 0, 1)

    rows = [S(1, "readlink", f"{ROOT}/lib/plugins")] + [
        S(10 + i, "stat", f"{ROOT}/lib/plugins/p{i}") for i in range(4)]
    got = nf.forecast(rows, {0}, 1, nf.MountCaches(600.0, 600.0, 600.0))
    assert got.readlinks_per_request == 5.0  # the readlink itself and 4 walks through it
    assert got.reaching_per_request >= 5.0


def test_closing_note_names_symlinks_on_fuse_as_the_cause() -> None:
    line = prediction_fit.symlink_line("/mnt/gv")
    note = prediction_fit.verdict("network round trips per request", 15.0, 250.0, (line,))
    assert "READLINK" in note and "symlinks on a FUSE mount" in note
    assert "outside the model" not in note
    both = prediction_fit.verdict("network round trips per request", 15.0, 250.0,
                                  (line, "gluster volume set gv0 network.inode-lru-limit 1"))
    assert "READLINK" in both and "also act outside the model" in both
    assert prediction_fit.verdict("network round trips per request", 240.0, 250.0,
                                  (line,)) == ""


def test_forecast_calls_keeps_the_walks_of_the_whatif_input() -> None:
    got = nf.forecast_calls(_calls(True), {0}, 10, nf.MountCaches(600.0, 600.0, 600.0))
    assert got.readlinks_per_request == 3.0 and got.reaching_per_request == 4.0
    blind = nf.forecast_calls(_calls(False), {0}, 10, nf.MountCaches(600.0, 600.0, 600.0))
    assert blind.readlinks_per_request == 0.0 and blind.reaching_per_request == 1.0


def test_readlinks_are_one_per_walk_unless_the_trace_measured_none() -> None:
    by_mount = {(0, STAT, False): 30}
    reach = {(0, STAT, False): 0.0}
    walks = [[0, STAT, False, 1.0]]
    # a measured window with more requests than counted: the READLINKs stay one per walk
    inflated = {"per_request": 9.0, "round_trips": 90, "by_fop": {"READLINK": 60, "LOOKUP": 30},
                "symlink_walks": walks}
    f = rt.round_trip_factors(inflated, by_mount, 10, reach)
    assert f.readlink_ops == 1.0
    assert rt.network_side(by_mount, 10, reach, f, {}, [])["round_trips_per_request"] == 3.0
    # operations measured, none READLINK: the client caches its symlinks
    cached = {"per_request": 3.0, "round_trips": 30, "by_fop": {"LOOKUP": 30},
              "symlink_walks": walks}
    assert rt.round_trip_factors(cached, by_mount, 10, reach).readlink_ops == 0.0


def test_the_demos_scaled_round_trips_keep_the_readlinks() -> None:
    now = nf.Forecast(10, 270.0, 186.0, 8.5, 121.0)
    then = nf.Forecast(10, 270.0, 129.0, 8.5, 121.0)
    # 194 measured before: 121 READLINKs stay, the other 73 scale with 65 → 8 reaching calls
    assert nf.scaled_round_trips(194.0, now, then) == round(121 + 73 * 8 / 65, 2)
    plain = nf.Forecast(10, 100.0, 50.0, 0.0)
    assert nf.scaled_round_trips(100.0, plain, nf.Forecast(10, 100.0, 5.0, 0.0)) == 10.0

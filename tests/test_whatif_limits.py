"""What a trace cannot show (model/replay_limits.py): the paths a replay takes rather than
sees, and the settings changes whose calls leave no mark in a trace under the recorded ones.
Pure tests here; tests/test_whatif_fidelity.py checks against real PHP that every
prediction with no limit named is exact."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import invoke
from test_whatif_model import small_trace
from statstorm.model.phpsettings import PhpSettings
from statstorm.model.fs_view import DIR, FILE, MISSING, FsView
from statstorm.model.realpath_cache import REALPATH, RealpathCache, Resolver
from statstorm.model.replay_input import Prepared
from statstorm.model.replay_limits import limits

APP = "/srv/app"


def view() -> FsView:
    fs = FsView()
    for p in (APP, f"{APP}/lib", f"{APP}/lib/a.php"):
        fs.observe(p, FILE)  # a realpath walk: each component lstat()ed
    fs.observe(f"{APP}/lib/gone.php", MISSING)
    fs.observe("/home/u/work", DIR)  # a getcwd: physical, no link in it
    fs.observe("/opt/rel/current", DIR)  # a chdir() target, never lstat()ed nor getcwd()ed
    fs.unsure_dirs.add("/opt/rel/current")
    fs.observe("/data/deep/file.txt", FILE)  # an open(): its directories are not lstat()ed
    fs.finish()
    return fs


def test_seen_paths_are_not_guesses() -> None:
    fs = view()
    for p in (APP, f"{APP}/lib", f"{APP}/lib/a.php", f"{APP}/lib/gone.php", "/home",
              "/home/u", "/home/u/work"):
        fs.kind(p)
        fs.exists(p)
    assert fs.guessed == set()
    # under a missing directory, missing is certain
    fs.kind(f"{APP}/lib/gone.php/x")
    fs.kind("/nowhere/at/all")  # (its parent is taken for missing: no guess of its own)
    assert fs.guessed == set()
    fs.kind("/nowhere")  # but / exists: /nowhere itself is taken
    assert fs.guessed == {"/nowhere"}


def test_unseen_paths_are_guesses_each_replay() -> None:
    fs = view()
    assert fs.kind(f"{APP}/lib/b.php") == MISSING  # never looked at, in a directory that is
    assert fs.kind("/data/deep") == DIR  # a parent of a file opened: a symlink, maybe
    assert fs.kind("/opt/rel/current") == DIR  # only changed into
    assert fs.guessed == {f"{APP}/lib/b.php", "/data/deep", "/opt/rel/current"}
    fs.guessed = set()  # the next replay: answers come from the memo, guesses still count
    assert not fs.exists(f"{APP}/lib/b.php")
    fs.kind("/data/deep")
    assert fs.guessed == {f"{APP}/lib/b.php", "/data/deep"}


def test_a_resolution_through_an_unseen_directory_is_guessed() -> None:
    fs = view()
    r = Resolver(fs, RealpathCache(0, 120), lambda call, path, failed: None)
    assert r.resolve("/data/deep/file.txt", "/", REALPATH) is not None
    assert "/data/deep" in fs.guessed and "/data" in fs.guessed


S = PhpSettings()
OPC = PhpSettings(opcache=True)


def prep(wipes: int = 0) -> Prepared:
    p = Prepared(FsView(), {}, [], {}, [])
    p.wipes = wipes
    return p


def ids(lims: list[dict[str, object]]) -> list[object]:
    return [lim["id"] for lim in lims]


def test_opcache_keys_hide_once_calls() -> None:
    assert ids(limits(prep(), OPC, S)) == ["opcache-once"]
    assert ids(limits(prep(), OPC, PhpSettings(opcache=True, opcache_revalidate_path=True))) \
        == ["opcache-once"]
    assert ids(limits(prep(), OPC, PhpSettings(opcache=True, include_path="/x"))) \
        == ["opcache-once"]
    assert limits(prep(), OPC, PhpSettings(opcache=True, realpath_cache_size=0)) == []
    # recorded with revalidate_path=1 every *_once resolves: nothing hidden
    rp = PhpSettings(opcache=True, opcache_revalidate_path=True)
    assert limits(prep(), rp, S) == []
    # recorded without OPcache: every call was seen
    assert limits(prep(), S, OPC) == []


def test_file_override_hides_probes() -> None:
    on = PhpSettings(opcache=True, opcache_revalidate_path=True,
                     opcache_enable_file_override=True)
    assert ids(limits(prep(), on, PhpSettings(opcache=True, opcache_revalidate_path=True))) \
        == ["opcache-override"]
    assert ids(limits(prep(), on, S)) == ["opcache-override"]
    assert limits(prep(), on, on) == []


def test_open_basedir_of_unlink_and_rename() -> None:
    basedir = PhpSettings(open_basedir="/srv")
    assert ids(limits(prep(wipes=3), S, basedir)) == ["open-basedir-unseen"]
    assert limits(prep(wipes=0), S, basedir) == []  # no unlink(), rename() nor rmdir()
    assert limits(prep(wipes=3), basedir, S) == []  # recorded with it: its checks are seen
    assert limits(prep(wipes=3), basedir, PhpSettings(open_basedir="/srv:/tmp")) == []


def test_guessed_paths_are_named() -> None:
    lims = limits(prep(), S, S, [f"/p{i}" for i in range(7)])
    assert ids(lims) == ["unseen-paths"]
    assert lims[0]["paths"] == [f"/p{i}" for i in range(7)]
    assert "7 path(s)" in str(lims[0]["text"]) and "/p4, …" in str(lims[0]["text"])


def test_whatif_names_the_limits(tmp_path: Path) -> None:
    """`--json` carries `proposed.limits` (empty: determined); the table prints each."""
    tr = small_trace(tmp_path / "t.sst.gz")
    d = json.loads(invoke(["whatif", str(tr), "--set", "realpath_cache_size=0", "--json"],
                          tmp_path, check=True).stdout)
    assert d["proposed"]["limits"] == []
    opc = small_trace(tmp_path / "opc.sst.gz", {
        "sapi": "cli", "realpath_cache_size": "4096K", "include_path": ".:/usr/share/php",
        "opcache.enable": "1", "opcache.enable_cli": "1", "opcache.revalidate_path": "0"})
    d = json.loads(invoke(["whatif", str(opc), "--set", "opcache.enable_cli=0", "--json"],
                          tmp_path, check=True).stdout)
    assert [lim["id"] for lim in d["proposed"]["limits"]] == ["opcache-once"]
    text = invoke(["whatif", str(opc), "--set", "opcache.enable_cli=0"], tmp_path,
                  check=True).stdout
    assert "not determined by the trace (opcache-once): recorded with OPcache on" in text

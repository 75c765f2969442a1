"""The cached app tree's pure rules (model/tree_cache.py) and its manifest (results/
tree_manifest.py): the key changes with the app's version, layout and storage; a manifest
comparison sees every change PHP could see; the scan of a real tree on local disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from statstorm.adapters.storage import tree_cache
from statstorm.errors import UsageError
from statstorm.model.tree_cache import compare, key_for, overlay
from statstorm.results.tree_manifest import TreeEntry, TreeManifest

EXCL = ("./LocalSettings.php", "./images")


def test_key_changes_with_version_layout_and_storage() -> None:
    base = key_for("mediawiki", "1:1.39.17-1+deb12u2", "glusterfs", EXCL)
    assert base == key_for("mediawiki", "1:1.39.17-1+deb12u2", "glusterfs", EXCL[::-1])
    others = [key_for("mediawiki", "1:1.39.18-1", "glusterfs", EXCL),
              key_for("mediawiki", "1:1.39.17-1+deb12u2", "openafs", EXCL),
              key_for("mediawiki", "1:1.39.17-1+deb12u2", "glusterfs", EXCL[:1]),
              key_for("wordpress", "1:1.39.17-1+deb12u2", "glusterfs", EXCL)]
    names = {k.name for k in [base, *others]}
    assert len(names) == 5
    assert base.name.startswith("mediawiki-1_1.39.17-1+deb12u2-glusterfs-")
    assert "/" not in key_for("x", "../../etc", "glusterfs", ()).name


def _tree(*entries: TreeEntry) -> TreeManifest:
    return TreeManifest(tuple(sorted(entries, key=lambda e: e.path)))


F = TreeEntry("a.php", "file", 0o644, 0, 0, size=3, mtime_ns=5_000_000_000, digest="aa")
D = TreeEntry("d", "dir", 0o755, 0, 0)


def test_compare_sees_what_php_sees() -> None:
    same = _tree(F, D)
    assert compare(same, _tree(F, D)).same
    # a directory's mtime and a file's sub-second mtime are not compared (tar keeps seconds)
    assert compare(same, _tree(F.__class__(**{**F.__dict__, "mtime_ns": 5_900_000_000}), D)).same
    for change in ({"digest": "bb"}, {"size": 4}, {"mode": 0o600}, {"uid": 33},
                   {"mtime_ns": 6_000_000_000}, {"kind": "link", "target": "x"}):
        diff = compare(same, _tree(TreeEntry(**{**F.__dict__, **change}), D))
        assert diff.changed == ("a.php",), change
    assert compare(same, _tree(F, D), content=False).same
    assert compare(same, _tree(TreeEntry(**{**F.__dict__, "digest": ""}), D),
                   content=False).same
    diff = compare(same, _tree(D, TreeEntry("b.php", "file", 0o644, 0, 0)))
    assert diff.missing == ("a.php",) and diff.extra == ("b.php",)
    assert "1 missing (a.php)" in diff.summary()


def test_overlay_writes_the_labs_files_and_removes_what_it_lacks() -> None:
    cached = _tree(F, D, TreeEntry("d/gone.php", "file", 0o644, 0, 0))
    settings = TreeEntry("LocalSettings.php", "file", 0o640, 0, 33, size=9, digest="cc")
    write, remove = overlay(cached, _tree(F, D, settings))
    assert write == ("LocalSettings.php",) and remove == ("d/gone.php",)


def test_manifest_round_trip_and_bad_input(tmp_path: Path) -> None:
    m = TreeManifest((D, F), key="k")
    assert TreeManifest.from_json(m.to_json()) == TreeManifest((F, D), key="k")
    with pytest.raises(UsageError, match="schema"):
        TreeManifest.from_json({"schema": "other", "entries": []})
    with pytest.raises(UsageError, match="kind"):
        TreeManifest.from_json({"schema": m.to_json()["schema"],
                                "entries": [{"path": "x", "kind": "fifo"}]})


def test_scan_of_a_tree(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d/a.php").write_text("<?php\n")
    os.symlink("d/a.php", tmp_path / "l")
    m = tree_cache.scan(tmp_path, digests=True)
    by = {e.path: e for e in m.entries}
    assert [e.path for e in m.entries] == ["d", "d/a.php", "l"]
    assert by["d/a.php"].size == 6 and len(by["d/a.php"].digest) == 64
    assert by["l"].kind == "link" and by["l"].target == "d/a.php"
    (tmp_path / "d/a.php").write_text("<?php!\n")
    assert compare(m, tree_cache.scan(tmp_path, digests=True)).changed == ("d/a.php",)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(Exception, match="not a file"):
        tree_cache.scan(tmp_path, digests=False)

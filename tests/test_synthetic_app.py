"""The synthetic app generator: determinism, and real PHP running the entry script."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from statstorm.apps import synthetic
from statstorm.env import Env
from statstorm.errors import UsageError


def gen(path: Path, **kw: object) -> synthetic.GeneratedApp:
    return synthetic.generate(Env(), path, synthetic.AppSpec(**kw))  # type: ignore[arg-type]


def test_same_seed_same_tree_other_seed_other_tree(tmp_path: Path) -> None:
    a = gen(tmp_path / "a", seed=7, packages=6, classes=4, touch=10)
    b = gen(tmp_path / "b", seed=7, packages=6, classes=4, touch=10)
    c = gen(tmp_path / "c", seed=8, packages=6, classes=4, touch=10)
    assert synthetic.tree_digest(a.root) == synthetic.tree_digest(b.root)
    assert synthetic.tree_digest(a.root) != synthetic.tree_digest(c.root)


def test_tree_shape_follows_the_flags(tmp_path: Path) -> None:
    app = gen(tmp_path / "app", packages=5, classes=3, depth=4, legacy_files=7,
              include_path_entries=3, user_ini=True, touch=6)
    classes = [p for p in (app.root / "vendor").rglob("*.php")
               if "composer" not in p.parts and p.name != "autoload.php"]
    assert len(classes) == 15
    # depth 4: vendor/<v>/<p>/src/<4 levels>/Class.php
    for path in classes:
        rel = path.relative_to(app.root / "vendor")
        assert len(rel.parts) == 3 + 4 + 1
    assert len(list((app.root / "lib/legacy").glob("helper_*.php"))) == 7
    assert app.include_path == ["lib/inc1", "lib/inc2", "lib"]
    assert (app.root / "public/.user.ini").exists()
    # Real Composer wrote the autoloader, non-authoritative, with our PSR-4 map.
    psr4 = (app.root / "vendor/composer/autoload_psr4.php").read_text()
    assert psr4.count("=> array(") == 5
    assert "classMapAuthoritative" not in (app.root / "vendor/composer/autoload_static.php").read_text()


def test_entry_runs_under_real_php_and_touches_the_classes(tmp_path: Path) -> None:
    app = gen(tmp_path / "app", packages=8, classes=5, touch=23, legacy_files=4, missing=3)
    out = subprocess.run(["php", str(app.docroot / app.entry)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    page = json.loads(out)
    assert page["classes"] == 23
    assert page["legacy"] == 4
    assert page["missing_found"] == 0
    # entry + autoload.php + composer's 3 (autoload_real, ClassLoader, autoload_static)
    # + 4 legacy + 23 classes
    assert page["included_files"] == 1 + 1 + 3 + 4 + 23


def test_bad_specs_and_directories(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--touch"):
        gen(tmp_path / "x", packages=2, classes=2, touch=5)
    with pytest.raises(UsageError, match="--packages"):
        gen(tmp_path / "x", packages=0)
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty"):
        gen(other)
    with pytest.raises(UsageError, match="not a statstorm app"):
        synthetic.generate(Env(), other, synthetic.AppSpec(), force=True)
    assert (other / "keep.txt").read_text() == "mine"


def test_gen_app_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from statstorm.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["lab", "gen-app", str(tmp_path / "app"), "--packages", "3", "--classes", "2",
              "--touch", "4", "--json"])
    assert exc.value.code == 0
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["expected_classes"] == 4 and manifest["spec"]["packages"] == 3
    with pytest.raises(SystemExit) as exc:
        main(["lab", "gen-app", str(tmp_path / "app")])
    assert exc.value.code == 2
    assert "not empty" in capsys.readouterr().err


def test_force_replaces_a_generated_app(tmp_path: Path) -> None:
    first = gen(tmp_path / "app", seed=1, packages=3, classes=2, touch=2)
    before = synthetic.tree_digest(first.root)
    again = synthetic.generate(Env(), tmp_path / "app",
                               synthetic.AppSpec(seed=2, packages=3, classes=2, touch=2), force=True)
    assert synthetic.tree_digest(again.root) != before
    assert synthetic.load(again.root).spec.seed == 2
    assert [p.name for p in tmp_path.iterdir()] == ["app"]  # no staging directory left

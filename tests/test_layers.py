"""scripts/layers.py: the layering of docs/architecture.md, checked — clean on this checkout,
and failing, with the arrow named, on a copy where one import points up."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts/layers.py"


def layers_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True,
                          text=True, timeout=60)


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("layers_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the sources and docs/architecture.md to plant imports in."""
    shutil.copytree(ROOT / "src/statstorm", tmp_path / "src/statstorm",
                    ignore=shutil.ignore_patterns("__pycache__", "bpf", "templates"))
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "docs/architecture.md", tmp_path / "docs")
    return tmp_path


def test_this_checkout_is_clean_within_a_second_or_so() -> None:
    t0 = time.monotonic()
    proc = layers_check(ROOT)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("clean: ") and proc.stdout.count("\n") == 1
    assert took < 5  # about 0.3 s alone; the machine may be busy with other tests


@pytest.mark.parametrize("module, line, named", [
    ("results/common.py", "from statstorm.model import stats",
     "statstorm.results.common (results) -> statstorm.model.stats (model)"),
    ("model/knee.py", "from statstorm.adapters.tracing import bpftrace",
     "statstorm.model.knee (model) -> statstorm.adapters.tracing.bpftrace (adapters)"),
    ("apps/mediawiki.py", "from statstorm.adapters.storage import tree_copy",
     "statstorm.apps.mediawiki (apps) -> statstorm.adapters.storage.tree_copy (adapters)"),
    ("adapters/host/smaps.py", "def later() -> None:\n    from statstorm.commands import trace",
     "statstorm.adapters.host.smaps (adapters) -> statstorm.commands.trace (commands)"),
    ("report/html.py", "from statstorm.adapters.load import http",
     "statstorm.report.html (report) -> statstorm.adapters.load.http (adapters)"),
    ("commands/check.py", "from statstorm.commands import trace",
     "verb->verb import: statstorm.commands.check -> statstorm.commands.trace"),
    ("errors.py", "from statstorm.results import common",
     "statstorm.errors (base) -> statstorm.results.common (results)"),
])
def test_a_planted_upward_import_fails_and_is_named(checkout: Path, module: str, line: str,
                                                   named: str) -> None:
    path = checkout / "src/statstorm" / module
    path.write_text(path.read_text() + "\n" + line + "  # planted\n")
    proc = layers_check(checkout)
    assert proc.returncode == 1, proc.stdout
    assert named in proc.stdout
    assert "clean" not in proc.stdout


def test_model_io_size_cycles_and_docs_are_checked_too(checkout: Path) -> None:
    """The shared check's rules: I/O in model, a module over 500 lines, a cycle, no docs."""
    src = checkout / "src/statstorm"
    (src / "model/knee.py").write_text((src / "model/knee.py").read_text()
                                      + "\ndef peek(p: str) -> str:\n    return open(p).read()\n")
    (src / "model/long.py").write_text("x = 1\n" * 501)
    (src / "results/facts.py").write_text((src / "results/facts.py").read_text()
                                         + "\nfrom statstorm.results import lab  # planted\n")
    (src / "results/lab.py").write_text((src / "results/lab.py").read_text()
                                       + "\nfrom statstorm.results import facts  # planted\n")
    (checkout / "docs/architecture.md").unlink()
    out = layers_check(checkout).stdout
    assert "I/O in model: src/statstorm/model/knee.py" in out
    assert "module over 500 lines: src/statstorm/model/long.py (501)" in out
    assert "import cycle:" in out and "statstorm.results.facts" in out
    assert "no docs/architecture.md" in out


def test_the_import_reader_finds_what_a_full_parse_finds() -> None:
    """The check reads only the import statements (a full parse of every module would cost
    most of its time): on this checkout they give the same arrows as the whole syntax tree."""
    layers = load_script()
    mods = layers.modules(ROOT / "src")
    for name, path in mods.items():
        text = path.read_text()
        fast = layers.imports(layers.import_statements(text), path, name, mods)
        full = layers.imports(layers.all_statements(ast.parse(text)), path, name, mods)
        assert fast == full, name


def test_an_import_in_a_docstring_is_not_an_arrow(checkout: Path) -> None:
    path = checkout / "src/statstorm/results/common.py"
    doc = '\n"""For example:\nfrom statstorm.model import stats\n"""\n'
    path.write_text(path.read_text() + doc)
    proc = layers_check(checkout)
    assert proc.returncode == 0 and proc.stdout.startswith("clean: "), proc.stdout

"""`statstorm demo` end to end on real components (synthetic app, to keep it short)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import leftovers, run_cli

pytestmark = pytest.mark.root


def test_demo_runs_and_leaves_nothing(state_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = run_cli(["demo", "--app", "synthetic", "--storage", "glusterfs", "--views", "2",
                    "-o", str(out)], state_home, check=True)
    assert proc.stdout.count("HTTP 200") == 2
    assert "sweep: " in proc.stdout and "lab removed." in proc.stdout
    assert "trace: 2 page views" in proc.stdout
    trace = json.loads(run_cli(["trace", "show", str(out / "trace.sst.gz"), "--json"],
                               state_home, check=True).stdout)
    assert trace["requests"] == 2 and trace["per_request"]["total"] > 0
    sweep = json.loads((out / "sweep.json").read_text())
    assert [lv["concurrency"] for lv in sweep["levels"]] == [1, 2, 4]
    assert all(lv["rps"] > 0 for lv in sweep["levels"]) and sweep["knee"]
    assert (out / "sweep.svg").read_text().lstrip().startswith("<")
    assert leftovers(str(state_home / "labs" / "demo"), "statstorm-demo") == []

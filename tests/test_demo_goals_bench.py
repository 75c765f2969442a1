"""bench/demo_goals.py --from: each run's figures after `apply --all` and where it ended
(demo.json's `final`), the escalation's kept changes named; a demo.json written before the
`final` key summarised from its trials. No root: the demo.json comes from the unit test's
fakes (tests/test_demo_unit.py) and the report's golden fixture."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_demo_unit import OFF, DemoFakes, run

from statstorm.model import escalation

ROOT = Path(__file__).resolve().parent.parent
OLD = ROOT / "tests" / "fixtures" / "report" / "demo" / "demo.json"  # no `final` key


def summary(*files: Path) -> list[str]:
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "demo_goals.py"), "--from",
                        *map(str, files)], capture_output=True, text=True, check=True)
    return p.stdout.splitlines()


def test_the_final_figure_is_printed_beside_after_with_the_kept_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = DemoFakes(tmp_path, ratios={"before": 0.2, "after": 0.5, f"with {OFF}": 0.7},
                      reported=escalation.ESCALATION)
    run(tmp_path, fakes, monkeypatch)
    new = tmp_path / "out" / "demo.json"
    stripped = tmp_path / "old-style.json"  # the same run written before the `final` key
    stripped.write_text(json.dumps({k: v for k, v in json.loads(new.read_text()).items()
                                    if k != "final"}))
    lines = summary(OLD, new, stripped)
    rows = {line.split()[0]: line.split() for line in lines[1:4]}
    assert rows["1"][1:5] == ["glusterfs", "0.090x", "0.580x", "0.580x"]  # ended after
    assert rows["2"][1:5] == ["glusterfs", "0.200x", "0.500x", "0.700x"]  # ended with OFF
    assert rows["3"][1:] == rows["2"][1:]  # its end read from its trials
    assert lines[4] == "run 1: ended after apply --all; escalation kept: none"
    assert lines[5] == (f"run 2: ended with {OFF} kept; escalation kept: {OFF} "
                        f"(tried: {OFF} (kept))")
    assert lines[6] == lines[5].replace("run 2", "run 3")
    assert lines[7].startswith("median: throughput 0.500x local after apply --all, "
                               "0.700x final")

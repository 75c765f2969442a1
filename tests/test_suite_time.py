"""scripts/suite_time.py: where the suite's time went, from pytest's JUnit XML."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts/suite_time.py"

XML = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_a" name="test_one" time="12.5" />
<testcase classname="tests.test_a" name="test_two[x]" time="0.5" />
<testcase classname="tests.test_b.TestC" name="test_three" time="30.0" />
</testsuite></testsuites>"""


def test_the_slowest_tests_the_files_and_the_total(tmp_path: Path) -> None:
    xml = tmp_path / "root.xml"
    xml.write_text(XML)
    out = subprocess.run([sys.executable, str(SCRIPT), "--phase", "setup=60", "--phase",
                          f"root=600:{xml}", "--slowest", "2"], capture_output=True, text=True,
                         check=True).stdout
    slow = out.split("slowest tests", 1)[1].split("\n\n", 1)[0]
    assert slow.index("tests/test_b.py::test_three") < slow.index("tests/test_a.py::test_one")
    assert "test_two" not in slow  # only the 2 slowest
    files = out.split("root tests by file:", 1)[1].split("\n\n", 1)[0].splitlines()
    assert "30.0 s" in files[1] and "tests/test_b.py" in files[1]
    assert "13.0 s" in files[2] and "2 tests" in files[2] and "tests/test_a.py" in files[2]
    assert "setup 1.0 min, root 10.0 min; total 11.0 min" in out


def test_a_missing_xml_still_gives_the_wall_times(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--phase", "setup=6", "--phase",
                          f"non-root=114:{tmp_path / 'none.xml'}"], capture_output=True,
                         text=True, check=True).stdout
    assert "total 2.0 min" in out and "slowest" not in out


def test_a_phase_of_two_lanes_reads_both_files(tmp_path: Path) -> None:
    """scripts/test.sh's root lanes side by side: one phase, one wall time, a file each."""
    main, beside = tmp_path / "main.xml", tmp_path / "beside.xml"
    main.write_text(XML)
    beside.write_text(XML.replace("tests.test_a", "tests.test_d").replace("test_b", "test_e"))
    out = subprocess.run([sys.executable, str(SCRIPT), "--phase",
                          f"root (two lanes)=900:{main},{beside}", "--phase",
                          f"root (alone)=300:{tmp_path / 'none.xml'}"], capture_output=True,
                         text=True, check=True).stdout
    files = out.split("root (two lanes) tests by file:", 1)[1].split("\n\n", 1)[0]
    assert {"tests/test_a.py", "tests/test_b.py", "tests/test_d.py",
            "tests/test_e.py"} <= {line.split()[-1] for line in files.splitlines() if line}
    assert "root (two lanes) 15.0 min, root (alone) 5.0 min; total 20.0 min" in out

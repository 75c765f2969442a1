#!/usr/bin/env python3
"""Where the test suite's time went: printed by scripts/test.sh at the end of a full run.

  suite_time.py --phase NAME=SECONDS:JUNIT.xml[,JUNIT.xml] ... [--phase NAME=SECONDS]
                [--slowest 20]

Each phase is a part of the run with its wall time (setup, the tests not marked root, the
root tests in two lanes side by side, then those that run alone), and for pytest's phases
the JUnit XML they wrote, one for each lane of a phase (each test's time there is its setup,
call and teardown together, a module's shared lab in its first test's setup). Printed:
the N slowest tests, the root tests' time by file, and each phase's wall time with the total.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def tests_of(xml: Path) -> list[tuple[str, float]]:
    """(file::test, seconds) of every test case in a JUnit XML file (none if unreadable)"""
    try:
        root = ET.parse(xml).getroot()
    except (OSError, ET.ParseError):
        return []
    out = []
    for case in root.iter("testcase"):
        module = case.get("classname", "").split(".")
        path = "/".join(m for m in module if m and not m[0].isupper())  # no test class
        out.append((f"{path}.py::{case.get('name', '?')}", float(case.get("time") or 0)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase", action="append", default=[], metavar="NAME=SECONDS[:XML]")
    ap.add_argument("--slowest", type=int, default=20)
    a = ap.parse_args()
    phases: list[tuple[str, float, list[tuple[str, float]]]] = []
    for spec in a.phase:
        name, _, rest = spec.partition("=")
        seconds, _, xml = rest.partition(":")
        try:
            wall = float(seconds)
        except ValueError:
            sys.exit(f"suite_time: --phase {spec!r} is not NAME=SECONDS[:XML]")
        phases.append((name, wall, [t for one in xml.split(",") if one
                                    for t in tests_of(Path(one))]))
    every = [(t, s, name) for name, _, tests in phases for t, s in tests]
    if every:
        print(f"\nthe {min(a.slowest, len(every))} slowest tests (setup + call + teardown):")
        for t, s, name in sorted(every, key=lambda x: -x[1])[:a.slowest]:
            print(f"  {s:8.1f} s  {t}  [{name}]")
    for name, wall, tests in phases:
        if not name.startswith("root") or not tests:
            continue
        by_file: dict[str, list[float]] = defaultdict(list)
        for t, s in tests:
            by_file[t.split("::")[0]].append(s)
        print(f"\n{name} tests by file:")
        for f, times in sorted(by_file.items(), key=lambda x: -sum(x[1])):
            print(f"  {sum(times):8.1f} s  {len(times):4d} tests  {f}")
    total = sum(wall for _, wall, _ in phases)
    print("\nthe suite's wall time: " + ", ".join(
        f"{name} {wall / 60:.1f} min" for name, wall, _ in phases)
        + f"; total {total / 60:.1f} min")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Fault injection over every verb, every point and every write (issue #20's goal).

For `lab up` (local disk and GlusterFS), `trace`, `trace import`, `sweep`, `fsbench`, `apply --yes`,
`apply --rollback` and the demo: the points each passes are listed by a first run, then the
verb runs once per point with SIGINT and once with SIGTERM (at the first and the second
passing of a repeated point), and once per write with ENOSPC and once with EACCES, each in a
cgroup of its own (tests/fault_runs.py). After each run the case's checks of
tests/test_faults.py say what is wrong. Prints, per verb, the faults delivered, the leftovers
(processes, mounts, labs, temp files, work directories) and the partial targets (a result,
trace or configuration neither the previous nor a whole new one), and every problem.

The suite (tests/test_faults.py) runs a subset of the same faults. Needs root. Not a timing
benchmark, but it starts labs and load: run it on a machine without other tests.

    python3 bench/faults.py                       # every verb (about 25 min)
    python3 bench/faults.py --only apply,rollback
    python3 bench/faults.py --json faults.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

import fault_runs  # noqa: E402
import test_faults as cases  # noqa: E402
from conftest import unique_name  # noqa: E402

VERBS = ("lab-up-local", "lab-up-glusterfs", "trace", "trace_import", "sweep", "fsbench",
         "apply", "rollback", "demo")
LEFTOVER = ("processes left", "left in its TMPDIR", "temp file left", "process ", "mount:",
            "volume ", "directory ")
PARTIAL = ("neither the old nor the new", "does not read", "published by a run that failed",
           "did not finish", "schema", "Expecting", "backup set", "--rollback after it")


def kind(problem: str) -> str:
    text = problem.partition(": ")[2]  # after the fault
    if any(k in text for k in LEFTOVER):
        return "leftover"
    if any(k in text for k in PARTIAL):
        return "partial"
    return "other"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(VERBS), help="comma-separated: " + ", ".join(VERBS))
    ap.add_argument("--json", type=Path, help="write the figures and problems here")
    args = ap.parse_args()
    why = fault_runs.available()
    if why:
        print(f"bench/faults.py: {why}", file=sys.stderr)
        return 2
    only = [v.strip() for v in args.only.split(",") if v.strip()]
    unknown = [v for v in only if v not in VERBS]
    if unknown:
        print(f"bench/faults.py: unknown --only {unknown}; choose from {', '.join(VERBS)}",
              file=sys.stderr)
        return 2
    home = Path(f"/var/tmp/statstorm-faults-{unique_name('b')}")
    home.mkdir(mode=0o755)
    rows = []
    try:
        with cases.served_lab(home) as served:
            for verb in only:
                tmp = Path(tempfile.mkdtemp(prefix=f"statstorm-bench-faults-{verb}-"))
                t0 = time.monotonic()
                try:
                    if verb.startswith("lab-up-"):
                        out = cases.lab_up_case(home, tmp, verb.removeprefix("lab-up-"), every=True)
                    elif verb in ("demo", "trace_import"):
                        out = getattr(cases, f"{verb}_case")(home, tmp, every=True)
                    else:
                        case = getattr(cases, f"{verb}_case")
                        out = case(home, tmp, served, every=True)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
                kinds = [kind(p) for p in out.problems]
                rows.append({"verb": verb, "faults": out.runs,
                             "leftovers": kinds.count("leftover"),
                             "partial": kinds.count("partial"), "other": kinds.count("other"),
                             "seconds": round(time.monotonic() - t0, 1),
                             "problems": out.problems})
                r = rows[-1]
                print(f"{verb:17} {r['faults']:4} faults  {r['leftovers']:3} leftovers  "
                      f"{r['partial']:3} partial  {r['other']:3} other  {r['seconds']:7.1f} s",
                      flush=True)
                for p in out.problems:
                    print(f"    {p[:400]}")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    total = {k: sum(r[k] for r in rows) for k in ("faults", "leftovers", "partial", "other")}
    print(f"{'total':17} {total['faults']:4} faults  {total['leftovers']:3} leftovers  "
          f"{total['partial']:3} partial  {total['other']:3} other")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "total": total}, indent=2) + "\n")
    return 0 if not any(total[k] for k in ("leftovers", "partial", "other")) else 1


if __name__ == "__main__":
    sys.exit(main())

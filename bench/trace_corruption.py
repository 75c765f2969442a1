"""Random corruptions of a real trace and its record sidecar: is every one detected, or the
result identical? (issue #20's goal: 0 silent result changes, 0 crashes.)

The trace is the demo's real `before.sst.gz` (php-fpm under the tracer: requests, PHP
operations, paths), written again by this statstorm (so sealed, with its sidecar); plain
JSON lines by default (a flipped byte there is most likely to stay valid JSON), gzip with
--gz. Each round restores both files, corrupts one of them once (a flipped byte, a cut at a
line boundary or anywhere, a deleted or duplicated line or byte range), and runs what
`trace show --json` and `whatif --json --no-cache --set realpath_cache_size=0` run, in
process, twice (the second read uses the sidecar the first one rebuilt, if any). Outcomes: detected (a statstorm error; its message must be one line), identical
(both results as before the corruption), silent change, crash (any other exception). Also
counted: temp files left beside the trace.

CPU only, no privileges:
    .venv/bin/python bench/trace_corruption.py            # 1,000 rounds, seed 1
    .venv/bin/python bench/trace_corruption.py -n 300 --gz --json
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

from statstorm.commands import trace as trace_cmd
from statstorm.commands import whatif as whatif_cmd
from statstorm.errors import StatstormError
from statstorm.results.trace import read_trace, write_trace
from statstorm.results.trace.sidecar import records_path

FIXTURE = Path(__file__).resolve().parent.parent / "tests/fixtures/report/demo/before.sst.gz"
KINDS = ("flip", "cut-at-line", "cut-anywhere", "delete", "duplicate")


def results(path: Path) -> str:
    """`trace show --json` and `whatif --json` of the trace, as one comparable string."""
    show = trace_cmd.show(path).to_json()
    run = whatif_cmd.run(whatif_cmd.WhatifOptions(path, sets=("realpath_cache_size=0",),
                                                  cache=False))
    return json.dumps([show, run.to_json()], sort_keys=True, default=str)


def corrupt(rng: random.Random, data: bytes, kind: str) -> bytes:
    """One corruption of `data` (never a no-op)."""
    n = len(data)
    ends = [i + 1 for i, b in enumerate(data) if b == 0x0A]
    if kind == "flip":
        i = rng.randrange(n)
        return data[:i] + bytes([data[i] ^ rng.randrange(1, 256)]) + data[i + 1:]
    if kind == "cut-at-line" and len(ends) > 1:
        return data[:rng.choice(ends[:-1])]
    if kind in ("cut-at-line", "cut-anywhere"):
        return data[:rng.randrange(n)]
    if len(ends) > 2 and rng.random() < 0.5:  # a whole line (text), else a byte range
        k = rng.randrange(len(ends) - 1)
        a, b = ends[k], ends[k + 1]
    else:
        a = rng.randrange(n - 1)
        b = min(n, a + rng.randint(1, 64))
    if kind == "delete":
        return data[:a] + data[b:]
    return data[:b] + data[a:b] + data[b:]  # duplicate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=1000, help="rounds (default 1,000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gz", action="store_true", help="a gzip trace instead of plain")
    ap.add_argument("--json", action="store_true", help="the counts as JSON")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="statstorm-corruption-"))
    try:
        trace = work / ("t.sst.gz" if args.gz else "t.sst")
        write_trace(trace, read_trace(FIXTURE))
        side = records_path(trace)
        pristine = {trace: trace.read_bytes(), side: side.read_bytes()}
        base = results(trace)
        outcome: collections.Counter[str] = collections.Counter()
        by: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        examples: list[str] = []
        leftovers = 0
        multi_line = 0
        for i in range(args.n):
            for p, data in pristine.items():
                p.write_bytes(data)
            target = trace if i % 2 == 0 else side
            kind = rng.choice(KINDS)
            target.write_bytes(corrupt(rng, pristine[target], kind))
            what = f"{'trace' if target == trace else 'sidecar'} {kind}"
            try:
                got = results(trace)
                if got == base:  # again: from the sidecar the first read may have rebuilt
                    got = results(trace)
            except StatstormError as exc:
                res = "detected"
                multi_line += "\n" in str(exc)
            except Exception as exc:  # noqa: BLE001 - counted: the goal is 0
                res = "crash"
                examples.append(f"{what}: {traceback.format_exception_only(exc)[-1].strip()}")
            else:
                res = "identical" if got == base else "silent change"
                if res != "identical":
                    examples.append(f"{what}: round {i}")
            outcome[res] += 1
            by[what][res] += 1
            leftovers += sum(1 for x in work.iterdir() if x.name.startswith("."))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report: dict[str, Any] = {
        "rounds": args.n, "seed": args.seed, "trace": "gzip" if args.gz else "plain",
        "detected": outcome["detected"], "identical": outcome["identical"],
        "silent_change": outcome["silent change"], "crash": outcome["crash"],
        "multi_line_messages": multi_line, "temp_files_left": leftovers,
        "by_corruption": {k: dict(v) for k, v in sorted(by.items())}, "examples": examples[:20]}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{args.n:,} corruptions of a {report['trace']} trace and its sidecar "
              f"(seed {args.seed}): {report['detected']:,} detected, "
              f"{report['identical']:,} identical, {report['silent_change']} silent changes, "
              f"{report['crash']} crashes; {multi_line} multi-line messages, "
              f"{leftovers} temp files left")
        for k, v in report["by_corruption"].items():
            print(f"  {k:24} " + ", ".join(f"{n} {r}" for r, n in sorted(v.items())))
        for e in examples[:20]:
            print(f"  ! {e}")
    bad = report["silent_change"] + report["crash"] + multi_line + leftovers
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

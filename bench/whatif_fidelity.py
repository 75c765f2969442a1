#!/usr/bin/env python3
"""whatif's fidelity against real PHP over hundreds of generated scenarios.

Each seed of tests/php_scenarios.py is a random code tree and CLI script (includes in every
style, probes, chdir, clearstatcache, an autoloader, symlinked releases, files created and
removed) with a set of settings (realpath_cache_size from 0 to 4096K, open_basedir, OPcache
and its revalidation settings, include_path orders). It is traced once with `statstorm trace
--cmd` and predicted under the other settings; real PHP runs under each (strace). Prints the
share of exact comparisons, the error distribution per call type, the mismatches by the
features the scenario used, and the run time. A prediction for which whatif names a limit
of the trace (model/replay_limits.py: something PHP does under the proposed settings that
leaves no mark in a trace under the recorded ones) is counted apart as not determined; the
goal is every replay and every determined prediction exact.

`--php 7.4|8.4` runs the scenarios on that PHP version's Debian root (`statstorm lab
php-root build VERSION`; found in $STATSTORM_PHP_ROOTS, else /var/tmp/statstorm-php-roots):
its binary chrooted in the root, the scenarios' directory mounted there for the run, and
the model replays as that version (the trace's header says which). 8.2 is the host's PHP.

Needs root (the tracer). Not a timing benchmark: it may run beside other work.

    python3 bench/whatif_fidelity.py                 # 500 seeds, every feature
    python3 bench/whatif_fidelity.py --php 8.4 --seeds 100
    python3 bench/whatif_fidelity.py --seeds 50 --features include,probe,cache
    python3 bench/whatif_fidelity.py --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

import php_scenarios as ps  # noqa: E402
from statstorm.results.trace import SUMMARY_KEYS  # noqa: E402


def features_of(sc: ps.Scenario) -> set[str]:
    """What a generated scenario actually used (for grouping mismatches)."""
    text = "\n".join(sc.lines)
    used = set()
    if "chdir(" in text:
        used.add("chdir")
    if "clearstatcache" in text:
        used.add("clear")
    if "file_put_contents" in text:
        used.add("tmpfile")
    if "spl_autoload_register" in text:
        used.add("autoload")
    if sc.links:
        used.add("symlink")
    for s in sc.settings:
        if s.get("open_basedir"):
            used.add("basedir")
        if s.get("opcache.enable_cli") == "1":
            used.add("opcache")
    return used


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=500, help="scenarios to run (default 500)")
    ap.add_argument("--first", type=int, default=1, help="first seed (default 1)")
    ap.add_argument("--features", default="all",
                    help="comma-separated features (default all: " + ",".join(
                        sorted(ps.FEATURES)) + ")")
    ap.add_argument("--jobs", type=int, default=3, help="scenarios at once (default 3)")
    ap.add_argument("--json", type=Path, help="write every comparison to this file")
    ap.add_argument("--php", default="8.2", choices=("7.4", "8.2", "8.4"),
                    help="the PHP version to run the scenarios on (default 8.2, the host's)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("whatif_fidelity: needs root (it traces with eBPF); run it with sudo",
              file=sys.stderr)
        return 2
    feats = ps.FEATURES if args.features == "all" else frozenset(args.features.split(","))
    unknown = feats - ps.FEATURES
    if unknown:
        print(f"whatif_fidelity: unknown features {sorted(unknown)}", file=sys.stderr)
        return 2
    roots = Path(os.environ.get("STATSTORM_PHP_ROOTS") or "/var/tmp/statstorm-php-roots")
    try:
        php = ps.root_of_version(args.php, roots)
    except FileNotFoundError as exc:
        print(f"whatif_fidelity: {exc}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="statstorm-fidelity-", dir="/var/tmp"))
    os.chmod(work, 0o755)
    home = work / "home"
    home.mkdir()
    seeds = list(range(args.first, args.first + args.seeds))
    t0 = time.monotonic()
    results: list[ps.Comparison] = []
    errors: list[tuple[int, str]] = []
    used: dict[int, set[str]] = {}

    def one(seed: int) -> tuple[int, list[ps.Comparison] | str]:
        sc = ps.generate(seed, work / "cases", feats, php)
        used[seed] = features_of(sc)
        try:
            return seed, ps.check_scenario(sc, home)
        except Exception as exc:  # a scenario that could not run is reported, not hidden
            return seed, f"{type(exc).__name__}: {exc}"

    (work / "cases").mkdir()
    mounted = ps.root_mounted(php[1], work / "cases") if php[1] else contextlib.nullcontext()
    try:
        with mounted, ThreadPoolExecutor(args.jobs) as pool:
            for n, (seed, out) in enumerate(pool.map(one, seeds), 1):
                if isinstance(out, str):
                    errors.append((seed, out))
                else:
                    results.extend(out)
                if n % 25 == 0 or n == len(seeds):
                    exact = sum(c.exact for c in results)
                    print(f"  {n}/{len(seeds)} scenarios, {exact}/{len(results)} comparisons "
                          f"exact, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.monotonic() - t0

    kinds: dict[str, list[ps.Comparison]] = defaultdict(list)
    for c in results:
        kinds["replay" if c.what == "replay" else
              "tracer vs strace" if c.what == "strace vs tracer" else "prediction"].append(c)
    print(f"whatif fidelity: PHP {args.php}, {len(seeds)} scenarios ({args.features}), "
          f"{len(results)} comparisons, {elapsed:.0f} s")
    for kind, cs in kinds.items():
        exact = sum(c.exact for c in cs)
        print(f"  {kind:17} {exact:5}/{len(cs):<5} exact ({100 * exact / max(len(cs), 1):.1f} %)")
    preds = kinds.get("prediction", [])
    det = [c for c in preds if c.determined]
    undet = [c for c in preds if not c.determined]
    exact = sum(c.exact for c in det)
    print(f"  {'determined':17} {exact:5}/{len(det):<5} exact "
          f"({100 * exact / max(len(det), 1):.1f} %): predictions whatif names no limit for")
    by_limit: Counter[str] = Counter(lim for c in undet for lim in c.limits)
    print(f"  {'not determined':17} {sum(c.exact for c in undet):5}/{len(undet):<5} exact; "
          "limits named: " + (", ".join(f"{k} {n}" for k, n in by_limit.most_common())
                              or "none"))
    bad = [c for c in results if not c.exact]
    if bad:
        print("error per mismatched comparison (model − real, per call type):")
        for k in SUMMARY_KEYS:
            errs = [c.model[k] - c.real[k] for c in bad if c.model[k] != c.real[k]]
            if errs:
                rel = [abs(c.model[k] - c.real[k]) / max(c.real[k], 1) for c in bad
                       if c.model[k] != c.real[k]]
                print(f"  {k:9} {len(errs):4} off; median {statistics.median(errs):+g}, "
                      f"range {min(errs):+g}..{max(errs):+g}; median |relative| "
                      f"{100 * statistics.median(rel):.1f} %")
        by_feature: Counter[str] = Counter()
        for c in bad:
            for f in used.get(c.seed, set()) or {"(basic)"}:
                by_feature[f] += 1
        print("mismatches by feature the scenario used: " + ", ".join(
            f"{f} {n}" for f, n in by_feature.most_common()))
        print("first mismatched seeds: " + ", ".join(
            str(s) for s in sorted({c.seed for c in bad})[:20]))
        bad_det = [c for c in bad if c.determined]
        if bad_det:
            print("determined but not exact: " + "; ".join(
                f"seed {c.seed} ({c.what})" for c in bad_det[:20]))
    if errors:
        print(f"{len(errors)} scenario(s) could not run:")
        for seed, why in errors[:10]:
            print(f"  seed {seed}: {why[:200]}")
    if args.json:
        args.json.write_text(json.dumps([{"seed": c.seed, "what": c.what, "model": c.model,
                                          "real": c.real, "limits": c.limits}
                                         for c in results], indent=1))
    # the goal: every replay and every determined prediction exact
    return 0 if not [c for c in bad if c.determined or c.what == "replay"] and not errors \
        else 1


if __name__ == "__main__":
    sys.exit(main())

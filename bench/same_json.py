#!/usr/bin/env python3
"""Do two statstorm source trees give the same JSON on the same lab? (A refactor's proof.)

One lab (the synthetic app on GlusterFS, so that storage findings and round trips show) is
stood up by the NEW tree; then each tree, in turn, traces the lab's pool for the same number
of requests; each tree then prints `trace show`, `whatif`, `check --trace` and apply's dry run
as JSON for both traces (two traces never have the same totals, so each trace is compared as
read by the old code and by the new). Values that differ between
any two runs of the same code (times, latencies, PIDs, paths of the files written, dates) are
blanked, then the documents are compared key by key. Needs root; takes the load lock through
the machine-wide load lock (one load test at a time).

    python3 bench/same_json.py --old ../old-checkout/src --new src [--keep-dir DIR]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

VOLATILE = ("time", "_s", "_ms", "_us", "_ns", "latency", "pid", "date", "started", "finished",
            "when", "elapsed", "duration", "hostname", "stamp", "cpu", "p50", "p90", "p99",
            "mean", "median", "hist", "path", "file", "output", "trace", "run_id", "version",
            "kernel", "rate", "seconds", "_kb", "pss")


def cli(src: Path, args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(src.resolve()), STATSTORM_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "statstorm", *args], capture_output=True,
                          text=True, env=env, timeout=900)


def blank(doc: Any, key: str = "") -> Any:
    if isinstance(doc, dict):
        return {k: blank(v, k) for k, v in doc.items()}
    if isinstance(doc, list):
        return [blank(v, key) for v in doc]
    if isinstance(doc, (int, float, str)) and not isinstance(doc, bool) and any(
            w in key.lower() for w in VOLATILE):
        return "~"
    if isinstance(doc, str) and ("/tmp/" in doc or "/var/tmp/" in doc):
        return "~path"
    return doc


def diff(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        if list(a) != list(b):
            if set(a) != set(b):
                out.append(f"{where}: keys {sorted(set(a) ^ set(b))}")
            else:
                out.append(f"{where}: key order differs")
        for k in a.keys() & b.keys():
            out += diff(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items against {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} against {b!r}"]


def load(url: str, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            urllib.request.urlopen(url, timeout=5).read()
        except OSError:
            time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, required=True, help="the old tree's src/")
    ap.add_argument("--new", type=Path, required=True, help="the new tree's src/")
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--keep-dir", type=Path, help="keep the JSON documents here")
    opts = ap.parse_args()
    if os.geteuid() != 0:
        print("same_json: needs root (it stands up a lab and traces it): run it with sudo",
              file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="statstorm-same-json-", dir="/var/tmp"))
    os.chmod(work, 0o755)
    home = work / "home"
    home.mkdir()
    out = opts.keep_dir or work / "json"  # removed with the rest unless --keep-dir
    out.mkdir(parents=True, exist_ok=True)
    trees = {"old": opts.old, "new": opts.new}
    lock = os.open(os.environ.get("STATSTORM_LOAD_LOCK", "/tmp/statstorm-load.lock"),
                   os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(lock, fcntl.LOCK_EX)
    up = cli(opts.new, ["lab", "up", "--name", "same", "--app", "synthetic", "--storage",
                        "glusterfs", "--json"], home)
    if up.returncode:
        print(up.stderr, file=sys.stderr)
        return 1
    url = json.loads(up.stdout)["url"]
    docs: dict[str, Any] = {}
    try:
        for name, src in trees.items():
            stop = threading.Event()
            t = threading.Thread(target=load, args=(url, stop), daemon=True)
            trace = work / f"{name}.sst.gz"
            t.start()
            p = cli(src, ["trace", "--lab", "same", "--requests", str(opts.requests),
                          "-o", str(trace), "--json"], home)
            stop.set()
            t.join()
            if p.returncode:
                print(f"{name} trace: {p.stderr}", file=sys.stderr)
                return 1
        for name, src in trees.items():
            for tname in trees:
                trace = work / f"{tname}.sst.gz"
                runs = {
                    "show": ["trace", "show", str(trace), "--json"],
                    "whatif": ["whatif", str(trace), "--json", "--set", "realpath_cache_size=16K",
                               "--set", "mount:attribute-timeout=600"],
                    "check": ["check", "--lab", "same", "--trace", str(trace), "--json"],
                    "apply": ["apply", "--lab", "same", "--all", "--json"],
                }
                for what, args in runs.items():
                    p = cli(src, args, home)
                    key = f"{what}.{tname}-trace.by-{name}"
                    docs[key] = {"exit": p.returncode, "json": json.loads(p.stdout or "null")}
                    (out / f"{key}.json").write_text(json.dumps(docs[key], indent=1))
    finally:
        cli(opts.new, ["lab", "down", "--name", "same"], home)
        shutil.rmtree(work, ignore_errors=True)
    bad = 0
    for what in ("show", "whatif", "check", "apply"):
        for tname in trees:
            a = blank(docs[f"{what}.{tname}-trace.by-old"])
            b = blank(docs[f"{what}.{tname}-trace.by-new"])
            d = diff(a, b)
            print(f"{what:7} of the {tname} tree's trace, old code against new: "
                  + ("same" if not d else f"{len(d)} difference(s)"))
            for line in d[:20]:
                print("   ", line)
            bad += bool(d)
    if opts.keep_dir:
        print(f"JSON kept in {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

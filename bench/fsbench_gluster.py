#!/usr/bin/env python3
"""Benchmark: the lab's GlusterFS (default vs tuned mount) against local disk, with fsbench.

Starts two synthetic labs on GlusterFS (default mount, and attribute/entry/negative-timeout=600),
generates the same tree on local disk, runs `statstorm fsbench LOCAL DEFAULT TUNED` warm and
cold, prints the p50 ratio to local disk per operation, and tears the labs down.
Run as root, under the shared lock:  flock /tmp/statstorm-load.lock python3 bench/fsbench_gluster.py
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from statstorm.apps import synthetic
from statstorm.commands import fsbench as cmd
from statstorm.commands import lab as lab_cmd
from statstorm.env import Env

SPEC = synthetic.AppSpec(packages=60, classes=20, depth=3)
TUNED = {"attribute-timeout": "600", "entry-timeout": "600", "negative-timeout": "600"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--max-files", type=int, default=None)
    ap.add_argument("--state", default="both")
    ap.add_argument("-o", "--output", type=Path, default=Path("fsbench-gluster.json"))
    a = ap.parse_args()
    env = Env()
    tmp = Path(tempfile.mkdtemp(prefix="statstorm-fsbench-"))
    labs = []
    try:
        local = tmp / "app"
        synthetic.generate(env, local, SPEC)
        for name, port, mopts in (("fbb1", 8176, {}), ("fbb2", 8177, TUNED)):
            labs.append(name)
            lab_cmd.up(env, lab_cmd.LabOptions(name=name, app="synthetic", storage="glusterfs",
                                               mount_options=mopts, php_ini={}, workers=1,
                                               port=port, app_spec=SPEC))
        paths = (str(local), lab_cmd.status(env, "fbb1").code_path,
                 lab_cmd.status(env, "fbb2").code_path)
        r = cmd.run(env, cmd.FsbenchOptions(paths=paths, states=cmd.parse_states(a.state),
                                            iterations=a.iterations, max_files=a.max_files,
                                            output=a.output))
        w = r.workload[0]
        print(f"tree: {w['files']} files ({w['php_files']} PHP), {w['dirs']} dirs; "
              f"{a.iterations} interleaved passes; timing overhead {r.overhead_p50_us:.2f} µs")
        print(f"{'op':9} {'state':5} {'local p50':>10} {'default p50':>12} {'tuned p50':>10} "
              f"{'default/local':>14} {'tuned/local':>12}")
        for state in r.states:
            for op in r.ops:
                c = [r.cell(op, state, i) for i in range(3)]
                p = [x.stats.p50_us if x else 0.0 for x in c]
                rt = [x.stats.p50_us / p[0] if x and p[0] else 0.0 for x in c[1:]]  # p50 ratio
                print(f"{op:9} {state:5} {p[0]:>8.1f}µs {p[1]:>10.1f}µs {p[2]:>8.1f}µs "
                      f"{rt[0]:>13.1f}x {rt[1]:>11.1f}x")
        print(json.dumps({"output": str(a.output)}))
    finally:
        for name in labs:
            lab_cmd.down(env, name, quiet=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

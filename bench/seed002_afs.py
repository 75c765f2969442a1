#!/usr/bin/env python3
"""Benchmark: seed 002 on OpenAFS — a PHP page with a few includes served from AFS, under 1, 2,
5, 10, 20 and 30 concurrent users, before and after statstorm's fixes.

Seed 002 (a 2007 report on openafs-info): a page including a few PHP files, served by Apache
and PHP from AFS, went from 32 req/s at 5 users to 3 req/s at 30, context switches soaring to
~270,000/s. This script makes the synthetic app small (one package, `--touch` classes and a few
legacy includes per request) on a lab whose code lives in its own OpenAFS cell, then:

1. `statstorm sweep --lab` over the levels: throughput, latency and context switches per level,
   and the file server's RPCs per request (its xstat counts, around each level's sweep);
2. `statstorm check` of the lab and the OpenAFS stat-cache rule on the lab's code tree, then
   `statstorm apply --all --yes` of check's findings and the client restarted with the stat
   cache the AFS finding asks for (when it has one);
3. the same sweep again; both in one report (JSON and a table), the lab removed whatever
   happens (also on Ctrl-C).

`--stat N` starts the lab's client with `-stat N` first (the seed's site ran `-stat 150000`; a
small one shows the rule at work). Run as root on a quiet machine; sweep takes the shared load
lock itself for every run:
  python3 bench/seed002_afs.py -o seed002-afs.json
A functional check with tiny parameters (not a measurement):
  python3 bench/seed002_afs.py --levels 1,2 --duration 2 --repeats 1 --warmup 0 -o /tmp/s.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

from statstorm.adapters.labs import lab_build, state as labs
from statstorm.adapters.storage import afs_check, afs_client, afs_stats, openafs
from statstorm.apps import synthetic
from statstorm.commands import apply as apply_cmd, check as check_cmd, sweep as sweep_cmd
from statstorm.env import Env
from statstorm.model import knee
from statstorm.errors import StatstormError
from statstorm.results.storage_kind import StorageKind
from statstorm.results.sweep import SweepResult

SEED_LEVELS = (1, 2, 5, 10, 20, 30)
# seed 002: users → (req/s, ms per request) on OpenAFS 1.4.4, and ~context switches/s
SEED = {1: (16, 60), 2: (27, 73), 5: (32, 157), 10: (10, 934), 20: (5, 3666), 30: (3, 10899)}
SEED_CS = {10: 200_000, 20: 250_000, 30: 270_000}


@dataclass(frozen=True)
class Level:
    users: int
    rps: float
    p50_ms: float
    p99_ms: float
    ctx_per_s: float
    errors: int
    rpcs_per_request: float | None
    point: knee.LevelPoint  # what the knee analysis takes (repeats, server signals)


def _stop(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM as Ctrl-C: the lab still comes down


def sweep_phase(env: Env, a: argparse.Namespace, name: str, phase: str) -> list[Level]:
    """One sweep per level (the file server's RPCs counted around each)."""
    state = labs.status(env, name)
    servers = afs_client.servers_of(state.mount_point)
    out = []
    for users in a.levels:
        path = a.output.with_name(f"{a.output.stem}-{phase}-c{users}.json")
        p = sweep_cmd.plan(env, sweep_cmd.SweepOptions(
            lab=name, concurrency=(users,), duration_s=a.duration, warmup_s=a.warmup,
            repeats=a.repeats, output=path, plot=None))
        before = afs_stats.snapshot(env, servers[0]) if servers else None
        res: SweepResult = sweep_cmd.run(env, p)
        rpcs = None
        lv = res.levels[0]
        requests = sum(r.run.requests for r in lv.repeats)
        if before is not None and requests:
            calls = afs_stats.delta(before, afs_stats.snapshot(env, servers[0]))
            rpcs = round(afs_stats.round_trips(calls) / requests, 2)  # warm-up's RPCs too
        point = knee.LevelPoint(users, tuple(r.run.rps for r in lv.repeats), lv.server,
                                lv.errors.total, requests)
        out.append(Level(users, lv.rps, lv.p50, lv.p99, lv.server.ctx_switches_per_s,
                         lv.errors.total, rpcs, point))
        env.log(f"{phase}: {users} users {lv.rps:.1f} req/s, p50 {lv.p50:.1f} ms, "
                f"{lv.server.ctx_switches_per_s:.0f} cs/s, RPCs/req {rpcs}")
    return out


def analysis(levels: list[Level]) -> dict[str, object]:
    """The sweep's knee and collapse over all the levels (model/knee.py), its sentence."""
    k = knee.analyse([lv.point for lv in levels])
    return {"knee": k.knee, "peak": k.peak, "saturation_rps": k.saturation_rps,
            "collapse": k.collapse, "collapse_at": k.collapse_at, "sentence": k.sentence}


def as_json(levels: list[Level]) -> list[dict[str, object]]:
    return [{k: v for k, v in lv.__dict__.items() if k != "point"} for lv in levels]


def fix(env: Env, name: str) -> dict[str, object]:
    """check, apply --all of its findings, and the AFS stat-cache finding's client restart."""
    state = labs.status(env, name)
    chk = check_cmd.run(env, check_cmd.CheckOptions(lab=name))
    afs = afs_check.findings(state.code_path, pool=state.pool)
    applied = apply_cmd.run(env, apply_cmd.ApplyOptions(lab=name, all=True, yes=True))
    made = sorted({c.finding for c in applied.changes if c.kind != "manual"})
    restarted: list[str] = []
    for f in afs:
        if f.id in made:
            continue  # apply restarted the client itself
        for line in f.change:
            if line.startswith("stat="):
                cell = openafs.Cell(Path(state.mount_point).parent)
                step = afs_client.apply(env, cell, {"stat": line.split("=", 1)[1]})
                restarted.append(" ".join(step.after))
    return {"check": [f"{f.severity}: {f.id}" for f in chk.findings],
            "afs": [f"{f.severity}: {f.id}: {f.title}" for f in afs],
            "applied": made, "afs_client_restarted_with": restarted}


def table(before: list[Level], after: list[Level]) -> list[str]:
    head = (f"{'users':>5} | {'before req/s':>12} {'p50 ms':>8} {'p99 ms':>8} {'cs/s':>8} "
            f"{'RPC/req':>7} | {'after req/s':>11} {'p50 ms':>8} {'p99 ms':>8} {'cs/s':>8} "
            f"{'RPC/req':>7} | seed 002 (req/s, ms)")
    out = [head, "-" * len(head)]
    for b, f in zip(before, after):
        seed = SEED.get(b.users)
        out.append(f"{b.users:>5} | {b.rps:>12.1f} {b.p50_ms:>8.1f} {b.p99_ms:>8.1f} "
                   f"{b.ctx_per_s:>8.0f} {b.rpcs_per_request if b.rpcs_per_request is not None else '-':>7} | "
                   f"{f.rps:>11.1f} {f.p50_ms:>8.1f} {f.p99_ms:>8.1f} {f.ctx_per_s:>8.0f} "
                   f"{f.rpcs_per_request if f.rpcs_per_request is not None else '-':>7} | "
                   + (f"{seed[0]}, {seed[1]}" + (f", ~{SEED_CS[b.users]:,} cs/s"
                                                 if b.users in SEED_CS else "") if seed else ""))
    return out


def check_args(env: Env, a: argparse.Namespace) -> str:
    """What stops the bench before the lab starts ('' if nothing)."""
    if not a.levels or any(not 1 <= u <= 256 for u in a.levels):
        return "--levels: give users between 1 and 256, comma-separated"
    if a.duration < 1 or a.repeats < 1 or a.warmup < 0:
        return "--duration and --repeats must be 1 or more, --warmup 0 or more"
    parent = a.output.parent if str(a.output.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        return f"-o {a.output}: {parent} is not a writable directory"
    if not env.is_root():
        return "run it as root (it starts a lab with its own OpenAFS cell)"
    if labs.lab_dir(env, a.name).exists():
        return f"a lab named {a.name!r} exists: `statstorm lab down --name {a.name}` first"
    try:
        openafs.require_installed()
        openafs.check_free()
    except StatstormError as exc:
        return str(exc)
    return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", type=lambda s: tuple(int(x) for x in s.split(",") if x),
                    default=SEED_LEVELS, help="concurrent users (default: seed 002's)")
    ap.add_argument("-d", "--duration", type=float, default=10.0, help="seconds per run")
    ap.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds per level")
    ap.add_argument("--repeats", type=int, default=3, help="runs per level")
    ap.add_argument("--touch", type=int, default=5, help="classes a request includes")
    ap.add_argument("--workers", type=int, default=8, help="php-fpm workers")
    ap.add_argument("--stat", default="", help="start the AFS client with -stat N")
    ap.add_argument("--opcache", choices=("on", "off"), default="on",
                    help="off: the seed's era (PHP compiling every include on every request, "
                         "as without an opcode cache); apply turns OPcache on")
    ap.add_argument("--name", default="seed002-afs", help="the lab's name")
    ap.add_argument("-o", "--output", type=Path, default=Path("seed002-afs.json"))
    a = ap.parse_args()
    env = Env()
    problem = check_args(env, a)
    if problem:
        sys.exit(f"bench/seed002_afs.py: {problem}")
    signal.signal(signal.SIGTERM, _stop)
    spec = replace(synthetic.AppSpec(), packages=1, classes=max(a.touch, 1), touch=a.touch,
                   legacy_files=3, include_path_entries=1, missing=0)
    report: dict[str, object] = {"seed": "002", "levels": list(a.levels), "duration_s": a.duration,
                                 "repeats": a.repeats, "touch": a.touch, "workers": a.workers,
                                 "opcache": a.opcache}
    try:
        state = lab_build.up(env, lab_build.LabOptions(
            name=a.name, app="synthetic", storage=StorageKind.OPENAFS, workers=a.workers,
            app_spec=spec, php_ini={"opcache.enable": "0"} if a.opcache == "off" else {}))
        cell = openafs.Cell(Path(state.mount_point).parent)
        if a.stat:
            afs_client.apply(env, cell, {"stat": a.stat})
        report["client_before"] = afs_client.mount_cache_options(state.mount_point)
        before = sweep_phase(env, a, a.name, "before")
        report["before"] = as_json(before)
        report["before_knee"] = analysis(before)
        report["fix"] = fix(env, a.name)
        report["client_after"] = afs_client.mount_cache_options(state.mount_point)
        after = sweep_phase(env, a, a.name, "after")
        report["after"] = as_json(after)
        report["after_knee"] = analysis(after)
        a.output.write_text(json.dumps(report, indent=2) + "\n")
        print("\n".join(table(before, after)))
        print(f"before: {report['before_knee']['sentence']}")  # type: ignore[index]
        print(f"after: {report['after_knee']['sentence']}")  # type: ignore[index]
        print(json.dumps({"output": str(a.output), "fix": report["fix"]}))
    finally:
        lab_build.down(env, a.name, quiet=True)


if __name__ == "__main__":
    main()

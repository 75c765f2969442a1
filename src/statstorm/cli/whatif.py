"""`statstorm whatif TRACE --set KEY=VALUE …`: predicted syscalls under other PHP settings."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from statstorm.cli import cli
from statstorm.cli.paths import InputPath
from statstorm.commands import whatif as whatif_cmd
from statstorm.env import Env
from statstorm.results.trace import SUMMARY_KEYS
from statstorm.results.trace.jsonl import iter_batches
from statstorm.results.whatif import Scalars

UNSEALED = ("written before statstorm sealed its traces: its completeness and content could "
            "not be checked")  # as `trace show` says it


def unsealed(path: Path) -> bool:
    """Whether a trace that read whole was written before traces were sealed: its header does
    not promise a seal (a trace whose header does, and that lacks it, does not read at all)."""
    for batch in iter_batches(path, sidecar=False):  # the header alone, then let go
        return "seal" not in batch[0]
    return False


def _caches(c: Scalars) -> str:
    return "(" + ", ".join(f"{k} {v}" for k, v in c.items() if k != "kind") + ")"


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"


@cli.command("whatif")
@click.argument("trace_file", type=InputPath())
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="A proposed setting (repeat for more): realpath_cache_size, "
                   "realpath_cache_ttl, open_basedir, include_path, opcache.enable(_cli), "
                   "opcache.validate_timestamps, opcache.revalidate_freq, "
                   "opcache.revalidate_path, opcache.enable_file_override, user_ini.filename, "
                   "user_ini.cache_ttl, pm.max_requests, pm.max_children; the network mount's "
                   "caches: mount:attribute-timeout, mount:entry-timeout, "
                   "mount:negative-timeout (FUSE/GlusterFS), mount:actimeo, mount:acregmin, "
                   "mount:acregmax, mount:acdirmin, mount:acdirmax, "
                   "mount:lookupcache=none|pos|all, mount:nocto, mount:noac (NFS); "
                   "app:data-cache=on (the app's data files in its object cache).")
@click.option("--profile", default="auto", show_default=True, metavar="NAME|FILE",
              help="Latency per call: auto (the trace's own latencies when it has them, else "
                   "local), trace (the trace's own, or an error), local, gluster, "
                   "gluster-tuned (measured, see docs/fsbench.md) or a "
                   "`statstorm fsbench --profile-out` file.")
@click.option("--find-min", "find_min", default=None, metavar="realpath_cache_size",
              help="Also print the smallest realpath_cache_size that holds the working set "
                   "of every worker (under the proposed settings).")
@click.option("--json", "as_json", is_flag=True, help="Print {current, proposed} as JSON.")
@click.option("--no-cache", "no_cache", is_flag=True,
              help="Neither use nor write TRACE.whatif-cache, the model input kept beside "
                   "the trace to make the next run fast (see docs/trace.md).")
@click.pass_obj
def whatif(env: Env, trace_file: Path, sets: tuple[str, ...], profile: str,
           find_min: str | None, as_json: bool, no_cache: bool) -> None:
    """Replay a trace through a model of PHP's realpath cache, include resolution, OPcache
    and stat calls, under its recorded settings and under proposed ones.

    Prints per-request calls by type, failed calls, the realpath cache bytes each worker
    uses, the calls that reach network storage and the round trips they make (under the
    mount's recorded cache options, and under mount: changes), and the metadata time per
    request, current vs proposed. The trace must hold PHP operations (recorded by
    `statstorm trace` without --counts). No root needed.

    \b
    Examples:
      statstorm whatif before.sst.gz --set realpath_cache_size=16K
      statstorm whatif before.sst.gz --set open_basedir= --profile gluster
      statstorm whatif before.sst.gz --set mount:attribute-timeout=600 --set mount:entry-timeout=600
      statstorm whatif cli.sst.gz --set opcache.enable_cli=1 --set opcache.revalidate_freq=0
      statstorm whatif before.sst.gz --find-min realpath_cache_size --json
    """
    opts = whatif_cmd.WhatifOptions(trace=trace_file, sets=sets, profile=profile,
                                    find_min=find_min, cache=not no_cache)
    res = whatif_cmd.run(opts)
    if unsealed(trace_file) and UNSEALED not in res.notes:
        res = replace(res, notes=(*res.notes, UNSEALED))
    if as_json:
        click.echo(json.dumps(res.to_json(), indent=2))
        return
    out = Console(file=env.stdout, highlight=False,
                  width=None if env.stdout.isatty() else 120)
    changes = ", ".join(f"{k}={v}" for k, v in res.changes) or "(no changes)"
    t = Table(title=f"{trace_file}: {res.current.requests} request(s); proposed: {changes}")
    for h in ("per request", "measured", "current", "proposed", "change"):
        t.add_column(h, justify="left" if h == "per request" else "right")
    cur, prop = res.current, res.proposed
    for key in SUMMARY_KEYS:
        a, b = cur.per_request[key], prop.per_request[key]
        t.add_row(key, _fmt(res.measured.get(key, 0.0)), _fmt(a), _fmt(b), f"{b - a:+,.1f}")
    ca, cb = cur.realpath_cache_bytes, prop.realpath_cache_bytes
    t.add_row("realpath cache bytes (peak, worker)", "", f"{ca.per_worker_peak_max:,}",
              f"{cb.per_worker_peak_max:,}",
              f"{cb.per_worker_peak_max - ca.per_worker_peak_max:+,}")
    t.add_row("metadata time µs", "", _fmt(cur.metadata_time_us_per_request),
              _fmt(prop.metadata_time_us_per_request),
              f"{prop.metadata_time_us_per_request - cur.metadata_time_us_per_request:+,.1f}")
    cn, pn = cur.network, prop.network
    if cn is not None and pn is not None:
        for label, a_n, b_n in (
                ("network mount calls", cn.calls_per_request, pn.calls_per_request),
                ("of them reaching the storage", cn.reaching_per_request,
                 pn.reaching_per_request),
                ("network round trips", cn.round_trips_per_request,
                 pn.round_trips_per_request)):
            meas = ""
            if label == "network round trips" and res.network is not None \
                    and res.network.measured_per_request is not None:
                meas = _fmt(res.network.measured_per_request)
            t.add_row(label, meas, _fmt(a_n), _fmt(b_n), f"{b_n - a_n:+,.1f}")
    out.print(t)
    if res.php is not None:
        out.print(res.php.line())
    out.print(f"latency profile ({res.profile_kind}): {res.profile_source}")
    if res.network is not None:
        mounts = ", ".join(f"{mp} {_caches(c)} → {_caches(pn.mounts[mp])}"
                           for mp, c in cn.mounts.items()) if cn and pn else ""
        out.print(f"network: {mounts}; round trips: {res.network.basis}")
    for note in res.notes:
        out.print(f"note: {note}")
    for lim in prop.limits or ():
        out.print(f"not determined by the trace ({lim.id}): {lim.text}")
    if res.find_min is not None:
        fm = res.find_min
        if fm.note:
            out.print(f"find-min: {fm.note}")
        else:
            out.print(f"smallest realpath_cache_size holding every worker's working set: "
                      f"{fm.bytes:,} bytes → realpath_cache_size={fm.ini} "
                      f"({fm.workers} worker(s), pm.max_requests={fm.max_requests})")

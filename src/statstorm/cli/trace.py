"""`statstorm trace …`: capture, show, diff and import file-metadata syscall traces."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from statstorm.cli import StartedWhenReady, cli, started
from statstorm.cli.paths import InputPath, OutputPath
from statstorm.commands import trace as trace_cmd
from statstorm.env import Env
from statstorm.results.common import check_output_dir
from statstorm.results.trace import CALLS, SUMMARY_KEYS
from statstorm.results.trace.diff import SCHEMA as DIFF_SCHEMA
from statstorm.results.jsontypes import JsonValue
from statstorm.results.trace.summary import SCHEMA as SUMMARY_SCHEMA
from statstorm.results.trace.summary import TraceSummary
from statstorm.results.trace.vocabulary import Detail

# the JSON of `trace --json`, `trace show/import --json` (a trace's summary): SUMMARY_SCHEMA;
# of `trace diff`: DIFF_SCHEMA


def _console(env: Env) -> Console:
    return Console(file=env.stdout, highlight=False, width=None if env.stdout.isatty() else 120)


def _fmt(v: float | None) -> str:
    if v is None:
        return "unknown"  # a row an excerpt of an strace -c table left out
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"


def shown(text: str) -> str:
    """A path as it can be printed in any locale: bytes that are not UTF-8 as \\xNN."""
    return os.fsencode(text).decode("utf-8", "backslashreplace")


def _list_table(out: Console, title: str, headers: list[str], rows: list[list[str]]) -> None:
    """A table whose first column is text and the others numbers; nothing if no rows."""
    if not rows:
        return
    t = Table(title=title)
    for i, h in enumerate(headers):
        t.add_column(h, justify="left" if i == 0 else "right")
    for row in rows:
        t.add_row(*row)
    out.print(t)


def summary_json(s: TraceSummary, **extra: JsonValue) -> str:
    """The summary printed by `--json`: its schema first, then the summary, then `extra`."""
    return json.dumps({"schema": SUMMARY_SCHEMA, **s.to_json(), **extra}, indent=2)


def render(env: Env, s: TraceSummary, title: str) -> None:
    out = _console(env)
    n = s.requests
    t = Table(title=f"{title}: {n} request(s)")
    dist = s.per_request_dist
    t.add_column("call")
    t.add_column("per request", justify="right")
    if dist:
        t.add_column("p50", justify="right")
        t.add_column("p95", justify="right")
    t.add_column("total", justify="right")
    for key in SUMMARY_KEYS:
        row = [key, _fmt(s.per_request[key])]
        if dist:
            row += [_fmt(dist[key].p50), _fmt(dist[key].p95)]
        row.append(_fmt(s.totals[key]))
        t.add_row(*row)
    out.print(t)
    tot = s.totals.total
    if tot is not None and s.totals.failed is not None:
        out.print(f"failed: {s.totals.failed:,} of {tot:,} "
                  f"({s.failed_share or 0:.1%})")
    st = s.syscall_time_us
    if st and st.per_request:
        out.print(f"time in these syscalls: {st.per_request:,.1f} µs per request "
                  f"(p50 {st.p50:,.1f}, p95 {st.p95:,.1f})")
    samp = s.trace.sampling
    if samp:
        out.print(f"sampled: about 1 request in {samp.one_in} recorded in full: "
                  f"{samp.recorded_requests:,} recorded, {samp.counted_requests:,} "
                  f"counted (totals x {samp.scale:g} for all requests); calls per request: "
                  f"{s.per_request.total or 0:,.1f} ± {samp.calls_per_request_error:,.1f} "
                  f"recorded, {samp.counted_calls_per_request:,.1f} counted")
    net = s.trace.network
    if net and net.per_request is not None:
        out.print(f"network round trips: {net.per_request:,.2f} per request "
                  f"({net.round_trips:,} in all, " + (
                      f"GlusterFS profile of volume {net.volume})" if net.volume
                      else f"OpenAFS file server {net.server}'s RPC counts, every client's "
                           "traffic)" if net.server
                      else f"NFS counters of {net.mount}, every process's traffic)"))
    if s.detail == Detail.COUNTS:
        out.print("counted in the kernel (--counts): no paths, mounts or PHP operations")
    ops = s.by_operation or {}
    if ops:
        ot = Table(title="by PHP operation (per request)")
        ot.add_column("operation")
        for key in ("total", "failed", *CALLS):
            ot.add_column(key, justify="right")
        div = max(n, 1)
        for kind, c in ops.items():
            ot.add_row(kind, *[_fmt(round((c.calls[k] or 0) / div, 1))
                               for k in ("total", "failed", *CALLS)])
        out.print(ot)
    mounts = s.by_mount or ()
    if mounts:
        mt = Table(title="by mount")
        for h in ("mount", "fstype", "per request", "failed", "p50 µs", "p95 µs", "p99 µs"):
            mt.add_column(h, justify="left" if h in ("mount", "fstype") else "right")
        for m in mounts:
            lat = m.latency_us
            mt.add_row(shown(m.mount), m.fstype, _fmt(m.per_request), f"{m.failed:,}",
                       *([str(lat.p50), str(lat.p95), str(lat.p99)] if lat else ["-"] * 3))
        out.print(mt)
    _list_table(out, "failed include lookups by include_path entry",
                ["entry", "failed", "per request"],
                [[shown(e.entry), f"{e.failed:,}", _fmt(e.per_request)]
                 for e in s.failed_by_include_path_entry or ()])
    _list_table(out, "top failed paths", ["path", "calls"],
                [[shown(f.path), f"{f.calls:,}"] for f in (s.top_failed_paths or ())[:10]])
    _list_table(out, "top directories", ["directory", "calls"],
                [[shown(d.dir), f"{d.calls:,}"] for d in (s.top_dirs or ())[:10]])
    for note in s.notes or ():
        out.print(f"note: {shown(note)}")


def describe(opts: trace_cmd.TraceOptions) -> str:
    """What a trace acts on, for its startup line: target, bound, detail, file."""
    target = (f"lab {opts.lab}" if opts.lab else f"php-fpm pool {opts.pool}" if opts.pool
              else f"PID {', '.join(map(str, opts.pids))}" if opts.pids
              else f"command {opts.cmd}" if opts.cmd is not None
              else "the system Apache's PHP" if opts.apache
              else f"the PHP serving {opts.site}" if opts.site
              else "the PHP running here")
    bound = (f"{opts.duration_s:g} s" if opts.duration_s is not None
             else "until it exits" if opts.cmd is not None
             else f"{trace_cmd.DEFAULT_DURATION_S:g} s")
    if opts.requests is not None:
        bound += f" or {opts.requests:,} requests"
    detail = ("in-kernel counts" if opts.counts else
              f"about 1 request in {opts.sample} recorded in full" if opts.sample > 1
              else "full events")
    backend = "" if opts.backend == "auto" else f" ({opts.backend})"
    return (f"{target}, {bound}, {detail}{backend} → {shown(str(opts.output))}. "
            "Ctrl-C to stop.")


@cli.group("trace", invoke_without_command=True)
@click.option("--pool", default=None, help="Trace every worker of this php-fpm pool (also "
              "workers started during the trace) [default: the only one running, when no "
              "other target is given].")
@click.option("-p", "--pid", "pids", type=int, multiple=True, help="Trace this PID (repeat "
              "for more) and its children; php-fpm workers given so are the only processes "
              "probed.")
@click.option("--lab", "lab", is_flag=False, flag_value="lab", default=None, metavar="[NAME]",
              help="Trace a lab's pool (default name: lab).")
@click.option("--apache", is_flag=True, help="Trace the system Apache's PHP (mod_php "
              "children, mod_fcgid's php-cgi), children started during the trace included. "
              "With no target at all: the one PHP target running here.")
@click.option("--site", default="", metavar="URL", help="Trace the PHP target serving this "
              "site (the nginx server or Apache virtual host on its port, and the pool it "
              "passes to), e.g. http://127.0.0.1:8080/")
@click.option("--cmd", default=None, metavar="'CMD ARGS'", help="Run this command and trace "
              "it and its children; the whole run is one request.")
@click.option("-d", "--duration", type=float, default=None, help="Stop after this many "
              f"seconds  [default: {trace_cmd.DEFAULT_DURATION_S:g} s; with --cmd: when it exits]")
@click.option("--requests", type=int, default=None, help="Stop once this many requests "
              "have finished.")
@click.option("--max-events", type=int, default=trace_cmd.DEFAULT_EVENT_CAP, show_default=True,
              help="Stop at this many syscalls.")
@click.option("-o", "--output", type=OutputPath(dir_okay=False), default=None,
              help="Trace file (gzip if it ends in .gz)  [default: trace-DATE-TIME.sst.gz]")
@click.option("--backend", type=click.Choice(list(trace_cmd.BACKENDS)), default="auto",
              show_default=True, help="auto: the compiled eBPF tracer (the package's, or "
              "built by scripts/setup.sh --lab), else bpftrace, else strace.")
@click.option("--sample", type=int, default=1, show_default=True, metavar="N",
              help="Record about one request in N in full (one worker at a time, whole "
              "requests) and count the others in the kernel (ebpf backend): for busy "
              "production pools.")
@click.option("--counts", is_flag=True, help="Count per request in the kernel instead of "
              "recording every call (ebpf or bpftrace backend): low overhead (for production "
              "or load tests), but no paths, mounts or PHP operations.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@click.pass_context
def trace(ctx: click.Context, pool: str | None, pids: tuple[int, ...], lab: str | None,
          apache: bool, site: str, cmd: str | None, duration: float | None,
          requests: int | None, max_events: int, output: Path | None, backend: str, sample: int, counts: bool, as_json: bool) -> None:
    """Trace PHP's file-metadata syscalls per request and per PHP operation (eBPF).

    Captures stat/lstat/fstat (newfstatat, statx), access, open, readlink, getcwd and chdir
    with result, latency, path and mount; splits them into requests and attributes them to
    include resolution, file_exists-style probes, OPcache revalidation, .user.ini lookups and
    the main script. Needs root. Ctrl-C stops and still writes a valid trace.

    \b
    Examples:
      statstorm trace --lab -d 10 -o before.sst.gz
      statstorm trace --pool www --requests 200 --json
      statstorm trace --pool www --counts -d 60
      statstorm trace --apache -d 30 -o apache.sst.gz
      statstorm trace --site http://127.0.0.1:8080/ -d 20
      statstorm trace --pool www --sample 10 -d 60
      statstorm trace --cmd 'php bench.php' -o cli.sst.gz
      statstorm trace show before.sst.gz
      statstorm trace diff before.sst.gz after.sst.gz
      statstorm trace import strace.log -o old.sst.gz
    """
    if ctx.invoked_subcommand is not None:
        return
    env: Env = ctx.obj
    output = output or trace_cmd.default_output()  # named once: the startup line says it
    opts = trace_cmd.TraceOptions(pool=pool, pids=pids, lab=lab, cmd=cmd, duration_s=duration,
                                  requests=requests, max_events=max_events, output=output,
                                  backend=backend, counts=counts, sample=sample,
                                  apache=apache, site=site, live=True)
    trace_cmd.validate(opts)
    err = Console(file=env.stderr, stderr=True, highlight=False)
    ready = StartedWhenReady(env, "trace", describe(opts))

    def progress(msg: str) -> None:
        if env.stderr.isatty():
            err.print(f"  {msg}", style="dim", end="\r")

    result = trace_cmd.run(env, opts, progress=progress, ready=ready)
    for w in result.warnings:
        err.print(f"warning: {w}", style="bold yellow" if "LOUD" in w else "yellow",
                  soft_wrap=True)  # one line, whatever the width
    summary = result.summary
    if as_json:
        click.echo(summary_json(summary, file=str(result.output)))
    else:
        render(env, summary, f"trace ({result.backend})")
        _console(env).print(f"wrote {result.output}")


@trace.command("show")
@click.argument("trace_file", type=InputPath())
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_obj
def show(env: Env, trace_file: Path, as_json: bool) -> None:
    """Summarise a saved trace again.

    \b
    Examples:
      statstorm trace show before.sst.gz
      statstorm trace show before.sst.gz --json | jq .per_request
    """
    s = trace_cmd.show(trace_file)
    if as_json:
        click.echo(summary_json(s))
    else:
        render(env, s, str(trace_file))


@trace.command("diff")
@click.argument("a", type=InputPath())
@click.argument("b", type=InputPath())
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.pass_obj
def diff(env: Env, a: Path, b: Path, as_json: bool) -> None:
    """Compare two traces per request (before/after), call type by call type.

    \b
    Examples:
      statstorm trace diff before.sst.gz after.sst.gz
      statstorm trace diff old-strace-c.sst.gz new.sst.gz --json
    """
    d = trace_cmd.diff(a, b)
    if as_json:
        click.echo(json.dumps({"schema": DIFF_SCHEMA, **d.to_json()}, indent=2))
        return
    t = Table(title=f"per request: {a} ({d.a.requests} req) → {b} "
                    f"({d.b.requests} req)")
    for h in ("call", "before", "after", "change", "ratio"):
        t.add_column(h, justify="left" if h == "call" else "right")
    rows = list(d.per_request.items())
    if d.syscall_time_us is not None:
        rows.append(("µs in these calls", d.syscall_time_us))
    for key, c in rows:
        t.add_row(key, _fmt(c.a), _fmt(c.b),
                  "not compared" if c.delta is None else f"{c.delta:+,.1f}",
                  "-" if c.ratio is None else f"{c.ratio:.2f}x")
    _console(env).print(t)
    if d.not_compared:
        _console(env).print(f"not compared: {', '.join(d.not_compared)} (unknown in an "
                            "excerpt of an strace -c table: rows cut or no total row)")


@trace.command("import")
@click.argument("source", type=InputPath(exists=True, dir_okay=False))
@click.option("-o", "--output", type=OutputPath(dir_okay=False), default=None,
              help="Trace file to write  [default: SOURCE.sst.gz]")
@click.option("--requests", type=int, default=None,
              help="How many requests the input covers (for an strace -c table or a log "
                   "without accept calls): per-request figures divide by it.")
@click.option("--table", type=int, default=0, show_default=True,
              help="Which strace -c table of the file to import (0 = the first).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_obj
def import_(env: Env, source: Path, output: Path | None, requests: int | None, table: int,
            as_json: bool) -> None:
    """Import an strace log (-f, -tt, -T, -y or not) or an `strace -c` table.

    \b
    Examples:
      statstorm trace import php-fpm.strace -o fpm.sst.gz
      statstorm trace import strace-c.txt --requests 1000 --json
    """
    if output is not None:
        check_output_dir(output)
    started(env, "trace import", f"{shown(str(source))} → "
            f"{shown(str(output or source.with_name(source.name + '.sst.gz')))}")
    out, summary = trace_cmd.import_log(source, output, requests=requests, table=table)
    if as_json:
        click.echo(summary_json(summary, file=str(out)))
    else:
        render(env, summary, str(source))
        _console(env).print(f"wrote {out}")

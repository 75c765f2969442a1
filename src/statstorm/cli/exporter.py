"""`statstorm exporter`: flags → ExporterOptions → commands.exporter."""

from __future__ import annotations

import json

import click

from statstorm.cli import cli
from statstorm.env import Env


@cli.command("exporter")
@click.option("--pool", "pools", multiple=True, metavar="NAME",
              help="A php-fpm pool to export (repeatable)  [default: every running pool, "
                   "followed as pools start and stop].")
@click.option("--lab", default=None, help="Export a lab's pool instead.")
@click.option("--listen", default="127.0.0.1:9733", show_default=True, metavar="HOST:PORT",
              help="Where /metrics is served (an IPv6 host in brackets). Keep it on loopback "
                   "or a private network: the metrics name your pools and settings.")
@click.option("--status-every", type=float, default=30.0, show_default=True, metavar="S",
              help="Seconds between reads of each pool's state: its workers over FastCGI "
                   "(realpath cache, OPcache), their memory, the storage's round trips.")
@click.option("--check-every", type=float, default=300.0, show_default=True, metavar="S",
              help="Seconds between runs of check's rules on each pool.")
@click.option("--rescan-every", type=float, default=30.0, show_default=True, metavar="S",
              help="Seconds between looks for pools that started, stopped or restarted.")
@click.option("--duration", type=float, default=None, metavar="S",
              help="Stop after this many seconds  [default: run until SIGTERM or Ctrl-C].")
@click.option("--backend", type=click.Choice(["auto", "ebpf", "bpftrace"]), default="auto",
              show_default=True, metavar="TRACER",
              help="The counting tracer: ebpf (statstorm's compiled one, about half of "
              "bpftrace's kernel time per syscall), bpftrace, or auto (ebpf where it is built).")
@click.option("--json", "as_json", is_flag=True, help="Print a summary as JSON when it stops.")
@click.pass_obj
def exporter(env: Env, pools: tuple[str, ...], lab: str | None, listen: str,
             status_every: float, check_every: float, rescan_every: float,
             duration: float | None, backend: str, as_json: bool) -> None:
    """Serve the pools' file-metadata cost to Prometheus, for as long as it runs.

    Keeps the in-kernel counting tracer (`trace --counts`) attached to the pools and serves,
    per pool: requests, metadata syscalls and failed lookups by call type, their time, a
    per-request histogram of both, worker exits; the network round trips of the storage
    under the code (GlusterFS profile, NFS mountstats); realpath cache use and OPcache
    figures (asked over FastCGI, --status-every); memory (PSS); and check's findings by rule
    and severity (--check-every). Workers that respawn and pools that appear or go are
    followed. SIGTERM or Ctrl-C detaches every probe and stops. Needs root (eBPF).

    \b
    Examples:
      sudo statstorm exporter
      sudo statstorm exporter --pool www --listen 127.0.0.1:9733
      sudo statstorm exporter --lab lab --status-every 10 --check-every 60
      curl -s http://127.0.0.1:9733/metrics | grep '^statstorm_requests_total'
    \b
    As a service: contrib/systemd/statstorm-exporter.service with its settings in
    /etc/default/statstorm-exporter (contrib/default/); Prometheus alerts in
    contrib/prometheus/alerts.yml, a Grafana dashboard in contrib/grafana/statstorm.json.
    """
    from statstorm.commands import exporter as cmd  # prometheus_client: only for this verb
    opts = cmd.ExporterOptions(pools=pools, lab=lab, listen=listen, status_every_s=status_every,
                               check_every_s=check_every, rescan_every_s=rescan_every,
                               duration_s=duration, backend=backend)
    result = cmd.run(env, opts, progress=lambda msg: env.log(f"exporter: {msg}"))
    for w in result.warnings:
        env.log(f"exporter: warning: {w}")
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        total = sum(result.requests.values())
        env.log(f"exporter: stopped ({result.stopped}) after {result.duration_s:g} s: "
                f"{total:,} requests counted over {len(result.pools)} pool(s); tracer CPU "
                f"{result.tracer_cpu_s:g} s")

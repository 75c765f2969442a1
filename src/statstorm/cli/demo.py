"""`statstorm demo`."""

from __future__ import annotations

import statistics
from pathlib import Path

import click

from statstorm.cli import cli
from statstorm.commands import demo as demo_cmd
from statstorm.env import Env


@cli.command()
@click.option("--app", type=click.Choice(["mediawiki", "synthetic"]), default="mediawiki",
              show_default=True, help="The application the demo lab serves.")
@click.option("--storage", type=click.Choice(["local", "glusterfs"]), default="glusterfs",
              show_default=True, help="Where the demo lab keeps the code.")
@click.option("--views", type=click.IntRange(1, 1000), default=5, show_default=True,
              help="Page views to fetch and time.")
@click.option("-o", "--output-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("statstorm-demo"), show_default=True,
              help="Where the demo writes its result files (sweep.json, sweep.svg).")
@click.option("--keep", is_flag=True, help="Leave the lab running (stop it with `statstorm lab down --name demo`).")
@click.pass_obj
def demo(env: Env, app: str, storage: str, views: int, output_dir: Path, keep: bool) -> None:
    """The main job on the built-in default: MediaWiki on GlusterFS, measured, then removed.

    \b
    Examples:
      statstorm demo
      statstorm demo --storage local --views 20
      statstorm demo --keep && statstorm lab status --name demo
    """
    result = demo_cmd.run(env, app=app, storage=storage, views=views, keep=keep,
                          output_dir=output_dir)
    lab = result.lab
    click.echo(f"lab: {lab.app} on {lab.storage} ({lab.code_path}), pool {lab.pool} with "
               f"{len(lab.worker_pids)} workers, served at {lab.url}")
    for i, view in enumerate(result.views, 1):
        click.echo(f"  view {i}: HTTP {view.status}, {view.size} bytes, {view.seconds * 1000:.0f} ms"
                   f"  {view.title!r}")
    warm = [v.seconds for v in result.views[1:]] or [result.views[0].seconds]
    click.echo(f"median page time after the first view: {statistics.median(warm) * 1000:.0f} ms "
               f"(single client, no tuning)")
    if result.trace_summary:
        pr = result.trace_summary["per_request"]
        click.echo(f"trace: {result.trace_summary['requests']} page views, per view "
                   f"{pr['total']:.0f} file syscalls ({pr['lstat']:.0f} lstat, {pr['stat']:.0f} "
                   f"stat, {pr['access']:.0f} access, {pr['open']:.0f} open), "
                   f"{pr['failed']:.0f} failed")
        click.echo(f"  trace file: {result.trace_file} (statstorm trace show {result.trace_file})")
    if result.sweep_sentence:
        click.echo(f"sweep: {result.sweep_sentence}")
        click.echo(f"  results: {result.sweep_json} (plot {result.sweep_plot})")
    click.echo("lab left running: stop it with `statstorm lab down --name demo`" if keep
               else "lab removed.")

"""`statstorm mirror sync --pool NAME | --lab NAME`: flags → SyncOptions → commands.mirror."""

from __future__ import annotations

import json

import click

from statstorm.cli import StartedWhenReady, cli
from statstorm.env import Env


@cli.group()
def mirror() -> None:
    """The local mirror of a pool's code that `apply code-local-mirror` made.

    \b
    Examples:
      statstorm mirror sync --pool www
    """


@mirror.command("sync")
@click.option("--pool", default="", metavar="NAME", help="The php-fpm pool whose mirror to "
              "refresh.")
@click.option("--lab", "lab", is_flag=False, flag_value="lab", default=None, metavar="[NAME]",
              help="Refresh a lab's mirror instead (default name: lab).")
@click.option("--no-reload", "no_reload", is_flag=True,
              help="Do not reload the pool after the switch: its workers may serve the tree "
                   "before for up to realpath_cache_ttl (600 s after `apply --all`), and with "
                   "opcache.validate_timestamps = 0 until php-fpm reloads.")
@click.option("--json", "as_json", is_flag=True, help="Print what was synced as JSON.")
@click.pass_obj
def sync(env: Env, pool: str, lab: str | None, no_reload: bool, as_json: bool) -> None:
    """Copy the pool's network tree into its local mirror again: run it after every deploy,
    on every web server.

    The copy goes into a new directory beside the one served; the mirror's `current` symlink
    is then switched to it with one rename, so a request sees the old tree or the new one,
    never a half-copied one (twice the copy's disk while it runs).

    Each php-fpm worker keeps what `current` resolved to in its realpath cache (and OPcache
    its compiled files by that path), so the pool is then reloaded gracefully, as `statstorm
    apply` reloads it (requests running finish; with process_control_timeout = 0 a second
    master serves meanwhile): the very next request runs the new code, with a cold OPcache.
    The tree served before is then removed, unless a process still holds a file in it (then
    it is kept until the next sync). `statstorm check` reports mirror-stale while the
    network tree has newer PHP files than the last sync.

    \b
    Examples:
      statstorm mirror sync --pool www
      statstorm mirror sync --pool www --no-reload
      statstorm mirror sync --pool www --json
      statstorm mirror sync --lab demo-net
    """
    from statstorm.commands import mirror as mirror_cmd
    ready = StartedWhenReady(env, "mirror sync", f"lab {lab}" if lab else f"pool {pool}")
    result = mirror_cmd.run(env, mirror_cmd.SyncOptions(pool, reload=not no_reload,
                                                        lab=lab or ""), ready)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
        return
    for s in result.synced:
        click.echo(f"{s.path}: {s.marker.source} synced at {s.marker.synced_at} "
                   f"({s.marker.files} entries, {s.marker.bytes / 1048576:.1f} MiB)")
    if result.reloaded:
        click.echo(f"pool {result.pool} reloaded: its workers serve the new tree")
    for path in result.removed:
        click.echo(f"removed {path}")
    for path, why in result.kept:
        click.echo(f"kept {path} until the next sync: {why}")
    if result.note:
        click.echo(f"note: {result.note}")

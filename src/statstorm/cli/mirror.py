"""`statstorm mirror sync --pool NAME`: flags → SyncOptions → commands.mirror."""

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
@click.option("--pool", required=True, help="The php-fpm pool whose mirror to refresh.")
@click.option("--json", "as_json", is_flag=True, help="Print what was synced as JSON.")
@click.pass_obj
def sync(env: Env, pool: str, as_json: bool) -> None:
    """Copy the pool's network tree into its local mirror again: run it after every deploy,
    on every web server.

    The copy goes into a new directory beside the one served; the mirror's `current` symlink
    is then switched to it with one rename, so a request sees the old tree or the new one,
    never a half-copied one (twice the copy's disk while it runs). The tree served before is
    kept until the next sync: PHP's realpath cache may resolve paths into it for up to
    realpath_cache_ttl (reload php-fpm for the new code at once). `statstorm check` reports
    mirror-stale while the network tree has newer PHP files than the last sync.

    \b
    Examples:
      statstorm mirror sync --pool www
      statstorm mirror sync --pool www --json
    """
    from statstorm.commands import mirror as mirror_cmd
    ready = StartedWhenReady(env, "mirror sync", f"pool {pool}")
    result = mirror_cmd.run(env, mirror_cmd.SyncOptions(pool), ready)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        for s in result.synced:
            click.echo(f"{s.path}: {s.marker.source} synced at {s.marker.synced_at} "
                       f"({s.marker.files} entries, {s.marker.bytes / 1048576:.1f} MiB)")

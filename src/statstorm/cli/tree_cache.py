"""`statstorm lab cache list|clear`: the app trees kept on network storage's side for the
next labs (commands.lab → adapters/storage/tree_cache.py)."""

from __future__ import annotations

import json

import click

from statstorm.cli.lab import lab
from statstorm.commands import lab as lab_cmd
from statstorm.env import Env


@lab.group("cache")
def cache() -> None:
    """The cached app trees: MediaWiki's or WordPress's package tree as a GlusterFS brick,
    filled through the FUSE client once and given to each new lab's volume as a local copy
    (seconds instead of minutes), verified against its manifest every time.

    A cached tree is keyed by the app's Debian package versions, the layout of the copy and
    the storage; a new package version is copied (and cached) again. It lives under
    <state root>/cache/trees/ and `lab down` keeps it; `lab cache clear` removes it.

    \b
    Examples:
      statstorm lab cache list
      sudo statstorm lab cache clear
    """


@cache.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_(env: Env, as_json: bool) -> None:
    """List the cached trees: key, files, size on disk, path.

    \b
    Examples:
      statstorm lab cache list
      statstorm lab cache list --json
    """
    trees = lab_cmd.cache_list(env)
    if as_json:
        click.echo(json.dumps({"trees": [t.to_json() for t in trees]}, indent=2))
        return
    for t in trees:
        click.echo(f"{t.name}  {t.files} files  {t.size_bytes / 1048576:.0f} MiB  {t.path}")
    if not trees:
        click.echo("no cached trees (a MediaWiki or WordPress lab on GlusterFS makes one)")


@cache.command("clear")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def clear(env: Env, as_json: bool) -> None:
    """Remove every cached tree (each once no lab is copying it); the next lab copies its
    tree through the storage again and caches it.

    \b
    Example:
      sudo statstorm lab cache clear
    """
    removed = lab_cmd.cache_clear(env)
    if as_json:
        click.echo(json.dumps({"removed": removed}))
    elif removed:
        click.echo(f"removed {len(removed)} cached tree(s): {', '.join(removed)}")
    else:
        click.echo("no cached trees; nothing to do")

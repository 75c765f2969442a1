"""`statstorm lab php-root build|list|remove VERSION`: the Debian roots that other PHP
versions run from (commands.lab → adapters/labs/php_roots.py)."""

from __future__ import annotations

import json

import click

from statstorm.cli import started
from statstorm.cli.lab import lab
from statstorm.commands import lab as lab_cmd
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.results.php_root import PhpRoot, other_releases, release

_OTHERS = ", ".join(f"{r.version} ({r.release})" for r in other_releases())


def _other(version: str) -> str:
    """The version as given, checked: one with a root (not the host's own)."""
    rel = release(version, "VERSION")
    if rel.host:
        raise UsageError(f"PHP {rel.version} is the host's own and needs no root; roots: {_OTHERS}")
    return rel.version


def _line(root: PhpRoot) -> str:
    used = f"  used by {', '.join(root.in_use_by)}" if root.in_use_by else ""
    size = f"  {root.size_bytes / 1048576:.0f} MiB" if root.size_bytes else ""
    return (f"{root.version:4} {root.release:9} PHP {root.php_version:9} {root.path}"
            f"{size}  built {root.built_at} in {root.build_seconds:.0f} s{used}")


@lab.group("php-root")
def php_root() -> None:
    """The Debian roots other PHP versions run from: 7.4 (bullseye) and 8.4 (trixie).

    A root is made once with debootstrap from the Debian mirror apt already uses (a few
    minutes), kept under the state root, and reused by every `lab up --php VERSION`
    (php-fpm chrooted in it, the web server outside).

    \b
    Examples:
      statstorm lab php-root build 8.4
      statstorm lab php-root list --json
      statstorm lab php-root remove 7.4
    """


@php_root.command("build")
@click.argument("version")
@click.option("--rebuild", is_flag=True, help="Make it again even if a finished root is there.")
@click.option("--json", "as_json", is_flag=True, help="Print the root as JSON.")
@click.pass_obj
def build(env: Env, version: str, rebuild: bool, as_json: bool) -> None:
    """Make PHP VERSION's root (debootstrap, then php-fpm, php-cli, OPcache and the lab apps'
    extensions inside), or reuse the finished one in seconds; a half-built one (an
    interrupted build) is made again. Refused in one line when the Debian mirror cannot be
    reached.

    \b
    Examples:
      statstorm lab php-root build 8.4
      statstorm lab php-root build 7.4 --json
      statstorm lab php-root build 8.4 --rebuild
    """
    v = _other(version)
    started(env, "lab php-root build", f"PHP {v}'s root (made once with debootstrap, then reused)")
    root, reused = lab_cmd.php_root_build(env, v, rebuild=rebuild)
    if as_json:
        click.echo(json.dumps({**root.to_json(), "reused": reused}, indent=2))
    else:
        click.echo(("reused " if reused else "built ") + _line(root))


@php_root.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_(env: Env, as_json: bool) -> None:
    """List the PHP roots: version, Debian release, PHP_VERSION, path, size, the labs using it.

    \b
    Examples:
      statstorm lab php-root list
      statstorm lab php-root list --json
    """
    roots, half, busy = lab_cmd.php_root_list(env)
    if as_json:
        click.echo(json.dumps({"roots": [r.to_json() for r in roots], "half_built": half,
                               "building": busy}, indent=2))
        return
    for r in roots:
        click.echo(_line(r))
    for v in half:
        click.echo(f"{v:4} being built now (another statstorm)" if busy else
                   f"{v:4} half-built (a build that did not finish): "
                   f"`statstorm lab php-root build {v}` makes it again")
    if not roots and not half:
        click.echo(f"no PHP roots (make one: statstorm lab php-root build 8.4; there are {_OTHERS})")


@php_root.command("remove")
@click.argument("version")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def remove(env: Env, version: str, as_json: bool) -> None:
    """Remove PHP VERSION's root (refused while a lab runs in it: `lab down` it first).

    \b
    Example:
      statstorm lab php-root remove 8.4
    """
    v = _other(version)
    removed = lab_cmd.php_root_remove(env, v)
    if as_json:
        click.echo(json.dumps({"version": v, "removed": removed}))
    else:
        click.echo(f"PHP {v}'s root " + ("removed" if removed else "was not there; nothing to do"))

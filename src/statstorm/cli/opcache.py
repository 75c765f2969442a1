"""`statstorm opcache reset`: flags → ResetOptions → commands.opcache → figures or JSON."""

from __future__ import annotations

import json

import click

from statstorm.cli import cli
from statstorm.commands import opcache as opcache_cmd
from statstorm.env import Env
from statstorm.results.opcache_reset import OpcacheFigures, OpcacheReset


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _line(when: str, f: OpcacheFigures) -> str:
    return (f"  {when}: {f.cached_scripts:,} cached scripts, {_mib(f.used_memory)} used, "
            f"{_mib(f.free_memory)} free, {_mib(f.wasted_memory)} wasted (worker {f.pid})")


def render(env: Env, result: OpcacheReset) -> None:
    out = env.stdout
    print(f"OPcache of {result.target} reset (FastCGI {result.listen})", file=out)
    print(_line("before", result.before), file=out)
    print(_line("after ", result.after), file=out)
    if result.after.restart_pending:
        print("  the reset is still pending: PHP does it when no worker is in a request "
              "(opcache.force_restart_timeout forces it after that many seconds)", file=out)


@cli.group("opcache")
def opcache() -> None:
    """Act on a PHP target's OPcache.

    \b
    Examples:
      statstorm opcache reset --pool www
      statstorm opcache reset --lab --json
    """


@opcache.command("reset")
@click.option("--pool", default="", metavar="NAME", help="Reset this php-fpm pool's OPcache.")
@click.option("--lab", "lab", is_flag=False, flag_value="lab", default=None, metavar="[NAME]",
              help="Reset a lab's pool (default name: lab).")
@click.option("--wait", type=float, default=5.0, show_default=True, metavar="S",
              help="Seconds to wait for the reset to be done when a worker is busy with a "
                   "request (PHP resets when none is).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures before and after "
              "as JSON.")
@click.pass_obj
def reset(env: Env, pool: str, lab: str | None, wait: float, as_json: bool) -> None:
    """Empty a php-fpm pool's OPcache, without a web request: the deploy step of
    `opcache.validate_timestamps = 0`.

    Runs one small PHP file of statstorm's own in one worker over FastCGI (as cachetool
    does): it calls opcache_reset() and reports opcache_get_status() before and after.
    One worker is enough: OPcache's shared memory belongs to the php-fpm master, so the
    whole pool (and every other pool of that master) starts empty. With no --pool or
    --lab: the only PHP target running. The file lives in a fresh directory under /run
    for the moment of the request; a pool whose open_basedir leaves /run out, or that
    runs chrooted, refuses it (the error says what to do instead: reload php-fpm). PHP in
    Apache (mod_php, mod_fcgid) has no pool socket: run `apache2ctl graceful` there.
    Run it as root or as the user that can open the pool's socket.

    \b
    Examples:
      statstorm opcache reset --pool www
      statstorm opcache reset --lab demo --json
      git pull && statstorm opcache reset --pool www
    """
    opts = opcache_cmd.ResetOptions(pool=pool, lab=lab, wait=wait)
    result = opcache_cmd.run(env, opts)
    if as_json:
        json.dump(result.to_json(), env.stdout, indent=2)
        env.stdout.write("\n")
    else:
        render(env, result)

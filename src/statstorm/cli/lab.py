"""`statstorm lab …`: flags → LabOptions → commands.lab → rendered result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, TypeVar

import click

from statstorm.adapters.labs import apache_lab, phpfpm
from statstorm.apps import synthetic
from statstorm.cli import cli, started
from statstorm.cli.paths import OutputPath
from statstorm.commands import lab as lab_cmd
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.model import storage_delay
from statstorm.model.storage_kinds import LAB_ALIASES
from statstorm.results.lab import LabState
from statstorm.results.php_root import HOST_VERSION, RELEASES
from statstorm.results.serving import Handler
from statstorm.results.storage_kind import StorageKind


def key_values(values: tuple[str, ...], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        for part in item.split(","):
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise UsageError(f"{flag} {part!r}: expected KEY=VALUE, e.g. attribute-timeout=600")
            out[key.strip()] = value.strip()
    return out


STORAGE_ALIASES = {alias: str(kind) for alias, kind in LAB_ALIASES.items()}  # afs: openafs

F = TypeVar("F", bound=Callable[..., Any])


def _spec_options(fn: F) -> F:
    """Flags of the synthetic app, shared by `lab up` and `lab gen-app`."""
    d = synthetic.AppSpec()
    opts = [
        click.option("--seed", type=int, default=d.seed, show_default=True, help="Synthetic app: PRNG seed."),
        click.option("--packages", type=int, default=d.packages, show_default=True, help="Synthetic app: vendor packages."),
        click.option("--classes", type=int, default=d.classes, show_default=True, help="Synthetic app: classes per package."),
        click.option("--depth", type=int, default=d.depth, show_default=True, help="Synthetic app: namespace directory depth under each package."),
        click.option("--touch", type=int, default=d.touch, show_default=True, help="Synthetic app: classes autoloaded per request."),
        click.option("--legacy-files", type=int, default=d.legacy_files, show_default=True, help="Synthetic app: legacy files required through include_path per request."),
        click.option("--include-path-entries", type=int, default=d.include_path_entries, show_default=True, help="Synthetic app: include_path entries (only the last holds the legacy files)."),
        click.option("--missing", type=int, default=d.missing, show_default=True, help="Synthetic app: class_exists() probes of missing classes per request."),
        click.option("--user-ini/--no-user-ini", default=d.user_ini, show_default=True, help="Synthetic app: write public/.user.ini."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def _spec(kw: dict[str, object]) -> synthetic.AppSpec:
    return synthetic.AppSpec(**{k: kw.pop(k) for k in list(kw) if k in synthetic.AppSpec.__dataclass_fields__})  # type: ignore[arg-type]


def _render_state(state: LabState) -> str:
    lines = [
        f"lab {state.name}: {state.phase}",
        f"  url        {state.url}{state.entry_path}",
        f"  app        {state.app}",
        f"  storage    {state.storage}" + (f" (volume {state.volume}, mount options "
                                           f"{','.join(f'{k}={v}' for k, v in state.mount_options.items()) or 'defaults'})"
                                           if state.storage == StorageKind.GLUSTERFS else "")
        + _render_delay(state),
        f"  code path  {state.code_path}",
        _render_server(state),
        (f"  php        {state.handler} ({state.php_cgi_binary or 'Apache children'})"
         if Handler(state.handler).php_in_server
         else f"  pool       {state.pool} (master {state.fpm_master_pid})"),
        f"  workers    {' '.join(map(str, state.worker_pids)) or '-'}",
        f"  state      {state.state_dir}/lab.json",
    ]
    if state.php_version:
        lines.append(f"  php        PHP {state.php_version}"
                     + (f" (php-fpm chrooted in {state.php_root})" if state.php_root
                        else " (the host's)"))
    if state.php_ini:
        lines.append("  php ini    " + " ".join(f"{k}={v}" for k, v in state.php_ini.items()))
    return "\n".join(lines)


def _render_delay(state: LabState) -> str:
    us = state.storage_delay_us
    return (f"\n  delay      {storage_delay.format_us(us)} added to each round trip to "
            "the storage (--storage-delay)") if us else ""


def _render_server(state: LabState) -> str:
    if state.server != "apache":
        return f"  server     nginx (master {state.nginx_pid})"
    return (f"  server     apache mpm_{state.mpm}, PHP through {state.handler}, AllowOverride "
            f"{state.allow_override} (master {state.apache_pid})")


@cli.group()
def lab() -> None:
    """Stand up, inspect and tear down a real PHP stack (php-fpm + nginx, or Apache with
    php-fpm, mod_php or mod_fcgid) on this machine.

    \b
    Examples:
      statstorm lab up --app mediawiki --storage glusterfs
      statstorm lab up --server apache --mpm prefork --handler mod_php
      statstorm lab up --name fast --app synthetic --storage glusterfs \\
          --mount-opt attribute-timeout=600,entry-timeout=600,negative-timeout=600
      statstorm lab up --php-ini realpath_cache_size=16K --php-ini opcache.enable=0
      statstorm lab status --json
      statstorm lab down --name fast
      statstorm lab php-root build 8.4 && statstorm lab up --app synthetic --php 8.4
    """


@lab.command("up")
@click.option("--app", type=click.Choice(lab_cmd.APPS), default="mediawiki", show_default=True,
              help="The application to serve.")
@click.option("--storage", type=click.Choice([*lab_cmd.STORAGES, *STORAGE_ALIASES]),
              default="local", show_default=True,
              help="Where the code lives: local disk, a GlusterFS volume on loopback, a "
                   "single-node Ceph cluster's CephFS read through ceph-fuse, or an OpenAFS "
                   "cell of the lab's own (openafs, or afs).")
@click.option("--mount-opt", "mount_opts", multiple=True, metavar="K=V[,K=V]",
              help="GlusterFS FUSE mount option, e.g. attribute-timeout=600 (repeatable).")
@click.option("--storage-delay", "storage_delay_text", default="0", metavar="DURATION",
              help="Delay each round trip to the storage by this much, so the loopback lab "
                   "stands for a LAN or WAN, e.g. 200us or 1ms [default: 0, none]. GlusterFS: "
                   "every metadata call (lookup, stat, open, readdir, …) held on the brick; "
                   "CephFS and OpenAFS: every packet between the client (in a network "
                   "namespace of its own) and its servers, half the delay each way.")
@click.option("--php-ini", "php_ini", multiple=True, metavar="KEY=VALUE",
              help="php.ini override for the lab's PHP (php-fpm -d; the lab's ini file under mod_php and fcgid), e.g. realpath_cache_size=16K (repeatable).")
@click.option("--workers", type=int, default=4, show_default=True,
              help="PHP workers: php-fpm's (pm=static), prefork's children under mod_php, "
                   "or mod_fcgid's php-cgi processes (started on demand).")
@click.option("--server", type=click.Choice(lab_cmd.SERVERS), default="nginx", show_default=True,
              help="The web server in front of PHP.")
@click.option("--mpm", type=click.Choice(apache_lab.MPMS), default=None,
              help="Apache's MPM [default: prefork with mod_php, else event].")
@click.option("--handler", type=click.Choice(apache_lab.HANDLERS), default="fpm", show_default=True,
              help="How Apache runs PHP: php-fpm via mod_proxy_fcgi, mod_php (prefork only), "
                   "or php-cgi under mod_fcgid. nginx: fpm only.")
@click.option("--allow-override", type=click.Choice(apache_lab.OVERRIDES), default=None,
              help="Apache's AllowOverride for the docroot (All: .htaccess looked up per "
                   "directory per request) [default: None].")
@click.option("--port", type=int, default=None, help="Web server port on 127.0.0.1 [default: first free from 8080].")
@click.option("--name", default="lab", show_default=True, help="Lab name; several labs can run side by side.")
@click.option("--php", "php", default=HOST_VERSION, show_default=True, metavar="VERSION",
              help=f"PHP's version: {', '.join(RELEASES)}. {HOST_VERSION} is the host's own; "
                   "another runs php-fpm chrooted in its PHP root (made once: `lab php-root "
                   "build`), the web server outside.")
@click.option("--json", "as_json", is_flag=True, help="Print the lab's state as JSON.")
@_spec_options
@click.pass_obj
def up(env: Env, /, app: str, storage: str, mount_opts: tuple[str, ...], php_ini: tuple[str, ...],
       workers: int, server: str, mpm: str | None, handler: str, allow_override: str | None,
       port: int | None, name: str, php: str, as_json: bool, storage_delay_text: str = "0",
       **spec: object) -> None:
    """Start a lab: php-fpm pool + nginx (or Apache with the chosen MPM and PHP handler)
    serving the app from the chosen storage.

    \b
    Apache runs these combinations (mod_php needs prefork: Debian's PHP is not thread-safe):
      --mpm event|worker|prefork --handler fpm
      --mpm event|worker|prefork --handler fcgid
      --mpm prefork              --handler mod_php

    \b
    Examples:
      statstorm lab up                                   # MediaWiki on local disk
      statstorm lab up --app mediawiki --storage glusterfs
      statstorm lab up --app mediawiki --storage glusterfs --storage-delay 1ms   # storage 1 ms away
      statstorm lab up --app synthetic --touch 300 --port 8090 --name synth
      statstorm lab up --server apache --mpm prefork --handler mod_php --name prefork
      statstorm lab up --server apache --mpm worker --handler fcgid --allow-override All
      statstorm lab up --app synthetic --php 8.4 --name php84   # PHP 8.4 from its root
    """
    opts = lab_cmd.LabOptions(
        name=name, app=app, storage=STORAGE_ALIASES.get(storage, storage), mount_options=key_values(mount_opts, "--mount-opt"),
        php_ini=phpfpm.parse_ini_overrides(list(php_ini)), workers=workers, port=port,
        app_spec=_spec(spec), server=server, mpm=mpm or "", handler=handler,
        allow_override=allow_override or "",
        php=php,
        storage_delay_us=storage_delay.parse(storage_delay_text),
    )
    lab_cmd.validate(env, opts)
    arch = (f"Apache {opts.mpm or apache_lab.default_mpm(handler)} + {handler}"
            if server == "apache" else "nginx + php-fpm")
    if opts.php != HOST_VERSION:
        arch += f" (PHP {opts.php} from its root)"
    started(env, "lab up", f"lab {name}: {app} on "
            f"{storage_delay.label(storage, opts.storage_delay_us)} storage, {arch}, {workers} "
            f"worker(s). Ctrl-C stops it and removes what was started.")
    state = lab_cmd.up(env, opts)
    click.echo(json.dumps(state.to_json(), indent=2) if as_json else _render_state(state))


@lab.command("down")
@click.option("--name", default="lab", show_default=True, help="Lab name.")
@click.option("--all", "all_labs", is_flag=True, help="Stop every lab.")
@click.pass_obj
def down(env: Env, name: str, all_labs: bool) -> None:
    """Stop exactly what `lab up` started, unmount, remove the volume and brick (idempotent).

    \b
    Examples:
      statstorm lab down
      statstorm lab down --name fast
      statstorm lab down --all
    """
    labs = [s.name for s in lab_cmd.list_labs(env)]
    names = labs if all_labs else [name]
    if [n for n in names if n in labs]:  # an unknown or bad --name: only its own line
        started(env, "lab down", ("every lab: " if all_labs else "lab ") + ", ".join(names)
                + " (stop its processes, unmount, remove its files)")
    for n in names:
        lab_cmd.down(env, n)


@lab.command("status")
@click.option("--name", default="lab", show_default=True, help="Lab name.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (url, pool, worker_pids, code_path, storage, …).")
@click.pass_obj
def status(env: Env, name: str, as_json: bool) -> None:
    """Show a lab: URL, pool, worker PIDs, code path and storage.

    \b
    Examples:
      statstorm lab status
      statstorm lab status --name fast --json
    """
    state = lab_cmd.status(env, name)
    click.echo(json.dumps(state.to_json(), indent=2) if as_json else _render_state(state))


@lab.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_(env: Env, as_json: bool) -> None:
    """List the labs on this machine.

    \b
    Example:
      statstorm lab list
    """
    states = lab_cmd.list_labs(env)
    if as_json:
        click.echo(json.dumps([s.to_json() for s in states], indent=2))
    elif not states:
        click.echo("no labs")
    else:
        for s in states:
            arch = f"apache-{s.mpm}-{s.handler}" if s.server == "apache" else "nginx-fpm"
            click.echo(f"{s.name:12} {s.phase:9} {s.app:10} "
                       f"{storage_delay.label(s.storage, s.storage_delay_us):10} {arch:20} "
                       f"php{s.php_version or '?':4} {s.url}{s.entry_path}")


@lab.command("gen-app")
@click.argument("directory", type=OutputPath(file_okay=False))
@click.option("--force", is_flag=True, help="Replace DIRECTORY if it holds a generated app.")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
@_spec_options
@click.pass_obj
def gen_app(env: Env, /, directory: Path, force: bool, as_json: bool, **spec: object) -> None:
    """Generate the deterministic Composer-style synthetic app into DIRECTORY.

    \b
    Examples:
      statstorm lab gen-app /tmp/app
      statstorm lab gen-app /tmp/big --packages 80 --classes 25 --touch 600 --depth 4
      php /tmp/app/public/index.php
    """
    app, manifest = lab_cmd.gen_app(env, directory, _spec(spec), force=force)
    if as_json:
        click.echo(manifest)
    else:
        click.echo(f"generated {app.php_files} PHP files in {app.root} "
                   f"(entry {app.docroot / app.entry}; a request touches {app.expected_classes} classes "
                   f"and {app.expected_legacy} legacy files)")


from statstorm.cli import php_root  # noqa: E402,F401  (registers `lab php-root`)
from statstorm.cli import tree_cache  # noqa: E402,F401  (registers `lab cache`)

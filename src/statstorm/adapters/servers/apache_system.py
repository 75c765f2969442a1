"""The system Apache, found and read with Apache's own tools: the master from the pid file
`/etc/apache2/envvars` names (APACHE_PID_FILE), its virtual hosts from `apache2ctl -S`, what
it runs with from `apache2ctl -t -D DUMP_RUN_CFG` and `apache2ctl -M`, and — from its
configuration files, includes followed (`adapters/servers/apache_conf.py`) — each site's
DocumentRoot and how it runs PHP (mod_php, proxy_fcgi to php-fpm, mod_fcgid).

`discover(env)` returns a `SystemApache` (`results/apache_sites.py`), or None when no system
Apache is running."""

from __future__ import annotations

import re
from pathlib import Path

from statstorm.adapters.host import procs
from statstorm.adapters.servers import apache_conf, apache_facts
from statstorm.env import Env
from statstorm.results.apache_sites import ApacheSite, SystemApache, VirtualHost
from statstorm.results.serving import Handler

CONFDIR = Path("/etc/apache2")
CTL = "apache2ctl"
PHP_TYPE = "application/x-httpd-php"
_ONE = re.compile(r"^(\S+:(\d+))\s+(\S+) \((.+:\d+)\)\s*$")
_HEADER = re.compile(r"^(\S+:(\d+))\s+is a NameVirtualHost\s*$")
_NAMED = re.compile(r"^\s+port (\d+) namevhost (\S+) \((.+:\d+)\)\s*$")
_FCGI_ADDR = re.compile(r"fcgi://([^/|\"\s]+)")


def parse_vhosts(text: str) -> tuple[VirtualHost, ...]:
    """`apache2ctl -S`'s virtual hosts: one per IP-based line, one per `namevhost` line
    under a NameVirtualHost address (its `default server` line repeats one of them)."""
    out: list[VirtualHost] = []
    address = ""
    for line in text.splitlines():
        one, header, named = _ONE.match(line), _HEADER.match(line), _NAMED.match(line)
        if header:
            address = header.group(1)
        elif one:
            out.append(VirtualHost(one.group(1), int(one.group(2)), one.group(3), one.group(4)))
        elif named and address:
            out.append(VirtualHost(address, int(named.group(1)), named.group(2), named.group(3)))
    return tuple(out)


def parse_env(text: str) -> dict[str, str]:
    """`env`'s output: NAME=VALUE lines."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            out[key] = value
    return out


def envvars(env: Env, confdir: Path = CONFDIR) -> dict[str, str]:
    """The variables `apache2ctl` gives Apache: `envvars` sourced by a shell, as apache2ctl
    does it (APACHE_RUN_USER, APACHE_PID_FILE, APACHE_LOG_DIR, …); {} if it cannot be read."""
    if not (confdir / "envvars").is_file():
        return {}
    res = env.run(["env", "-i", f"APACHE_CONFDIR={confdir}", "sh", "-c",
                   '. "$APACHE_CONFDIR/envvars" && env'], check=False, what="envvars")
    return parse_env(res.stdout) if res.returncode == 0 else {}


def run_user(run_cfg: dict[str, str]) -> str:
    """DUMP_RUN_CFG's `User: name="www-data" id=33` → www-data."""
    m = re.search(r'name="?([^"\s]+)', run_cfg.get("User", ""))
    return m.group(1) if m else ""


def master_pid(pid_file: str) -> int:
    """The Apache master the pid file names, when it is running (0 otherwise)."""
    try:
        pid = int(Path(pid_file).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0
    argv = procs.cmdline(pid) if procs.alive(pid) else []
    return pid if argv and "apache2" in Path(argv[0]).name else 0


def _handler(name: str, args: str, modules: set[str]) -> tuple[Handler, str] | None:
    """The way of running PHP one directive sets, and the php-fpm address it passes to."""
    lname, value = name.lower(), args.strip().strip('"')
    if lname == "sethandler":
        if value.startswith("proxy:unix:"):
            return Handler.FPM, value[len("proxy:unix:"):].partition("|")[0]
        if value.startswith("proxy:fcgi://"):
            m = _FCGI_ADDR.search(value)
            return Handler.FPM, m.group(1) if m else ""
    if lname == "proxypassmatch" and "fcgi://" in args:
        m = _FCGI_ADDR.search(args)
        return Handler.FPM, m.group(1) if m else ""
    if lname in ("sethandler", "addhandler") and value.split()[:1] == [PHP_TYPE]:
        return (Handler.MOD_PHP, "") if "php_module" in modules else None
    if (lname in ("sethandler", "addhandler") and "fcgid-script" in value) or \
            lname == "fcgidwrapper":
        return (Handler.FCGID, "") if "fcgid_module" in modules else None
    return None


def site_handler(cfg: apache_conf.ApacheConfig, vhost_source: str, modules: set[str],
                 ) -> tuple[Handler | None, str, str]:
    """How the <VirtualHost> at `vhost_source` runs PHP: the last directive that hands .php
    to a handler, the server-level ones first (conf-enabled/phpX.Y-fpm.conf, mods-enabled/
    phpX.Y.conf, whatever the PHP version), then the vhost's own; with its php-fpm address
    and file:line."""
    loaded = apache_conf.loaded_modules(cfg)
    found: tuple[Handler | None, str, str] = (None, "", "")
    for own in (False, True):
        for (name, args, where, cond), vhost in zip(cfg.directives, cfg.vhost_of):
            if (vhost == vhost_source) != own or (vhost and not own):
                continue
            if not apache_conf.active(cond, loaded):
                continue
            got = _handler(name, args, modules)
            if got:
                found = (got[0], got[1], where)
    return found


def _local(source: str, reported_root: str, read_root: str) -> str:
    """A file:line as apache2ctl reports it, as this reader names the same file (a tree read
    from another directory than the one the server reported)."""
    if reported_root and read_root and reported_root != read_root and \
            source.startswith(reported_root.rstrip("/") + "/"):
        return read_root.rstrip("/") + source[len(reported_root.rstrip("/")):]
    return source


def sites(cfg: apache_conf.ApacheConfig, vhosts: tuple[VirtualHost, ...],
          variables: dict[str, str], modules: tuple[str, ...], *, main_root: str = "",
          reported_root: str = "", read_root: str = "") -> tuple[ApacheSite, ...]:
    """Each virtual host with its DocumentRoot (`${NAME}` resolved from Define and envvars
    where Apache would; '' and a note when it cannot be) and how it runs PHP."""
    names = {**variables, **cfg.defines}
    out: list[ApacheSite] = []
    for vh in vhosts:
        src = _local(vh.source, reported_root, read_root)
        raw = cfg.vhost_roots.get(src) or cfg.main_root
        note = ""
        if raw:
            docroot, unknown = apache_conf.expand(raw, names)
            if unknown:
                note = (f"DocumentRoot {raw}: ${{{unknown[0]}}} is neither Defined nor set by "
                        "envvars; Apache serves it as written")
                docroot = ""
        else:
            docroot = main_root
        handler, listen, where = site_handler(cfg, src, set(modules))
        out.append(ApacheSite(vh, docroot.rstrip("/") or ("/" if docroot else ""), handler,
                              listen, where, note))
    return tuple(out)


def describe(env: Env, pid: int, confdir: Path = CONFDIR, variables: dict[str, str] | None = None,
             ) -> SystemApache:
    """The system Apache whose master is `pid`, asked with apache2ctl."""
    ctl = [CTL] if confdir == CONFDIR else ["env", f"APACHE_CONFDIR={confdir}", CTL]
    variables = envvars(env, confdir) if variables is None else variables
    s = env.run([*ctl, "-S"], check=False, what="apache2ctl -S")
    run = env.run([*ctl, "-t", "-D", "DUMP_RUN_CFG"], check=False,
                  what="apache2ctl -D DUMP_RUN_CFG")
    mods = env.run([*ctl, "-M"], check=False, what="apache2ctl -M")
    run_cfg = apache_facts.parse_run_cfg(run.stdout + run.stderr)
    modules = tuple(apache_facts.parse_modules(mods.stdout))
    root = run_cfg.get("ServerRoot", str(confdir))
    cfg = apache_conf.read(confdir / "apache2.conf", str(confdir))
    mpm = next((m[4:-7] for m in modules if re.fullmatch(r"mpm_\w+_module", m)), "")
    return SystemApache(
        master_pid=pid, conf=str(confdir / "apache2.conf"), server_root=root,
        pid_file=run_cfg.get("PidFile", variables.get("APACHE_PID_FILE", "")),
        user=run_user(run_cfg) or variables.get("APACHE_RUN_USER", ""),
        mpm=mpm or apache_conf.mpm(cfg), modules=modules,
        sites=sites(cfg, parse_vhosts(s.stdout + s.stderr), variables, modules,
                    main_root=run_cfg.get("Main DocumentRoot", ""), reported_root=root,
                    read_root=str(confdir)),
        ctl=tuple(ctl))


def discover(env: Env, confdir: Path = CONFDIR) -> SystemApache | None:
    """The running system Apache (its pid file from envvars' APACHE_PID_FILE), or None."""
    if not (confdir / "apache2.conf").is_file():
        return None
    variables = envvars(env, confdir)
    pid = master_pid(variables.get("APACHE_PID_FILE", "/var/run/apache2/apache2.pid"))
    if not pid:
        return None
    return describe(env, pid, confdir, variables)


def _same_address(to: str, listen: str) -> bool:
    """A proxy_fcgi target and a pool's `listen` name the same socket or port."""
    return bool(to) and (to == listen or to.endswith(":" + listen) or listen.endswith(":" + to)
                         or to.replace("localhost", "127.0.0.1") == listen)


def docroot_passing_to(conf: Path, listen: str, variables: dict[str, str] | None = None,
                       server_root: str = "") -> str:
    """The DocumentRoot of the first virtual host of `conf` whose PHP goes to the php-fpm
    pool at `listen` ('' if none is known statically): for a pool behind the system Apache
    (`variables`: what envvars sets)."""
    if not listen:
        return ""
    cfg = apache_conf.read(conf, server_root or str(conf.parent))
    names = {**(variables or {}), **cfg.defines}
    keys = list(dict.fromkeys([*cfg.vhost_roots, *(v for v in cfg.vhost_of if v)]))
    for src in keys or [""]:
        handler, to, _ = site_handler(cfg, src, {"proxy_fcgi_module"})
        if handler is Handler.FPM and _same_address(to, listen):
            raw = cfg.vhost_roots.get(src) or cfg.main_root
            docroot, unknown = apache_conf.expand(raw, names)
            if raw and not unknown:
                return docroot.rstrip("/") or "/"
    return ""

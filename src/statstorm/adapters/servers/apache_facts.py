"""The facts `check` needs of an Apache server in front of PHP: its MPM and limits, how it
runs PHP, what its <Directory> sections set from / down to the docroot, the `.htaccess` files
under it, and the memory of the children that carry PHP (mod_php)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from statstorm.adapters.host import procs, smaps
from statstorm.adapters.servers import apache_conf
from statstorm.env import Env
from statstorm.results.facts import ApacheFacts
from statstorm.results.serving import Handler, handler_of


def _int(value: str | None) -> int | None:
    try:
        return int(str(value).split()[0]) if value is not None else None
    except (ValueError, IndexError):
        return None


def parse_run_cfg(text: str) -> dict[str, str]:
    """`apache2 -t -D DUMP_RUN_CFG`: `ServerRoot`, `Main DocumentRoot`, `PidFile`, … (quotes
    removed)."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key and not key.startswith(("AH", " ")):
            out[key.strip()] = value.strip().strip('"')
    return out


def parse_modules(text: str) -> list[str]:
    """`apache2 -M`: the loaded modules' names (`mpm_event_module`, `php_module`, …)."""
    return [m.group(1) for m in re.finditer(r"^\s+(\w+_module) \((?:static|shared)\)", text, re.M)]


@dataclass(frozen=True)
class RunConfig:
    """What a running Apache reports of its configuration."""

    server_root: str = "/etc/apache2"  # DUMP_RUN_CFG's ServerRoot
    document_root: str = ""  # DUMP_RUN_CFG's Main DocumentRoot
    modules: tuple[str, ...] = ()  # `apache2 -M`'s loaded modules


def live(env: Env, argv: list[str]) -> RunConfig:
    """What the server itself reports of its configuration, asked as `argv` (the master's
    command line, or `apache2ctl`): DUMP_RUN_CFG and the loaded modules."""
    run = env.run([*argv, "-t", "-D", "DUMP_RUN_CFG"], check=False, what="apache2 -D DUMP_RUN_CFG")
    mods = env.run([*argv, "-M"], check=False, what="apache2 -M")
    cfg = parse_run_cfg(run.stdout + run.stderr)
    return RunConfig(cfg.get("ServerRoot", "/etc/apache2"), cfg.get("Main DocumentRoot", ""),
                     tuple(parse_modules(mods.stdout)))


def gather(conf: Path, docroot: str, *, php_pids: list[int], server_root: str = "/etc/apache2",
           handler: str = "", modules: list[str] | None = None,
           htaccess: tuple[str, ...] = ()) -> ApacheFacts:
    """ApacheFacts of the configuration `conf` for the site served from `docroot`;
    `php_pids`: the processes running PHP (Apache's children under mod_php); `modules`: the
    loaded modules as `apache2 -M` lists them (they decide the MPM and mod_php); `htaccess`:
    the .htaccess files found in the code tree (adapters.codetree)."""
    cfg = apache_conf.read(conf, server_root)
    mpm = next((m[4:-7] for m in modules or [] if re.fullmatch(r"mpm_\w+_module", m)), "")
    mpm = mpm or apache_conf.mpm(cfg) or "event"
    if modules and "php_module" in modules:
        handler = handler or Handler.MOD_PHP
    d_workers, d_limit, d_threads = apache_conf.MPM_DEFAULTS.get(mpm, apache_conf.MPM_DEFAULTS["event"])
    threads = 1 if mpm == "prefork" else _int(apache_conf.directive(cfg, "ThreadsPerChild")) or d_threads
    limit = _int(apache_conf.directive(cfg, "ServerLimit")) or d_limit
    workers = (_int(apache_conf.directive(cfg, "MaxRequestWorkers"))
               or _int(apache_conf.directive(cfg, "MaxClients")) or d_workers)
    workers = min(workers, limit * threads)
    handler = handler or apache_conf.php_handler(cfg)
    known = handler_of(handler)
    # the bound on the PHP processes the handler starts (mod_fcgid's), if Apache holds one
    limit_directive = known.process_limit_directive if known else ""
    fcgid = _int(apache_conf.directive(cfg, limit_directive)) if limit_directive else None
    docroot = docroot.rstrip("/") or "/"
    pss = (tuple(m.pss_kb for m in smaps.read_all(php_pids))
           if known is not None and known.children_carry_php else ())
    return ApacheFacts(
        config=str(conf), mpm=mpm, handler=handler, max_request_workers=workers,
        server_limit=limit, threads_per_child=threads, docroot=docroot,
        walk=apache_conf.walk(cfg, docroot),
        htaccess_files=tuple(h for h in htaccess if h.startswith(docroot + "/")),
        directory_source=apache_conf.source_for(cfg, docroot),
        fcgid_max_processes=fcgid, child_pss_kb=pss)


def server_passing_to(listen: str) -> tuple[Path, list[str], list[int]] | None:
    """A running Apache whose configuration passes PHP to `listen` (a php-fpm socket or
    address): its configuration file, the argv that asks it (`-t`, `-M`), its master PID."""
    if not listen:
        return None
    for pid in procs.find_pids(["apache2"]):
        argv = procs.cmdline(pid)
        if not argv or Path(argv[0]).name != "apache2" or "apache2" in " ".join(
                procs.cmdline(procs.ppid(pid))):
            continue  # a child, or not Apache
        conf = Path(argv[argv.index("-f") + 1]) if "-f" in argv[:-1] else Path(
            "/etc/apache2/apache2.conf")
        ask = argv[:argv.index("-f") + 2] if "-f" in argv[:-1] else ["apache2ctl"]
        cfg = apache_conf.read(conf, str(conf.parent))
        if any(listen in args for _, args, _, _ in cfg.directives):
            return conf, ask, [pid]
    return None

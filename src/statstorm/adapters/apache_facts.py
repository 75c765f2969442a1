"""The facts `check` needs of an Apache server in front of PHP: its MPM and limits, how it
runs PHP, what its <Directory> sections set from / down to the docroot, the `.htaccess` files
under it, and the memory of the children that carry PHP (mod_php)."""

from __future__ import annotations

from pathlib import Path

from statstorm.adapters import apache_conf, smaps
from statstorm.results.facts import ApacheFacts


def _int(value: str | None) -> int | None:
    try:
        return int(str(value).split()[0]) if value is not None else None
    except (ValueError, IndexError):
        return None


def gather(conf: Path, docroot: str, *, php_pids: list[int], server_root: str = "/etc/apache2",
           handler: str = "") -> ApacheFacts:
    """ApacheFacts of the configuration `conf` for the site served from `docroot`;
    `php_pids`: the processes running PHP (Apache's children under mod_php)."""
    cfg = apache_conf.read(conf, server_root)
    mpm = apache_conf.mpm(cfg) or "event"
    d_workers, d_limit, d_threads = apache_conf.MPM_DEFAULTS.get(mpm, apache_conf.MPM_DEFAULTS["event"])
    threads = 1 if mpm == "prefork" else _int(apache_conf.directive(cfg, "ThreadsPerChild")) or d_threads
    limit = _int(apache_conf.directive(cfg, "ServerLimit")) or d_limit
    workers = (_int(apache_conf.directive(cfg, "MaxRequestWorkers"))
               or _int(apache_conf.directive(cfg, "MaxClients")) or d_workers)
    workers = min(workers, limit * threads)
    handler = handler or apache_conf.php_handler(cfg)
    fcgid = _int(apache_conf.directive(cfg, "FcgidMaxProcessesPerClass")) if handler == "fcgid" else None
    docroot = docroot.rstrip("/") or "/"
    pss = tuple(m.pss_kb for m in smaps.read_all(php_pids)) if handler == "mod_php" else ()
    return ApacheFacts(
        config=str(conf), mpm=mpm, handler=handler, max_request_workers=workers,
        server_limit=limit, threads_per_child=threads, docroot=docroot,
        walk=apache_conf.walk(cfg, docroot),
        htaccess_files=apache_conf.htaccess_files(docroot) if Path(docroot).is_dir() else (),
        directory_source=apache_conf.source_for(cfg, docroot),
        fcgid_max_processes=fcgid if handler == "fcgid" else None, child_pss_kb=pss)

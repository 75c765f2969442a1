"""The live facts of a PHP pool that check's rules judge, gathered from the running system:
the pool (a php-fpm pool, or PHP inside a lab's Apache), the settings its workers run with
(`php-fpm -i` of the master's own options, the pool's php_value/php_admin_value from
`php-fpm -tt`, then — where the pool answers — the values a worker reports over FastCGI, with
its OPcache status and realpath cache use), the CLI's for comparison, the web server in front
(nginx's `root` and SCRIPT_FILENAME, or Apache's configuration), the files under the docroot and
include_path, the mounts holding them, memory (PSS of the workers), huge pages and the PHP
binary's code segment.

`statstorm check` judges these facts once; `statstorm exporter` judges them again and again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from statstorm.adapters.host import elf, memory, smaps
from statstorm.adapters.labs import apache_lab, phpfpm, state as labs
from statstorm.adapters.php import (apcu, codetree, php_apps, php_runtime, php_targets,
                                   server_php, target)
from statstorm.adapters.servers import apache_facts, apache_system, nginx
from statstorm.adapters.storage import code_mirror, gluster, mounts
from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.model.checkfacts import (Facts, MountFact, OpcacheStatus, SiteRoot, TraceFacts,
                                        ini_int)
from statstorm.model import app_tree
from statstorm.model.storage_kinds import is_network_fstype
from statstorm.results.sites import Site


@dataclass
class Gathered:
    """One pool's facts, where its settings came from, and what could not be read."""
    facts: Facts
    settings_source: str
    notes: list[str] = field(default_factory=list)


# -- targets -------------------------------------------------------------------------------------
@dataclass
class PoolTarget:
    """A pool check can gather: the PHP processes and the server in front of them."""
    pool: target.PhpTarget
    nginx_conf: list[str] = field(default_factory=list)  # the nginx master's argv (-p, -c)
    apache_conf: Path | None = None  # the Apache in front of the pool, if any
    apache_ask: list[str] = field(default_factory=list)  # argv that asks it (-M, DUMP_RUN_CFG)

    @property
    def name(self) -> str:
        return self.pool.name


def lab_target(env: Env, name: str) -> PoolTarget:
    state = labs.require_up(env, name)
    php = target.for_lab(state)
    if state.server != "apache":
        return PoolTarget(php, nginx.lab_argv(labs.nginx_conf(state), Path(state.state_dir)))
    conf = labs.apache_conf(state)
    return PoolTarget(php, [], conf, apache_lab.lab_argv(conf))


def apache_targets(php: server_php.InServer | None) -> list[PoolTarget]:
    """The system Apache's PHP, one target per site that runs it (each with its docroot)."""
    if php is None:
        return []
    return [PoolTarget(server_php.for_site(php, site), [], Path(php.conf), list(php.ctl))
            for site in php.sites]


def targets(env: Env, *, lab: str | None, pools: tuple[str, ...],
            apache: bool = False) -> list[PoolTarget]:
    """The lab's pool, the named php-fpm pools, the system Apache's PHP (`apache`), or every
    running pool and the system Apache's PHP."""
    if lab:
        return [lab_target(env, lab)]
    if apache:
        return apache_targets(target.require_system_apache(env))
    names = list(pools) or php_targets.running_pools()
    in_apache = [] if pools else apache_targets(server_php.system_apache(env))
    if not names and not in_apache:
        raise UsageError("no php-fpm pool is running and no system Apache runs PHP: name a "
                         "pool with --pool NAME, or check a lab with --lab NAME")
    return [PoolTarget(php_targets.find_pool(name)) for name in names] + in_apache


# -- gathering -----------------------------------------------------------------------------------
def _mounts(env: Env, docroots: list[str], include: list[str],
            writable: list[tuple[str, str]] | None = None) -> tuple[MountFact, ...]:
    """The mount of every site's docroot, include_path entry and writable path."""
    return _mount_facts(env, [("docroot", d) for d in docroots]
                        + [("include_path", p) for p in include]
                        + [(f"writable:{w}", p) for w, p in writable or []])


def _traced(env: Env, found: tuple[MountFact, ...],
            trace: TraceFacts | None) -> tuple[MountFact, ...]:
    """With the trace as evidence: the network mounts the pool really read that no
    configuration named (role `traced`), so the storage findings see them too."""
    if trace is None:
        return found
    known = {m.mount_point for m in found}
    extra = [("traced", mp) for mp, fstype, _ in trace.mounts
             if mp not in known and is_network_fstype(fstype) and os.path.isdir(mp)]
    return found + _mount_facts(env, extra) if extra else found


def _sites(given: str | None, lab_docroot: str, nginx_sites: tuple[Site, ...],
           apache_docroot: str) -> list[SiteRoot]:
    """Every site the pool serves: `--docroot`, a lab's own, or each server passing to it."""
    if given:
        return [SiteRoot("option", docroot=given)]
    if lab_docroot:  # as its nginx serves it now (apply may have switched it to a mirror)
        served = [x.known_docroot for x in nginx_sites if x.known_docroot]
        return [SiteRoot("lab", docroot=served[0] if served else lab_docroot)]
    out = [SiteRoot("nginx", x.server_names, x.known_docroot, x.docroot_unknown,
                    f"{x.config_file}:{x.config_line}") for x in nginx_sites]
    if apache_docroot:
        out.append(SiteRoot("apache", docroot=apache_docroot))
    return out


def app_docroot(docroots: list[str], found: tuple[MountFact, ...]) -> str:
    """The docroot whose app check judges: the first site on network storage (its app is
    the one that re-reads its data from there), else the first site."""
    net = {m.path for m in found if m.role == "docroot" and is_network_fstype(m.fstype)}
    return next((d for d in docroots if d in net), docroots[0] if docroots else "")


def _site_notes(sites: list[SiteRoot]) -> list[str]:
    notes = [f"the docroot of {', '.join(x.names) or 'a site'} ({x.config or x.source}) is "
             f"built from {x.unknown}: its storage is checked from the trace only (give "
             "--docroot DIR or --trace FILE)" for x in sites if x.unknown]
    if not sites:
        notes.append("no docroot found (no nginx or Apache server passes to this pool): file "
                     "counts, mounts and symlinks are not checked; give --docroot")
    return notes


def _mount_facts(env: Env, paths: list[tuple[str, str]]) -> tuple[MountFact, ...]:
    entries = mounts.current()
    if not entries:
        return ()
    out = []
    described: dict[str, mounts.MountInfo] = {}
    for role, path in paths:
        if not path:
            continue
        entry = mounts.find_mount(entries, os.path.realpath(path))
        if entry is None:
            continue
        kind = mounts.kind_of(entry.fstype)
        cache: dict[str, str] = {}
        vol: dict[str, str] = {}
        volume = ""
        if kind != "local":
            info = described.get(entry.mount_point) or mounts.detect(
                path, volume_reader=lambda v: gluster.volume_options(env, v))
            described[entry.mount_point] = info
            cache, vol = dict(info.cache_options), dict(info.volume_options)
            volume = cache.pop("volume", "")
        out.append(MountFact(role=role, path=path, mount_point=entry.mount_point,
                             fstype=entry.fstype, kind=kind, cache_options=cache,
                             volume_options=vol, volume=volume))
    return tuple(out)


def directives_of(env: Env, pool: PoolTarget) -> dict[str, str]:
    """The pool's own directives (`listen`, `pm.*`, `chroot`, …): `php-fpm -tt` for a php-fpm
    pool; for mod_fcgid's php-cgi only the socket one of them answers on."""
    return pool.pool.directives(env)


def _app_root(docroot: str, trace: TraceFacts | None) -> str:
    """The app's tree the docroot belongs to: the Composer project around it
    (codetree.app_root), or the directory above it holding the code the traced requests
    included (model/app_tree.py), whichever is wider."""
    if not docroot:
        return ""
    static = codetree.app_root(docroot)
    if trace is None or not trace.included_dirs:
        return static
    traced = app_tree.tree_of_dirs(docroot, trace.included_dirs).root
    return traced if static.startswith(traced.rstrip("/") + "/") else static


def gather(env: Env, pool: PoolTarget, *, docroot: str | None = None, query_pool: bool = True,
           trace: TraceFacts | None = None,
           fsb: dict[str, dict[str, float]] | None = None) -> Gathered:
    """The pool's facts (`docroot` overrides the one found; `query_pool`: ask its workers
    over FastCGI; `trace` and `fsb`: measured evidence to judge with them)."""
    notes: list[str] = []
    fpm = pool.pool
    settings = fpm.settings(env)
    settings.pop("sapi", None)
    directives = directives_of(env, pool)
    pm = {k: v for k, v in directives.items() if k.startswith("pm")}
    fpm_global = (phpfpm.pool_directives(php_targets.fpm_tt(env, fpm.argv), "global")
                  if isinstance(fpm, php_targets.FpmPool) and fpm.argv else {})
    for k in list(settings):
        if k.startswith("pm"):
            settings.pop(k)
    listen = directives.get("listen", "")
    source = fpm.settings_source
    status: OpcacheStatus | None = None
    used: int | None = None
    used_by: tuple[int, ...] = ()
    extensions: tuple[str, ...] | None = None
    if query_pool:
        notes += fpm.query_caveats(listen)
    runtime = php_runtime.of_binary(fpm.binary)
    if runtime.root and isinstance(fpm, php_targets.FpmPool):
        notes.append(php_runtime.identity(env, runtime, php_targets.settings_args(fpm.argv))
                     .describe(runtime))
        source += f", run chrooted in the PHP root {runtime.root}"
    if query_pool and listen and not directives.get("chroot"):
        try:
            answers = php_targets.ask_pool(env, listen, len(fpm.workers), root=runtime.root)
            data = answers[0]
            settings.update(data.ini)
            status = data.opcache
            used_by = tuple(a.realpath_used for a in answers if a.realpath_used is not None)
            used = max(used_by) if used_by else None
            extensions = data.extensions
            source = f"{len(answers)} worker(s) of the pool over FastCGI ({listen})"
            if runtime.root:
                source += (f", PHP {data.php_version or runtime.version} chrooted in the PHP "
                           f"root {runtime.root}")
        except ComponentError as exc:
            notes.append(f"could not ask the pool over FastCGI ({exc}; open_basedir or "
                         "security.limit_extensions can keep the query script out); settings "
                         "come from php-fpm -i/-tt, without OPcache status")
    settings = {k: ("" if v == "no value" else str(v)) for k, v in settings.items()}
    cli = php_targets.cli_settings(env, [phpfpm.php_cli_for(fpm.binary)]
                                   if Path(fpm.binary).name.startswith("php-fpm") else ["php"])
    cli.pop("sapi", None)
    nginx_sites = nginx.sites_passing_to([pool.nginx_conf] if pool.nginx_conf else None, listen)
    server = nginx_sites[0] if nginx_sites else None  # the SCRIPT_FILENAME check reads the first
    run_cfg = apache_facts.RunConfig()
    if pool.apache_conf is None and server is None and not fpm.handler.php_in_server:
        found = apache_facts.server_passing_to(listen)  # a system Apache in front of the pool
        if found:
            pool.apache_conf, pool.apache_ask, _ = found
    apache_root = ""
    if pool.apache_conf is not None:
        run_cfg = apache_facts.live(env, pool.apache_ask)
        if not fpm.handler.php_in_server:  # the site whose .php goes to this pool
            apache_root = apache_system.docroot_passing_to(
                pool.apache_conf, listen, apache_system.envvars(env, pool.apache_conf.parent),
                run_cfg.server_root)
    sites = _sites(docroot, fpm.docroot, nginx_sites, apache_root or run_cfg.document_root)
    notes += _site_notes(sites)
    docroots = list(dict.fromkeys(x.docroot for x in sites if x.docroot))
    docroot = docroots[0] if docroots else ""
    include_path = settings.get("include_path", "").split(":")
    include = [e for e in include_path if e.startswith("/") and Path(e).is_dir()]
    tree = codetree.CodeTree()
    if docroot:
        roots = ([codetree.app_root(d) for d in docroots]
                 + [e for e in include if not e.startswith("/usr/share/php")])
        tree = codetree.scan(roots, settings.get("user_ini.filename", ""),
                          ini_int(settings.get("opcache.file_update_protection"), 2))
    inc_php = tuple((e, codetree.count_php(e)) for e in include_path
                    if e.startswith("/")) if docroot else ()
    found_mounts = _traced(env, _mounts(env, docroots, include, codetree.writable_paths(
        settings, codetree.app_root(docroot) if docroot else "")), trace)
    app, app_config = php_apps.recognise(app_docroot(docroots, found_mounts))
    info = memory.meminfo()
    mem = smaps.read_all(fpm.workers)
    pss = [m.pss_kb for m in mem if m.pss_kb]
    apache = apache_facts.gather(pool.apache_conf, docroot, php_pids=fpm.workers,
                                 server_root=run_cfg.server_root,
                                 modules=list(run_cfg.modules), htaccess=tree.htaccess
                                 ) if pool.apache_conf and docroot else None
    return Gathered(Facts(
        pool=pool.name, settings=settings, lab=fpm.lab, handler=str(fpm.handler),
        cli_settings=cli, pm=pm, settings_source=source, fpm_global=fpm_global,
        docroot=docroot, app_root=_app_root(docroot, trace),
        mirror=code_mirror.facts(docroot, labs.mirror_root(env, fpm.lab) if fpm.lab else None),
        php_files=tree.php_files if docroot else None,
        tree_entries=tree.entries, tree_bytes=tree.bytes,
        user_ini_files=tree.user_ini_files if docroot else None,
        recent_php_files=tree.recent, future_php_files=tree.future, include_path_php=inc_php,
        mounts=found_mounts,
        sites=tuple(sites),
        symlinks=codetree.symlinks_on([docroot, *include]) if docroot else (),
        nginx_script_filename=(server.script_filename or None) if server else None,
        hugepages=memory.hugepages(info), php_binary=fpm.binary,
        text_bytes=elf.read_text_segment(fpm.binary), worker_pss_kb=tuple(pss),
        mem_available_kb=info.available_kb, mem_total_kb=info.total_kb,
        opcache=status, realpath_used=used, realpath_used_by_worker=used_by,
        trace=trace, fsbench_p50_us=fsb or {}, app=app, app_config=app_config,
        extensions=extensions, apcu_path=apcu.extension_path(root=runtime.root), apache=apache,
        huge_mapped_kb=tuple(m.huge_kb for m in mem) if mem else None,
        code_mapping=memory.code_window(fpm.workers[0]) if fpm.workers else None),
        source, notes)

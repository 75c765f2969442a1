"""`statstorm check`: gather each php-fpm pool's live facts, judge them with model.findings.

Per pool: the settings its workers run with (`php-fpm -i` of the master's own options, the
pool's php_value/php_admin_value from `php-fpm -tt`, then — where the pool answers — the values
a worker reports over FastCGI, with its OPcache status and realpath cache use), the CLI's for
comparison, nginx's `root` and SCRIPT_FILENAME for the pool, the files under the docroot and
include_path, the mounts holding them, memory (PSS of the workers), huge pages and the PHP
binary's code segment. `--trace` and `--fsbench` add measured evidence.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statstorm.adapters import (codetree, elf, fastcgi, gluster, memory, mounts, nginx, phpfpm,
                                procs)
from statstorm.commands import trace as trace_cmd
from statstorm.context import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.model.checkfacts import (Facts, MountFact, TraceFacts, fsbench_p50, ini_int,
                                        trace_facts)
from statstorm.model.findings import SEVERITIES, Finding, evaluate, rank
from statstorm.model.tracestats import summarize
from statstorm.results.common import read_json
from statstorm.results.trace import read_trace

SCHEMA = "statstorm.check/1"
# The script a worker runs for `check` (no output but JSON; nothing is changed).
QUERY_PHP = r"""<?php
header('Content-Type: application/json');
$keys = ['realpath_cache_size', 'realpath_cache_ttl', 'open_basedir', 'include_path',
  'user_ini.filename', 'user_ini.cache_ttl', 'cgi.fix_pathinfo', 'session.save_handler',
  'session.save_path', 'upload_tmp_dir', 'sys_temp_dir'];
$ini = [];
foreach ($keys as $k) { $v = ini_get($k); if ($v !== false) { $ini[$k] = $v; } }
foreach ((ini_get_all('zend opcache', false) ?: []) as $k => $v) { $ini[$k] = (string)$v; }
foreach (explode(',', (string)($_GET['keys'] ?? '')) as $k) {
  $v = $k === '' ? false : ini_get($k); if ($v !== false) { $ini[$k] = $v; } }
if (isset($_GET['hold'])) { usleep(min(200000, (int)$_GET['hold'])); }
echo json_encode(['ini' => $ini, 'realpath_used' => realpath_cache_size(),
  'opcache' => function_exists('opcache_get_status') ? opcache_get_status(false) : null,
  'sapi' => PHP_SAPI, 'pid' => getmypid()]);
"""


@dataclass(frozen=True)
class CheckOptions:
    pools: tuple[str, ...] = ()
    lab: str | None = None
    trace: Path | None = None
    fsbench: Path | None = None
    docroot: str | None = None
    query_pool: bool = True  # ask a worker over FastCGI


@dataclass
class PoolCheck:
    pool: str
    settings_source: str
    facts: Facts
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)


@dataclass
class CheckResult:
    pools: list[PoolCheck]

    @property
    def findings(self) -> list[Finding]:
        return sorted((f for p in self.pools for f in p.findings), key=lambda f: -rank(f.severity))

    def worst(self) -> str | None:
        found = self.findings
        return found[0].severity if found else None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "findings": [f.to_json() for f in self.findings],
            "pools": [{"pool": p.pool, "settings_source": p.settings_source,
                       "docroot": p.facts.docroot, "php_files": p.facts.php_files,
                       "settings": p.facts.settings, "pm": p.facts.pm,
                       "mounts": [m.__dict__ for m in p.facts.mounts],
                       "symlinks": [list(x) for x in p.facts.symlinks],
                       "nginx_script_filename": p.facts.nginx_script_filename,
                       "worker_pss_kb": list(p.facts.worker_pss_kb),
                       "mem_available_kb": p.facts.mem_available_kb,
                       "hugepages": (p.facts.hugepages.__dict__ if p.facts.hugepages
                                     else None),
                       "php_binary": p.facts.php_binary, "text_bytes": p.facts.text_bytes,
                       "realpath_used": p.facts.realpath_used,
                       "realpath_used_by_worker": list(p.facts.realpath_used_by_worker),
                       "opcache_memory": (p.facts.opcache_status or {}).get("memory_usage"),
                       "notes": p.notes} for p in self.pools],
        }


def failed(result: CheckResult, fail_on: str | None) -> bool:
    """True if a finding is at least as severe as `fail_on`."""
    if fail_on is None:
        return False
    return any(rank(f.severity) >= rank(fail_on) for f in result.findings)


def validate(opts: CheckOptions) -> None:
    if opts.pools and opts.lab:
        raise UsageError("give --pool or --lab, not both")
    for flag, path in (("--trace", opts.trace), ("--fsbench", opts.fsbench)):
        if path is not None and not path.is_file():
            raise UsageError(f"{flag} {path}: no such file; record one with `statstorm "
                             f"{flag.lstrip('-')} -o FILE`")
    if opts.docroot is not None and not Path(opts.docroot).is_dir():
        raise UsageError(f"--docroot {opts.docroot}: not a directory")


# -- targets -------------------------------------------------------------------------------------
@dataclass
class _Pool:
    name: str
    binary: str
    argv: list[str]  # binary + options that decide its settings
    workers: list[int]
    docroot: str = ""
    nginx_conf: list[str] = field(default_factory=list)  # argv for `nginx -T`
    lab: str = ""


def running_pools() -> list[str]:
    names = set()
    for pid in procs.find_pids(["php-fpm: pool "]):
        m = re.fullmatch(r"php-fpm: pool (\S+)", " ".join(procs.cmdline(pid)).strip())
        if m:
            names.add(m.group(1))
    return sorted(names)


def _targets(env: Env, opts: CheckOptions) -> list[_Pool]:
    if opts.lab:
        from statstorm.commands import lab as lab_cmd
        state = lab_cmd.status(env, opts.lab)
        if state.phase != "up" or not state.pool:
            raise UsageError(f"lab {opts.lab!r} is not up; start it with `statstorm lab up "
                             f"--name {opts.lab}`")
        root = Path(state.state_dir)
        argv = [state.fpm_binary, "-y", str(root / "conf/php-fpm.conf"),
                *phpfpm.ini_args(state.php_ini)]
        return [_Pool(state.pool, state.fpm_binary, argv, state.worker_pids, state.docroot,
                      nginx.lab_argv(root / "conf/nginx.conf", root), lab=opts.lab)]
    names = list(opts.pools) or running_pools()
    if not names:
        raise UsageError("no php-fpm pool is running: name one with --pool NAME, or check a "
                         "lab with --lab NAME")
    out = []
    for name in names:
        workers = trace_cmd.pool_workers(name)
        if not workers:
            raise UsageError(f"no php-fpm pool {name!r} is running (no process titled "
                             f"'php-fpm: pool {name}'); list them with `ps -eo args | grep "
                             "'php-fpm: pool'`")
        _, binary, conf = phpfpm.master_of(workers[0])
        argv = [binary] + (["-y", conf] if conf else [])
        out.append(_Pool(name, binary, argv, workers))
    return out


# -- gathering -----------------------------------------------------------------------------------
def _nginx_for(env: Env, pool: _Pool, listen: str) -> dict[str, str] | None:
    argvs = [pool.nginx_conf] if pool.nginx_conf else nginx.running_masters()
    for argv in argvs:
        res = env.run([*argv, "-T"], check=False, what="nginx -T")
        for server in nginx.nginx_servers(res.stdout):
            fp = server.get("fastcgi_pass", "").removeprefix("unix:")
            if fp and listen and (fp == listen or fp.endswith(":" + listen)):
                return server
    return None


class PoolAnswerError(fastcgi.AnsweredError):
    """The pool answered, but not with the query's JSON (it could not run the script)."""


def _decode(head: str, body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        status = re.search(r"Status:\s*(.*)", head)
        raise PoolAnswerError(f"the pool answered {status.group(1).strip() if status else 'no JSON'}"
                             f": {body.decode(errors='replace').strip()[:120]!r}") from None
    if not isinstance(data, dict):
        raise PoolAnswerError("the pool answered something other than the query's JSON")
    return data


def query_pool(env: Env, listen: str, workers: int,
               keys: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Ask the pool `workers` times at once (each answer held 50 ms, so that busy workers make
    the next request go to another): one answer per worker that replied. `keys`: more ini
    settings to report besides the ones the query always reads."""
    base = "/run" if os.access("/run", os.W_OK) else tempfile.gettempdir()
    tmp = tempfile.mkdtemp(prefix="statstorm-check-", dir=base)
    try:
        os.chmod(tmp, 0o755)
        script = Path(tmp, "query.php")
        script.write_text(QUERY_PHP)
        script.chmod(0o644)
        env.debug(f"FastCGI {listen}: {script} x{workers}")
        n = max(1, min(workers, 16))
        query = "&".join(q for q in ("hold=50000" if n > 1 else "",
                                       "keys=" + ",".join(keys) if keys else "") if q)
        with ThreadPoolExecutor(max_workers=n) as ex:
            replies = list(ex.map(lambda _: fastcgi.run_script(listen, str(script), query=query),
                                  range(n)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    by_pid: dict[int, dict[str, Any]] = {}
    for head, body in replies:
        data = _decode(head, body)
        by_pid.setdefault(int(data.get("pid") or 0), data)
    return list(by_pid.values())


def _mounts(env: Env, docroot: str, include: list[str],
            writable: list[tuple[str, str]] | None = None) -> tuple[MountFact, ...]:
    try:
        entries = mounts.parse_mounts(Path("/proc/self/mounts").read_text())
    except OSError:
        return ()
    out = []
    described: dict[str, mounts.MountInfo] = {}
    for role, path in ([("docroot", docroot)] + [("include_path", p) for p in include]
                       + [(f"writable:{w}", p) for w, p in writable or []]):
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


def _load_trace(path: Path) -> tuple[TraceFacts, str]:
    tr = read_trace(path)
    s = summarize(tr)
    return trace_facts(tr, s), str((tr.header.get("targets") or {}).get("pool") or "")


def _load_fsbench(path: Path) -> dict[str, dict[str, float]]:
    data = read_json(path, "fsbench result")
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("statstorm.fsbench/"):
        raise UsageError(f"--fsbench {path}: not a `statstorm fsbench --json`/-o result")
    return fsbench_p50(data)


def gather(env: Env, pool: _Pool, opts: CheckOptions, trace: TraceFacts | None,
           fsb: dict[str, dict[str, float]]) -> PoolCheck:
    notes: list[str] = []
    settings: dict[str, Any] = trace_cmd.fpm_settings(env, pool.binary, pool.argv, pool.name)
    settings.pop("sapi", None)
    res = env.run([pool.binary, "-tt", *trace_cmd._ini_args(pool.argv)], check=False,
                  what="php-fpm -tt")
    directives = phpfpm.pool_directives(res.stderr + res.stdout, pool.name)
    pm = {k: v for k, v in directives.items() if k.startswith("pm")}
    for k in list(settings):
        if k.startswith("pm"):
            settings.pop(k)
    listen = directives.get("listen", "")
    source = "php-fpm -i and -tt (the master's ini, the pool's php_value/php_admin_value)"
    status: dict[str, Any] | None = None
    used: int | None = None
    used_by: tuple[int, ...] = ()
    if opts.query_pool and not listen:
        notes.append("the pool's listen address is unknown (php-fpm -tt did not show it): "
                     "not asked over FastCGI")
    if opts.query_pool and listen and not directives.get("chroot"):
        try:
            answers = query_pool(env, listen, len(pool.workers))
            data = answers[0]
            settings.update({k: "" if v is None else str(v)
                             for k, v in (data.get("ini") or {}).items()})
            status = data.get("opcache") or None
            used_by = tuple(int(a["realpath_used"]) for a in answers
                            if a.get("realpath_used") is not None)
            used = max(used_by) if used_by else None
            source = f"{len(answers)} worker(s) of the pool over FastCGI ({listen})"
        except ComponentError as exc:
            notes.append(f"could not ask the pool over FastCGI ({exc}; open_basedir or "
                         "security.limit_extensions can keep the query script out); settings "
                         "come from php-fpm -i/-tt, without OPcache status")
    settings = {k: ("" if v == "no value" else str(v)) for k, v in settings.items()}
    cli = trace_cmd.cli_settings(env, [phpfpm.php_cli_for(pool.binary)]
                                 if Path(pool.binary).name.startswith("php-fpm") else ["php"])
    cli.pop("sapi", None)
    server = _nginx_for(env, pool, listen)
    docroot = opts.docroot or pool.docroot or (server or {}).get("root", "")
    if not docroot:
        notes.append("no docroot found (no nginx server passes to this pool): file counts, "
                     "mounts and symlinks are not checked; give --docroot")
    include = [e for e in str(settings.get("include_path", "")).split(":")
               if e.startswith("/") and Path(e).is_dir()]
    tree = codetree.CodeTree()
    if docroot:
        roots = [codetree.app_root(docroot)] + [e for e in include if not e.startswith("/usr/share/php")]
        tree = codetree.scan(roots, str(settings.get("user_ini.filename", "")),
                          ini_int(settings.get("opcache.file_update_protection"), 2))
    inc_php = tuple((e, codetree.count_php(e)) for e in str(settings.get("include_path", "")).split(":")
                    if e.startswith("/")) if docroot else ()
    info = memory.meminfo()
    pss = [p for p in (memory.pss_kb(w) for w in pool.workers) if p]
    return PoolCheck(pool.name, source, Facts(
        pool=pool.name, settings=settings, cli_settings=cli, pm=pm, settings_source=source,
        docroot=docroot, php_files=tree.php_files if docroot else None,
        tree_entries=tree.entries, tree_bytes=tree.bytes,
        user_ini_files=tree.user_ini_files if docroot else None,
        recent_php_files=tree.recent, future_php_files=tree.future, include_path_php=inc_php,
        mounts=_mounts(env, docroot, include,
                       codetree.writable_paths(settings, codetree.app_root(docroot) if docroot else "")),
        symlinks=codetree.symlinks_on([docroot, *include]) if docroot else (),
        nginx_script_filename=(server or {}).get("script_filename"),
        hugepages=memory.hugepages(info), php_binary=pool.binary,
        text_bytes=elf.read_text_segment(pool.binary), worker_pss_kb=tuple(pss),
        mem_available_kb=info.get("MemAvailable"), mem_total_kb=info.get("MemTotal"),
        opcache_status=status, realpath_used=used, realpath_used_by_worker=used_by,
        trace=trace, fsbench_p50_us=fsb),
        [], notes)


def run(env: Env, opts: CheckOptions) -> CheckResult:
    validate(opts)
    trace: TraceFacts | None = None
    trace_pool = ""
    if opts.trace is not None:
        trace, trace_pool = _load_trace(opts.trace)
    fsb = _load_fsbench(opts.fsbench) if opts.fsbench is not None else {}
    pools = _targets(env, opts)
    out = []
    for pool in pools:
        use = trace if trace is not None and (len(pools) == 1 or trace_pool == pool.name) else None
        env.log(f"checking php-fpm pool {pool.name}…")
        pc = gather(env, pool, opts, use, fsb)
        if trace is not None and use is None:
            pc.notes.append(f"the trace is of pool {trace_pool or '?'}, not this one: not used")
        elif use is not None and trace_pool and trace_pool != pool.name:
            pc.notes.append(f"the trace is of pool {trace_pool}: used anyway (one pool checked)")
        pc.findings = evaluate(pc.facts)
        out.append(pc)
    return CheckResult(out)


__all__ = ["CheckOptions", "CheckResult", "SEVERITIES", "failed", "run"]

"""`statstorm check`: gather each php-fpm pool's (and the system Apache's PHP's) live facts (adapters/php/pool_facts.py), judge
them with model.rules. `--trace` and `--fsbench` add measured evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from statstorm.adapters.php import by_site, pool_facts
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.model.checkfacts import Facts, TraceFacts, fsbench_p50, trace_facts
from statstorm.model.rules import evaluate
from statstorm.model import sampling
from statstorm.model.tracestats import summarize_trace
from statstorm.results.check import SCHEMA, SEVERITIES, CheckedPool, CheckResult, Finding
from statstorm.results.check import Severity, by_severity
from statstorm.results.common import read_json
from statstorm.results.fsbench import FsbenchResult
from statstorm.results.trace import read_trace


@dataclass(frozen=True)
class CheckOptions:
    pools: tuple[str, ...] = ()
    lab: str | None = None
    trace: Path | None = None
    fsbench: Path | None = None
    docroot: str | None = None
    query_pool: bool = True  # ask a worker over FastCGI
    apache: bool = False  # the system Apache's PHP (mod_php, mod_fcgid), one target per site
    site: str = ""  # a site's URL: the PHP target serving it


def checked_pool(facts: Facts, settings_source: str, notes: list[str]) -> CheckedPool:
    """The pool's record in check's result: the facts judged that `check --json` shows."""
    return CheckedPool(
        pool=facts.pool, settings_source=settings_source, docroot=facts.docroot,
        php_files=facts.php_files, settings=facts.settings, pm=facts.pm, mounts=facts.mounts, sites=facts.sites,
        symlinks=facts.symlinks, nginx_script_filename=facts.nginx_script_filename,
        worker_pss_kb=facts.worker_pss_kb, mem_available_kb=facts.mem_available_kb,
        hugepages=facts.hugepages, php_binary=facts.php_binary, text_bytes=facts.text_bytes,
        realpath_used=facts.realpath_used, realpath_used_by_worker=facts.realpath_used_by_worker,
        opcache_memory=facts.opcache_memory, huge_mapped_kb=facts.huge_mapped_kb,
        apache=facts.apache, code_mapping=facts.code_mapping, notes=tuple(notes))


def failed(result: CheckResult, fail_on: Severity | str | None) -> bool:
    """True if a finding is at least as severe as `fail_on`."""
    return result.failed(None if fail_on is None else Severity(fail_on))


def validate(opts: CheckOptions) -> None:
    if sum(map(bool, (opts.pools, opts.lab, opts.apache, opts.site))) > 1:
        raise UsageError("give one of --pool, --lab, --apache or --site, not several")
    for flag, path in (("--trace", opts.trace), ("--fsbench", opts.fsbench)):
        if path is not None and not path.is_file():
            raise UsageError(f"{flag} {path}: no such file; record one with `statstorm "
                             f"{flag.lstrip('-')} -o FILE`")
    if opts.docroot is not None and not Path(opts.docroot).is_dir():
        raise UsageError(f"--docroot {opts.docroot}: not a directory")


def _load_trace(path: Path) -> tuple[TraceFacts, str, str | None]:
    """The trace's facts, its pool and what to say of its sampling (None: not sampled)."""
    tr = read_trace(path)
    return (trace_facts(tr, summarize_trace(tr)), tr.head.target_pool,
            sampling.check_note(tr.head, tr.tail))


def _load_fsbench(path: Path) -> dict[str, dict[str, float]]:
    data = read_json(path, "fsbench result")
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("statstorm.fsbench/"):
        raise UsageError(f"--fsbench {path}: not a `statstorm fsbench --json`/-o result")
    try:
        result = FsbenchResult.from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"--fsbench {path}: an incomplete fsbench result ({exc!r})") from None
    return fsbench_p50(result)


def run(env: Env, opts: CheckOptions) -> CheckResult:
    validate(opts)
    if opts.site:
        serving = by_site.serving(env, opts.site)
        env.log(f"{opts.site}: {serving.how}")
        opts = replace(opts, pools=(serving.pool,) if serving.pool else (), apache=serving.apache)
    trace: TraceFacts | None = None
    trace_pool = ""
    sampled: str | None = None
    if opts.trace is not None:
        trace, trace_pool, sampled = _load_trace(opts.trace)
    fsb = _load_fsbench(opts.fsbench) if opts.fsbench is not None else {}
    pools = pool_facts.targets(env, lab=opts.lab, pools=opts.pools, apache=opts.apache)
    checked: list[CheckedPool] = []
    found: list[Finding] = []
    for pool in pools:
        use = trace if trace is not None and (len(pools) == 1 or trace_pool == pool.name) else None
        env.log(f"checking {'' if pool.pool.handler.php_in_server else 'php-fpm pool '}"
                f"{pool.name}…")
        got = pool_facts.gather(env, pool, docroot=opts.docroot, query_pool=opts.query_pool,
                                trace=use, fsb=fsb)
        notes = list(got.notes)
        if trace is not None and use is None:
            notes.append(f"the trace is of pool {trace_pool or '?'}, not this one: not used")
        elif use is not None and trace_pool and trace_pool != pool.name:
            notes.append(f"the trace is of pool {trace_pool}: used anyway (one pool checked)")
        if use is not None and sampled:
            notes.append(sampled)
        checked.append(checked_pool(got.facts, got.settings_source, notes))
        found += evaluate(got.facts)
    return CheckResult(tuple(checked), list(by_severity(found)))


__all__ = ["SCHEMA", "SEVERITIES", "CheckOptions", "CheckResult", "failed", "run"]

"""`statstorm check`: gather each php-fpm pool's (and the system Apache's PHP's) live facts (adapters/php/pool_facts.py), judge
them with model.rules. `--trace` and `--fsbench` add measured evidence; without `--trace`, the
pool's last trace (adapters/tracing/last_trace.py) is the evidence, and apply's newest backup
set says whether that trace predates the last change.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from statstorm.adapters.apply import backups
from statstorm.adapters.php import by_site, pool_facts
from statstorm.adapters.tracing import last_trace, tracer_host
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.model.checkfacts import AppliedChange, Facts, TraceOrigin, fsbench_p50
from statstorm.model.rules import evaluate
from statstorm.results.check import SCHEMA, SEVERITIES, CheckedPool, CheckResult, Finding
from statstorm.results.check import Severity, by_severity
from statstorm.results.common import read_json
from statstorm.results.doctor import Mode
from statstorm.results.fsbench import FsbenchResult
from statstorm.results.last_trace import LastTrace


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
    remembered: bool = True  # without `trace`: judge each pool by its last trace, if any
    # the pool's throughput over the same code's on local disk, measured by the caller (tune's
    # shadow): evidence for the rules of a network-bound pool
    local_ratio: float | None = None


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


def _load_fsbench(path: Path) -> dict[str, dict[str, float]]:
    data = read_json(path, "fsbench result")
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("statstorm.fsbench/"):
        raise UsageError(f"--fsbench {path}: not a `statstorm fsbench --json`/-o result")
    try:
        result = FsbenchResult.from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"--fsbench {path}: an incomplete fsbench result ({exc!r})") from None
    return fsbench_p50(result)


def _target_args(opts: CheckOptions, pool: pool_facts.PoolTarget) -> str:
    """How trace and check name this target (the commands check's findings print)."""
    if opts.lab:
        return f"--lab {opts.lab}"
    return "--apache" if pool.pool.handler.php_in_server else f"--pool {pool.name}"


def _origin(path: Path, loaded: last_trace.LoadedTrace, pool: str, lab: str,
            rec: LastTrace | None) -> tuple[TraceOrigin, LastTrace]:
    """Where a trace came from and when it was taken: the record's end time when `rec` is the
    pool's record of this file, else the trace's own start time."""
    mine = rec is not None and Path(rec.path) == path.resolve()
    if rec is None or not mine:
        f = loaded.facts
        rec = LastTrace(pool=loaded.pool or pool, path=str(path), ended=loaded.created,
                        network_time_share=f.network_time_share,
                        network_ms_per_request=f.network_ms_per_request,
                        requests=f.requests, detail=f.detail, lab=lab)
    return TraceOrigin(rec.path, rec.ended or "an unknown time", last_trace.epoch(rec.ended),
                       remembered=False), rec


def _remembered(env: Env, name: str, lab: str, notes: list[str],
                ) -> tuple[last_trace.LoadedTrace, TraceOrigin, LastTrace] | None:
    """The pool's last trace as evidence, said in a note (None: none on record, or it cannot
    be read: a note says so)."""
    rec = last_trace.recall(env, name, lab)
    if rec is None:
        return None
    try:
        loaded = last_trace.load(Path(rec.path))
    except (UsageError, OSError) as exc:
        notes.append(f"the last trace of this pool, {rec.path}, cannot be read ({exc}): not used")
        return None
    notes.append(f"evidence from the last trace of this pool, {rec.path}, taken at {rec.ended}")
    return loaded, TraceOrigin(rec.path, rec.ended, last_trace.epoch(rec.ended),
                               remembered=True), rec


def _last_change(env: Env, name: str, lab: str, notes: list[str]) -> AppliedChange | None:
    """Apply's newest backup set in effect for the pool (a note when they cannot be read)."""
    try:
        found = backups.last_change(env, lab=lab, pool=name)
    except (UsageError, OSError) as exc:
        notes.append(f"apply's backup sets cannot be read ({exc}): a change made after the "
                     "trace would not be seen")
        return None
    if found is None:
        return None
    d, m = found
    return AppliedChange(str(d), m.created or "an unknown time", last_trace.epoch(m.created))


def run(env: Env, opts: CheckOptions) -> CheckResult:
    validate(opts)
    if opts.site:
        serving = by_site.serving(env, opts.site)
        env.log(f"{opts.site}: {serving.how}")
        opts = replace(opts, pools=(serving.pool,) if serving.pool else (), apache=serving.apache)
    given = last_trace.load(opts.trace) if opts.trace is not None else None
    fsb = _load_fsbench(opts.fsbench) if opts.fsbench is not None else {}
    pools = pool_facts.targets(env, lab=opts.lab, pools=opts.pools, apache=opts.apache)
    lab = opts.lab or ""
    checked: list[CheckedPool] = []
    found: list[Finding] = []
    for pool in pools:
        notes: list[str] = []
        origin: TraceOrigin | None = None
        evidence: LastTrace | None = None
        use: last_trace.LoadedTrace | None = None
        if given is not None and opts.trace is not None:
            if len(pools) == 1 or last_trace.covers(given.pool, pool.name):
                use = given
                origin, evidence = _origin(opts.trace, given, pool.name, lab,
                                           last_trace.recall(env, pool.name, lab))
            if use is None:
                notes.append(f"the trace is of pool {given.pool or '?'}, not this one: not used")
            elif given.pool and not last_trace.covers(given.pool, pool.name):
                notes.append(f"the trace is of pool {given.pool}: used anyway (one pool checked)")
        elif opts.remembered:
            got_last = _remembered(env, pool.name, lab, notes)
            if got_last is not None:
                use, origin, evidence = got_last
        if use is not None and use.sampled:
            notes.append(use.sampled)
        if use is not None and use.thin:
            notes.append(use.thin)
        change = _last_change(env, pool.name, lab, notes)
        env.log(f"checking {'' if pool.pool.handler.php_in_server else 'php-fpm pool '}"
                f"{pool.name}…")
        got = pool_facts.gather(env, pool, docroot=opts.docroot, query_pool=opts.query_pool,
                                trace=use.facts if use else None, fsb=fsb)
        facts = replace(got.facts, trace_origin=origin, last_change=change,
                        target_args=_target_args(opts, pool), local_ratio=opts.local_ratio)
        findings = evaluate(facts)
        notes += _tracing_here(findings)
        checked.append(replace(checked_pool(facts, got.settings_source, got.notes + notes),
                               trace=evidence, trace_remembered=bool(origin and origin.remembered)))
        found += findings
    return CheckResult(tuple(checked), list(by_severity(found)))


def _tracing_here(findings: list[Finding]) -> list[str]:
    """When a finding asks for a trace and this host cannot run the compiled tracer: one note
    in doctor's words, with what `statstorm trace` uses instead (or that it refuses)."""
    if not any(c.startswith("statstorm trace ") for f in findings for c in f.change):
        return []
    host = tracer_host.judge()
    why = tracer_host.refusal(host, Mode.EVENTS)
    if not why:
        return []
    route = next(r for r in host.routes if r.verb == "trace")
    return [f"{why}: statstorm trace here uses {route.note}" if route.mode is not None
            else f"{why}: statstorm trace cannot trace here (statstorm doctor says why)"]


__all__ = ["SCHEMA", "SEVERITIES", "CheckOptions", "CheckResult", "failed", "run"]

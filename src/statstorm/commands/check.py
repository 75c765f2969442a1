"""`statstorm check`: gather each php-fpm pool's live facts (adapters/php/pool_facts.py), judge
them with model.rules. `--trace` and `--fsbench` add measured evidence.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statstorm.adapters.php import php_targets, pool_facts
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.model.checkfacts import Facts, TraceFacts, fsbench_p50, trace_facts
from statstorm.model.finding import Finding
from statstorm.model.rules import SEVERITIES, evaluate, rank
from statstorm.model import sampling
from statstorm.model.tracestats import summarize
from statstorm.results.common import read_json
from statstorm.results.trace import read_trace

SCHEMA = "statstorm.check/1"
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
                       "huge_mapped_kb": (list(p.facts.huge_mapped_kb)
                                          if p.facts.huge_mapped_kb is not None else None),
                       "apache": asdict(p.facts.apache) if p.facts.apache else None,
                       "code_mapping": list(p.facts.code_mapping) if p.facts.code_mapping else None,
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


def _load_trace(path: Path) -> tuple[TraceFacts, str, str | None]:
    """The trace's facts, its pool and what to say of its sampling (None: not sampled)."""
    tr = read_trace(path)
    s = summarize(tr)
    return (trace_facts(tr, s), str((tr.header.get("targets") or {}).get("pool") or ""),
            sampling.check_note(tr.header, tr.trailer))


def _load_fsbench(path: Path) -> dict[str, dict[str, float]]:
    data = read_json(path, "fsbench result")
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("statstorm.fsbench/"):
        raise UsageError(f"--fsbench {path}: not a `statstorm fsbench --json`/-o result")
    return fsbench_p50(data)


def run(env: Env, opts: CheckOptions) -> CheckResult:
    validate(opts)
    trace: TraceFacts | None = None
    trace_pool = ""
    sampled: str | None = None
    if opts.trace is not None:
        trace, trace_pool, sampled = _load_trace(opts.trace)
    fsb = _load_fsbench(opts.fsbench) if opts.fsbench is not None else {}
    pools = pool_facts.targets(env, lab=opts.lab, pools=opts.pools)
    out = []
    for pool in pools:
        use = trace if trace is not None and (len(pools) == 1 or trace_pool == pool.name) else None
        env.log(f"checking {'php-fpm pool ' if isinstance(pool.pool, php_targets.FpmPool) else ''}"
                f"{pool.name}…")
        got = pool_facts.gather(env, pool, docroot=opts.docroot, query_pool=opts.query_pool,
                                trace=use, fsb=fsb)
        pc = PoolCheck(pool.name, got.settings_source, got.facts, [], got.notes)
        if trace is not None and use is None:
            pc.notes.append(f"the trace is of pool {trace_pool or '?'}, not this one: not used")
        elif use is not None and trace_pool and trace_pool != pool.name:
            pc.notes.append(f"the trace is of pool {trace_pool}: used anyway (one pool checked)")
        if use is not None and sampled:
            pc.notes.append(sampled)
        pc.findings = evaluate(pc.facts)
        out.append(pc)
    return CheckResult(out)


__all__ = ["CheckOptions", "CheckResult", "SEVERITIES", "failed", "run"]

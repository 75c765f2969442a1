"""`statstorm doctor`: what this host allows, before anything fails. The kernel's facts
(adapters/host/kernel_features.py), the tracers installed and the PHP running here, as check
and trace find it (adapters/php/target.py `running`, each target's binaries as trace probes
them), with what the compiled tracer can attribute in each (adapters/tracing/php_layouts.py
`coverage`), judged by model/host_checks.py into a `DoctorResult` (results/doctor.py):
each check with its fix, the modes that run, what trace, its counting mode and the exporter
will use, and each verb's privileges. It reads files and starts nothing (php-fpm's and
Apache's own tools excepted, as check runs them to find their PHP)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from statstorm.adapters.host import kernel_features
from statstorm.adapters.php import target
from statstorm.adapters.tracing import php_layouts, trace_targets, tracer_host
from statstorm.env import Env
from statstorm.errors import StatstormError
from statstorm.model import host_checks, php_versions
from statstorm.results.doctor import DoctorResult
from statstorm.results.host_facts import Coverage, PhpFound, TracerTools

NOT_BUILT = "the compiled tracer is not built: what it would attribute is not known"
HOST_ROOT = Path("/")  # where /proc and /sys are read when the options name no root


@dataclass(frozen=True)
class DoctorOptions:
    root: Path | None = None  # where /proc and /sys are read (None: HOST_ROOT, this host)


def describe(env: Env, label: str, binaries: list[str], tools: TracerTools) -> PhpFound:
    """A PHP target by its binaries: version, build ids, and what the compiled tracer
    attributes in them (as it would trace them)."""
    versions = {php_versions.version_of(b) for b in binaries} - {""}
    builds = tuple((php_layouts.build_ids(b) or [""])[0] for b in binaries)
    if tools.tracer:
        cov, note = php_layouts.coverage(env, binaries, tools.tracer_php_build)
    else:
        cov, note = Coverage.UNKNOWN, NOT_BUILT
    return PhpFound(label, tuple(binaries), versions.pop() if len(versions) == 1 else "",
                    builds, cov, note)


def php_found(env: Env, tools: TracerTools) -> tuple[list[PhpFound], str]:
    """The PHP targets running here (trace's binaries of each), described; or [] and why
    they could not be listed."""
    try:
        running = target.running(env)
    except StatstormError as exc:
        return [], str(exc)
    return [describe(env, php.label, trace_targets.own_binaries(php), tools)
            for php in running], ""


def run(env: Env, opts: DoctorOptions = DoctorOptions(), *,
        tools: Callable[[], TracerTools] | None = None,
        php: Callable[[Env, TracerTools], tuple[list[PhpFound], str]] | None = None,
        ) -> DoctorResult:
    """This host judged: its kernel, its tracers and its PHP (`tools` and `php` given by
    the tests, with a captured tree as `opts.root`)."""
    kernel = kernel_features.read(opts.root or HOST_ROOT)
    have = (tools or tracer_host.tools)()
    found, error = (php or php_found)(env, have)
    return host_checks.judge(kernel, have, found, error)

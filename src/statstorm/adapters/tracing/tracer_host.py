"""The tracers this host has and what its kernel lets them do, judged once per call (`judge`):
the kernel's facts (adapters/host/kernel_features.py) and the tracers installed (`tools`:
the compiled one found as libbpf_trace finds it, with the PHP build whose layout is built
into it; bpftrace and strace on PATH), judged by model/host_checks.py. `trace`, its
counting mode and the exporter ask it before they attach, so that a tracer the kernel
cannot run is refused, or fallen back from, in the one line `statstorm doctor` prints for
it (`refusal`)."""

from __future__ import annotations

import shutil
from pathlib import Path

from statstorm.adapters.host import kernel_features
from statstorm.adapters.tracing import libbpf_trace, php_layouts
from statstorm.model import host_checks
from statstorm.results.doctor import DoctorResult, Mode
from statstorm.results.host_facts import TracerTools


def tools() -> TracerTools:
    """The tracers installed here: the compiled one (built from these sources, or why not),
    the PHP build of the layout compiled into it, bpftrace and strace."""
    path = libbpf_trace.loader()
    builds = php_layouts.build_ids(path) if path is not None else []
    return TracerTools(tracer=str(path or ""),
                       tracer_missing="" if path else libbpf_trace.NOT_BUILT,
                       tracer_fix="" if path else libbpf_trace.BUILD_FIX,
                       tracer_php_build=builds[0] if builds else "",
                       bpftrace=shutil.which("bpftrace") or "",
                       strace=shutil.which("strace") or "")


def judge(root: Path | str = "/") -> DoctorResult:
    """This host's kernel and tracers judged (no PHP asked for)."""
    return host_checks.judge(kernel_features.read(root), tools())


def refusal(result: DoctorResult, mode: Mode) -> str:
    """Why `mode` cannot run here, in doctor's words ('' when it can)."""
    return host_checks.refusal(result, mode)

"""`statstorm doctor` on captured /proc and /sys trees (tests/fixtures/doctor/<case>/): the
reader (adapters/host/kernel_features.py), the judgement (model/host_checks.py,
model/capabilities.py), what the compiled tracer attributes in a PHP
(adapters/tracing/php_layouts.py `coverage`), the CLI in-process, and trace's and the
exporter's refusals and fallbacks in doctor's words. Each case's case.json says what it is,
where its kernel tree is, the tracers found and the PHP running (binaries: stand-ins that
hold only the build ids the reader reads)."""

from __future__ import annotations

import json
import os
import platform
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import invoke
from statstorm.adapters.host import kernel_features
from statstorm.adapters.tracing import count_stream, libbpf_trace, php_layouts, tracer_host
from statstorm.commands import doctor as doctor_cmd
from statstorm.commands import trace as trace_cmd
from statstorm.env import Env
from statstorm.errors import DependencyError
from statstorm.model import capabilities, host_checks
from statstorm.results.doctor import DoctorResult, Mode, Status
from statstorm.results.host_facts import Coverage, KernelFacts, PhpFound, TracerTools

FIX = Path(__file__).resolve().parent / "fixtures" / "doctor"
CASES = sorted(p.name for p in FIX.iterdir() if (p / "case.json").is_file())


def case(name: str) -> tuple[Path, TracerTools, Any]:
    """A case's kernel tree, its tracers and its PHP lister (for doctor_cmd.run)."""
    meta = json.loads((FIX / name / "case.json").read_text())
    root = (FIX / name / meta["kernel"]).resolve()
    tools = TracerTools(**{k: v for k, v in meta["tools"].items()})

    def php(env: Env, have: TracerTools) -> tuple[list[PhpFound], str]:
        return [doctor_cmd.describe(env, p["label"], [str(FIX / name / b) for b in p["binaries"]],
                                    have) for p in meta["php"]], ""
    return root, tools, php


def judged(name: str, tmp_path: Path) -> DoctorResult:
    root, tools, php = case(name)
    return doctor_cmd.run(Env(state_root=tmp_path), doctor_cmd.DoctorOptions(root=root),
                          tools=lambda: tools, php=php)


def status(result: DoctorResult, check_id: str) -> Status:
    return next(c for c in result.checks if c.id == check_id).status


def works(result: DoctorResult) -> dict[str, bool]:
    return {m.mode.value: m.works for m in result.modes}


# -- the reader ----------------------------------------------------------------------------------
def test_the_captured_host_is_read_as_it_is() -> None:
    k = kernel_features.read(FIX / "this-host" / "root")
    assert k.release == "6.18.44-fc-v1300"
    assert k.btf and k.uprobe_pmu and k.tracefs == "/sys/kernel/tracing"
    assert k.syscall_tracepoints is True and k.uprobe_events is True and k.tracefs_known
    assert k.lockdown == "" and not k.securityfs  # securityfs is not mounted there
    assert k.config_source == "/proc/config.gz"
    assert k.config["CONFIG_DEBUG_INFO_BTF"] == "y" and k.config["CONFIG_UPROBES"] == "y"
    assert (k.unprivileged_bpf_disabled, k.perf_event_paranoid, k.ptrace_scope) == (2, 2, None)
    assert k.euid == 0 and k.cap_eff == 0x1fffeffffff  # every capability but CAP_SYS_RESOURCE
    assert not capabilities.has(k.cap_eff, "CAP_SYS_RESOURCE")
    assert k.memlock_hard == 8 << 20
    assert KernelFacts.from_json(json.loads(json.dumps(k.to_json()))) == k


def test_what_is_not_there_is_not_known_not_guessed() -> None:
    k = kernel_features.read(FIX / "no-tracefs" / "root")
    assert k.tracefs == "" and k.tracefs_known  # it can be mounted
    assert k.syscall_tracepoints is None and k.uprobe_events is None
    assert k.config_source == "/boot/config-6.1.0-28-amd64"
    empty = kernel_features.read(FIX / "no-such-tree")
    assert empty == KernelFacts()


def test_the_readers_small_parsers() -> None:
    assert kernel_features.lockdown("none [integrity] confidentiality\n") == "integrity"
    assert kernel_features.lockdown(None) == ""
    assert kernel_features.parse_config("CONFIG_UPROBES=y\n# CONFIG_DEBUG_INFO_BTF is not set\n"
                                        "CONFIG_OTHER=y\n") == {"CONFIG_UPROBES": "y",
                                                                "CONFIG_DEBUG_INFO_BTF": ""}
    assert kernel_features.tracefs_point(
        [("/sys/kernel/debug/tracing", "tracefs"), ("/sys/kernel/tracing", "tracefs")]
    ) == "/sys/kernel/tracing"
    assert kernel_features.memlock_hard("Max locked memory  65536  unlimited  bytes") == -1
    assert kernel_features.status("Uid:\t33\t33\t33\t33\nCapEff:\t00000000a80425fb\n") == \
        (33, 0xa80425fb)


def test_this_machine_is_read_live() -> None:
    """The real files of this machine, read where they are: the release as Python sees it."""
    k = kernel_features.read()
    assert k.release == platform.release()
    assert k.euid == os.geteuid()


# -- the judgement, case by case ------------------------------------------------------------------
EXPECTED: dict[str, tuple[int, dict[str, bool], str | None]] = {
    # case: exit code, modes that work, what trace uses
    "this-host": (0, {"events": True, "counts": True, "bpftrace": True, "strace": True}, "events"),
    "no-btf": (4, {"events": False, "counts": False, "bpftrace": True, "strace": True},
               "bpftrace"),
    "lockdown-integrity": (0, {"events": True, "counts": True, "bpftrace": True,
                               "strace": True}, "events"),
    "lockdown-confidentiality": (4, {"events": False, "counts": False, "bpftrace": False,
                                     "strace": True}, "strace"),
    "kernel-5.10": (4, {"events": False, "counts": False, "bpftrace": True, "strace": True},
                    "bpftrace"),
    "no-tracefs": (0, {"events": True, "counts": True, "bpftrace": True, "strace": True},
                   "events"),
    "not-root": (3, {"events": False, "counts": False, "bpftrace": False, "strace": False},
                 None),
    "zts-php": (0, {"events": True, "counts": True, "bpftrace": True, "strace": True}, "events"),
    "unknown-php": (0, {"events": True, "counts": True, "bpftrace": True, "strace": True},
                    "events"),
    "no-php": (0, {"events": True, "counts": True, "bpftrace": True, "strace": True}, "events"),
}


def test_every_case_has_its_expectation() -> None:
    assert sorted(EXPECTED) == CASES


@pytest.mark.parametrize("name", CASES)
def test_each_case_is_judged(name: str, tmp_path: Path) -> None:
    code, modes, trace_mode = EXPECTED[name]
    r = judged(name, tmp_path)
    assert r.exit_code == code, [c.says for c in r.missing]
    assert works(r) == modes
    trace = next(x for x in r.routes if x.verb == "trace")
    assert (trace.mode.value if trace.mode else None) == trace_mode
    for c in r.checks:  # every line is one line; what is missing names its fix
        assert "\n" not in c.says and "\n" not in c.fix
        if c.status == Status.MISSING:
            assert c.fix and c.blocks
    assert DoctorResult.from_json(json.loads(json.dumps(r.to_json()))) == r


def test_a_kernel_too_old_names_the_version_and_falls_back_to_bpftrace(tmp_path: Path) -> None:
    r = judged("kernel-5.10", tmp_path)
    kernel = next(c for c in r.checks if c.id == "kernel")
    assert kernel.status == Status.MISSING and "older than 5.15" in kernel.says
    assert "bpf_task_pt_regs" in kernel.says and "upgrade the kernel" in kernel.fix
    # before 5.11 BPF maps count against RLIMIT_MEMLOCK: unlimited here, so nothing to lift
    trace = next(p for p in r.privileges if p.verb == "trace")
    assert "CAP_SYS_RESOURCE" not in trace.needed
    exporter = next(x for x in r.routes if x.verb == "exporter")
    assert exporter.mode == Mode.BPFTRACE


def test_no_btf_stops_the_compiled_tracer_only(tmp_path: Path) -> None:
    r = judged("no-btf", tmp_path)
    assert status(r, "btf") == Status.MISSING
    assert r.mode(Mode.EVENTS).blocked_by == ("btf",)
    assert "perf events" in next(c for c in r.checks if c.id == "kernel").says  # 6.1: no multi


def test_lockdown_integrity_lets_every_tracer_run(tmp_path: Path) -> None:
    r = judged("lockdown-integrity", tmp_path)
    lockdown = next(c for c in r.checks if c.id == "lockdown")
    assert lockdown.status == Status.OK and "bpf_probe_write_user" in lockdown.says
    # Debian's perf_event_paranoid 3: perf events need CAP_SYS_ADMIN, which root has
    trace = next(p for p in r.privileges if p.verb == "trace")
    assert "CAP_SYS_ADMIN" in trace.needed and trace.ok
    assert "CAP_SYS_ADMIN" in next(c for c in r.checks if c.id == "perf-paranoid").says
    assert "restricted" in next(c for c in r.checks if c.id == "ptrace-scope").says


def test_lockdown_confidentiality_leaves_strace_and_the_exporter_refuses(tmp_path: Path) -> None:
    r = judged("lockdown-confidentiality", tmp_path)
    lockdown = next(c for c in r.checks if c.id == "lockdown")
    assert lockdown.status == Status.MISSING
    assert "bpf_probe_read_kernel" in lockdown.says and "tracefs is closed" in lockdown.says
    assert r.mode(Mode.EVENTS).reason == lockdown.line()  # the first check that stops it
    assert host_checks.refusal(r, Mode.EVENTS) == \
        f"the compiled eBPF tracer cannot run here: {lockdown.line()}"
    routes = {x.verb: x for x in r.routes}
    assert routes["exporter"].mode is None and lockdown.says in routes["exporter"].note
    counts = routes["trace --counts, sweep --trace, apply --verify"]
    assert counts.mode == Mode.STRACE and "every call" in counts.note


def test_tracefs_not_mounted_is_a_warning_as_root_and_missing_for_a_user(tmp_path: Path) -> None:
    r = judged("no-tracefs", tmp_path)
    tracefs = next(c for c in r.checks if c.id == "tracefs")
    assert tracefs.status == Status.WARN and "mount -t tracefs" in tracefs.fix
    assert status(r, "syscall-tracepoints") == Status.OK  # the configuration says so
    user = replace(r.kernel, euid=1000, cap_eff=0)
    as_user = host_checks.judge(user, r.tools, [])
    assert status(as_user, "tracefs") == Status.MISSING
    assert as_user.exit_code == 3 and all(c.privilege for c in as_user.missing)


def test_a_user_is_told_to_run_as_root(tmp_path: Path) -> None:
    r = judged("not-root", tmp_path)
    priv = next(c for c in r.checks if c.id == "privileges")
    assert priv.status == Status.MISSING and "uid 1000, not root" in priv.says
    assert "sudo" in priv.fix
    assert status(r, "check-privileges") == Status.WARN  # check runs, and reads less


def test_root_without_the_bpf_capabilities_is_told_which(tmp_path: Path) -> None:
    r = judged("this-host", tmp_path)
    caps = r.kernel.cap_eff or 0
    no_bpf = caps & ~(1 << capabilities.CAPS["CAP_BPF"]) & ~(1 << capabilities.CAPS["CAP_PERFMON"])
    j = host_checks.judge(replace(r.kernel, cap_eff=no_bpf), r.tools, [])
    priv = next(c for c in j.checks if c.id == "privileges")
    assert "CAP_BPF, CAP_PERFMON" in priv.says and "--cap-add" in priv.fix
    assert j.exit_code == 3 and j.mode(Mode.STRACE).works  # CAP_SYS_PTRACE is still there


def test_the_capabilities_depend_on_the_kernel() -> None:
    trace = capabilities.verb("trace")
    old = capabilities.judge(trace, 0, 0x1fffeffffff, capabilities.Host((5, 4)))
    assert "CAP_BPF" not in old.needed and "CAP_SYS_ADMIN" in old.needed
    assert "CAP_SYS_RESOURCE" in old.missing  # 5.4 charges BPF maps to RLIMIT_MEMLOCK
    new = capabilities.judge(trace, 0, 0x1fffeffffff, capabilities.Host((6, 1)))
    assert new.needed == ("CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE") and new.ok
    memlock = "lift RLIMIT_MEMLOCK for BPF maps before Linux 5.11 (unless unlimited)"
    assert ("CAP_SYS_RESOURCE", memlock) in new.elsewhere
    unmounted = capabilities.judge(trace, 0, 0, capabilities.Host((6, 1), tracefs=False))
    assert "CAP_SYS_ADMIN" in unmounted.missing


def test_a_tracer_not_built_is_missing_with_its_build_fix(tmp_path: Path) -> None:
    r = judged("this-host", tmp_path)
    unbuilt = replace(r.tools, tracer="", tracer_missing=libbpf_trace.NOT_BUILT,
                      tracer_fix=libbpf_trace.BUILD_FIX)
    j = host_checks.judge(r.kernel, unbuilt, [])
    tracer = next(c for c in j.checks if c.id == "tracer")
    assert tracer.status == Status.MISSING and tracer.fix == libbpf_trace.BUILD_FIX
    assert j.exit_code == 4 and next(x for x in j.routes if x.verb == "trace").mode == \
        Mode.BPFTRACE
    no_bpftrace = host_checks.judge(r.kernel, replace(r.tools, bpftrace=""), [])
    assert status(no_bpftrace, "bpftrace") == Status.WARN and no_bpftrace.exit_code == 0


# -- PHP -----------------------------------------------------------------------------------------
def test_the_hosts_php_of_the_built_in_build_is_attributed_in_full(tmp_path: Path) -> None:
    r = judged("this-host", tmp_path)
    (php,) = r.php
    assert php.coverage == Coverage.TABLE and php.builds == ("API20220829,NTS",)
    assert php.version == "8.2" and status(r, "php") == Status.OK


def test_a_zts_php_is_traced_probing_includes(tmp_path: Path) -> None:
    r = judged("zts-php", tmp_path)
    (php,) = r.php
    assert php.coverage == Coverage.PROBES and php.thread_safe
    assert "zend_stream_open" in php.note and "thread-safe (ZTS)" in php.note
    assert status(r, "php") == Status.WARN and r.exit_code == 0


def test_php_builds_without_a_layout_say_counts_only_or_probing_includes(tmp_path: Path) -> None:
    r = judged("unknown-php", tmp_path)
    rooted, host = r.php
    assert rooted.coverage == Coverage.COUNTS
    assert php_layouts.NOT_ATTRIBUTED in rooted.note and "has no PHP headers" in rooted.note
    assert host.coverage == Coverage.PROBES and "API20200930,NTS" in host.note
    assert "not in the tracer's table of PHP layouts" in host.note
    says = [c.says for c in r.checks if c.id == "php"]
    assert "counts only" in says[0] and "probing includes" in says[1]


def test_no_php_is_a_line_not_an_error(tmp_path: Path) -> None:
    r = judged("no-php", tmp_path)
    php = [c for c in r.checks if c.id == "php"]
    assert len(php) == 1 and php[0].status == Status.INFO and "none is running" in php[0].says
    assert r.exit_code == 0 and r.php == () and r.php_listed


def test_a_tracer_built_without_php_headers_reads_the_table() -> None:
    """The host's 8.2 is in the table: attributed in full whatever layout the loader was
    built with; a build the table lacks keeps the loader's own, or probes."""
    binary = str(FIX / "this-host" / "usr/sbin/php-fpm8.2")
    assert php_layouts.coverage(Env(), [binary], "") == (Coverage.TABLE, "")
    assert php_layouts.build_ids(binary) == ["API20220829,NTS"]
    old = str(FIX / "unknown-php" / "usr/sbin/php-fpm8.0")
    assert php_layouts.coverage(Env(), [old], "API20200930,NTS") == (Coverage.TABLE, "")
    cov, note = php_layouts.coverage(Env(), [old], "")
    assert cov == Coverage.PROBES and "zend_stream_open" in note


# -- the CLI in-process --------------------------------------------------------------------------
def _as_case(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    root, tools, php = case(name)
    monkeypatch.setattr(doctor_cmd, "HOST_ROOT", root)
    monkeypatch.setattr(tracer_host, "tools", lambda: tools)
    monkeypatch.setattr(doctor_cmd, "php_found", php)


def test_the_cli_prints_each_section_and_exits_0(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    _as_case(monkeypatch, "this-host")
    proc = invoke(["doctor"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("statstorm doctor: Linux 6.18.44-fc-v1300, running as root")
    for section in ("Kernel and BPF", "Privileges", "Tracers", "PHP", "Tracing here"):
        assert f"\n{section}\n" in out
    assert "lockdown: not readable: securityfs is not mounted" in out
    assert "Everything check, trace and the exporter need is here." in out
    assert proc.stderr == ""


def test_the_cli_says_what_is_missing_and_exits_4(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    _as_case(monkeypatch, "lockdown-confidentiality")
    proc = invoke(["doctor"], tmp_path)
    assert proc.returncode == 4
    flat = " ".join(proc.stdout.split())
    r = judged("lockdown-confidentiality", tmp_path)
    lockdown = next(c for c in r.checks if c.id == "lockdown")
    assert lockdown.says in flat and f"fix: {lockdown.fix}" in flat  # trace's words, too
    assert "Missing: lockdown" in flat and "(exit 4)" in flat


def test_the_cli_exits_3_when_only_privileges_are_missing(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    _as_case(monkeypatch, "not-root")
    assert invoke(["doctor"], tmp_path).returncode == 3


def test_the_cli_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _as_case(monkeypatch, "kernel-5.10")
    proc = invoke(["doctor", "--json"], tmp_path)
    assert proc.returncode == 4
    data = json.loads(proc.stdout)
    assert data["schema"] == "statstorm.doctor/1" and data["kind"] == "doctor"
    assert data["exit"] == 4 and data["ok"] is False
    kernel = next(c for c in data["checks"] if c["id"] == "kernel")
    assert kernel["status"] == "missing" and kernel["blocks"] == ["events", "counts"]
    assert set(kernel) == {"id", "status", "says", "fix", "blocks", "privilege"}
    assert {m["mode"]: m["works"] for m in data["modes"]} == EXPECTED["kernel-5.10"][1]
    assert [r["mode"] for r in data["routes"]] == ["bpftrace", "bpftrace", "bpftrace"]
    assert {p["verb"] for p in data["privileges"]} >= {"check", "trace", "exporter"}
    assert data["kernel"]["release"] == "5.10.0-32-amd64" and data["php"] == []
    assert data["tools"]["tracer"]


def test_the_cli_help_has_examples_and_exit_codes(tmp_path: Path) -> None:
    proc = invoke(["doctor", "--help"], tmp_path)
    assert proc.returncode == 0
    assert "Examples:" in proc.stdout and "statstorm doctor --json" in proc.stdout
    assert "Exit status: 0" in proc.stdout and " 3 " in proc.stdout and " 4 " in proc.stdout
    assert "doctor" in invoke(["--help"], tmp_path).stdout


# -- trace and the exporter: the same reason, and the fallback ------------------------------------
def _host(name: str, tmp_path: Path) -> DoctorResult:
    r = judged(name, tmp_path)
    return host_checks.judge(r.kernel, r.tools)


def _fake_backends(monkeypatch: pytest.MonkeyPatch, host: DoctorResult) -> list[tuple[str, Any]]:
    ran: list[tuple[str, Any]] = []

    def backend(name: str) -> Any:
        def run(env: Env, rec: Any, target: Any, out: Path, warnings: list[str],
                *args: Any) -> Any:
            ran.append((name, rec, list(warnings)))
            return name
        return run
    monkeypatch.setattr(tracer_host, "judge", lambda root="/": host)
    monkeypatch.setattr(libbpf_trace, "loader", lambda: Path("/built/statstorm-trace"))
    monkeypatch.setattr(trace_cmd.bpftrace, "find", lambda: "/usr/bin/bpftrace")
    monkeypatch.setattr(trace_cmd.bpftrace, "ensure_tracefs", lambda: None)
    for name in ("run_ebpf", "run_bpftrace", "run_strace"):
        monkeypatch.setattr(trace_cmd, name, backend(name))
    return ran


def _record(opts: trace_cmd.TraceOptions, tmp_path: Path) -> Any:
    target: Any = None  # the fake backends never look at it
    return trace_cmd._record(Env(state_root=tmp_path), opts, target, tmp_path / "t.sst.gz",
                             None, None, None)


def test_trace_falls_back_to_strace_in_doctors_words(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    host = _host("lockdown-confidentiality", tmp_path)
    ran = _fake_backends(monkeypatch, host)
    assert _record(trace_cmd.TraceOptions(), tmp_path) == "run_strace"
    (_, rec, warnings), = ran
    line = host_checks.refusal(host, Mode.EVENTS)
    assert warnings[0] == f"{line}; trying bpftrace"
    assert warnings[1].startswith(host_checks.refusal(host, Mode.BPFTRACE))
    assert warnings[1].endswith("; falling back to strace")
    # counting: strace cannot count in the kernel, so the trace holds every call
    ran.clear()
    assert _record(trace_cmd.TraceOptions(counts=True), tmp_path) == "run_strace"
    (_, rec, warnings), = ran
    assert rec.counts is False and "strace cannot count in the kernel" in warnings[-1]
    # asked for by name: refused in the same line
    with pytest.raises(DependencyError) as exc:
        _record(trace_cmd.TraceOptions(backend="ebpf"), tmp_path)
    assert str(exc.value) == line


def test_trace_falls_back_to_bpftrace_on_an_old_kernel(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    host = _host("kernel-5.10", tmp_path)
    ran = _fake_backends(monkeypatch, host)
    assert _record(trace_cmd.TraceOptions(), tmp_path) == "run_bpftrace"
    assert "older than 5.15" in ran[0][2][0]
    ok = _fake_backends(monkeypatch, _host("this-host", tmp_path))
    assert _record(trace_cmd.TraceOptions(), tmp_path) == "run_ebpf" and ok[0][2] == []


def test_the_exporter_counts_with_what_runs_or_refuses(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(libbpf_trace, "loader", lambda: Path("/built/statstorm-trace"))
    assert count_stream.available("auto", _host("this-host", tmp_path)) == "ebpf"
    assert count_stream.available("auto", _host("kernel-5.10", tmp_path)) == "bpftrace"
    host = _host("lockdown-confidentiality", tmp_path)
    with pytest.raises(DependencyError) as exc:
        count_stream.available("auto", host)
    assert str(exc.value) == host_checks.refusal(host, Mode.COUNTS)
    with pytest.raises(DependencyError):
        count_stream.available("ebpf", _host("kernel-5.10", tmp_path))


def test_check_notes_why_a_trace_it_asks_for_falls_back(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    from statstorm.commands import check as check_cmd
    from statstorm.results.check import Finding, Severity

    asks = Finding("no-trace", Severity.INFO, "trace the pool", (),
                   ("statstorm trace --pool www -d 20 -o after.sst.gz",), "")
    other = Finding("realpath-cache", Severity.WARNING, "raise it", (),
                    ("realpath_cache_size = 4096K",), "")
    host = _host("kernel-5.10", tmp_path)
    monkeypatch.setattr(tracer_host, "judge", lambda root="/": host)
    (note,) = check_cmd._tracing_here([other, asks])
    assert note.startswith(host_checks.refusal(host, Mode.EVENTS)) and "bpftrace" in note
    assert check_cmd._tracing_here([other]) == []
    monkeypatch.setattr(tracer_host, "judge", lambda root="/": _host("this-host", tmp_path))
    assert check_cmd._tracing_here([asks]) == []

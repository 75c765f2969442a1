"""doctor's judgement of a host: its facts (results/host_facts.py) → the checks, each with
its status, its fix and the tracing modes it stops; which modes can run; what trace, its
counting mode and the exporter will use here; and the one line trace and the exporter refuse
with (`refusal`), the same text doctor prints. Pure: the facts are given.

What the compiled tracer (src/statstorm/bpf/) needs of the kernel: Linux 5.15 for
bpf_task_pt_regs (with the ring buffer, task storage and tp_btf raw tracepoints before it),
the kernel's BTF (CO-RE, tp_btf), uprobes (uprobe_multi links where the kernel has them,
6.6 and later, perf-event uprobes otherwise: probes.c `uprobes_prepare`), and for its
counting mode the syscall tracepoints in tracefs. Kernel lockdown (kernel_lockdown(7)):
`integrity` forbids bpf_probe_write_user and debugfs files other than read-only ones (with
unsigned modules, /dev/mem, kexec), none of which the tracers use; `confidentiality` also makes the verifier
refuse bpf_probe_read_kernel (the compiled tracer reads a syscall's registers with it:
BPF_CORE_READ) and keeps tracefs's files from being made (the syscall tracepoints of
bpftrace and of the counting mode), so only strace can trace."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from statstorm.model import capabilities as caps
from statstorm.results.doctor import (MODE_NAMES, Check, DoctorResult, Mode, ModeVerdict, Route,
                                      Status, VerbPrivileges)
from statstorm.results.host_facts import Coverage, KernelFacts, PhpFound, TracerTools

TRACER_SINCE = (5, 15)  # bpf_task_pt_regs
MULTI_SINCE = (6, 6)  # uprobe_multi links
EBPF = (Mode.EVENTS, Mode.COUNTS)
BPF_ALL = (Mode.EVENTS, Mode.COUNTS, Mode.BPFTRACE)
TRACEFS_AT = "/sys/kernel/tracing"
BPF_CONFIG = ("CONFIG_BPF_SYSCALL", "CONFIG_BPF_EVENTS")
# the verbs' chains of modes, in the order they fall back
CHAINS: tuple[tuple[str, tuple[Mode, ...]], ...] = (
    ("trace", (Mode.EVENTS, Mode.BPFTRACE, Mode.STRACE)),
    ("trace --counts, sweep --trace, apply --verify", (Mode.COUNTS, Mode.BPFTRACE, Mode.STRACE)),
    ("exporter", (Mode.COUNTS, Mode.BPFTRACE)),
)
ROUTE_NOTES = {
    Mode.EVENTS: "the compiled eBPF tracer: every call with its path, per request and PHP "
                 "operation",
    Mode.COUNTS: "the compiled eBPF tracer, counting per request in the kernel",
    Mode.BPFTRACE: "bpftrace, the fallback: slower than the compiled tracer, the host's PHP "
                   "8.2 only",
    Mode.STRACE: "strace, the last fallback: it stops every traced process twice per "
                 "syscall, so PHP runs several times slower",
}
PARANOID = {-1: "perf events are open to every user", 0: "users without CAP_PERFMON may "
            "not read raw tracepoint data", 1: "users without CAP_PERFMON may not profile the "
            "kernel", 2: "users without CAP_PERFMON may profile only their own processes in "
            "user space"}
UNPRIV_BPF = {0: "open to users without CAP_BPF", 1: "closed to users without CAP_BPF until "
              "the next boot", 2: "closed to users without CAP_BPF (root may open it)"}
PTRACE = {0: "classic: a process may trace any process of its user",
          1: "restricted: a process may trace only its descendants, unless it has "
             "CAP_SYS_PTRACE", 2: "admin-only: tracing needs CAP_SYS_PTRACE"}


def version(release: str) -> tuple[int, int] | None:
    """(major, minor) of a kernel release ("6.1.0-28-amd64" → (6, 1)); None: not one."""
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _check(id: str, status: Status, says: str, fix: str = "", blocks: tuple[Mode, ...] = (),
           privilege: bool = False) -> Check:
    """A check; one that stops a mode is MISSING when the mode is the compiled tracer's (a
    main verb's default), WARN when only a fallback is lost."""
    if blocks:
        status = Status.MISSING if set(blocks) & set(EBPF) else Status.WARN
    return Check(id, status, says, fix, blocks, privilege)


def _kernel(k: KernelFacts) -> Check:
    v = version(k.release)
    if v is None:
        return _check("kernel", Status.INFO, "kernel: its release is not readable "
                      "(/proc/sys/kernel/osrelease)")
    name = f"kernel: Linux {k.release}"
    if v < TRACER_SINCE:
        return _check("kernel", Status.MISSING, f"{name}: older than 5.15, which the compiled "
                      "tracer needs (bpf_task_pt_regs)", "upgrade the kernel to 5.15 or later "
                      "(Debian 12's is 6.1); until then trace uses bpftrace or strace", EBPF)
    links = ("its uprobes are uprobe_multi links (6.6 and later): they detach in about 0.1 s"
             if v >= MULTI_SINCE else "its uprobes are perf events (uprobe_multi links need "
             "6.6): detaching them takes about a second more")
    return _check("kernel", Status.OK, f"{name}: 5.15 or later, as the compiled tracer needs "
                  f"(bpf_task_pt_regs, tp_btf raw tracepoints, uprobes); {links}")


def _btf(k: KernelFacts) -> Check:
    if k.btf:
        return _check("btf", Status.OK, "BTF: /sys/kernel/btf/vmlinux, the kernel's types the "
                      "compiled tracer is relocated by (CO-RE) and its tp_btf tracepoints need")
    return _check("btf", Status.MISSING, "BTF: no /sys/kernel/btf/vmlinux: the kernel gives "
                  "no types, which the compiled tracer needs (CO-RE, tp_btf)", "boot a kernel "
                  "built with CONFIG_DEBUG_INFO_BTF=y (Debian's are); bpftrace and strace run "
                  "without it", EBPF)


def _lockdown(k: KernelFacts) -> Check:
    mode = k.lockdown
    if mode == "none":
        return _check("lockdown", Status.OK, "lockdown: none")
    if mode == "integrity":
        return _check("lockdown", Status.OK, "lockdown: integrity: it forbids "
                      "bpf_probe_write_user and debugfs files other than read-only ones (and "
                      "unsigned modules, /dev/mem, kexec), none of which statstorm's tracers "
                      "use")
    if mode == "confidentiality":
        return _check("lockdown", Status.MISSING, "lockdown: confidentiality: BPF may not read "
                      "kernel memory (bpf_probe_read_kernel, which the compiled tracer reads a "
                      "syscall's registers with) and tracefs is closed (the syscall tracepoints "
                      "of bpftrace and --counts): only strace can trace", "boot without "
                      "lockdown=confidentiality (lockdown cannot be lowered while the kernel "
                      "runs)", BPF_ALL)
    if mode:
        return _check("lockdown", Status.INFO, f"lockdown: {mode}")
    if k.securityfs:
        return _check("lockdown", Status.OK, "lockdown: none (securityfs has no lockdown "
                      "file: the kernel has no lockdown LSM)")
    return _check("lockdown", Status.INFO, "lockdown: not readable: securityfs is not mounted",
                  "mount -t securityfs securityfs /sys/kernel/security, then run doctor again")


def _config(k: KernelFacts) -> Check:
    if not k.config_source:
        return _check("kernel-config", Status.INFO, "kernel configuration: not readable "
                      "(/proc/config.gz, /boot/config-RELEASE): judged from /sys and tracefs")
    off = [key for key in BPF_CONFIG if k.config.get(key) != "y"]
    if off:
        return _check("kernel-config", Status.MISSING, f"kernel configuration "
                      f"({k.config_source}): {' and '.join(off)} not set: no BPF tracing",
                      "a kernel built with CONFIG_BPF_SYSCALL=y and CONFIG_BPF_EVENTS=y "
                      "(Debian's is); strace runs without them", BPF_ALL)
    shown = " ".join(f"{key.removeprefix('CONFIG_')}={v or 'n'}" for key, v in
                     sorted(k.config.items()))
    return _check("kernel-config", Status.OK, f"kernel configuration ({k.config_source}): "
                  f"{shown}")


def _can_mount(k: KernelFacts) -> bool:
    root = k.euid is None or k.euid == 0
    admin = k.cap_eff is None or caps.has(k.cap_eff, "CAP_SYS_ADMIN")
    return root and admin


def _tracefs(k: KernelFacts) -> Check:
    if k.tracefs:
        return _check("tracefs", Status.OK, f"tracefs: mounted at {k.tracefs}")
    mount = f"mount -t tracefs nodev {TRACEFS_AT}"
    if not k.tracefs_known:
        return _check("tracefs", Status.MISSING, "tracefs: the kernel has none (not in "
                      "/proc/filesystems), and --counts and bpftrace attach to its syscall "
                      "tracepoints", "a kernel built with CONFIG_TRACING=y (Debian's is)",
                      (Mode.COUNTS, Mode.BPFTRACE))
    if not _can_mount(k):
        return _check("tracefs", Status.MISSING, "tracefs: not mounted, and this process may not "
                      "mount it (root with CAP_SYS_ADMIN): --counts and bpftrace attach to its "
                      "syscall tracepoints", f"{mount} as root", (Mode.COUNTS, Mode.BPFTRACE),
                      privilege=True)
    return _check("tracefs", Status.WARN, f"tracefs: not mounted; trace and the exporter mount "
                  f"it at {TRACEFS_AT} when they need it (--counts, bpftrace)", mount)


def _syscall_tracepoints(k: KernelFacts) -> Check:
    known = k.config.get("CONFIG_FTRACE_SYSCALLS")
    if k.syscall_tracepoints or (k.syscall_tracepoints is None and known == "y"):
        return _check("syscall-tracepoints", Status.OK, "syscall tracepoints: there "
                      "(CONFIG_FTRACE_SYSCALLS), for --counts and bpftrace")
    if k.syscall_tracepoints is False or known == "":
        where = (f"{k.tracefs} has no events/syscalls/" if k.syscall_tracepoints is False
                 else "CONFIG_FTRACE_SYSCALLS is not set")
        return _check("syscall-tracepoints", Status.MISSING, f"syscall tracepoints: {where}: "
                      "--counts and bpftrace attach to them (full events use the raw ones)",
                      "a kernel built with CONFIG_FTRACE_SYSCALLS=y (Debian's is)",
                      (Mode.COUNTS, Mode.BPFTRACE))
    return _check("syscall-tracepoints", Status.INFO, "syscall tracepoints: not known until "
                  "tracefs is mounted")


def _uprobes(k: KernelFacts) -> Check:
    have = (["the perf uprobe PMU"] if k.uprobe_pmu else []) + (
        ["tracefs's uprobe_events"] if k.uprobe_events else [])
    if have:
        return _check("uprobes", Status.OK, f"uprobes: {' and '.join(have)}")
    if k.config.get("CONFIG_UPROBES") == "y":
        return _check("uprobes", Status.OK, "uprobes: CONFIG_UPROBES=y")
    if k.config.get("CONFIG_UPROBES") == "" or k.uprobe_events is False:
        return _check("uprobes", Status.MISSING, "uprobes: none (no uprobe PMU, no "
                      "uprobe_events): every tracer but strace probes PHP's functions with them",
                      "a kernel built with CONFIG_UPROBES=y and CONFIG_UPROBE_EVENTS=y (Debian's "
                      "is)", BPF_ALL)
    return _check("uprobes", Status.INFO, "uprobes: not known (no uprobe PMU in /sys, tracefs "
                  "not mounted)")


def _sysctls(k: KernelFacts) -> list[Check]:
    out = []
    if k.unprivileged_bpf_disabled is not None:
        u = k.unprivileged_bpf_disabled
        out.append(_check("unprivileged-bpf", Status.INFO, f"kernel.unprivileged_bpf_disabled "
                          f"= {u}: BPF is {UNPRIV_BPF.get(u, 'as the kernel sets it')}; the "
                          "tracers load tracing programs, which need CAP_BPF and CAP_PERFMON "
                          "whatever it says"))
    if k.perf_event_paranoid is not None:
        p = k.perf_event_paranoid
        meaning = (f"{PARANOID[p]}; the tracers open theirs with CAP_PERFMON, which it does "
                   "not restrict" if p in PARANOID else "no perf event is open to users "
                   "without CAP_SYS_ADMIN (Debian's and Ubuntu's own level): the tracers' "
                   "perf events need CAP_SYS_ADMIN, CAP_PERFMON is not enough")
        out.append(_check("perf-paranoid", Status.INFO,
                          f"kernel.perf_event_paranoid = {p}: {meaning}"))
    v = k.ptrace_scope
    if v is None:
        out.append(_check("ptrace-scope", Status.OK, "ptrace: Yama is not active; strace "
                          "attaches with CAP_SYS_PTRACE or as the processes' user"))
    elif v >= 3:
        out.append(_check("ptrace-scope", Status.WARN, f"kernel.yama.ptrace_scope = {v}: no "
                          "process may be traced with ptrace until the next boot: strace "
                          "cannot attach", "set kernel.yama.ptrace_scope to 1 or 2 at boot "
                          "(it cannot be lowered from 3 while the kernel runs)",
                          (Mode.STRACE,)))
    else:
        out.append(_check("ptrace-scope", Status.OK, f"kernel.yama.ptrace_scope = {v}: "
                          f"{PTRACE.get(v, '')}"))
    return out


def _privileges(k: KernelFacts, host: caps.Host,
                privs: Sequence[VerbPrivileges]) -> list[Check]:
    by = {p.verb: p for p in privs}
    # what the tracers lack besides tracefs's mount (tracefs's own check says that one)
    trace = caps.judge(caps.verb("trace"), k.euid, k.cap_eff, replace(host, tracefs=True))
    strace, check = by["trace --backend strace"], by["check"]
    cap = "" if k.cap_eff is None else f" (CapEff {k.cap_eff:016x})"
    out = []
    if k.euid is None:
        out.append(_check("privileges", Status.INFO, "privileges: not known (/proc/self/status "
                          "not readable)"))
    elif not trace.euid_ok:
        out.append(_check("privileges", Status.MISSING, f"privileges: uid {k.euid}, not root: "
                          f"trace and the exporter run as root ({', '.join(trace.needed)})",
                          "run them as root (sudo statstorm trace …)",
                          (*BPF_ALL, Mode.STRACE), privilege=True))
    elif trace.missing or strace.missing:
        lacking = tuple(dict.fromkeys(trace.missing + strace.missing))
        whys = "; ".join(f"{c}: {w}" for c, w in trace.why + strace.why if c in lacking)
        blocks = ((BPF_ALL if trace.missing else ())
                  + ((Mode.STRACE,) if strace.missing else ()))
        out.append(_check("privileges", Status.MISSING, f"privileges: root{cap}, but without "
                          f"{', '.join(lacking)} ({whys})", "give the process these capabilities "
                          "(a container: --cap-add; a systemd unit: AmbientCapabilities=)",
                          blocks, privilege=True))
    else:
        out.append(_check("privileges", Status.OK, f"privileges: root{cap}: trace and the "
                          f"exporter have {', '.join(trace.needed)}"))
    if check.missing:
        whys = "; ".join(f"{c}: {w}" for c, w in check.why if c in check.missing)
        out.append(_check("check-privileges", Status.WARN, f"check runs without "
                          f"{', '.join(check.missing)}, and reads less ({whys})",
                          "run it as root"))
    return out


def _tools(t: TracerTools) -> list[Check]:
    out = []
    if t.tracer:
        built = (f" (PHP's layout built in: {t.tracer_php_build})" if t.tracer_php_build
                 else " (built without PHP's headers: every include's zend_stream_open probed)")
        out.append(_check("tracer", Status.OK, f"compiled tracer: {t.tracer}{built}"))
    else:
        out.append(_check("tracer", Status.MISSING, t.tracer_missing or "the compiled eBPF "
                          "tracer is not built", t.tracer_fix, EBPF))
    for tool, mode, package in (("bpftrace", Mode.BPFTRACE, "bpftrace"),
                                ("strace", Mode.STRACE, "strace")):
        path = t.bpftrace if tool == "bpftrace" else t.strace
        if path:
            out.append(_check(tool, Status.OK, f"{tool}: {path}"))
        else:
            out.append(_check(tool, Status.WARN, f"{tool} is not installed: no fallback through "
                              "it", f"apt-get install {package}", (mode,)))
    return out


def _php(php: Sequence[PhpFound] | None, error: str) -> list[Check]:
    if error:
        return [_check("php", Status.INFO, f"PHP: the targets could not be listed: {error}")]
    if php is None:
        return []
    if not php:
        return [_check("php", Status.INFO, "PHP: none is running here (no php-fpm pool, no "
                       "system Apache running PHP): check and trace find nothing to look at "
                       "until one runs (or name a lab: --lab NAME)")]
    out = []
    for p in php:
        what = ", ".join(f"{b} ({build})" if build else b for b, build in
                         zip(p.binaries, p.builds + ("",) * len(p.binaries)))
        head = f"PHP: {p.label}: PHP {p.version or '?'}, {what or 'no binary found'}"
        if p.coverage == Coverage.TABLE:
            out.append(_check("php", Status.OK, f"{head}: every operation attributed, includes "
                              "read from PHP's included-files table"))
        elif p.coverage == Coverage.UNKNOWN:
            note = p.note or "what the compiled tracer attributes is not known"
            out.append(_check("php", Status.INFO, f"{head}: {note}"))
        else:  # the note's own "PHP at BINARY: " is in the head already
            note = p.note.split(": ", 1)[1] if p.note.startswith("PHP at ") else p.note
            out.append(_check("php", Status.WARN, f"{head}: {p.coverage.value}: {note}"))
    return out


def checks(k: KernelFacts, t: TracerTools, php: Sequence[PhpFound] | None = None,
           php_error: str = "") -> tuple[tuple[Check, ...], tuple[VerbPrivileges, ...]]:
    """Every check, in the order doctor prints them (a mode's reason is its first blocking
    check), and each verb's privileges."""
    host = caps.Host(version(k.release), bool(k.tracefs), k.perf_event_paranoid,
                     k.memlock_hard == -1)
    privs = caps.judge_all(k.euid, k.cap_eff, host)
    out = [_kernel(k), _btf(k), _lockdown(k), _config(k), _tracefs(k), _syscall_tracepoints(k),
           _uprobes(k), *_sysctls(k), *_privileges(k, host, privs), *_tools(t),
           *_php(php, php_error)]
    return tuple(out), privs


def verdicts(found: Sequence[Check]) -> tuple[ModeVerdict, ...]:
    out = []
    for mode in Mode:
        blockers = [c for c in found if mode in c.blocks]
        out.append(ModeVerdict(mode, not blockers, blockers[0].line() if blockers else "",
                               tuple(c.id for c in blockers)))
    return tuple(out)


def routes(modes: Sequence[ModeVerdict]) -> tuple[Route, ...]:
    works = {m.mode for m in modes if m.works}
    out = []
    for verb, chain in CHAINS:
        mode = next((m for m in chain if m in works), None)
        if mode is None:
            first = next(m for m in modes if m.mode == chain[0])
            out.append(Route(verb, None, f"refuses: {first.reason}"))
            continue
        note = ROUTE_NOTES[mode]
        if mode == Mode.STRACE and chain[0] == Mode.COUNTS:
            note += "; strace cannot count in the kernel: the trace holds every call"
        out.append(Route(verb, mode, note))
    return tuple(out)


def judge(k: KernelFacts, t: TracerTools, php: Sequence[PhpFound] | None = None,
          php_error: str = "") -> DoctorResult:
    """The whole judgement: php None when the PHP targets were not asked for (trace's and
    the exporter's own look before they attach)."""
    found, privs = checks(k, t, php, php_error)
    modes = verdicts(found)
    return DoctorResult(found, modes, routes(modes), privs, tuple(php or ()),
                        php is not None and not php_error, k, t)


def refusal(result: DoctorResult, mode: Mode) -> str:
    """Why `mode` cannot run here, in the one line trace and the exporter refuse or fall
    back with ('' when it can)."""
    verdict = result.mode(mode)
    return "" if verdict.works else f"{MODE_NAMES[mode]} cannot run here: {verdict.reason}"

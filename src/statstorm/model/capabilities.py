"""What each verb needs of the kernel's privileges, capability by capability, and whether an
effective set (/proc/self/status CapEff) has it. Pure: the set and the host's facts are
given.

The capabilities are the kernel's (capabilities(7)). Where a need depends on the host, its
condition says so: CAP_BPF and CAP_PERFMON exist since Linux 5.8 (before, BPF tracing needs
CAP_SYS_ADMIN); BPF maps are charged to RLIMIT_MEMLOCK before 5.11, which the loader and
bpftrace lift (CAP_SYS_RESOURCE, unless its hard limit is unlimited already); trace and the
exporter mount tracefs when it is not mounted (CAP_SYS_ADMIN); and where
kernel.perf_event_paranoid is above 2 (Debian's and Ubuntu's own level 3), perf_event_open,
which perf-event uprobes and the syscall tracepoints are opened with, asks for CAP_SYS_ADMIN:
CAP_PERFMON is not enough."""

from __future__ import annotations

from dataclasses import dataclass

from statstorm.results.doctor import VerbPrivileges

# capability numbers (linux/capability.h)
CAPS = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3,
        "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_NET_BIND_SERVICE": 10,
        "CAP_SYS_CHROOT": 18, "CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21,
        "CAP_SYS_RESOURCE": 24, "CAP_PERFMON": 38, "CAP_BPF": 39}

BPF_CAPS_SINCE = (5, 8)  # CAP_BPF and CAP_PERFMON
MEMLOCK_UNTIL = (5, 11)  # BPF memory charged to RLIMIT_MEMLOCK before this


@dataclass(frozen=True)
class Need:
    """One capability a verb uses, what for, and when it is needed at all: always (''),
    `bpf-caps` (5.8 and later), `old-bpf` (before 5.8), `memlock` (before 5.11),
    `no-tracefs` (tracefs not mounted), `paranoid` (perf_event_paranoid above 2) or
    `low-port` (a --listen port below 1024: listed, never required)."""

    cap: str
    why: str
    when: str = ""


@dataclass(frozen=True)
class Host:
    """What the conditions of the needs are judged by (None: not known)."""

    version: tuple[int, int] | None = None
    tracefs: bool = True  # mounted
    paranoid: int | None = None  # kernel.perf_event_paranoid
    memlock_unlimited: bool = False  # the hard RLIMIT_MEMLOCK: nothing to lift


@dataclass(frozen=True)
class VerbNeeds:
    """A verb's needs: whether statstorm itself asks for root (it checks the effective user)
    and the capabilities the kernel checks."""

    verb: str
    root: bool  # statstorm refuses another user
    needs: tuple[Need, ...]
    main: bool = True  # one of the verbs doctor's exit code stands for


TRACE_NEEDS = (
    Need("CAP_BPF", "load the tracer's BPF programs and maps", "bpf-caps"),
    Need("CAP_PERFMON", "attach them to tracepoints and uprobes, read user memory", "bpf-caps"),
    Need("CAP_SYS_ADMIN", "BPF tracing before Linux 5.8", "old-bpf"),
    Need("CAP_SYS_ADMIN", "open perf events where kernel.perf_event_paranoid > 2", "paranoid"),
    Need("CAP_SYS_PTRACE", "read other users' workers (/proc/PID/exe, maps)"),
    Need("CAP_SYS_ADMIN", "mount tracefs where it is not mounted", "no-tracefs"),
    Need("CAP_SYS_RESOURCE", "lift RLIMIT_MEMLOCK for BPF maps before Linux 5.11 (unless "
         "unlimited)", "memlock"),
)
STRACE_NEEDS = (Need("CAP_SYS_PTRACE", "attach strace to other users' workers"),)
READ_NEEDS = (
    Need("CAP_DAC_OVERRIDE", "connect to a pool's FastCGI socket (owned by its user)"),
    Need("CAP_DAC_READ_SEARCH", "read configuration and code trees closed to others"),
    Need("CAP_SYS_PTRACE", "read workers' /proc/PID/exe and smaps (PSS)"),
)

VERBS: tuple[VerbNeeds, ...] = (
    VerbNeeds("check", False, READ_NEEDS),
    VerbNeeds("trace", True, TRACE_NEEDS),
    VerbNeeds("trace --backend strace", True, STRACE_NEEDS),
    VerbNeeds("exporter", True, TRACE_NEEDS + READ_NEEDS[:2] + (
        Need("CAP_NET_BIND_SERVICE", "a --listen port below 1024", "low-port"),)),
    VerbNeeds("apply --yes", True, (
        Need("CAP_DAC_OVERRIDE", "write configuration files"),
        Need("CAP_CHOWN", "keep a file's owner"), Need("CAP_FOWNER", "keep a file's mode"),
        Need("CAP_KILL", "signal a php-fpm master (graceful reload)"),
        Need("CAP_SYS_ADMIN", "remount storage with new options")), main=False),
    VerbNeeds("lab, demo, tune, matrix", True, (
        Need("CAP_SETUID", "run php-fpm and nginx workers as www-data"),
        Need("CAP_SETGID", "run php-fpm and nginx workers as www-data"),
        Need("CAP_SYS_ADMIN", "mount storage and PHP roots"),
        Need("CAP_SYS_CHROOT", "run another PHP version in its root")), main=False),
)


def has(cap_eff: int, cap: str) -> bool:
    return bool(cap_eff >> CAPS[cap] & 1)


def applies(need: Need, host: Host) -> bool:
    """Is `need` needed on this host? A version not known counts as any version's; an older
    kernel, a paranoid level and a choice of port count only when known."""
    v = host.version
    match need.when:
        case "bpf-caps":
            return v is None or v >= BPF_CAPS_SINCE
        case "old-bpf":
            return v is not None and v < BPF_CAPS_SINCE
        case "memlock":
            return (v is None or v < MEMLOCK_UNTIL) and not host.memlock_unlimited
        case "no-tracefs":
            return not host.tracefs
        case "paranoid":
            return host.paranoid is not None and host.paranoid > 2
        case "low-port":
            return False
    return True


def judge(verb: VerbNeeds, euid: int | None, cap_eff: int | None, host: Host) -> VerbPrivileges:
    """`verb` as this process could run it (a user or set not known counts as had)."""
    here = [n for n in verb.needs if applies(n, host)]
    needed = tuple(dict.fromkeys(n.cap for n in here))
    missing = tuple(c for c in needed if cap_eff is not None and not has(cap_eff, c))
    euid_ok = not verb.root or euid is None or euid == 0
    return VerbPrivileges(verb.verb, verb.root, needed, missing, euid_ok, verb.main,
                          tuple((n.cap, n.why) for n in here),
                          tuple((n.cap, n.why) for n in verb.needs if n not in here))


def judge_all(euid: int | None, cap_eff: int | None, host: Host) -> tuple[VerbPrivileges, ...]:
    return tuple(judge(v, euid, cap_eff, host) for v in VERBS)


def verb(name: str) -> VerbNeeds:
    return next(v for v in VERBS if v.verb == name)

"""The kernel's facts that decide which tracer can run here, read once from /proc and /sys
(`read`): its release, BTF, lockdown, tracefs and its syscall tracepoints, uprobes (the perf
PMU, tracefs's uprobe_events), the kernel configuration where one is readable (/proc/config.gz,
/boot/config-RELEASE), the sysctls that gate BPF, perf events and ptrace, and the effective
user, capabilities and RLIMIT_MEMLOCK of this process. Nothing is mounted, loaded or probed: a
file that is not there or cannot be read is a fact not known (None, '').

`root` is where the tree is read from: '/' on this host, a captured copy of the same files
in tests (tests/fixtures/doctor/). The judgement of these facts is model/host_checks.py's."""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path

from statstorm.results.host_facts import KernelFacts

# where tracefs is mounted, most usual first (the second: debugfs's automount)
TRACEFS_POINTS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
# the syscall tracepoint that tells CONFIG_FTRACE_SYSCALLS (every PHP stat goes through it)
SYSCALL_TRACEPOINT = "events/syscalls/sys_enter_newfstatat"
CONFIG_KEYS = ("CONFIG_BPF_SYSCALL", "CONFIG_BPF_EVENTS", "CONFIG_DEBUG_INFO_BTF",
               "CONFIG_UPROBES", "CONFIG_UPROBE_EVENTS", "CONFIG_FTRACE_SYSCALLS",
               "CONFIG_SECURITY_LOCKDOWN_LSM")
CONFIG_LINE = re.compile(r"^(CONFIG_\w+)=(\S+)$|^# (CONFIG_\w+) is not set$")
MAX_CONFIG = 4 << 20  # bytes of a kernel configuration read at most


def _text(path: Path, limit: int = 1 << 16) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode(errors="replace")
    except OSError:
        return None


def _int(path: Path) -> int | None:
    text = _text(path)
    try:
        return int(text.split()[0]) if text else None
    except ValueError:
        return None


def mounts(text: str) -> list[tuple[str, str]]:
    """/proc/mounts' (mount point, fstype) pairs (octal escapes in points decoded)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[1])
            out.append((point, parts[2]))
    return out


def tracefs_point(entries: list[tuple[str, str]]) -> str:
    """Where tracefs is mounted ('' nowhere): the usual points first."""
    points = [p for p, fstype in entries if fstype == "tracefs"]
    return next((p for p in TRACEFS_POINTS if p in points), points[0] if points else "")


def lockdown(text: str | None) -> str:
    """The lockdown mode the kernel's file shows in brackets ("none [integrity]
    confidentiality" → integrity); '' when it is not readable."""
    m = re.search(r"\[(\w+)\]", text or "")
    return m.group(1) if m else ""


def parse_config(text: str) -> dict[str, str]:
    """The configuration's values of CONFIG_KEYS (y, m, a value; '' for `is not set`)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        m = CONFIG_LINE.match(line.strip())
        if m:
            key = m.group(1) or m.group(3)
            if key in CONFIG_KEYS:
                found[key] = m.group(2) or ""
    return found


def _config(root: Path, release: str) -> tuple[dict[str, str], str]:
    """The kernel's configuration (CONFIG_KEYS) and where it was read ('' nowhere)."""
    packed = root / "proc/config.gz"
    try:
        with gzip.open(packed, "rb") as fh:
            return parse_config(fh.read(MAX_CONFIG).decode(errors="replace")), "/proc/config.gz"
    except (OSError, EOFError, zlib.error):
        pass
    if release:
        text = _text(root / "boot" / f"config-{release}", MAX_CONFIG)
        if text is not None:
            return parse_config(text), f"/boot/config-{release}"
    return {}, ""


def status(text: str | None) -> tuple[int | None, int | None]:
    """The effective UID and the CapEff set from a /proc/PID/status text."""
    uid = cap = None
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        words = value.split()
        if key == "Uid" and len(words) >= 2 and words[1].isdigit():
            uid = int(words[1])
        elif key == "CapEff" and words:
            try:
                cap = int(words[0], 16)
            except ValueError:
                pass
    return uid, cap


def memlock_hard(text: str | None) -> int | None:
    """The hard RLIMIT_MEMLOCK in a /proc/PID/limits text, in bytes (-1: unlimited)."""
    m = re.search(r"^Max locked memory\s+\S+\s+(\S+)", text or "", re.M)
    if not m:
        return None
    return -1 if m.group(1) == "unlimited" else int(m.group(1)) if m.group(1).isdigit() else None


def read(root: Path | str = "/") -> KernelFacts:
    """The facts of the kernel whose /proc and /sys are under `root`."""
    r = Path(root)
    release = (_text(r / "proc/sys/kernel/osrelease") or "").strip()
    entries = mounts(_text(r / "proc/mounts", 1 << 20) or "")
    point = tracefs_point(entries)
    tracefs = r / point.lstrip("/") if point else None
    filesystems = _text(r / "proc/filesystems") or ""
    config, source = _config(r, release)
    euid, cap_eff = status(_text(r / "proc/self/status"))
    return KernelFacts(
        release=release,
        btf=(r / "sys/kernel/btf/vmlinux").is_file(),
        lockdown=lockdown(_text(r / "sys/kernel/security/lockdown")),
        securityfs=any(fstype == "securityfs" for _, fstype in entries),
        tracefs=point,
        tracefs_known=bool(re.search(r"^\S*\s*tracefs$", filesystems, re.M)),
        syscall_tracepoints=(tracefs / SYSCALL_TRACEPOINT).is_dir() if tracefs else None,
        uprobe_events=(tracefs / "uprobe_events").is_file() if tracefs else None,
        uprobe_pmu=(r / "sys/bus/event_source/devices/uprobe").is_dir(),
        config=config, config_source=source,
        unprivileged_bpf_disabled=_int(r / "proc/sys/kernel/unprivileged_bpf_disabled"),
        perf_event_paranoid=_int(r / "proc/sys/kernel/perf_event_paranoid"),
        ptrace_scope=_int(r / "proc/sys/kernel/yama/ptrace_scope"),
        euid=euid, cap_eff=cap_eff, memlock_hard=memlock_hard(_text(r / "proc/self/limits")))

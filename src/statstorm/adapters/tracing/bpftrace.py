"""bpftrace: the eBPF program that watches PHP's file-metadata syscalls, and its output.

The program keeps the traced processes in a map (`@tgt`): seeded with the targets' PIDs and
grown in-kernel by fork, so workers respawned during a trace are followed. A value of 2 marks
a parent whose children are traced but which is not itself (a php-fpm master).

Each event is one tab-separated line, the path last (a path holding a newline continues on
the next line; `parse_line` callers join such lines):
  S pid ts lat syscall flags dfd ret path     a file syscall (ts = entry time)
  A pid ts                                    accept returned a connection: a request starts
  U pid ts script                             USDT php:request__startup (SCRIPT_FILENAME)
  V pid uri                                   ... its second argument (SCRIPT_NAME under FPM)
  X pid ts                                    php_execute_script entered
  Q pid ts                                    php_request_shutdown returned
  O pid ts kind num str1                      a PHP function we attribute to was entered
  P pid str2                                  ... its second string argument, if it has one
  R pid ts kind                               ... and returned
  F parent child                              fork of a traced process
  E pid                                       exit of a traced process
  SYNC cpu                                    the tracer's own marker (see program())

`count_program()` is the low-overhead variant (`statstorm trace --counts`): the kernel keeps
per-process counters and prints one line per request instead of one per event:
  K pid start end c0 ... c15                  a request (start = 0: calls outside a request)
                                              ended; c[2*call + failed] packs the number of
                                              calls (high 24 bits) and their summed latency
                                              in ns (low 40 bits); call indexes COUNT_CALLS
plus U, V, F, E and SYNC as above.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from statstorm.errors import DependencyError, PrivilegeError

TRACEFS = "/sys/kernel/tracing"
STRLEN = 200  # bpftrace's longest string; longer paths are cut (reported in the trailer)
# Event buffer memory shared by all CPUs. bpftrace's default (64 pages a CPU) holds about a
# thousand path events: a PHP process emits that in a few milliseconds, so a tracer that is not
# scheduled for that long loses events (`Lost N events`), request ends among them.
PERF_BUDGET_BYTES = 32 << 20
PERF_PAGES_MIN, PERF_PAGES_MAX = 64, 4096

# (syscall, path argument or "", flags argument or "", dirfd argument or "")
SYSCALLS: tuple[tuple[str, str, str, str], ...] = (
    ("newfstatat", "filename", "flag", "dfd"),
    ("statx", "filename", "flags", "dfd"),
    ("stat", "filename", "", ""),
    ("lstat", "filename", "", ""),
    ("fstat", "", "", "fd"),
    ("access", "filename", "", ""),
    ("faccessat", "filename", "", "dfd"),
    ("faccessat2", "filename", "flags", "dfd"),
    ("open", "filename", "flags", ""),
    ("openat", "filename", "flags", "dfd"),
    ("readlink", "path", "", ""),
    ("readlinkat", "pathname", "", "dfd"),
    ("getcwd", "buf", "", ""),
    ("chdir", "filename", "", ""),
    ("fchdir", "", "", "fd"),
)

# PHP functions (exported from the php and php-fpm binaries) whose calls become operations.
# (kind tag, function, numeric argument expression, string 1, string 2)
UPROBES: tuple[tuple[str, str, str, str, str], ...] = (
    ("resolve", "php_resolve_path", "arg1", "str(arg0)", "str(arg2)"),
    ("compile", "compile_filename", "arg0", "str(arg1 + 24)", '""'),
    ("sopen", "zend_stream_open", "0", "str(*(uint64 *)(arg0 + 40) + 24)", '""'),
    ("stat", "php_stat", "arg1", "str(arg0 + 24)", '""'),
    ("uini", "php_parse_user_ini_file", "0", "str(arg0)", "str(arg1)"),
    ("realpath", "tsrm_realpath", "0", "str(arg0)", '""'),
    ("clear", "php_clear_stat_cache", "arg0", "str(arg1)", '""'),
    ("expand", "expand_filepath_with_mode", "arg4", "str(arg0)", '""'),
    # an ini entry's handler for string values that must not be empty: include_path's (and
    # a few startup-only settings'), not the setters every ini_set() and ignore_user_abort()
    # go through (MediaWiki makes about 90 such calls a request)
    ("ini", "OnUpdateStringUnempty", "arg5", "str(*(uint64 *)arg0 + 24)", '""'),
)


# Call types counted in the kernel by count_program(), in slot order.
COUNT_CALLS = ("lstat", "stat", "fstat", "access", "open", "readlink", "getcwd", "chdir")
COUNT_SHIFT = 40  # a packed counter: calls << COUNT_SHIFT | summed latency (ns)
_FSTAT_FLAGS = "(args->{f} & 0x1000 ? 2 : (args->{f} & 0x100 ? 0 : 1))"  # AT_EMPTY_PATH, NOFOLLOW
# syscall → the expression of its COUNT_CALLS index
COUNT_KIND = {
    "newfstatat": _FSTAT_FLAGS.format(f="flag"), "statx": _FSTAT_FLAGS.format(f="flags"),
    "lstat": "0", "stat": "1", "fstat": "2", "access": "3", "faccessat": "3", "faccessat2": "3",
    "open": "4", "openat": "4", "readlink": "5", "readlinkat": "5", "getcwd": "6",
    "chdir": "7", "fchdir": "7",
}


def unpack_counts(values: list[int]) -> dict[str, tuple[int, int, int]]:
    """K-line counters → {call: (calls, failed, latency_ns)} for the calls that happened."""
    out: dict[str, tuple[int, int, int]] = {}
    mask = (1 << COUNT_SHIFT) - 1
    for i, call in enumerate(COUNT_CALLS):
        ok, bad = values[2 * i], values[2 * i + 1]
        calls = (ok >> COUNT_SHIFT) + (bad >> COUNT_SHIFT)
        if calls:
            out[call] = (calls, bad >> COUNT_SHIFT, (ok & mask) + (bad & mask))
    return out


@dataclass(frozen=True)
class Targets:
    pids: tuple[int, ...] = ()  # traced, with their future children
    parents: tuple[int, ...] = ()  # not traced, but their future children are


def find() -> str:
    path = shutil.which("bpftrace")
    if not path:
        raise DependencyError("bpftrace is not installed; run scripts/setup.sh --lab "
                              "(or apt-get install bpftrace)")
    return path


def check_privileges() -> None:
    if os.geteuid() != 0:
        raise PrivilegeError("tracing with eBPF needs root (or CAP_BPF and CAP_PERFMON); "
                             "run statstorm trace with sudo")


def ensure_tracefs() -> None:
    """bpftrace reads syscall tracepoints from tracefs: mount it when it is missing."""
    if os.path.isdir(f"{TRACEFS}/events"):
        return
    if os.path.isdir("/sys/kernel/debug/tracing/events"):
        return
    rc = os.system(f"mount -t tracefs nodev {TRACEFS} 2>/dev/null")
    if rc != 0 or not os.path.isdir(f"{TRACEFS}/events"):
        raise DependencyError(f"tracefs is not mounted and could not be mounted at {TRACEFS}: "
                              f"run `mount -t tracefs nodev {TRACEFS}`")


def available_syscalls() -> set[str]:
    base = f"{TRACEFS}/events/syscalls"
    if not os.path.isdir(base):
        base = "/sys/kernel/debug/tracing/events/syscalls"
    try:
        return {n[len("sys_enter_"):] for n in os.listdir(base) if n.startswith("sys_enter_")}
    except OSError:
        return set()


def _syscall_probes(name: str, path_arg: str, flags_arg: str, dfd_arg: str) -> str:
    path = f"args->{path_arg}" if path_arg and name != "getcwd" else "0"
    flags = f"args->{flags_arg}" if flags_arg else "0"
    dfd = f"args->{dfd_arg}" if dfd_arg else "-100"
    out_path = "str(@p[tid])" if path_arg else '""'
    if name == "getcwd":
        # The path is the buffer the kernel filled in: read it after the call returns.
        path = "args->buf"
        out_path = "(args->ret > 0 ? str(@p[tid]) : \"\")"
    return (
        f"tracepoint:syscalls:sys_enter_{name} /@tgt[pid] == 1/ {{\n"
        f"  @ts[tid] = nsecs; @p[tid] = (uint64){path}; @f[tid] = (int64){flags};"
        f" @d[tid] = (int64){dfd};\n}}\n"
        f"tracepoint:syscalls:sys_exit_{name} /@ts[tid]/ {{\n"
        f"  printf(\"S\\t%d\\t%llu\\t%llu\\t{name}\\t%lld\\t%lld\\t%lld\\t%s\\n\", pid, @ts[tid],"
        f" nsecs - @ts[tid], @f[tid], @d[tid], (int64)args->ret, {out_path});\n"
        f"  delete(@ts[tid]); delete(@p[tid]); delete(@f[tid]); delete(@d[tid]);\n}}\n")


def program(targets: Targets, php_binaries: list[str], *, syscalls: set[str] | None = None,
            usdt: bool = True) -> str:
    """The bpftrace program for these targets and PHP binaries."""
    have = available_syscalls() if syscalls is None else syscalls
    parts = _prologue(targets, "")
    for name, path_arg, flags_arg, dfd_arg in SYSCALLS:
        if name in have:
            parts.append(_syscall_probes(name, path_arg, flags_arg, dfd_arg))
    for name in ("accept", "accept4"):
        if name in have:
            parts.append(f"tracepoint:syscalls:sys_exit_{name} /@tgt[pid] == 1 && args->ret >= 0/"
                         f" {{ printf(\"A\\t%d\\t%llu\\n\", pid, nsecs); }}\n")
    for binary in php_binaries:
        sel = "/@tgt[pid] == 1/"
        if usdt:
            parts.append(_usdt_startup(binary))
        parts.append(f"uprobe:{binary}:php_execute_script {sel}"
                     f" {{ printf(\"X\\t%d\\t%llu\\n\", pid, nsecs); }}\n")
        parts.append(f"uretprobe:{binary}:php_request_shutdown {sel}"
                     f" {{ printf(\"Q\\t%d\\t%llu\\n\", pid, nsecs); }}\n")
        for kind, func, num, s1, s2 in UPROBES:
            second = (f"  printf(\"P\\t%d\\t%s\\n\", pid, {s2});\n" if s2 != '""' else "")
            parts.append(f"uprobe:{binary}:{func} {sel} {{\n"
                         f"  printf(\"O\\t%d\\t%llu\\t{kind}\\t%lld\\t%s\\n\", pid, nsecs,"
                         f" (int64){num}, {s1});\n{second}}}\n")
            parts.append(f"uretprobe:{binary}:{func} {sel}"
                         f" {{ printf(\"R\\t%d\\t%llu\\t{kind}\\n\", pid, nsecs); }}\n")
    parts.append(_sync())
    return "".join(parts)


def _prologue(targets: Targets, exit_action: str) -> list[str]:
    seeds = "".join(f" @tgt[{p}] = 1;" for p in targets.pids)
    seeds += "".join(f" @tgt[{p}] = 2;" for p in targets.parents)
    return [
        f"BEGIN {{{seeds} printf(\"READY\\n\"); }}\n",
        "tracepoint:sched:sched_process_fork /@tgt[args->parent_pid]/ {\n"
        "  @tgt[args->child_pid] = 1;"
        " printf(\"F\\t%d\\t%d\\n\", args->parent_pid, args->child_pid);\n}\n",
        "tracepoint:sched:sched_process_exit /@tgt[pid] && pid == tid/ {\n"
        f"{exit_action}  delete(@tgt[pid]); printf(\"E\\t%d\\n\", pid);\n}}\n",
    ]


def _usdt_startup(binary: str) -> str:
    return (f"usdt:{binary}:php:request__startup /@tgt[pid] == 1/ {{\n"
            f"  printf(\"U\\t%d\\t%llu\\t%s\\n\", pid, nsecs, str(arg0));\n"
            f"  printf(\"V\\t%d\\t%s\\n\", pid, str(arg1));\n}}\n")


def _sync() -> str:
    # The tracer calls getppid() once on every CPU when it stops: the SYNC line from a CPU
    # comes after every event that CPU emitted before, so once all are read, nothing is lost.
    return (f"tracepoint:syscalls:sys_enter_getppid /pid == {os.getpid()}/"
            " { printf(\"SYNC\\t%d\\n\", cpu); }\n")


def count_program(targets: Targets, php_binaries: list[str], *,
                  syscalls: set[str] | None = None, usdt: bool = True) -> str:
    """The counting program: per-request counters kept in the kernel, one line per request.

    A syscall's entry stores its call type and start time in its thread's map slot (`@k`);
    its exit adds one packed counter (`@c[pid, slot]`). A request runs from accept() returning to
    the worker's next accept() (or its exit), where the counters are printed and cleared.
    No uprobes except PHP's request-startup USDT probe (once per request, for the script)."""
    have = available_syscalls() if syscalls is None else syscalls
    slots = range(2 * len(COUNT_CALLS))
    flush = ("  printf(\"K\\t%d\\t%llu\\t%llu" + "\\t%llu" * len(slots) + "\\n\", pid,"
             " @st[pid], nsecs, " + ", ".join(f"@c[pid, {i}]" for i in slots) + ");\n"
             "  delete(@st[pid]);" + "".join(f" delete(@c[pid, {i}]);" for i in slots) + "\n")
    parts = _prologue(targets, flush)
    # A thread's slot is overwritten by its next traced entry, never cleared at the exit (one
    # map operation less per call: every exit follows its own entry); it goes with the thread.
    parts.append("tracepoint:sched:sched_process_exit /@k[tid]/ { delete(@k[tid]); }\n")
    for name, *_ in SYSCALLS:
        if name not in have:
            continue
        parts.append(
            f"tracepoint:syscalls:sys_enter_{name} /@tgt[pid] == 1/ {{\n"
            f"  @k[tid] = ({COUNT_KIND[name]} << 56) | nsecs;\n}}\n"
            f"tracepoint:syscalls:sys_exit_{name} {{\n"
            f"  $v = @k[tid];\n  if ($v) {{\n"
            f"    @c[pid, (($v >> 56) << 1) | (args->ret < 0 ? 1 : 0)] +="
            f" (uint64)(1 << {COUNT_SHIFT}) + nsecs - ($v & 0xffffffffffffff);\n  }}\n}}\n")
    for name in ("accept", "accept4"):
        if name in have:
            parts.append(f"tracepoint:syscalls:sys_enter_{name} /@tgt[pid] == 1/ {{\n{flush}}}\n")
            parts.append(f"tracepoint:syscalls:sys_exit_{name} /@tgt[pid] == 1 && args->ret >= 0/"
                         " { @st[pid] = nsecs; }\n")
    if usdt:
        parts += [_usdt_startup(b) for b in php_binaries]
    parts.append(_sync())
    return "".join(parts)


def perf_pages(cpus: int) -> int:
    """Pages of each CPU's event buffer: the budget split over the CPUs, a power of two."""
    share = PERF_BUDGET_BYTES // max(cpus, 1) // 4096
    pages = PERF_PAGES_MIN
    while pages * 2 <= min(share, PERF_PAGES_MAX):
        pages *= 2
    return pages


def env() -> dict[str, str]:
    return {**os.environ, "BPFTRACE_STRLEN": str(STRLEN), "BPFTRACE_MAP_KEYS_MAX": "65536",
            "BPFTRACE_PERF_RB_PAGES": str(perf_pages(os.cpu_count() or 1))}


def argv(binary: str, program_file: str) -> list[str]:
    return [binary, "-B", "line", "--usdt-file-activation", program_file]

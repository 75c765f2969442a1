"""Where a process group's CPU time goes, by sampling every CPU (`perf record -e cpu-clock`).

Used by bench/trace_overhead.py `--profile`: while wrk runs, perf samples all CPUs at a fixed
rate; the samples taken in the PHP workers (by command name) are sorted into what a tracer
adds to them: uprobe traps (the int3 and return trampolines, the kernel's uprobe lookup and
dispatch), the BPF programs, their helpers, the ring buffer, the syscall tracepoints, the
rest of the kernel, and PHP's own user-space code. Divided by the requests served, each is
microseconds of CPU per request; set against an untraced run, what each part of the tracer
costs. `cpu-clock` is a software timer: it works in VMs without performance counters. With
interrupts disabled (the int3 handler) a sample lands where they are enabled again, which is
why the trap's cost shows mostly as `irqentry_exit_to_user_mode`.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

HZ = 499  # samples per second per CPU (prime: not in step with the kernel's tick)
CATEGORIES = ("uprobe traps", "BPF programs", "BPF helpers", "ring buffer",
              "syscall tracepoints", "kernel, other", "PHP user space")
_TRAP = re.compile(r"uprobe|uretprobe|irqentry_exit_to_user_mode|int3|mtree_load|"
                   r"handler_chain|xol|hijack_return")
_HELPER = re.compile(r"strncpy_from_user|probe_read|ktime|read_tsc|task_storage|"
                     r"get_current|trace_call_bpf|copy_from_user_nofault|^bpf_|__bpf_")
_SYSCALL_TP = re.compile(r"perf_syscall|syscall_trace_enter|syscall_exit_work|trace_sys_|"
                         r"perf_trace_buf|perf_call_bpf")


def category(dso: str, sym: str) -> str:
    if dso.startswith("bpf_prog_"):
        return "BPF programs"
    if dso == "[uprobes]":
        return "uprobe traps"
    if dso != "[kernel.kallsyms]":
        return "PHP user space"
    if "ringbuf" in sym:
        return "ring buffer"
    if _TRAP.search(sym):
        return "uprobe traps"
    if _HELPER.search(sym):
        return "BPF helpers"
    if _SYSCALL_TP.search(sym):
        return "syscall tracepoints"
    return "kernel, other"


class Profile:
    """`start()` before the load, `stop()` after it, then `split(comm, requests)`."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", str(HZ), "-a",
                                      "-q", "-o", str(self.out)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def split(self, comm: str, requests: int, *, pids: list[int] | None = None,
              keep: bool = False) -> dict[str, float]:
        """Microseconds of CPU per request in processes named `comm` (of them, the processes
        `pids` only, if given), by category. keep: leave the recording for another split."""
        # (sorted by pid and picked here: perf report's own --pid filter miscounts)
        rep = subprocess.run(["perf", "report", "-i", str(self.out), "--stdio", "--no-children",
                              "--comm", comm, "--sort", "pid,dso,sym",
                              "-F", "sample,pid,dso,sym", "-q", "-t", "\t"],
                             capture_output=True, text=True, errors="replace", timeout=300)
        if not keep:
            self.out.unlink(missing_ok=True)
            self.out.with_name(self.out.name + ".old").unlink(missing_ok=True)
        us = dict.fromkeys(CATEGORIES, 0.0)
        for line in rep.stdout.splitlines():
            parts = [p.strip() for p in line.split("\t")]
            if len(parts) < 4 or not parts[0].isdigit():
                continue
            pid = parts[1].split(":", 1)[0]
            if pids is not None and (not pid.isdigit() or int(pid) not in pids):
                continue
            sym = re.sub(r"^\[[.k]\]\s*", "", parts[3])
            us[category(parts[2], sym)] += int(parts[0]) * 1e6 / HZ
        return {k: round(v / requests, 1) for k, v in us.items()} if requests else us

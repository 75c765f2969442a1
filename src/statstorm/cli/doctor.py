"""`statstorm doctor`: no flags but --json → commands.doctor → the checks by section, or JSON;
exit code 0, 3 or 4 (results/doctor.py `DoctorResult.exit_code`)."""

from __future__ import annotations

import json
import sys
import textwrap

import click

from statstorm.cli import cli
from statstorm.commands import doctor as doctor_cmd
from statstorm.env import Env
from statstorm.results.doctor import MODE_NAMES, Check, DoctorResult, Status, VerbPrivileges

WIDTH = 100
SECTIONS = (
    ("Kernel and BPF", ("kernel", "btf", "lockdown", "kernel-config", "tracefs",
                        "syscall-tracepoints", "uprobes", "unprivileged-bpf", "perf-paranoid",
                        "ptrace-scope")),
    ("Privileges", ("privileges", "check-privileges")),
    ("Tracers", ("tracer", "bpftrace", "strace")),
    ("PHP", ("php",)),
)


def _wrap(text: str, first: str, rest: str) -> str:
    return textwrap.fill(text, WIDTH, initial_indent=first, subsequent_indent=rest,
                         break_on_hyphens=False, break_long_words=False)


def _check(c: Check) -> list[str]:
    lines = [_wrap(c.says, f"  {c.status.value:<8}", " " * 10)]
    if c.fix:
        lines.append(_wrap(c.fix, " " * 10 + "fix: ", " " * 15))
    return lines


def _verb(p: VerbPrivileges) -> str:
    needs = ", ".join(p.needed) or "nothing"
    if not p.euid_ok:
        state = "not root"
    elif p.missing:
        state = "lacks " + ", ".join(p.missing)
    else:
        state = "ok"
    return _wrap(f"{'root; ' if p.root else ''}{needs}: {state}", f"    {p.verb:<26}",
                 " " * 30)


def render(env: Env, result: DoctorResult) -> None:
    out = env.stdout
    k = result.kernel
    who = "uid ?" if k.euid is None else ("root" if k.euid == 0 else f"uid {k.euid}")
    print(f"statstorm doctor: Linux {k.release or '?'}, running as {who}", file=out)
    placed: set[str] = set()
    for title, ids in SECTIONS:
        print(f"\n{title}", file=out)
        for c in result.checks:
            if c.id in ids:
                placed.add(c.id)
                print("\n".join(_check(c)), file=out)
        if title == "Privileges":
            print("  each verb's needs here:", file=out)
            for p in result.privileges:
                print(_verb(p), file=out)
            trace = next((p for p in result.privileges if p.verb == "trace"), None)
            if trace is not None and trace.elsewhere:
                whys: dict[str, list[str]] = {}
                for cap, why in trace.elsewhere:
                    whys.setdefault(cap, []).append(why)
                text = "; ".join(f"{cap} ({', '.join(w)})" for cap, w in whys.items())
                print(_wrap(text, "    trace, not needed here: ", " " * 6), file=out)
    for c in result.checks:
        if c.id not in placed:
            print("\n".join(_check(c)), file=out)
    print("\nTracing here", file=out)
    for r in result.routes:
        print(_wrap(r.note, f"  {r.verb}: ", "    "), file=out)
    modes = ", ".join(f"{MODE_NAMES[m.mode]} {'yes' if m.works else 'no'}"
                      for m in result.modes)
    print(_wrap(modes, "  modes: ", "    "), file=out)
    missing = result.missing
    if not missing:
        warned = sum(c.status == Status.WARN for c in result.checks)
        tail = f" ({warned} warning{'s' * (warned != 1)} above)" if warned else ""
        print(f"\nEverything check, trace and the exporter need is here{tail}.", file=out)
    else:
        names = ", ".join(dict.fromkeys(c.id for c in missing))
        print(_wrap(f"Missing: {names}; each has its fix above (exit {result.exit_code}).",
                    "\n", ""), file=out)


@cli.command("doctor")
@click.option("--json", "as_json", is_flag=True,
              help="Print the checks, modes, routes, privileges, PHP and facts as JSON.")
@click.pass_obj
def doctor(env: Env, as_json: bool) -> None:
    """What this host allows, before anything fails: run it first.

    The kernel and the BPF features the compiled tracer uses (Linux 5.15 or later for
    bpf_task_pt_regs; BTF; tp_btf raw tracepoints; uprobes, as uprobe_multi links on 6.6 and
    later), lockdown (integrity is fine; confidentiality leaves only strace), tracefs and its
    syscall tracepoints, kernel.unprivileged_bpf_disabled, kernel.perf_event_paranoid and
    Yama's ptrace_scope; the capabilities each verb needs, against this process's effective
    set; the tracers installed (the compiled one built?, bpftrace, strace), and so what trace,
    its counting mode and the exporter will trace with here; the PHP running here, as check
    and trace find it, with what the compiled tracer attributes in it (every operation,
    probing includes, or counts only). Each thing missing is named with its fix in one line,
    the same line trace and the exporter refuse or fall back with.

    It only reads: /proc, /sys, the tracer's files, the PHP binaries. Run it as the user
    the other verbs will run as (root): the privileges it judges are its own.

    Exit status: 0 when everything check, trace and the exporter need for their default
    (the compiled eBPF tracer, full events and counting) is here, warnings aside; 3 when
    only privileges are missing (run it as root); 4 when a kernel feature or a tracer is
    missing (trace then falls back to bpftrace or strace, the exporter refuses).

    \b
    Examples:
      statstorm doctor
      sudo statstorm doctor --json | jq '.checks[] | select(.status != "ok")'
      statstorm doctor && statstorm check
    """
    result = doctor_cmd.run(env, doctor_cmd.DoctorOptions())
    if as_json:
        json.dump(result.to_json(), env.stdout, indent=2)
        env.stdout.write("\n")
    else:
        render(env, result)
    if result.exit_code:
        env.stdout.flush()
        sys.exit(result.exit_code)

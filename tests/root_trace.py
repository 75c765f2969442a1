"""Trace a PHP command of a PHP root (`lab php-root build 7.4|8.4`) with the compiled tracer,
as `statstorm trace --cmd` traces the host's PHP: for tests/php_scenarios.py's scenarios on
other PHP versions.

`trace --cmd` runs its command as given, and a root's binary runs only inside its root; so
the command here is `chroot ROOT env -C CWD BINARY ARGS…` (the same cwd as the host's run:
chroot(1) itself moves to /) while the tracer probes the root's binary, with the layout of
its version (adapters/tracing/php_layouts.py), and the header says that version.

    python3 tests/root_trace.py OUT ROOT BINARY [PHP ARGS…]   # BINARY: /usr/bin/php8.4
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def chrooted(root: str, binary: str, args: list[str], cwd: str) -> list[str]:
    """The command that runs `binary` (as the root sees it) in `root`, in `cwd`."""
    return ["chroot", root, "/usr/bin/env", "-C", cwd, binary, *args]


def main(argv: list[str]) -> int:
    from statstorm.adapters.php import php_targets
    from statstorm.adapters.tracing import bpftrace, libbpf_trace, trace_targets
    from statstorm.adapters.tracing.libbpf_run import run_ebpf
    from statstorm.adapters.tracing.trace_backends import RecordOptions
    from statstorm.env import Env

    out, root, binary, args = Path(argv[0]), argv[1], argv[2], argv[3:]
    env = Env()
    host_binary = root.rstrip("/") + binary
    target = trace_targets.Target(
        mode="cmd", description=f"command {binary} in {root}",
        argv=chrooted(root, binary, args, os.getcwd()), binaries=[host_binary],
        settings=php_targets.cli_settings(env, [host_binary, *args]))
    libbpf_trace.find()
    bpftrace.ensure_tracefs()
    run = run_ebpf(env, RecordOptions(), target, out, [], None)
    print(run.output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

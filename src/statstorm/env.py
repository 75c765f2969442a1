"""The injectable environment: subprocess runner, output streams, clock and privileges.

Core code receives an `Env` instead of reaching for globals, so tests can run the real
code paths with a recording runner or captured streams.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, TextIO

from statstorm.errors import ComponentError, DependencyError


@dataclass(frozen=True)
class RunResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def first_error_line(self) -> str:
        for text in (self.stderr, self.stdout):
            for line in text.splitlines():
                if line.strip():
                    return line.strip()
        return f"exit status {self.returncode}"


@dataclass
class Env:
    """What the core needs from the outside world."""

    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    verbose: bool = False
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    state_root: Path = field(
        default_factory=lambda: Path(os.environ.get("STATSTORM_HOME", "/var/lib/statstorm"))
    )
    # the fstab apply keeps mount options in: STATSTORM_FSTAB (a copy, in tests and labs),
    # else None: /etc/fstab for a running pool, none for a lab (adapters/storage/fstab.py)
    fstab: Path | None = field(
        default_factory=lambda: Path(os.environ["STATSTORM_FSTAB"])
        if os.environ.get("STATSTORM_FSTAB") else None
    )

    def is_root(self) -> bool:
        return os.geteuid() == 0

    def log(self, message: str) -> None:
        """A progress line on stderr (stdout stays clean for --json)."""
        print(message, file=self.stderr, flush=True)

    def debug(self, message: str) -> None:
        if self.verbose:
            print(f"  {message}", file=self.stderr, flush=True)

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        timeout: float = 120,
        input_text: str | None = None,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        what: str | None = None,
    ) -> RunResult:
        """Run a command to completion; with `check`, a failure raises ComponentError."""
        self.debug("$ " + shlex.join(argv))
        full_env = None
        if env:
            full_env = dict(os.environ)
            full_env.update(env)
        try:
            proc = subprocess.run(
                list(argv),
                input=input_text,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                cwd=cwd,
                env=full_env,
                stdin=None if input_text is not None else subprocess.DEVNULL,
            )
        except FileNotFoundError as exc:
            raise DependencyError(
                f"{argv[0]} is not installed: run `make setup` (scripts/setup.sh --dev) as root"
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise ComponentError(
                f"{what or argv[0]} did not finish within {timeout:.0f} s: {shlex.join(argv)}"
            ) from exc
        result = RunResult(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            raise ComponentError(f"{what or shlex.join(argv)} failed: {result.first_error_line()}")
        return result

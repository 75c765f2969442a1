"""The one error path: typed exceptions raised by the core, mapped to exit codes by the CLI.

Every message is one line that says what went wrong and names the fix.
"""

from __future__ import annotations

import errno

# Documented exit codes (docs/cli.md lists them too).
EXIT_OK = 0
EXIT_FAILURE = 1  # the command ran and failed (a check failed, a component misbehaved)
EXIT_USAGE = 2  # bad flags or bad input files (also a truncated or damaged input: DamagedInput)
EXIT_PRIVILEGE = 3  # needs root (or a capability)
EXIT_DEPENDENCY = 4  # a Debian package or a kernel feature is missing
EXIT_BUSY = 5  # a resource is taken: port in use, lab name exists
EXIT_INTERRUPTED = 130


class StatstormError(Exception):
    """Base class: `str(err)` is the one-line message shown to the user."""

    exit_code = EXIT_FAILURE


class UsageError(StatstormError):
    exit_code = EXIT_USAGE


class DamagedInput(UsageError):
    """An input file cut off or changed after it was written: a trace without its seal (an
    interrupted copy or write) or whose checksum does not match. Exit code 2, as for any bad
    input; the message says what the file still holds and how to get a whole one."""


class OutputError(StatstormError):
    """A file could not be written (disk full, I/O error): nothing was published, the previous
    file is intact and no temp file is left. Exit code 1."""

    exit_code = EXIT_FAILURE


class PrivilegeError(StatstormError):
    exit_code = EXIT_PRIVILEGE


class DependencyError(StatstormError):
    exit_code = EXIT_DEPENDENCY


class BusyError(StatstormError):
    exit_code = EXIT_BUSY


class ComponentError(StatstormError):
    """A real component (php-fpm, nginx, glusterd, ...) failed; the message says which and why."""

    exit_code = EXIT_FAILURE


class RollbackFailed(ComponentError):
    """A change failed and so did putting the target back: it is neither as it was nor
    changed (apply's backup set is marked rollback-failed). Nothing may be tried on top."""


class NotSamePage(ComponentError):
    """A side of a measurement answered another page than the site's own (its status, its
    length beyond the bound, or without the page's marker): no ratio is taken from it.
    `role`: which side ("local", the reference; "network", the target; '' the site itself
    before anything changed)."""

    def __init__(self, message: str, role: str = "") -> None:
        super().__init__(message)
        self.role = role


class Interrupted(StatstormError):
    """Raised from signal handlers (SIGTERM) so cleanup runs as for Ctrl-C."""

    exit_code = EXIT_INTERRUPTED


def os_error(exc: OSError) -> StatstormError:
    """A file-system error no caller turned into its own message (a disk that filled up, a
    permission taken away mid-run): one line naming the file and the fix. Exit code 1."""
    where = f"{exc.filename}: " if exc.filename else ""
    what = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free space on that file system and run it again"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "fix its permissions (or run as root) and run it again"
    else:
        fix = "fix that and run it again"
    return OutputError(f"{where}{what}: {fix}")

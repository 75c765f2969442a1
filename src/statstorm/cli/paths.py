"""The file and directory arguments of the verbs, checked before any work starts.

click's own `click.Path` checks (exists, readable, a directory where a file is meant) fail
with its multi-line usage block; these types fail with one line that names the fix (a
`UsageError`, exit code 2, a JSON error object under --json), like every other error.
An input must be readable by the user running statstorm; an output is only checked not to be
a directory where a file is meant (or the reverse): whether it can be written is the verb's
own check, made before it measures.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import click

from statstorm.errors import UsageError


def _where(param: click.Parameter | None, path: object) -> str:
    """How the message names the value: `--trace FILE` for an option, FILE for an argument."""
    if isinstance(param, click.Option) and param.opts:
        return f"{max(param.opts, key=len)} {os.fsdecode(str(path))}"
    return os.fsdecode(str(path))


def unreadable(where: str) -> UsageError:
    return UsageError(f"{where}: permission denied; run as its owner (or root), or make it "
                      "readable (chmod o+r, and o+x on the directories above it)")


class _Checked(click.Path):
    def __init__(self, *, exists: bool = False, file_okay: bool = True, dir_okay: bool = True,
                 readable: bool) -> None:
        super().__init__(exists=False, file_okay=file_okay, dir_okay=dir_okay, readable=False,
                         path_type=Path)
        self.must_exist = exists
        self.must_read = readable

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        where = _where(param, value)
        try:
            st = os.stat(value)
        except PermissionError:
            if self.must_read:
                raise unreadable(where) from None
            return super().convert(value, param, ctx)
        except OSError:
            if self.must_exist:
                raise UsageError(f"{where}: no such file") from None
            return super().convert(value, param, ctx)
        if not self.dir_okay and stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{where}: is a directory; give a file")
        if not self.file_okay and not stat.S_ISDIR(st.st_mode):
            kind = "a file" if stat.S_ISREG(st.st_mode) else "not a directory"
            raise UsageError(f"{where}: is {kind}; give a directory")
        if self.must_read and not stat.S_ISDIR(st.st_mode) and not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{where}: not a regular file (a pipe, socket or device); save the "
                             "output to a file first and give that file")
        mode = os.R_OK | (os.X_OK if stat.S_ISDIR(st.st_mode) else 0)
        if self.must_read and not os.access(value, mode):
            raise unreadable(where)
        return super().convert(value, param, ctx)


class InputPath(_Checked):
    """A file (or directory) the verb reads: it must be readable by this user."""

    def __init__(self, *, exists: bool = False, file_okay: bool = True,
                 dir_okay: bool = True) -> None:
        super().__init__(exists=exists, file_okay=file_okay, dir_okay=dir_okay, readable=True)


class OutputPath(_Checked):
    """A file (or directory) the verb writes."""

    def __init__(self, *, file_okay: bool = True, dir_okay: bool = True) -> None:
        super().__init__(file_okay=file_okay, dir_okay=dir_okay, readable=False)

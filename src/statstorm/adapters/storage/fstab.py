"""/etc/fstab, where apply keeps a mount's new cache options across a remount or a reboot: the
file read as its bytes, the edit planned (the options of the mount's own line changed, or a line
added for a mount made by hand), and the result checked with util-linux's
`findmnt --verify --tab-file` before anything is written. The text edits are
`model/fstab_edit.py`'s; the write is apply's (`adapters/apply/apply_steps.py` `install`:
temp file + rename in the file's directory, mode and owner kept, after the backup set holds
the original bytes, or the fact that there was no file, for `apply --rollback`).

Which file: `$STATSTORM_FSTAB` when set (`Env.fstab`: tests point it at a copy, never at the
real file), else /etc/fstab for a running pool; a lab, whose mount is its own and gone with
it, keeps nothing unless `$STATSTORM_FSTAB` names a file.

A mount's line is found by its mount point as written (escapes undone, `/srv//code/` is
`/srv/code`) and, when no line names it so, by the mount point each line resolves to through
symlinks (a line for `/var/www` mounts `/srv/www` when `/var/www` links there).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from statstorm.adapters.storage import mounts
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.model import config_edit, fstab_edit
from statstorm.model.fstab_edit import FstabError
from statstorm.results.apply import FileEdit

FSTAB = Path("/etc/fstab")
ENV_VAR = "STATSTORM_FSTAB"  # read by Env (env.py): Env.fstab


@dataclass(frozen=True)
class Persist:
    """One mount whose new options go into fstab."""

    mount_point: str
    options: dict[str, str]  # the options apply changes (its line's other options stay)
    live: dict[str, str] = field(default_factory=dict)  # its other cache options now: a line
    # added for a mount made by hand keeps them too


def location(env: Env, lab: bool) -> Path | None:
    """The fstab apply keeps mount options in (None: none, a lab's mount is its own)."""
    if env.fstab is not None:
        return env.fstab
    return None if lab else FSTAB


def read(path: Path) -> str | None:
    """The file's text (its bytes decoded with surrogateescape, so every byte round-trips);
    None when it does not exist."""
    try:
        return path.read_bytes().decode("utf-8", "surrogateescape")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def matcher(text: str, mount_point: str) -> Callable[[str], bool]:
    """Whether an fstab line's mount point is `mount_point`: as written when a line names it
    so (no other line's path is looked at), else as each resolves through symlinks."""
    want = os.path.normpath(mount_point)
    real = os.path.realpath(mount_point)

    def literal(target: str) -> bool:
        return target.startswith("/") and os.path.normpath(target) in (want, real)

    def resolved(target: str) -> bool:
        return target.startswith("/") and os.path.realpath(target) == real
    return literal if fstab_edit.find(text, literal) is not None else resolved


def _mounted(mount_point: str, entries: list[mounts.MountEntry]) -> mounts.MountEntry | None:
    """The first (lowest) mount on `mount_point`: the one fstab would make."""
    want = os.path.normpath(mount_point)
    return next((e for e in entries if os.path.normpath(e.mount_point) == want), None)


def plan(path: Path, persist: list[Persist],
         entries: list[mounts.MountEntry] | None = None) -> FileEdit | None:
    """The edit of the fstab at `path` that keeps these mounts' options: each mount's line
    gets its options; a mount with no line gets one, built from its `/proc/mounts` entry
    (`entries`, default the live ones). None when nothing changes. UsageError (one line,
    nothing written) when the file is malformed or a mount is gone."""
    before = read(path)
    text = before or ""
    for p in persist:
        try:
            after = fstab_edit.set_options(text, matcher(text, p.mount_point), p.options)
        except FstabError as exc:
            raise UsageError(f"{path}: {exc}: fix that line (or add --no-fstab); nothing was "
                             "changed") from None
        if after is None:
            entry = _mounted(p.mount_point, mounts.current() if entries is None else entries)
            if entry is None:
                raise UsageError(f"{p.mount_point} is not mounted now: mount it again, then run "
                                 "apply again; nothing was changed")
            after = fstab_edit.add_line(text, entry.source, entry.mount_point, entry.fstype,
                                        {**p.options, **{k: v for k, v in p.live.items()
                                                         if k not in p.options}})
        text = after
    return None if text == before else FileEdit(path, before, text)


def verify(env: Env, text: str, mount_points: list[str]) -> str:
    """`findmnt --verify --tab-file` on the lines of `text` that mount these mount points (the
    rest of the file is the admin's business, and checking its targets could hang on a dead
    network mount; a malformed line anywhere is refused by `plan`): '' when it accepts them,
    else one line saying what it found."""
    try:
        entries = fstab_edit.parse(text)
    except FstabError as exc:
        return f"the new fstab is malformed ({exc})"
    body = config_edit.Lines.split(text, config_edit.LF_EOL).body
    lines = []
    for mp in mount_points:
        is_target = matcher(text, mp)
        lines += [body[e.index] for e in entries if is_target(e.target)]
    if not lines:
        return f"the new fstab has no line for {', '.join(mount_points)}"
    with tempfile.NamedTemporaryFile("wb", prefix="statstorm-fstab-") as tmp:
        tmp.write(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
        tmp.flush()
        res = env.run(["findmnt", "--verify", "--tab-file", tmp.name], check=False,
                      what="findmnt --verify")
    if res.returncode == 0:
        return ""
    errors = [ln.strip() for ln in (res.stdout + res.stderr).splitlines()
              if "[E]" in ln or "parse error" in ln]
    return (f"findmnt --verify rejects the fstab line for {', '.join(mount_points)} "
            f"({(errors or [res.first_error_line()])[0]})")


__all__ = ["ENV_VAR", "FSTAB", "Persist", "location", "matcher", "plan", "read", "verify"]

"""/etc/fstab as libmount reads it, and the edits apply makes there: a mount's options changed
in its own line (every other byte kept), or a line added for a mount made by hand. Pure code:
texts in, texts out (the file and `findmnt --verify`: `adapters/storage/fstab.py`).

libmount reads fstab line by line at `\\n`; a line that is blank or starts (after blanks) with
`#` is a comment; the fields are separated by blanks and tabs: source (`UUID=…`, `LABEL=…`,
`host:/volume`…), mount point, type, options, dump, pass, the last three optional; a blank,
tab, newline or backslash inside a field is written as an octal escape (`\\040`). A line with
fewer than three fields is a parse error, which `mount -a` skips: apply refuses such a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from statstorm.model import config_edit
from statstorm.model.storage_kinds import fstab_type, kind_of
from statstorm.results.storage_kind import StorageKind

MIN_FIELDS = 3  # source, mount point, type (libmount: options, dump, pass may be left out)
PERSIST_OPTIONS = ("defaults", "_netdev")  # an added line: mounted at boot, once the network is up
ADDED_BY = "# added by statstorm apply: {target} keeps its new cache options after a reboot"
_ESCAPED = " \t\n\\"


class FstabError(ValueError):
    """An fstab text libmount cannot parse (the message names the line)."""


@dataclass(frozen=True)
class FstabLine:
    """One entry of an fstab text: its line index (0-based) and its fields unescaped."""

    index: int
    source: str
    target: str
    fstype: str
    options: str  # '' when the line has no options field


def escape(field: str) -> str:
    """A field as fstab writes it: blanks, tabs, newlines and backslashes as octal escapes."""
    return "".join(f"\\{ord(c):03o}" if c in _ESCAPED else c for c in field)


def _entry(index: int, line: str) -> FstabLine | None:
    """The entry of one line (None: a comment or a blank line); FstabError when malformed."""
    if config_edit.blank(line) or line.lstrip(" \t").startswith("#"):
        return None
    spans = config_edit.fstab_fields(line.rstrip("\r"))
    if len(spans) < MIN_FIELDS:
        raise FstabError(f"line {index + 1} has {len(spans)} field(s) where libmount needs at "
                         "least a source, a mount point and a type")
    f = [config_edit.unescape_fstab(line[a:b]) for a, b in spans]
    return FstabLine(index, f[0], f[1], f[2], f[3] if len(f) > 3 else "")


def parse(text: str) -> list[FstabLine]:
    """The entries of an fstab text, in order; FstabError naming the first malformed line."""
    lines = config_edit.Lines.split(text, config_edit.LF_EOL)
    return [e for i, line in enumerate(lines.body) if (e := _entry(i, line)) is not None]


def find(text: str, is_target: Callable[[str], bool]) -> FstabLine | None:
    """The first entry whose mount point `is_target` accepts (as `mount /point` takes it)."""
    return next((e for e in parse(text) if is_target(e.target)), None)


def set_options(text: str, is_target: Callable[[str], bool],
                options: dict[str, str]) -> str | None:
    """`text` with `options` set in the options field of the first line whose mount point
    `is_target` accepts: an option there gets its new value in place, a new one goes at the end,
    the others (`defaults` included) stay; a line without options gets the field. Every other
    byte stays. None when no line mounts it; FstabError when the text is malformed."""
    found = find(text, is_target)
    if found is None:
        return None
    lines = config_edit.Lines.split(text, config_edit.LF_EOL)
    line = lines.body[found.index]
    spans = config_edit.fstab_fields(line.rstrip("\r"))
    if len(spans) > 3:
        a, b = spans[3]
        lines.body[found.index] = line[:a] + config_edit.fstab_options(line[a:b], options) + line[b:]
    else:
        end = spans[2][1]
        new = config_edit.fstab_options("defaults", options)
        lines.body[found.index] = line[:end] + " " + new + line[end:]
    return lines.text()


def persisted_source(source: str, fstype: str) -> str:
    """The fstab source of a mount as `/proc/mounts` shows it: a GlusterFS volume as
    `host:/volume` (its FUSE client may show `host:volume`)."""
    if kind_of(fstype) is StorageKind.GLUSTERFS and ":" in source:
        host, volume = source.split(":", 1)
        return f"{host}:/{volume.lstrip('/')}"
    return source


def add_line(text: str, source: str, target: str, fstype: str,
             options: dict[str, str]) -> str:
    """`text` with a comment line and a line that mounts `source` on `target` with `options`
    (after `defaults,_netdev`) at its end; every byte before stays. `source`, `target` and
    `fstype` are as `/proc/mounts` shows them, unescaped."""
    lines = config_edit.Lines.split(text, config_edit.LF_EOL)
    opts = config_edit.fstab_options(",".join(PERSIST_OPTIONS), options)
    lines.body.append(ADDED_BY.format(target=escape(target)))
    lines.eol.append("")
    lines.body.append(" ".join((escape(persisted_source(source, fstype)), escape(target),
                                fstab_type(fstype), opts, "0", "0")))
    lines.eol.append("")
    return lines.text()


__all__ = ["ADDED_BY", "FstabError", "FstabLine", "MIN_FIELDS", "PERSIST_OPTIONS", "add_line",
           "escape", "find", "parse", "persisted_source", "set_options"]

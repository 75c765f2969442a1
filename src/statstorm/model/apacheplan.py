"""Apache configuration edits of `statstorm apply` (pure: text in, text out).

A finding's Apache lines come after a header that says where they go:
  `# apache <Directory DIR>:`  the directives go into DIR's <Directory> section (the last one
                               for DIR in the file, which wins; a section of statstorm's own
                               is appended when the file has none);
  `# apache server config:`    server-level directives (MaxRequestWorkers …), replaced where
                               the file sets them (inside <IfModule> sections too), else
                               appended.

Only the directives it sets change: the text is split into lines as Apache reads it (at `\\n`,
a `\\r` before it staying with the line's end; \\u2028, \\x85, \\x0c… stay inside their line),
and every other byte stays, line ends (LF, CRLF, mixed) and a missing final line end included
(`model.config_edit.Lines`). A directive continued over several lines (a `\\` at a line's end)
is replaced whole. Blanks are Apache's own (C `isspace`), not Unicode's.
"""

from __future__ import annotations

import re

from statstorm.model.applyplan import APACHE, APP_MARK, Change
from statstorm.model.config_edit import LF_EOL, Lines, indent

_WS = r"[ \t\v\f\r]"  # apr_isspace: the blanks Apache skips around a line's words
_OPEN = re.compile(rf'{_WS}*<Directory{_WS}+"?(/[^">]*?)/?"?{_WS}*>{_WS}*', re.IGNORECASE)
_LEAD = re.compile(rf"{_WS}*")
_CLOSE = re.compile(rf"{_WS}*</Directory{_WS}*>{_WS}*", re.IGNORECASE)


def _directory_blocks(lines: list[str], directory: str) -> list[tuple[int, int]]:
    """(open, close) line indexes of each <Directory DIR> section for `directory`."""
    out = []
    want = directory.rstrip("/") or "/"
    start = -1
    for i, line in enumerate(lines):
        m = _OPEN.fullmatch(line)
        if m:
            start = i if (m.group(1).rstrip("/") or "/") == want else -1
        elif _CLOSE.fullmatch(line) and start >= 0:
            out.append((start, i))
            start = -1
    return out


def _continued(line: str) -> bool:
    """Whether Apache reads the next line as part of this one (a `\\` at its end)."""
    return line.rstrip(" \t\v\f\r").endswith("\\")


def _replace(lines: Lines, hits: list[int], new: str) -> None:
    """Each directive starting at a line of `hits` (bottom up) becomes `new`, the blanks before
    it kept; the lines it continued onto go."""
    for i in reversed(hits):
        j = i
        while _continued(lines.body[j]) and j + 1 < len(lines.body):
            j += 1
        lines.eol[i] = lines.eol[j]  # the directive's own line end: its last line's
        for k in range(j, i, -1):
            lines.delete(k)
        m = _LEAD.match(lines.body[i])
        lines.body[i] = (m.group(0) if m else "") + new


def _directive_lines(lines: Lines, pat: re.Pattern[str], lo: int, hi: int) -> list[int]:
    """The lines in [lo, hi) where a directive matching `pat` starts (not a continuation)."""
    out = []
    for i in range(lo, hi):
        if not (i > 0 and _continued(lines.body[i - 1])) and pat.match(lines.body[i]):
            out.append(i)
    return out


def edit_apache(text: str, changes: list[Change]) -> str:
    """The Apache configuration `text` with its APACHE changes made."""
    lines = Lines.split(text, LF_EOL)
    for c in (c for c in changes if c.kind == APACHE):
        pat = re.compile(rf"{_WS}*{re.escape(c.key)}{_WS}", re.IGNORECASE)
        new = f"{c.key} {c.value}"
        if c.where:
            blocks = _directory_blocks(lines.body, c.where)
            if not blocks:
                for line in ("", APP_MARK, f"<Directory {c.where}>", f"    {new}",
                             "</Directory>"):
                    lines.insert(len(lines.body), line)
                continue
            lo, hi = blocks[-1]
            hits = _directive_lines(lines, pat, lo + 1, hi)
            if hits:
                _replace(lines, hits, new)
            else:
                lines.insert(hi, f"{indent(lines.body[lo])}    {new}")
            continue
        hits = _directive_lines(lines, pat, 0, len(lines.body))
        if hits:
            _replace(lines, hits, new)
        else:
            for line in ("", APP_MARK, new):
                lines.insert(len(lines.body), line)
    return lines.text()

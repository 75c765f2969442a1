"""Apache configuration edits of `statstorm apply` (pure: text in, text out).

A finding's Apache lines come after a header that says where they go:
  `# apache <Directory DIR>:`  the directives go into DIR's <Directory> section (the last one
                               for DIR in the file, which wins; a section of statstorm's own
                               is appended when the file has none);
  `# apache server config:`    server-level directives (MaxRequestWorkers …), replaced where
                               the file sets them (inside <IfModule> sections too), else
                               appended.
"""

from __future__ import annotations

import re

from statstorm.model.applyplan import APACHE, APP_MARK, Change

_OPEN = re.compile(r'^\s*<Directory\s+"?(/[^">]*?)/?"?\s*>\s*$', re.IGNORECASE)
_CLOSE = re.compile(r"^\s*</Directory\s*>\s*$", re.IGNORECASE)


def _directory_blocks(lines: list[str], directory: str) -> list[tuple[int, int]]:
    """(open, close) line indexes of each <Directory DIR> section for `directory`."""
    out = []
    want = directory.rstrip("/") or "/"
    start = -1
    for i, line in enumerate(lines):
        m = _OPEN.match(line)
        if m:
            start = i if (m.group(1).rstrip("/") or "/") == want else -1
        elif _CLOSE.match(line) and start >= 0:
            out.append((start, i))
            start = -1
    return out


def edit_apache(text: str, changes: list[Change]) -> str:
    """The Apache configuration `text` with its APACHE changes made."""
    lines = text.splitlines()
    for c in (c for c in changes if c.kind == APACHE):
        pat = re.compile(rf"^(\s*){re.escape(c.key)}\s", re.IGNORECASE)
        if c.where:
            blocks = _directory_blocks(lines, c.where)
            if not blocks:
                lines += ["", APP_MARK, f"<Directory {c.where}>", f"    {c.key} {c.value}",
                          "</Directory>"]
                continue
            lo, hi = blocks[-1]
            hits = [i for i in range(lo + 1, hi) if pat.match(lines[i])]
            if hits:
                for i in hits:
                    m = pat.match(lines[i])
                    lines[i] = f"{m.group(1) if m else ''}{c.key} {c.value}"
            else:
                indent = re.match(r"\s*", lines[lo]).group(0)  # type: ignore[union-attr]
                lines.insert(hi, f"{indent}    {c.key} {c.value}")
            continue
        hits = [i for i, line in enumerate(lines) if pat.match(line)]
        if hits:
            for i in hits:
                m = pat.match(lines[i])
                lines[i] = f"{m.group(1) if m else ''}{c.key} {c.value}"
        else:
            lines += ["", APP_MARK, f"{c.key} {c.value}"]
    return "\n".join(lines) + "\n"

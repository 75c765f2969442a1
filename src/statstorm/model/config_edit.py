"""Edits of configuration texts that change only the bytes they mean to: php-fpm pools, PHP's
ini files, an app's PHP configuration file, nginx and /etc/fstab. Pure code: texts in, texts out.

A text is the file's bytes decoded as UTF-8 with `surrogateescape`, so a file in another
encoding round-trips. Each format is split into lines the way its own reader splits it, never
on other Unicode separators (\\u2028, \\x85, \\x0c stay inside their line, a comment's included):
PHP's ini scanner and its language scanner end a line at `\\r\\n`, `\\r` or `\\n`; /etc/fstab is
read line by line at `\\n` (a `\\r` before it stays with the line's end); nginx is read as tokens
(blanks, `\\r` and `\\n` separate them, `#` starts a comment up to `\\n`). Every line keeps its
own end (LF, CRLF, mixed), its indentation and its comments; a line added gets the file's most
common line end; a file without a final line end stays without one.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

PHP_EOL = re.compile(r"(\r\n|\r|\n)")  # PHP's ini and language scanners' NEWLINE
LF_EOL = re.compile(r"(\r?\n)")  # line-by-line readers (libmount's fstab)
_BLANK = " \t"


@dataclass
class Lines:
    """A text as lines (without their ends) and their ends; lines added have the end ''
    until `text()` gives them the file's own."""

    body: list[str]
    eol: list[str]
    default: str = "\n"
    open_end: bool = False  # the text does not end with a line end

    @classmethod
    def split(cls, text: str, sep: re.Pattern[str] = PHP_EOL) -> "Lines":
        parts = sep.split(text)
        body, eol = parts[0::2], parts[1::2] + [""]
        if body[-1] == "":  # the text ends with a line end (or is empty)
            body.pop()
            eol.pop()
        counts = Counter(e for e in eol if e)
        default = max(counts, key=lambda e: (counts[e], e == "\n")) if counts else "\n"
        return cls(body, eol, default, bool(body) and not eol[-1])

    def insert(self, i: int, line: str) -> None:
        self.body.insert(i, line)
        self.eol.insert(i, "")

    def delete(self, i: int) -> None:
        del self.body[i]
        del self.eol[i]

    def text(self) -> str:
        ends = [e or self.default for e in self.eol]
        if self.open_end and ends:
            ends[-1] = ""
        return "".join(b + e for b, e in zip(self.body, ends))


def indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip(_BLANK))]


def blank(line: str) -> bool:
    return not line.strip(_BLANK)


# -- PHP ini files and php-fpm pools -------------------------------------------------------------
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./:,+@-]*")
_SECTION = re.compile(r"[ \t]*\[([^\]\r\n]+)\][ \t]*")


def ini_value(value: str) -> str:
    """A value as an ini file (php.ini or a php-fpm pool) reads it back unchanged."""
    if '"' in value or "\n" in value or "\r" in value:
        raise ValueError(f"cannot write {value!r} to an ini file")
    return value if _PLAIN_VALUE.fullmatch(value) else f'"{value}"'


def ini_comment(line: str) -> str:
    """The comment that ends an ini line `key = value ; why` (with the blanks before it), as
    PHP's scanner reads it: a `;` after the value (a quoted value may hold one); '' if none."""
    eq = line.find("=")
    if eq < 0:
        return ""
    i = eq + 1
    while i < len(line) and line[i] in _BLANK:
        i += 1
    if line[i:i + 1] == '"':
        close = line.find('"', i + 1)
        if close < 0:
            return ""
        i = close + 1
    semi = line.find(";", i)
    if semi < 0:
        return ""
    return line[len(line[:semi].rstrip(_BLANK)):]


def section_bounds(lines: Lines, section: str) -> tuple[int, int]:
    """[start, end) of the lines after `[section]` up to the next section; (-1, -1) if absent."""
    start = -1
    for i, line in enumerate(lines.body):
        m = _SECTION.fullmatch(line)
        if m and start >= 0:
            return start, i
        if m and m.group(1) == section:
            start = i + 1
    return (start, len(lines.body)) if start >= 0 else (-1, -1)


def set_line(lines: Lines, lo: int, hi: int, pattern: re.Pattern[str], new: str,
             header: str) -> None:
    """Make the first line in [lo, hi) matching `pattern` read `new` (its indentation kept)
    and drop the others; add `header` (unless there) and `new` at the end of the range, before
    its trailing blank lines, if none matches."""
    hits = [i for i in range(lo, hi) if pattern.match(lines.body[i])]
    if hits:
        old = lines.body[hits[0]]
        lines.body[hits[0]] = indent(old) + new + ini_comment(old)
        for i in reversed(hits[1:]):
            lines.delete(i)
        return
    end = hi
    while end > lo and blank(lines.body[end - 1]):
        end -= 1
    if header not in lines.body[lo:end]:
        lines.insert(end, header)
        end += 1
    lines.insert(end, new)


# Settings apps change themselves at run time (set_include_path() in PEAR- and ZF1-style
# bootstraps): a pool's php_admin_value would make that call fail, so apply gives them as
# php_value, unless the pool already fixes them with php_admin_value.
APP_SETTABLE = frozenset({"include_path"})


def pool_setting(lines: Lines, lo: int, hi: int, kind: str, key: str, value: str,
                 header: str) -> None:
    """`php_admin_value[key] = value` ("ini"; php_value for APP_SETTABLE keys) or the
    directive `key = value` ("directive") in the pool's lines [lo, hi)."""
    if kind == "ini" and key == "extension":  # several may load: match this one
        pat = re.compile(r"[ \t]*php(?:_admin)?_value\[extension\][ \t]*=[ \t]*\"?[^ \t\"]*"
                         rf"{re.escape(value.rsplit('/', 1)[-1])}\"?[ \t]*$")
        new = f"php_admin_value[extension] = {ini_value(value)}"
    elif kind == "ini":
        pat = re.compile(rf"[ \t]*php(?:_admin)?_(?:value|flag)\[{re.escape(key)}\][ \t]*=")
        fixed = re.compile(rf"[ \t]*php_admin_value\[{re.escape(key)}\]")
        admin = key not in APP_SETTABLE or any(fixed.match(lines.body[i]) for i in range(lo, hi))
        new = f"php_{'admin_' if admin else ''}value[{key}] = {ini_value(value)}".rstrip()
    else:
        pat = re.compile(rf"[ \t]*{re.escape(key)}[ \t]*=")
        new = f"{key} = {ini_value(value)}"
    set_line(lines, lo, hi, pat, new, header)


def ini_setting(lines: Lines, key: str, value: str, header: str) -> None:
    """`key = value` in an ini file of settings (no sections)."""
    pat = re.compile(rf"[ \t]*{re.escape(key)}[ \t]*=")
    set_line(lines, 0, len(lines.body), pat, f"{key} = {ini_value(value)}".rstrip(), header)


# -- an app's PHP configuration file -------------------------------------------------------------
def app_setting(lines: Lines, start: int, key: str, value: str) -> None:
    """`$key = value;` in statstorm's block (after line `start`): replaced, else appended."""
    new = f"{key} = {value};"
    pat = re.compile(rf"[ \t]*{re.escape(key)}[ \t]*=")
    hits = [i for i in range(start + 1, len(lines.body)) if pat.match(lines.body[i])]
    if hits:
        lines.body[hits[0]] = indent(lines.body[hits[0]]) + new
    else:
        lines.insert(len(lines.body), new)


_ENV_LINE = re.compile(r"^([ \t]*(?:export[ \t]+)?)([A-Za-z_][A-Za-z0-9_]*)[ \t]*=")
_ENV_VALUE = re.compile(r"[A-Za-z0-9_./:,+@-]*")


def env_setting(lines: Lines, key: str, value: str, mark: str) -> None:
    """`KEY=value` in a dotenv file (Laravel's .env, read by phpdotenv): every assignment of
    KEY replaced where it stands (so no other one can win), else appended in statstorm's
    block (after the line `mark`, made at the end when missing)."""
    if not _ENV_VALUE.fullmatch(value):
        raise ValueError(f"cannot write {value!r} to a .env file unquoted")
    hits = [i for i, ln in enumerate(lines.body)
            if (m := _ENV_LINE.match(ln)) and m.group(2) == key]
    for i in hits:
        m = _ENV_LINE.match(lines.body[i])
        assert m is not None
        lines.body[i] = f"{m.group(1)}{key}={value}"
    if hits:
        return
    try:
        at = lines.body.index(mark) + 1
    except ValueError:
        lines.insert(len(lines.body), mark)
        at = len(lines.body)
    while at < len(lines.body) and _ENV_LINE.match(lines.body[at]):
        at += 1
    lines.insert(at, f"{key}={value}")


_YAML_KEY = re.compile(r"^([ ]*)([A-Za-z_][A-Za-z0-9_.-]*):(?:[ \t]+(.*?))?[ \t]*$")
YAML_STEP = 4  # the indentation Symfony's recipes use


def _yaml_significant(line: str) -> bool:
    s = line.strip(_BLANK)
    return bool(s) and not s.startswith("#")


def _yaml_block(lines: Lines, parent: int) -> tuple[int, int, int]:
    """The lines of the mapping under the key on line `parent` (-1: the document): first,
    end, and its keys' indentation (the parent's + YAML_STEP when it has none yet)."""
    base = -1 if parent < 0 else len(indent(lines.body[parent]))
    end = parent + 1
    child = None
    while end < len(lines.body):
        ln = lines.body[end]
        if _yaml_significant(ln):
            ind = len(indent(ln))
            if ind <= base:
                break
            child = ind if child is None else child
        end += 1
    return parent + 1, end, (child if child is not None else max(base, 0) + (YAML_STEP if parent >= 0 else 0))


def yaml_setting(lines: Lines, path: str, value: str, mark: str) -> None:
    """`a.b.c: value` in a YAML file of block mappings (Symfony's config/packages/*.yaml):
    the key's line replaced (marked with a `mark` comment), else the missing keys added under
    the deepest one there. A key on the way holding a scalar or a flow mapping, a tab or an
    anchor: ValueError (the file is left for a person)."""
    if not _ENV_VALUE.fullmatch(value):
        raise ValueError(f"cannot write {value!r} to a YAML file unquoted")
    keys = path.split(".")
    parent = -1
    for depth, key in enumerate(keys):
        lo, hi, ind = _yaml_block(lines, parent)
        found = None
        for i in range(lo, hi):
            m = _YAML_KEY.match(lines.body[i])
            if "\t" in indent(lines.body[i]):
                raise ValueError("the YAML file is indented with tabs: add the setting by hand")
            if m and len(m.group(1)) == ind and m.group(2) == key:
                found = (i, m)
                break
        last = depth == len(keys) - 1
        if found is None:
            at = parent + 1
            for j, k in enumerate(keys[depth:]):
                tail = f" {value} {mark}" if depth + j == len(keys) - 1 else ""
                lines.insert(at + j, " " * (ind + j * YAML_STEP) + f"{k}:{tail}")
            return
        i, m = found
        rest = (m.group(3) or "").strip()
        if last:
            lines.body[i] = f"{m.group(1)}{key}: {value} {mark}"
            return
        if rest and not rest.startswith("#") and rest not in ("~", "null"):
            raise ValueError(f"{'.'.join(keys[:depth + 1])} holds {rest!r} in the YAML file: "
                             "add the setting by hand")
        if rest in ("~", "null"):
            lines.body[i] = f"{m.group(1)}{key}:"
        parent = i


# -- nginx ---------------------------------------------------------------------------------------
_NGX_SPACE = " \t\r\n"


@dataclass(frozen=True)
class Statement:
    """An nginx directive: its words (quotes removed) and where each word and the statement's
    end (`;`, `{` or `}`) are in the text."""

    words: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]
    end: int  # the offset after its `;` / `{`

    @property
    def start(self) -> int:
        return self.spans[0][0]


def nginx_statements(text: str) -> list[Statement]:
    """The directives of an nginx text, as nginx's own reader tokenises it (comments skipped,
    quoted words with their escapes, `;` `{` `}` ending a statement)."""
    out: list[Statement] = []
    words: list[str] = []
    spans: list[tuple[int, int]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in _NGX_SPACE:
            i += 1
        elif ch == "#":
            nl = text.find("\n", i)
            i = n if nl < 0 else nl + 1
        elif ch in ";{}":
            if words:
                out.append(Statement(tuple(words), tuple(spans), i + 1))
            words, spans = [], []
            i += 1
        elif ch in "\"'":
            j = i + 1
            while j < n and text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            words.append(text[i + 1:j].replace("\\" + ch, ch))
            spans.append((i, min(j + 1, n)))
            i = j + 1
        else:
            j = i
            while j < n and text[j] not in _NGX_SPACE and text[j] not in ";{}":
                if text[j] == "$" and text[j + 1:j + 2] == "{":  # ${var}
                    close = text.find("}", j)
                    j = n if close < 0 else close + 1
                    continue
                j += 1 if text[j] != "\\" else 2
            words.append(text[i:j])
            spans.append((i, min(j, n)))
            i = j
    return out


def line_end_after(text: str, pos: int) -> int:
    """The offset after the line end that follows `pos` (len(text) when none)."""
    nl = text.find("\n", pos)
    return len(text) if nl < 0 else nl + 1


def line_indent_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    return indent(text[start:pos])


# -- /etc/fstab ----------------------------------------------------------------------------------
def fstab_fields(line: str) -> list[tuple[int, int]]:
    """The [start, end) of each blank-separated field of an fstab line."""
    return [m.span() for m in re.finditer(r"[^ \t]+", line)]


def unescape_fstab(field_text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_text)


def fstab_options(text: str, changes: dict[str, str]) -> str:
    """An fstab options field with `changes` made: an option there gets its new value in
    place, a new one goes at the end; the others (`defaults` included) stay as they are."""
    opts = text.split(",")
    todo = dict(changes)
    for i, opt in enumerate(opts):
        key = opt.partition("=")[0]
        if key in todo:
            value = todo.pop(key)
            opts[i] = f"{key}={value}" if value else key
    opts += [f"{k}={v}" if v else k for k, v in todo.items()]
    return ",".join(opts)


__all__ = ["LF_EOL", "Lines", "PHP_EOL", "Statement", "app_setting", "env_setting", "fstab_fields",
           "fstab_options", "ini_comment", "ini_setting", "ini_value", "line_end_after", "line_indent_at",
           "nginx_statements", "pool_setting", "section_bounds", "set_line", "unescape_fstab",
           "yaml_setting"]

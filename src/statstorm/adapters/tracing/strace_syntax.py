"""strace's output syntax, line by line: the line prefixes (`-f` PIDs, `-t`/`-tt`/`-ttt`/`-r`
times), a call's argument list (quoted strings with C escapes, `-y` fd decorations, flags),
its result (errno names, `-T` latency) and the `<unfinished ...>`/`<... resumed>` halves.
"""

from __future__ import annotations

import errno
import re

from statstorm.results.trace.vocabulary import AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW, decode_path

AT_FDCWD = -100
_AT_FLAGS = {b"AT_SYMLINK_NOFOLLOW": AT_SYMLINK_NOFOLLOW, b"AT_EMPTY_PATH": AT_EMPTY_PATH,
             b"AT_REMOVEDIR": 0x200, b"AT_SYMLINK_FOLLOW": 0x400, b"AT_NO_AUTOMOUNT": 0x800}
# Kernel-internal errno values strace prints by name; the errno module does not know them.
_KERNEL_ERRNO = {"ERESTARTSYS": 512, "ERESTARTNOINTR": 513, "ERESTARTNOHAND": 514,
                 "ENOIOCTLCMD": 515, "ERESTART_RESTARTBLOCK": 516}
PREFIX = re.compile(rb"""\s*
    (?:\[pid\s+(?P<bpid>\d{1,10})\]\s+ | (?P<pid>\d{1,10})\s+)?
    (?:(?P<clock>\d\d:\d\d:\d\d(?:\.\d+)?)\s+ | (?P<num>\d{1,12}\.\d+)\s+)?""", re.X)
CALL = re.compile(rb"([a-z_][a-z0-9_]*)\(")
RESUMED = re.compile(rb"<\.\.\. ([a-z_][a-z0-9_]*) resumed>")
ATTACHED = re.compile(rb"strace: Process (\d{1,10}) attached")
UNFINISHED = b"<unfinished ...>"
LATENCY = re.compile(rb"\s<(\d{1,9})\.(\d+)>\s*$")
RESULT = re.compile(rb"\s*=\s*(0x[0-9a-fA-F]+|-?\d+|\?)(?:<((?:[^>\\]|\\.)*)>)?"
                     rb"(?:\s+(E[A-Z0-9_]+))?")
DECORATED = re.compile(rb"(?:\d|AT_FDCWD)<")
_FD_ARG = re.compile(rb"(AT_FDCWD|-?\d{1,10})(?:<(.*)>)?$", re.S)
_ESCAPES = {ord("n"): 10, ord("t"): 9, ord("r"): 13, ord("v"): 11, ord("f"): 12, ord("a"): 7,
            ord("b"): 8, ord("e"): 27}


_INT64 = 1 << 63


def number(raw: bytes) -> int | None:
    """A result as strace prints it (`-1`, `3`, `0x7f00`); None when no 64-bit register holds
    it (a corrupt line: 5,000 digits, a leading zero)."""
    if raw.startswith(b"0x"):
        value = int(raw, 16) if len(raw) <= 18 else _INT64
    elif re.fullmatch(rb"-?(?:0|[1-9]\d{0,18})", raw):
        value = int(raw)
    else:
        return None
    return value if -_INT64 <= value < _INT64 else None


def unescape(s: bytes) -> bytes:
    """Undo strace's C escapes: \\" \\\\ \\n \\t \\NNN (octal) \\xHH."""
    if b"\\" not in s:
        return s
    out = bytearray()
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c != 0x5C or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        d = s[i + 1]
        if 0x30 <= d <= 0x37:
            k = i + 1
            while k < n and k < i + 4 and 0x30 <= s[k] <= 0x37:
                k += 1
            out.append(int(s[i + 1:k], 8) & 0xFF)
            i = k
        elif d == 0x78 and re.fullmatch(rb"[0-9a-fA-F]{2}", s[i + 2:i + 4]):
            out.append(int(s[i + 2:i + 4], 16))
            i += 4
        else:
            out.append(_ESCAPES.get(d, d))
            i += 2
    return bytes(out)


def quoted(arg: bytes) -> bytes | None:
    """The bytes of a quoted argument (a trailing `...` marks truncation), or None."""
    if not arg.startswith(b'"'):
        return None
    i, n = 1, len(arg)
    while i < n and arg[i] != 0x22:
        i += 2 if arg[i] == 0x5C else 1
    return unescape(arg[1:i])


def split_args(s: bytes) -> tuple[list[bytes], int]:
    """Split the text after `name(` into top-level arguments; also return the index after the
    closing parenthesis (-1 if there is none). Strings, brackets, `/* */` comments and `-y`
    decorations (`3</path>`, `4<TCP:[a->b]>`) may hold commas and parentheses."""
    args: list[bytes] = []
    depth, start, i, n = 0, 0, 0, len(s)
    while i < n:
        c = s[i]
        if c == 0x22:  # "
            i += 1
            while i < n and s[i] != 0x22:
                i += 2 if s[i] == 0x5C else 1
        elif c == 0x3C and i > start and s[i - 1] not in b" ,([{":  # a -y decoration
            bracket = 0
            i += 1
            while i < n:
                d = s[i]
                if d == 0x5C:
                    i += 1
                elif d == 0x5B:
                    bracket += 1
                elif d == 0x5D:
                    bracket -= 1
                elif d == 0x3E and bracket <= 0:
                    break
                i += 1
        elif c == 0x2F and s[i + 1:i + 2] == b"*":
            end = s.find(b"*/", i + 2)
            i = n if end < 0 else end + 1
        elif c in b"([{":
            depth += 1
        elif c in b")]}":
            if depth == 0 and c == 0x29:
                args.append(s[start:i].strip())
                return args, i + 1
            depth -= 1
        elif c == 0x2C and depth == 0:
            args.append(s[start:i].strip())
            start = i + 1
        i += 1
    args.append(s[start:].strip())
    return args, -1


def fd_arg(arg: bytes) -> tuple[int | None, str | None]:
    """An fd argument: its number (AT_FDCWD = -100) and its `-y` path decoration, if any."""
    m = _FD_ARG.match(arg)
    if not m:
        return None, None
    num = AT_FDCWD if m.group(1) == b"AT_FDCWD" else int(m.group(1))
    deco = m.group(2)
    if deco is None or not deco.startswith(b"/"):
        return num, None
    return num, decode_path(unescape(deco))


def at_flags(arg: bytes) -> int:
    value = 0
    for part in arg.split(b"|"):
        part = part.strip()
        if part in _AT_FLAGS:
            value |= _AT_FLAGS[part]
        else:
            try:
                value |= int(part, 0)
            except ValueError:
                pass
    return value


def errno_value(name: str) -> int:
    return int(getattr(errno, name, 0) or _KERNEL_ERRNO.get(name, 1))


def join_path(base: str | None, path: str) -> str:
    if not path or path.startswith("/") or not base:
        return path
    return base.rstrip("/") + "/" + path


def frac_ns(frac: bytes) -> int:
    return int((frac + b"000000000")[:9]) if frac else 0

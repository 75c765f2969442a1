"""afsd.fuse's FUSE timeouts: how long the kernel keeps what the AFS cache manager told it.
Pure.

afsd.fuse (OpenAFS 1.8.9, src/afsd/afsd_fuse.c) is a libfuse 2 high-level file system: its
`fuse_main` gets `-ouse_ino,fsname=AFS`, `-oallow_other` as root, and every word afsd's own
parser does not take. So libfuse's high-level options reach it: `attr_timeout` and
`entry_timeout` (1 s by default) and `negative_timeout` (0 by default). Each FUSE request
costs more than a kernel AFS client's call: libfuse turns the inode into a path, and
afsd.fuse's getattr (`uafs_lstat` of `/afs/<path>`) walks that path again inside the cache
manager under its global lock. Within the timeouts the kernel answers a stat and a path
lookup itself; a name PHP probes and does not find (an include_path or autoloader probe) is
asked again every time while `negative_timeout` is 0.

Measured on the synthetic lab (docs/lab-afs-notes.md): ~34 FUSE requests per page view with
the defaults, nearly all lookups of names that do not exist; `negative_timeout=60` alone took
them to 0 and throughput 3x, `attr_timeout`/`entry_timeout` 60 alone changed nothing. So the
one asked (`WANTED`) is the negative timeout. What it trades: the cache manager is coherent (a
file server's callback break drops its entry at once), the kernel's copy is not: a file
created where PHP looked for it and found nothing can stay unseen for up to that many seconds
(a deploy's new class file: "class not found" meanwhile). statstorm writes the options as
mount options with `-` (`negative-timeout=60`) and hands them to afsd.fuse as one word,
`-onegative_timeout=60`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from statstorm.model.storage_kinds import AFS_FUSE_TIMEOUT_KEYS as TIMEOUT_KEYS

ATTR, ENTRY, NEGATIVE = TIMEOUT_KEYS
DEFAULTS = {ATTR: "1", ENTRY: "1", NEGATIVE: "0"}  # libfuse 2.9's high-level defaults
WANTED_S = 60  # what the finding asks: a deploy's new files seen within a minute
WANTED = (NEGATIVE,)  # the timeouts the finding asks for (the others measured no gain)
_FUSE_NAME = {k: k.replace("-", "_") for k in TIMEOUT_KEYS}
_BY_FUSE_NAME = {v: k for k, v in _FUSE_NAME.items()}


def _o_words(argv: Sequence[str]) -> list[str]:
    """The FUSE option lists of a command line: `-oa,b` and `-o a,b` (libfuse takes both)."""
    out = []
    args = list(argv)
    for i, a in enumerate(args):
        if a == "-o" and i + 1 < len(args):
            out.append(args[i + 1])
        elif a.startswith("-o") and len(a) > 2:
            out.append(a[2:])
    return out


def timeouts(argv: Sequence[str]) -> dict[str, str]:
    """The FUSE timeouts a command line gives (mount-option names), the last one winning."""
    out: dict[str, str] = {}
    for word in _o_words(argv):
        for opt in word.split(","):
            name, _, value = opt.partition("=")
            if name in _BY_FUSE_NAME and value:
                out[_BY_FUSE_NAME[name]] = value
    return out


def effective(argv: Sequence[str]) -> dict[str, str]:
    """The FUSE timeouts the client runs with: the ones given, else libfuse's defaults."""
    return {**DEFAULTS, **timeouts(argv)}


def seconds(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return 0.0


def short(options: Mapping[str, str], want: float = WANTED_S) -> dict[str, str]:
    """The timeouts asked for (`WANTED`) below `want` seconds, each with the value asked
    ({}: none)."""
    now = {**DEFAULTS, **{k: v for k, v in options.items() if k in TIMEOUT_KEYS}}
    return {k: f"{want:g}" for k in WANTED if seconds(now[k]) < want}


def timeout_word(options: Mapping[str, str]) -> tuple[str, ...]:
    """The one afsd.fuse argument that gives these timeouts (() : none given)."""
    given = [f"{_FUSE_NAME[k]}={options[k]}" for k in TIMEOUT_KEYS if options.get(k, "")]
    return (f"-o{','.join(given)}",) if given else ()


def is_timeout_word(word: str) -> bool:
    """`word` is an option list of FUSE timeouts only (what `timeout_word` makes)."""
    if not word.startswith("-o") or len(word) < 3:
        return False
    return all(o.partition("=")[0] in _BY_FUSE_NAME for o in word[2:].split(","))


def with_timeouts(args: Sequence[str], options: Mapping[str, str]) -> tuple[str, ...]:
    """afsd.fuse's extra arguments with these timeouts set: the old timeout word merged with
    `options` (mount-option names) and put last; the other words kept in order."""
    kept = [a for a in args if not is_timeout_word(a)]
    given = {**timeouts([a for a in args if is_timeout_word(a)]),
             **{k: v for k, v in options.items() if k in TIMEOUT_KEYS}}
    return (*kept, *timeout_word(given))


__all__ = ["ATTR", "DEFAULTS", "ENTRY", "NEGATIVE", "TIMEOUT_KEYS", "WANTED", "WANTED_S", "effective",
           "is_timeout_word", "seconds", "short", "timeout_word", "timeouts", "with_timeouts"]

"""A trace's seal: how a trace file records its own completion, and how a reader checks it.

The writer ends every trace with one more line after the trailer, the seal
`["z", lines, sha256]`: how many lines came before it (the header, every record, the
trailer) and the SHA-256 of exactly those bytes (uncompressed). Its header says
`"seal": "sha256"`. A reader hashes what it decodes and compares at the end:

- the seal matches: the trace is whole;
- no seal where the header promises one, or a last line cut short: the trace is truncated
  (`DamagedInput`, naming what the file still holds);
- a seal that does not match: the trace was changed after it was written (`DamagedInput`).
  Lines holding only white space are not records: a trace that matches once they are left
  out is whole;
- a trace written before seals existed (no `seal` in its header): whole if its last record
  is the trailer, else truncated. Readers then say it could not be checked (docs/trace.md).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import zlib
from pathlib import Path
from typing import IO, Any

from statstorm.errors import DamagedInput

TAG = "z"
ALGORITHM = "sha256"
# what a file holds, by record tag, for the message on a truncated or damaged trace
_HOLDS = (("s", "syscalls"), ("r", "requests"), ("o", "PHP operations"),
          ("k", "counted requests"), ("c", "strace -c rows"))


def record(lines: int, digest: str) -> list[Any]:
    return [TAG, lines, digest]


def is_seal(rec: Any) -> bool:
    return type(rec) is list and len(rec) == 3 and rec[0] == TAG


def encode(lines: list[str]) -> bytes:
    """Lines as the bytes the file holds (paths' non-UTF-8 bytes are surrogate escapes)."""
    return "".join(lines).encode("utf-8", "surrogateescape")


class Check:
    """The reader's side: takes every line read, in order, and holds back the last one that
    is not blank (it may be the seal, which its own digest does not cover)."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.lines = 0
        self._held: list[str] = []

    def _hash(self, lines: list[str]) -> None:
        if lines:
            self._sha.update(encode(lines))
            self.lines += len(lines)

    def take(self, lines: list[str]) -> None:
        k = len(lines) - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        if k < 0:
            self._held.extend(lines)
            return
        self._hash(self._held)
        self._hash(lines[:k])
        self._held = lines[k:]

    def matches(self, seal: list[Any]) -> bool:
        """Whether the lines before the seal (the last line taken) are the ones it names."""
        return bool(seal[1] == self.lines and seal[2] == self._sha.hexdigest())


def matches_without_blank_lines(fh: IO[str], seal: list[Any]) -> bool:
    """The slow second look, after a mismatch: the digest of the lines that are not blank
    (a trace someone added empty lines to holds the same records)."""
    sha = hashlib.sha256()
    n = 0
    prev: str | None = None
    for line in fh:
        if not line.strip():
            continue
        if prev is not None:
            sha.update(prev.encode("utf-8", "surrogateescape"))
            n += 1
        prev = line
    return bool(seal[1] == n and seal[2] == sha.hexdigest())


def check_end(path: Path, header: dict[str, Any], last: Any, check: Check, cut: bool,
              reopen: Any) -> bool:
    """After the last line: whether the trace is sealed (True), an older unsealed but whole
    trace (False), or else raise DamagedInput. `last`: the last record decoded; `cut`: the
    last line had no newline and did not decode; `reopen()`: the file again, as text."""
    if cut:
        raise truncated(path, "its last line is cut short")
    if is_seal(last):
        if check.matches(last):
            return True
        with reopen() as fh:
            if matches_without_blank_lines(fh, last):
                return True
        raise damaged(path, "its content does not match the checksum in its last line")
    if header.get("seal") == ALGORITHM:
        raise truncated(path, "it ends without its seal")
    if type(last) is list and len(last) == 2 and last[0] == "e" and type(last[1]) is dict:
        return False
    raise truncated(path, "it ends without its trailer")


def holds(path: Path) -> str:
    """What a damaged trace file still holds, as words ("1,234 syscalls and 10 requests")."""
    counts = dict.fromkeys((t for t, _ in _HOLDS), 0)
    prefixes = {f'["{t}",': t for t in counts}
    try:
        raw = open(path, "rb")
        stream: IO[bytes] = raw
        if raw.peek(2)[:2] == b"\x1f\x8b":
            stream = gzip.GzipFile(fileobj=raw)  # type: ignore[assignment]
        with io.TextIOWrapper(stream, encoding="utf-8", errors="surrogateescape",
                              newline="\n") as fh:
            for line in fh:
                t = prefixes.get(line[:5])
                if t is not None:
                    counts[t] += 1
    except (OSError, EOFError, zlib.error, UnicodeDecodeError):
        pass  # what was read until the damage
    parts = [f"{counts[t]:,} {words}" for t, words in _HOLDS[:2]]
    parts += [f"{counts[t]:,} {words}" for t, words in _HOLDS[2:] if counts[t]]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def truncated(path: Path, why: str) -> DamagedInput:
    return DamagedInput(f"{path}: truncated trace ({why}): cut off before its end (an "
                        f"interrupted write or copy), it holds only {holds(path)}; record or "
                        "import it again")


def damaged(path: Path, why: str) -> DamagedInput:
    return DamagedInput(f"{path}: damaged trace ({why}): changed after it was written; record "
                        "or import it again")

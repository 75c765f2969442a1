"""The executable segment of an ELF binary (what opcache.huge_code_pages moves), read from its
program headers with `struct`."""

from __future__ import annotations

import struct

PT_LOAD = 1
PF_X = 1


def text_segment_bytes(data: bytes) -> int | None:
    """Size in memory of the executable PT_LOAD segment(s); None if not a 64/32-bit ELF."""
    if len(data) < 52 or data[:4] != b"\x7fELF":
        return None
    is64 = data[4] == 2
    end = "<" if data[5] == 1 else ">"
    try:
        if is64:
            phoff, = struct.unpack_from(end + "Q", data, 0x20)
            phentsize, phnum = struct.unpack_from(end + "HH", data, 0x36)
        else:
            phoff, = struct.unpack_from(end + "I", data, 0x1C)
            phentsize, phnum = struct.unpack_from(end + "HH", data, 0x2A)
        total = 0
        for i in range(phnum):
            off = phoff + i * phentsize
            if is64:
                ptype, flags = struct.unpack_from(end + "II", data, off)
                memsz, = struct.unpack_from(end + "Q", data, off + 0x28)
            else:
                ptype, = struct.unpack_from(end + "I", data, off)
                memsz, flags = struct.unpack_from(end + "II", data, off + 0x14)
            if ptype == PT_LOAD and flags & PF_X:
                total += memsz
    except struct.error:
        return None
    return total


def read_text_segment(path: str) -> int | None:
    """The executable segment size of the binary at `path` (reads only its headers)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF":
                return None
            is64 = head[4] == 2
            end = "<" if head[5] == 1 else ">"
            if is64:
                phoff = struct.unpack_from(end + "Q", head, 0x20)[0]
                phentsize, phnum = struct.unpack_from(end + "HH", head, 0x36)
            else:
                phoff = struct.unpack_from(end + "I", head, 0x1C)[0]
                phentsize, phnum = struct.unpack_from(end + "HH", head, 0x2A)
            fh.seek(0)
            data = fh.read(phoff + phentsize * phnum)
    except OSError:
        return None
    return text_segment_bytes(data)


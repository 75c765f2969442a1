"""An ELF binary's headers read with `struct`: its executable segment (what
opcache.huge_code_pages moves) and its GNU build id (what the tracer keys a PHP's layout by)."""

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



PT_NOTE = 4
NT_GNU_BUILD_ID = 3


def build_id(path: str) -> str:
    """The GNU build id of the ELF binary at `path` (its PT_NOTE segments), as hex; '' when
    it has none or cannot be read."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:
                return ""
            end = "<" if head[5] == 1 else ">"
            phoff, = struct.unpack_from(end + "Q", head, 0x20)
            phentsize, phnum = struct.unpack_from(end + "HH", head, 0x36)
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
            for i in range(phnum):
                ptype, = struct.unpack_from(end + "I", table, i * phentsize)
                if ptype != PT_NOTE:
                    continue
                offset, = struct.unpack_from(end + "Q", table, i * phentsize + 0x08)
                size, = struct.unpack_from(end + "Q", table, i * phentsize + 0x20)
                fh.seek(offset)
                notes, pos = fh.read(min(size, 1 << 16)), 0
                while pos + 12 <= len(notes):
                    namesz, descsz, ntype = struct.unpack_from(end + "III", notes, pos)
                    name_at = pos + 12
                    desc_at = name_at + (namesz + 3) // 4 * 4
                    if ntype == NT_GNU_BUILD_ID and notes[name_at:name_at + namesz] == b"GNU\0":
                        return notes[desc_at:desc_at + descsz].hex()
                    pos = desc_at + (descsz + 3) // 4 * 4
    except (OSError, struct.error):
        return ""
    return ""

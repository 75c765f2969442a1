"""ceph-fuse's work per FUSE request, and the two client settings that cut it. Pure.

ceph-fuse (Ceph 16.2, libfuse 2's low-level API) answers every lookup and getattr with 0 s
entry and attribute timeouts (src/client/fuse_ll.cc: the `fuse_entry_param` zeroed,
`fuse_reply_attr(req, &stbuf, 0)`); no option changes that, so every stat and every path
component PHP resolves on the mount is a FUSE request into ceph-fuse, answered from its own
cache while it holds the capabilities. What each request costs besides the answer:

- `fuse_set_user_groups` (true by default): before each lookup, getattr, open, readlink…
  ceph-fuse asks libfuse for the caller's supplementary groups (`fuse_req_getgroups`), which
  opens, reads and parses `/proc/PID/task/TID/status` of the calling process: three more
  system calls and a page of text per request. Off, ceph-fuse checks permissions with the
  caller's uid and primary gid only.
- `debug_client` (`0/5` by default: log level 0, in-memory level 5): Client.cc logs each
  `ll_lookup`, `ll_getattr`, `ll_open` at level 3, so every request formats log lines into
  the in-memory ring that is only written out when the client crashes. `0/0` gathers none.

Neither changes coherence: ceph-fuse still answers from capabilities the MDS revokes on
change, so a deploy is seen at once. The settings are given on ceph-fuse's command line
(`--fuse-set-user-groups=false`), in ceph.conf's `[client]` section, or live through the
client's admin socket (`ceph daemon SOCKET config set fuse_set_user_groups false`); Ceph
takes `-` and `_` alike in option names, statstorm writes them with `-` (mount options).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from statstorm.model.storage_kinds import CEPH_FUSE_PER_CALL_KEYS as PER_CALL_KEYS

SET_GROUPS, DEBUG_CLIENT = PER_CALL_KEYS  # fuse_set_user_groups, debug_client
DEFAULTS = {SET_GROUPS: "true", DEBUG_CLIENT: "0/5"}  # Ceph 16.2's
WANTED = {SET_GROUPS: "false", DEBUG_CLIENT: "0/0"}
_TRUE = frozenset({"true", "1", "yes", "on"})


def option_key(name: str) -> str:
    """A Ceph option's name as statstorm writes it: `fuse_set_user_groups` → `fuse-set-user-
    groups` (Ceph reads `_`, `-` and spaces alike)."""
    return name.strip().replace("_", "-").replace(" ", "-").lower()


def argv_options(argv: Sequence[str]) -> dict[str, str]:
    """The Ceph options a ceph-fuse command line gives (`--name=value` or `--name value`),
    names as `option_key` writes them; FUSE's own (`-o`, `-f`) and the mount point are not."""
    out: dict[str, str] = {}
    args = list(argv[1:])
    for i, a in enumerate(args):
        if not a.startswith("--") or len(a) < 3:
            continue
        name, eq, value = a[2:].partition("=")
        if eq:
            out[option_key(name)] = value
        elif option_key(name) in DEFAULTS and i + 1 < len(args):
            out[option_key(name)] = args[i + 1]
    return out


def cache_options(argv: Sequence[str], table_keys: Sequence[str] = ()) -> dict[str, str]:
    """A ceph-fuse mount's cache options from its client's command line: the options given
    (those among `table_keys`, the storage table's, under its name: `client_cache_size`),
    and the per-call settings it runs with, Ceph's defaults for the ones not given."""
    given = argv_options(argv)
    named = {}
    for k, v in given.items():
        under = k.replace("-", "_")
        named[under if under in table_keys else k] = v
    return {**named, **settings(given)}


def settings(options: Mapping[str, str]) -> dict[str, str]:
    """The per-call settings a client runs with: the ones given, else Ceph's defaults."""
    return {k: options.get(k, DEFAULTS[k]) for k in PER_CALL_KEYS}


def is_on(value: str) -> bool:
    return value.strip().lower() in _TRUE


def debug_levels(value: str) -> tuple[int, int]:
    """`debug_client`'s (log, memory) levels: `0/5` → (0, 5); one number sets both."""
    log, _, mem = value.partition("/")
    try:
        lv = int(log.strip())
        return lv, int(mem.strip()) if mem.strip() else lv
    except ValueError:
        return 0, 5


def changes(options: Mapping[str, str]) -> dict[str, str]:
    """The per-call settings to change ({} : none left): group lookups on → off, any client
    log gathered at a level above 0 → `0/0`."""
    now = settings(options)
    out = {}
    if is_on(now[SET_GROUPS]):
        out[SET_GROUPS] = WANTED[SET_GROUPS]
    if max(debug_levels(now[DEBUG_CLIENT])) > 0:
        out[DEBUG_CLIENT] = WANTED[DEBUG_CLIENT]
    return out


def conf_lines(options: Mapping[str, str]) -> list[str]:
    """ceph.conf `[client]` lines for these settings (names with `_`, as Ceph documents)."""
    return [f"{k.replace('-', '_')} = {v}" for k, v in options.items()]


__all__ = ["DEBUG_CLIENT", "DEFAULTS", "PER_CALL_KEYS", "SET_GROUPS", "WANTED", "argv_options",
           "cache_options", "changes", "conf_lines", "debug_levels", "is_on", "option_key", "settings"]

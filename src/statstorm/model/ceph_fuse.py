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

What a client runs with is what its admin socket answers (`config show`: the command line over
ceph.conf over the cluster's configuration database, a live `config set` over all three);
its command line alone misses the other two. The adapter (adapters/storage/ceph_admin.py)
reads the socket and falls back on the command line when none answers, and says which under
`SOURCE` among the options; the rules say it in their evidence.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from statstorm.model.storage_kinds import CEPH_FUSE_PER_CALL_KEYS as PER_CALL_KEYS

SET_GROUPS, DEBUG_CLIENT = PER_CALL_KEYS  # fuse_set_user_groups, debug_client
DEFAULTS = {SET_GROUPS: "true", DEBUG_CLIENT: "0/5"}  # Ceph 16.2's
WANTED = {SET_GROUPS: "false", DEBUG_CLIENT: "0/0"}
_TRUE = frozenset({"true", "1", "yes", "on"})
# not a Ceph option: where the settings beside it were read (`FROM_SOCKET` and its path, or
# `FROM_ARGV` and why no socket answered), as the adapter wrote it
SOURCE = "settings-from"
FROM_SOCKET, FROM_ARGV = "admin socket", "command line"


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


def running_options(config: Mapping[str, str], table_keys: Sequence[str] = ()) -> dict[str, str]:
    """A running client's options from what its admin socket answered (`config show` or
    `config get`: names with `_`): those among `table_keys` under their name, and the per-call
    settings as `option_key` writes them (Ceph's defaults for any it did not name)."""
    out = {k: str(config[k]) for k in table_keys if k in config}
    given = {k: str(config[k.replace("-", "_")]) for k in PER_CALL_KEYS
             if k.replace("-", "_") in config}
    return {**out, **settings(given)}


def from_socket(options: Mapping[str, str]) -> str:
    """The admin socket the options were read from; '' when they came from the command line
    (or nobody said)."""
    src = options.get(SOURCE, "")
    return src[len(FROM_SOCKET):].strip() if src.startswith(FROM_SOCKET) else ""


def source_line(options: Mapping[str, str]) -> str:
    """Where the settings were read, for a finding's evidence."""
    asok = from_socket(options)
    if asok:
        return (f"these are the settings ceph-fuse runs with, read from its admin socket {asok} "
                "(`config show`): whichever of its command line, ceph.conf and the cluster's "
                "configuration database set them")
    why = options.get(SOURCE, "").removeprefix(FROM_ARGV).strip(" :")
    return ("these settings are read from ceph-fuse's command line"
            + (f" ({why})" if why else "") + ": one made in ceph.conf or the cluster's "
            "configuration database is not seen there")


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


def same(key: str, a: str, b: str) -> bool:
    """Two values of a per-call setting mean the same (`0`/`false`, `0`/`0/0`)."""
    if key == SET_GROUPS:
        return is_on(a) == is_on(b)
    if key == DEBUG_CLIENT:
        return debug_levels(a) == debug_levels(b)
    return a.strip() == b.strip()


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


__all__ = ["DEBUG_CLIENT", "DEFAULTS", "FROM_ARGV", "FROM_SOCKET", "PER_CALL_KEYS", "SET_GROUPS",
           "SOURCE", "WANTED", "argv_options", "cache_options", "changes", "conf_lines",
           "debug_levels", "from_socket", "is_on", "option_key", "running_options", "same", "settings",
           "source_line"]

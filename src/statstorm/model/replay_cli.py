"""A traced command's request (`statstorm trace --cmd 'php …'`): the whole run is one
request. Its start goes before each process's first event; OPcache's own calls in a CLI run
(the open of its lock file, one more fstat of the primary script) go to the PHP processes;
a relative primary script makes OPcache fetch the cwd for its key (not with revalidate_path,
which makes no key by the name as written), a call the engine makes itself, so the recorded
one goes.
"""

from __future__ import annotations

import operator
import posixpath
import re
from typing import Any

from statstorm.model.engine_events import E_OPC_CLI, E_PASS, E_REALPATH, E_REQ
from statstorm.model.realpath_cache import FILEPATH

_TIME = operator.itemgetter(0)


def cli_request(timeline: dict[int, list[tuple[int, Any]]], argv: list[str], opcache: bool,
                opc_skip: set[tuple[int, int, str]], opc_sem: str, opc_script: str
                ) -> dict[int, int]:
    """Add the request's start (and OPcache's calls) to each process's events; returns each
    process's first event time. `opcache`: the trace was recorded with OPcache on and
    making keys by the names as written (revalidate_path off);
    `opc_skip`, `opc_sem`, `opc_script`: model.replay_ops.cli_opcache_calls."""
    first_request: dict[int, int] = {}
    primary = script_arg(argv)
    rel = "relative" if primary and not primary.startswith("/") else ""
    if rel and opcache:
        # a getcwd right after the script's own path resolution, in no operation
        for tl in timeline.values():
            tl.sort(key=_TIME)
            seen_expand = False
            for i, (_, ev) in enumerate(tl):
                if ev[0] == E_REALPATH and ev[4] == FILEPATH:
                    seen_expand = True
                elif seen_expand and ev[0] == E_PASS and ev[2] == "getcwd":
                    del tl[i]
                    break
                elif seen_expand and ev[0] != E_PASS:
                    break
    script = opc_script or primary
    # OPcache's own calls go to the PHP processes (a wrapping shell makes none): those
    # whose lock-file open was recorded, else those with PHP operations
    php_pids = {pid for _, pid, _ in opc_skip} or {
        pid for pid, tl in timeline.items() if any(x[1][0] != E_PASS for x in tl)}
    for pid, tl in timeline.items():
        t0 = min(x[0] for x in tl) if tl else 0
        tl.append((t0 - 1, (E_REQ, 0, rel)))
        if pid in php_pids:
            tl.append((t0 - 1, (E_OPC_CLI, 0, opc_sem or "/tmp/.ZendSem", script)))
        first_request[pid] = t0
    return first_request


_PHP = re.compile(r"php(?:-cgi)?\d*(?:\.\d+)?")


def php_binary(argv: list[str]) -> str:
    """The name of a command line's PHP binary (its basename): the first word that names
    one, so a wrapped run (`chroot ROOT env -C DIR /usr/bin/php7.4 …`, a PHP root's) is
    taken by its PHP, not its wrapper; else the command's own name. PHP searches for it at
    start-up (PHP_BINARY), before its realpath cache is on."""
    names = [posixpath.basename(a) for a in argv]
    return next((n for n in names if _PHP.fullmatch(n)), names[0] if names else "")


def script_arg(argv: list[str]) -> str:
    """The script of a `php [options] script.php` command line ('' if none); a wrapped one
    (`chroot ROOT env -C DIR /usr/bin/php8.4 …`: a PHP root's) from its PHP binary on."""
    start = next((i for i, a in enumerate(argv) if _PHP.fullmatch(posixpath.basename(a))), 0)
    argv = argv[start:]
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("-d", "-c", "-z"):
            i += 2
            continue
        if a == "--":
            return argv[i + 1] if i + 1 < len(argv) else ""
        if not a.startswith("-"):
            return a
        i += 1
    return ""

"""The OpenAFS client's stat cache on a real cell (root, slow): the file server's RPC counts per
page view, the stat-cache finding on a client restarted with a tiny stat cache and not on the
autotuned one, and the client's restart with a bigger one undone again.

The case runs in tests/test_lab_afs.py (test_stat_cache_finding_rpcs_apply_and_undo), on the
synthetic AFS lab that file's tests share: one OpenAFS cell per machine, ~40 s to make."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from statstorm.adapters.storage import afs_check, afs_client, afs_stats, openafs
from statstorm.env import Env
from statstorm.model import rules_afs
from statstorm.results.check import Finding

TINY = "50"  # far fewer entries than the ~130 files and directories a page view touches


def views_for(url: str, seconds: float) -> int:
    """Page views, one after the other, for `seconds` (long enough for OPcache's timestamp
    checks, every 2 s, to reach the files' status)."""
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with urllib.request.urlopen(url, timeout=30) as resp:
            assert resp.status == 200
            resp.read()
        n += 1
    return n


def rpcs_per_view(env: Env, server: str, url: str, seconds: float = 5.0) -> float:
    views_for(url, 1.0)  # warm: PHP's and the client's caches
    before = afs_stats.snapshot(env, server)
    n = views_for(url, seconds)
    calls = afs_stats.delta(before, afs_stats.snapshot(env, server))
    return afs_stats.round_trips(calls) / n


def stat_findings(code: str, pool: str = "") -> list[Finding]:
    """The stat-cache rule's findings only (the FUSE timeouts' are tests/test_afs_fuse.py's)."""
    return [f for f in afs_check.findings(code, pool=pool) if f.id == rules_afs.RULE_ID]


def stat_cache_case(state: dict[str, object]) -> None:
    """On a running synthetic AFS lab (2 workers, the client's stat cache autotuned): the
    finding and the RPCs per view with a tiny stat cache, the fix and its undo; the client is
    left as it was (autotuned)."""
    env = Env()
    mp, code = str(state["mount_point"]), str(state["code_path"])
    url = f"{state['url']}{state['entry_path']}"
    cell = openafs.Cell(Path(mp).parent)
    fact = afs_check.mount_fact(code)
    assert fact is not None and (fact.fstype, fact.kind) == ("fuse.afs", "openafs")
    assert fact.cache_options["stat"] == "3000" and "stat" in fact.cache_options["autotuned"]
    server = afs_client.servers_of(mp)[0]

    # the autotuned stat cache holds the app: no finding, warm views cost no status fetch
    assert stat_findings(code) == []
    default_rpcs = rpcs_per_view(env, server, url)

    step = afs_client.apply(env, cell, {"stat": TINY})
    try:
        assert afs_client.mount_cache_options(mp)["stat"] == TINY
        found = stat_findings(code, pool="www")
        assert [f.id for f in found] == ["openafs-stat-cache"]
        want = found[0].change[1]
        assert want.startswith("stat=") and int(want.split("=")[1]) > int(TINY)
        tiny_rpcs = rpcs_per_view(env, server, url)
        assert tiny_rpcs > 0  # every view fetches status again
        assert tiny_rpcs > default_rpcs

        # apply the finding: the client restarted with the stat cache it asks for
        fixed = afs_client.apply(env, cell, {"stat": want.split("=")[1]})
        assert stat_findings(code) == []
        assert rpcs_per_view(env, server, url) < tiny_rpcs
        # rollback: the tiny stat cache (and the finding) again, the site still served
        afs_client.undo(env, cell, fixed)
        assert afs_client.mount_cache_options(mp)["stat"] == TINY
        assert [f.id for f in stat_findings(code)] == ["openafs-stat-cache"]
        assert views_for(url, 0.5) > 0
    finally:
        afs_client.undo(env, cell, step)
    assert afs_client.mount_cache_options(mp)["stat"] == "3000"

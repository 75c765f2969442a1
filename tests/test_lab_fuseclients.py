"""The FUSE clients' own settings on real labs (root, slow): check finds ceph-fuse's
per-request work and afsd.fuse's short FUSE timeouts on a synthetic lab of each, apply
restarts the running client with the settings it asks for (the page still answers 200), and
--rollback restarts it with what it had. The rules without a lab: tests/test_ceph_fuse.py,
tests/test_afs_fuse.py."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Callable

import pytest

from conftest import run_cli
from statstorm.adapters.storage import afs_client, ceph_client
from statstorm.env import Env
from statstorm.model import afs_fuse, ceph_fuse, rules_afs, rules_ceph

pytestmark = [pytest.mark.root, pytest.mark.beside, pytest.mark.slow]
needs_ceph = pytest.mark.skipif(not Path("/usr/bin/ceph-fuse").exists(),
                                reason="Ceph is not installed: run scripts/setup.sh --ceph")
needs_afs = pytest.mark.skipif(not Path("/usr/sbin/afsd.fuse").exists(),
                               reason="OpenAFS is not installed: run scripts/setup.sh --afs")


def page(state: dict[str, object]) -> int:
    with urllib.request.urlopen(f"{state['url']}/index.php?format=json", timeout=60) as resp:
        assert json.loads(resp.read())["classes"] == 100
        return int(resp.status)


def check_ids(name: str, home: Path) -> list[str]:
    out = run_cli(["check", "--lab", name, "--json"], home).stdout
    return [f["id"] for f in json.loads(out)["findings"]]


def apply_and_undo(state: dict[str, object], home: Path, rule: str,
                   options: Callable[[], dict[str, str]], want: dict[str, str],
                   gone_after: bool = False) -> None:
    """check names `rule`; apply restarts the client with `want` (read back from the running
    client by `options`), the page answers (`gone_after`: and check no longer names `rule`);
    --rollback brings back what it had."""
    name = str(state["name"])
    before = options()
    assert rule in check_ids(name, home)
    run_cli(["apply", "--lab", name, "--yes", rule], home, check=True)
    assert {k: options()[k] for k in want} == want
    assert page(state) == 200
    if gone_after:
        assert rule not in check_ids(name, home)
    run_cli(["apply", "--lab", name, "--rollback", "--yes"], home, check=True)
    assert options() == before
    assert page(state) == 200


@needs_ceph
def test_ceph_fuse_restarted_without_its_per_request_work(lab, state_home: Path) -> None:
    state = lab("--app", "synthetic", "--storage", "cephfs", "--workers", "2")
    mp = str(state["mount_point"])
    assert ceph_client.lab_cluster(mp) is not None
    options = ceph_client.mount_cache_options(mp)  # from its admin socket
    assert {k: options[k] for k in ceph_fuse.DEFAULTS} == ceph_fuse.DEFAULTS
    assert ceph_fuse.from_socket(options) == str(ceph_client.lab_cluster(mp).client_asok)
    apply_and_undo(state, state_home, rules_ceph.PER_CALL_ID,
                   lambda: ceph_client.mount_cache_options(mp), ceph_fuse.WANTED,
                   gone_after=True)


@needs_ceph
def test_ceph_fuse_settings_made_in_ceph_conf_are_seen(lab, state_home: Path) -> None:
    """The settings in the lab's ceph.conf ([client]) and ceph-fuse restarted on the same
    command line: its admin socket shows them, and check no longer asks for them."""
    state = lab("--app", "synthetic", "--storage", "cephfs", "--workers", "2")
    mp, name = str(state["mount_point"]), str(state["name"])
    cluster = ceph_client.lab_cluster(mp)
    assert cluster is not None and rules_ceph.PER_CALL_ID in check_ids(name, state_home)
    text = cluster.conf.read_text()
    assert text.rstrip().rsplit("\n[", 1)[1].startswith("client]")  # the last section
    cluster.conf.write_text(text + "".join(f"{line}\n" for line in
                                           ceph_fuse.conf_lines(ceph_fuse.WANTED)))
    ceph_client.restart(Env(), cluster, {})
    client = ceph_client.client_of(mp)
    assert client is not None and ceph_fuse.argv_options(client[1]) == {}
    options = ceph_client.mount_cache_options(mp)
    assert {k: options[k] for k in ceph_fuse.WANTED} == ceph_fuse.WANTED
    assert ceph_fuse.from_socket(options) == str(cluster.client_asok)
    assert rules_ceph.PER_CALL_ID not in check_ids(name, state_home)
    assert page(state) == 200


@needs_afs
def test_afsd_fuse_restarted_with_longer_fuse_timeouts(lab, state_home: Path) -> None:
    state = lab("--app", "synthetic", "--storage", "afs", "--workers", "2")
    mp = str(state["mount_point"])
    assert {k: afs_client.mount_cache_options(mp)[k] for k in afs_fuse.TIMEOUT_KEYS} == \
        afs_fuse.DEFAULTS
    want = {k: str(afs_fuse.WANTED_S) for k in afs_fuse.WANTED}
    apply_and_undo(state, state_home, rules_afs.TIMEOUTS_ID,
                   lambda: afs_client.mount_cache_options(mp), want)
    # the restarted client kept its cache sizes
    assert afs_client.mount_cache_options(mp)["stat"] == "3000"

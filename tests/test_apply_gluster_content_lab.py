"""`statstorm apply glusterfs-content-caching` on a real GlusterFS lab: the volume's quick-read
options before, after and after --rollback, the FUSE mount and its options untouched, and
`apply --all` leaving the measure-first change out. Root."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli, unique_name

from statstorm.adapters.storage import fstab, gluster, mounts
from statstorm.env import Env
from statstorm.model.rules_gluster import RULE_ID

pytestmark = [pytest.mark.root, pytest.mark.beside]

MD_TIER = "attribute-timeout=600,entry-timeout=600,negative-timeout=600"


def apply(home: Path, *args: str) -> dict[str, Any]:
    p = run_cli(["apply", *args, "--json"], home)
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout))


def findings(home: Path, name: str) -> dict[str, dict[str, Any]]:
    p = run_cli(["check", "--lab", name, "--json"], home)
    assert p.returncode in (0, 1), p.stderr
    return {f["id"]: f for f in json.loads(p.stdout)["findings"]}


def quick_read(env: Env, volume: str) -> tuple[str, str]:
    opts = gluster.volume_options(env, volume)
    return (opts["performance.qr-cache-timeout"].split()[0],
            opts["performance.quick-read-cache-invalidation"].split()[0])


def test_content_caching_applied_live_and_rolled_back(lab, state_home: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    name = unique_name("glc")
    mnt = state_home / "labs" / name / "mnt"
    copy = tmp_path / "fstab"
    copy.write_text("")
    monkeypatch.setenv(fstab.ENV_VAR, str(copy))
    st = lab("--app", "synthetic", "--storage", "glusterfs", "--workers", "1",
             "--mount-opt", MD_TIER, name=name)
    env, volume = Env(), str(st["volume"])
    gluster.set_volume_option(env, volume, "performance.md-cache-timeout", "600")
    gluster.set_volume_option(env, volume, "performance.nl-cache", "on")
    found = findings(state_home, name)
    assert "glusterfs-mount-caching" not in found and RULE_ID in found
    assert "fopen-keep-cache" in found[RULE_ID]["change"][-1]  # offered as a comment
    client = mounts.fuse_client(str(mnt), "glusterfs")
    assert client is not None and gluster.mount_depth(mnt) == 1
    assert not any(a.startswith("--fopen-keep-cache") for a in client[1])
    assert quick_read(env, volume) == ("1", "false")

    dry = apply(state_home, "--lab", name, "--all")  # a measure-first change: not in --all
    assert not [c for c in dry["changes"] if c["finding"] == RULE_ID]
    assert any(RULE_ID in n for n in dry["notes"])

    r = apply(state_home, "--lab", name, RULE_ID, "--yes")
    assert r["mode"] == "applied", r
    assert quick_read(env, volume) == ("600", "on")
    assert [s["kind"] for s in r["storage"]] == ["volume"]
    assert gluster.mount_depth(mnt) == 1 and mounts.fuse_client(str(mnt), "glusterfs") == client
    assert copy.read_text() == ""  # no mount option changed: fstab stays
    assert RULE_ID not in findings(state_home, name)

    rb = apply(state_home, "--lab", name, "--rollback")
    assert rb["mode"] == "rolled-back"
    assert gluster.mount_depth(mnt) == 1 and mounts.fuse_client(str(mnt), "glusterfs") == client
    assert quick_read(env, volume)[0] == "1"
    assert quick_read(env, volume)[1] in ("false", "off")
    assert copy.read_text() == ""
    assert RULE_ID in findings(state_home, name)

"""Golden fixtures for mount detection and option parsing (NFS, GlusterFS FUSE, sshfs, local;
CephFS and OpenAFS: classified by model/storage_kinds.py, their caching not modelled).

Each tests/fixtures/mounts/<case>.txt holds sections: `# mounts` (a /proc/self/mounts line),
optionally `# cmdline` (the FUSE client's argv) and `# volume` (`gluster volume get` rows), or
`# mountstats` (/proc/self/mountstats). <case>.json is the expected parse. Set
STATSTORM_REGEN=1 to rewrite the .json files after a deliberate change, then review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from statstorm.adapters.storage import mounts, nfs_mountstats
from statstorm.model import mount_options
from statstorm.model.storage_kinds import TABLE

FIXTURES = Path(__file__).parent / "fixtures" / "mounts"
CASES = sorted(p.stem for p in FIXTURES.glob("*.txt"))


def sections(text: str) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    cur = ""
    for line in text.splitlines():
        if line.startswith("# ") and line[2:].strip() in ("mounts", "cmdline", "volume", "mountstats"):
            cur = line[2:].strip()
            out[cur] = []
        elif cur:
            out[cur].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def parse_case(case: str) -> Any:
    sec = sections((FIXTURES / f"{case}.txt").read_text())
    if "mountstats" in sec:
        return nfs_mountstats.parse(sec["mountstats"])
    entries = mounts.parse_mounts(sec["mounts"])
    assert len(entries) == 1
    argv = sec["cmdline"].split() if "cmdline" in sec else None
    vol = None
    if "volume" in sec:
        vol = {}
        for line in sec["volume"].splitlines():
            k, _, v = line.partition(" ")
            vol[k] = v
    info = mounts.describe(entries[0].mount_point + "/app", entries[0], client_argv=argv,
                           volume_options=vol)
    return json.loads(json.dumps(info.to_json()))


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    got = parse_case(case)
    expected = FIXTURES / f"{case}.json"
    if os.environ.get("STATSTORM_REGEN"):
        expected.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n")
    assert got == json.loads(expected.read_text())


def test_every_fixture_has_expected_json() -> None:
    assert CASES, "no fixtures"
    for case in CASES:
        assert (FIXTURES / f"{case}.json").exists(), f"{case}.json missing"


def test_nfs_effective_options() -> None:
    eff = mount_options.nfs_cache_options(mount_options.split_options("vers=3,actimeo=600,acregmax=900,nocto"))
    assert eff["acregmin"] == "600" and eff["acregmax"] == "900" and eff["acdirmax"] == "600"
    assert eff["cto"] == "no" and eff["lookupcache"] == "all"
    noac = mount_options.nfs_cache_options(mount_options.split_options("noac,actimeo=30"))
    assert all(noac[k] == "0" for k in ("acregmin", "acregmax", "acdirmin", "acdirmax"))


def test_gluster_defaults_without_client() -> None:
    e = mounts.MountEntry("vm:/v", "/mnt/v", "fuse.glusterfs", "rw")
    info = mounts.describe("/mnt/v", e)
    assert info.cache_options["negative-timeout"] == "0"
    assert any("not found" in n for n in info.notes)


def test_find_mount_longest_prefix() -> None:
    entries = mounts.parse_mounts("/dev/a / ext4 rw 0 0\nvm:/v /mnt/v fuse.glusterfs rw 0 0\n"
                                  "tmpfs /mnt/vx tmpfs rw 0 0\n")
    assert mounts.find_mount(entries, "/mnt/v/app/x.php").mount_point == "/mnt/v"  # type: ignore[union-attr]
    assert mounts.find_mount(entries, "/mnt/vx").fstype == "tmpfs"  # type: ignore[union-attr]
    assert mounts.find_mount(entries, "/srv").fstype == "ext4"  # type: ignore[union-attr]


def test_mountstats_skips_non_nfs() -> None:
    sec = sections((FIXTURES / "nfs_mountstats.txt").read_text())
    parsed = nfs_mountstats.parse(sec["mountstats"])
    assert list(parsed) == ["/var/www/code"]
    assert parsed["/var/www/code"]["GETATTR"] == 300000


def test_live_local_mount() -> None:
    info = mounts.detect(str(Path(__file__).parent))
    assert info.fstype and info.mount_point and info.kind in {s.label for s in TABLE}

"""code-local-mirror on a lab (the demo's escalation ends with it): the copy is made in the
lab's own directory and its nginx root switched to it; check then sees the lab served from
its mirror; `statstorm mirror sync --lab NAME` picks up a file added on the network copy and
reloads the lab's pool; `lab down` removes the mirror with the lab."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import leftovers, run_cli, unique_name

pytestmark = [pytest.mark.root, pytest.mark.beside]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_labs_mirror_is_made_synced_by_name_and_removed_with_the_lab(
        state_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from statstorm.commands import apply as apply_cmd
    from statstorm.env import Env
    monkeypatch.setenv("STATSTORM_HOME", str(state_home))
    name = unique_name("ml")
    lab_dir = state_home / "labs" / name
    try:
        run_cli(["lab", "up", "--name", name, "--app", "synthetic", "--storage", "glusterfs"],
                state_home, check=True)
        state = json.loads((lab_dir / "lab.json").read_text())
        made = apply_cmd.run(Env(state_root=state_home), apply_cmd.ApplyOptions(
            lab=name, findings=("code-local-mirror",), yes=True, local_ratio=0.3))
        assert made.mode == apply_cmd.ApplyMode.APPLIED, made.reason
        (mirror,) = list((lab_dir / "mirror").glob("*/*"))
        assert f"root {mirror}/current" in (lab_dir / "conf/nginx.conf").read_text()
        base = state["url"].rstrip("/")
        assert _status(base + state["entry_path"]) == 200
        chk = json.loads(run_cli(["check", "--lab", name, "--json"], state_home,
                                 check=True).stdout)
        ids = {f["id"] for f in chk["findings"]}
        assert chk["pools"][0]["docroot"].startswith(str(mirror))
        assert not ids & {"code-local-mirror", "mirror-stale", "symlink-deploy-stale"}, ids
        docroot = Path(state["docroot"])  # the network copy
        (docroot / "statstorm-probe.php").write_text("<?php echo 'probe';\n")
        assert _status(base + "/statstorm-probe.php") == 404  # not in the mirror yet
        out = run_cli(["mirror", "sync", "--lab", name, "--json"], state_home, check=True)
        synced = json.loads(out.stdout)
        assert synced["reloaded"] is True and len(synced["synced"]) == 1
        assert _status(base + "/statstorm-probe.php") == 200
        bad = run_cli(["mirror", "sync", "--lab", name, "--pool", "www"], state_home)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    finally:
        run_cli(["lab", "down", "--name", name], state_home)
    assert not lab_dir.exists()
    assert leftovers(str(lab_dir)) == []

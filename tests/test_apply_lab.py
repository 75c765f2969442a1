"""`statstorm apply` on real labs: the issue's bad lab is fixed and the measured metadata calls
per request fall; a change php-fpm -t rejects is rolled back while the pool keeps serving;
a graceful apply under light load fails no request; --rollback restores the files."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli, unique_name

from statstorm.adapters.apply import apply_target, backups, pool_config
from statstorm.adapters.storage import fstab, gluster, mounts
from statstorm.commands import apply as apply_cmd
from statstorm.env import Env
from statstorm.errors import ComponentError, UsageError
from statstorm.model.applyplan import NGINX, POOL, POOL_INI, Change
from statstorm.results.apply import ApplyMode

pytestmark = pytest.mark.root


def apply(home: Path, *args: str, code: int = 0) -> dict[str, Any]:
    p = run_cli(["apply", *args, "--json"], home)
    assert p.returncode == code, p.stderr
    return dict(json.loads(p.stdout)) if code == 0 else {"stderr": p.stderr}


def check_ids(home: Path, name: str) -> set[str]:
    p = run_cli(["check", "--lab", name, "--json"], home)
    assert p.returncode in (0, 1), p.stderr
    return {f["id"] for f in json.loads(p.stdout)["findings"]}


class Load:
    """Light load: one client, a request every 20 ms; counts failures."""

    def __init__(self, url: str) -> None:
        self.url, self.ok, self.failed = url, 0, []  # type: ignore[var-annotated]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._go, daemon=True)

    def _go(self) -> None:
        while not self.stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=30) as resp:
                    resp.read()
                    self.ok += 1
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                self.failed.append(str(exc))
            time.sleep(0.02)

    def __enter__(self) -> "Load":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def execute(env: Env, target: pool_config.Target, opts: apply_cmd.ApplyOptions,
            changes: list[Change]) -> apply_cmd.ApplyResult:
    """Plan and make `changes` (ones no finding would propose) the way `apply --yes` does."""
    placed, edits = apply_target.plan_edits(target, changes)
    return apply_cmd.execute(env, apply_cmd.ApplyResult(ApplyMode.DRY_RUN, target, placed, edits), opts)


def test_bad_glusterfs_lab_is_fixed_and_verified(lab, state_home: Path) -> None:
    """The issue's bad lab: 16K realpath cache, revalidate_freq=0, a long include_path with
    misses, open_basedir, default GlusterFS mount options."""
    name = unique_name("apl")
    mnt = state_home / "labs" / name / "mnt"
    st = lab("--app", "synthetic", "--storage", "glusterfs", "--workers", "2",
             "--include-path-entries", "6", "--php-ini", f"open_basedir={mnt}:/tmp",
             "--php-ini", "realpath_cache_size=16K", "--php-ini", "opcache.revalidate_freq=0",
             name=name)
    before_ids = check_ids(state_home, name)
    fixed = {"open-basedir", "opcache-revalidate", "include-path-misses", "user-ini-lookups",
             "glusterfs-mount-caching"}
    assert fixed <= before_ids
    conf = Path(str(st["state_dir"])) / "conf/php-fpm.conf"
    original = conf.read_text()
    volume = str(st["volume"])
    client = mounts.fuse_client(str(mnt), "glusterfs")
    assert client is not None and gluster.mount_depth(mnt) == 1

    dry = apply(state_home, "--lab", name, "--all")
    assert dry["mode"] == "dry-run" and conf.read_text() == original  # nothing written
    keys = {c["key"]: c for c in dry["changes"]}
    assert keys["open_basedir"]["value"] == "" and keys["open_basedir"]["current"] == f"{mnt}:/tmp"
    assert keys["opcache.revalidate_freq"]["value"] == "60"
    assert keys["include_path"]["value"] == f"{mnt}/app/lib"
    assert "+php_admin_value[open_basedir] =" in dry["files"][0]["diff"]
    steps = {s["kind"]: s for s in dry["storage"]}
    assert steps["mount"]["where"] == str(mnt) and steps["mount"]["after"] == {
        "attribute-timeout": "600", "entry-timeout": "600", "negative-timeout": "600"}
    assert steps["mount"]["before"]["negative-timeout"] == "0"
    assert steps["volume"]["where"] == volume
    assert steps["volume"]["after"]["performance.nl-cache"] == "on"
    assert gluster.mount_depth(mnt) == 1  # a dry run mounts nothing

    # --verify-settle 1: the after is measured a second time (the settling loop always runs
    # once) and no more; whether the runs agree is a count the unit tests check
    r = apply(state_home, "--lab", name, "--all", "--yes", "--verify", "--verify-duration", "2",
              "--verify-settle", "1")
    assert r["mode"] == "applied", r
    v = r["verify"]
    assert v["before"]["requests"] > 0 and v["after"]["requests"] > 0
    # measured again after the change until two runs agree (or the settle time): the first run is kept
    assert v["after"]["runs"] >= 2 and isinstance(v["after"]["settled"], bool)
    assert v["after"]["first"]["syscalls_per_request"] is not None
    assert v["after"]["errors"] == 0 and not v["worse"]
    # open_basedir off: the realpath cache works again, and the lstat walks go
    assert v["after"]["syscalls_per_request"] < 0.5 * v["before"]["syscalls_per_request"]
    assert "php_admin_value[opcache.revalidate_freq] = 60" in conf.read_text()
    backup = Path(r["backup"])
    assert json.loads((backup / "manifest.json").read_text())["status"] == "verified"
    after_ids = check_ids(state_home, name)
    assert not (fixed & after_ids), after_ids
    # the mount: a second client with the new options on top, the old one below
    top = mounts.fuse_client(str(mnt), "glusterfs")
    assert top is not None and top[0] != client[0] and gluster.mount_depth(mnt) == 2
    assert "--negative-timeout=600" in top[1]
    env = Env()
    assert gluster.volume_options(env, volume)["performance.nl-cache"] == "on"

    url = str(st["url"]) + str(st["entry_path"])
    with Load(url) as load:  # undoing the mount switch fails no request either
        rb = apply(state_home, "--lab", name, "--rollback")
    assert load.ok > 0 and not load.failed, load.failed[:3]
    assert rb["mode"] == "rolled-back" and conf.read_text() == original
    assert gluster.mount_depth(mnt) == 1
    assert mounts.fuse_client(str(mnt), "glusterfs") == client
    assert gluster.volume_options(env, volume)["performance.nl-cache"].startswith("off")
    again = check_ids(state_home, name)
    assert {"open-basedir", "glusterfs-mount-caching"} <= again
    apply(state_home, "--lab", name, "--rollback", code=2)  # nothing left to roll back


def test_mount_options_kept_in_fstab_and_rolled_back(lab, state_home: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """apply keeps the mount's new options in fstab: a copy of /etc/fstab named by
    STATSTORM_FSTAB (the real file is never touched). The lab's mount was made by hand, so a
    line is added; a line already there gets its options edited; `findmnt --verify` accepts
    the result; --rollback puts the file back byte for byte, with its mode."""
    name = unique_name("fst")
    mnt = state_home / "labs" / name / "mnt"
    st = lab("--app", "synthetic", "--storage", "glusterfs", "--workers", "2", name=name)
    volume = str(st["volume"])
    real = Path("/etc/fstab").read_bytes() if Path("/etc/fstab").exists() else None
    copy = tmp_path / "fstab"
    copy.write_bytes(real or b"")
    copy.chmod(0o640)
    monkeypatch.setenv(fstab.ENV_VAR, str(copy))
    mine = f"{gluster.brick_host()}:/{volume} {mnt} glusterfs "
    seeded = (real or b"").rstrip(b"\n") + f"\n# the lab's code\n{mine}defaults,_netdev,attribute-timeout=1  0 0\n".encode()
    for original, how in ((real or b"", "added"), (seeded, "edited")):
        copy.write_bytes(original)
        dry = apply(state_home, "--lab", name, "--all")
        diffs = [f["diff"] for f in dry["files"] if f["path"] == str(copy)]
        assert len(diffs) == 1 and "+" + mine in diffs[0], dry["files"]
        assert copy.read_bytes() == original  # a dry run writes nothing

        r = apply(state_home, "--lab", name, "--all", "--yes")
        assert r["mode"] == "applied", r
        text = copy.read_text()
        lines = [ln for ln in text.splitlines() if ln.startswith(mine)]
        assert len(lines) == 1, text
        opts = lines[0].split()[3].split(",")
        assert {"_netdev", "attribute-timeout=600", "entry-timeout=600",
                "negative-timeout=600"} <= set(opts), lines
        if how == "added":
            assert text.startswith(original.decode()) and "# added by statstorm apply" in text
        else:
            assert text == original.decode().replace("attribute-timeout=1  ", ",".join(
                ["attribute-timeout=600", "entry-timeout=600", "negative-timeout=600"]) + "  ")
        res = subprocess.run(["findmnt", "--verify", "--tab-file", str(copy)],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
        assert copy.stat().st_mode & 0o7777 == 0o640

        rb = apply(state_home, "--lab", name, "--rollback")
        assert rb["mode"] == "rolled-back"
        assert copy.read_bytes() == original and copy.stat().st_mode & 0o7777 == 0o640
        assert gluster.mount_depth(mnt) == 1
    # --no-fstab: the mount changes live, the file stays
    copy.write_bytes(seeded)
    r = apply(state_home, "--lab", name, "--all", "--yes", "--no-fstab")
    assert r["mode"] == "applied" and copy.read_bytes() == seeded
    assert not [f for f in r["files"] if f["path"] == str(copy)]
    apply(state_home, "--lab", name, "--rollback")
    assert (Path("/etc/fstab").read_bytes() if real is not None else None) == real


def test_rejected_change_rolls_back_and_graceful_apply_fails_no_request(
        lab, state_home: Path) -> None:
    st = lab("--app", "synthetic", "--workers", "2", "--php-ini", "realpath_cache_ttl=2")
    name = str(st["name"])
    url = str(st["url"]) + str(st["entry_path"])
    conf = Path(str(st["state_dir"])) / "conf/php-fpm.conf"
    original = conf.read_text()
    env = Env(state_root=state_home)
    opts = apply_cmd.ApplyOptions(lab=name, yes=True)

    # a change php-fpm -t refuses (no pool may have 0 children)
    target = apply_cmd.resolve(env, opts)
    with Load(url) as load:
        with pytest.raises(ComponentError, match="php-fpm -t rejected.*rolled back"):
            execute(env, target, opts, [Change("t", POOL, "pm.max_children", "0", "")])
        time.sleep(0.5)
    assert conf.read_text() == original
    assert load.ok > 0 and not load.failed
    sets = backups.sets(env)
    assert json.loads((sets[-1] / "manifest.json").read_text())["status"] == "rolled-back"

    # a change php-fpm accepts but the app cannot serve with: the page check rolls it back
    with pytest.raises(ComponentError, match="answered 404.*rolled back"):
        execute(env, target, opts, [Change("t", POOL_INI, "open_basedir", "/nonexistent", "")])
    assert conf.read_text() == original
    assert urllib.request.urlopen(url, timeout=30).status == 200

    # nginx: the symlink-deploy change goes to the lab's nginx.conf, passes nginx -t, reloads
    ng = conf.with_name("nginx.conf")
    fix = [Change("symlink-deploy-stale", NGINX, "SCRIPT_FILENAME",
                  "$realpath_root$fastcgi_script_name", ""),
           Change("symlink-deploy-stale", NGINX, "DOCUMENT_ROOT", "$realpath_root", "")]
    assert [e.path for e in apply_target.plan_edits(target, fix)[1]] == [ng]
    assert execute(env, target, opts, fix).mode == "applied"
    assert "fastcgi_param DOCUMENT_ROOT $realpath_root;" in ng.read_text()
    assert urllib.request.urlopen(url, timeout=30).status == 200
    # a variable nginx does not know: nginx -t refuses and the file comes back
    applied = ng.read_text()
    with pytest.raises(ComponentError, match="nginx -t rejected.*rolled back"):
        execute(env, target, opts, [Change("x", NGINX, "DOCUMENT_ROOT", "$no_such_variable", "")])
    assert ng.read_text() == applied
    assert urllib.request.urlopen(url, timeout=30).status == 200

    # --pool: the files are found from the running master's title, its includes and nginx -T
    pool = f"statstorm-{name}"
    dry = apply(state_home, "--pool", pool, "realpath-cache-ttl")
    assert dry["target"]["pool_file"] == str(conf)
    assert dry["target"]["nginx_files"] == [str(conf.with_name("nginx.conf"))]
    assert dry["changes"][0]["current"] == "2" and dry["changes"][0]["value"] == "600"
    assert not dry["notes"]  # the lab's process_control_timeout is 5 s

    # a real change under light load: the graceful reload fails no request
    with Load(url) as load:
        time.sleep(0.3)
        r = apply(state_home, "--pool", pool, "realpath-cache-ttl", "--yes", "--url", url)
        time.sleep(0.5)
    assert r["mode"] == "applied" and "php_admin_value[realpath_cache_ttl] = 600" in conf.read_text()
    assert load.ok >= 5 and not load.failed, load.failed
    assert "realpath-cache-ttl" not in check_ids(state_home, name)


def test_app_setting_and_apcu_for_one_pool(lab, state_home: Path) -> None:
    """The app-data-on-network change on a real pool: APCu loaded into this pool only and the
    app's setting appended to its PHP configuration file, checked with `php -l`; a file that
    does not parse is refused and restored, with the pool file as it was."""
    from statstorm.adapters.php import apcu
    from statstorm.adapters.php.php_targets import ask_pool
    from statstorm.model.applyplan import APP
    so = apcu.extension_path()
    if not so:
        pytest.skip(apcu.install_hint())
    st = lab("--app", "synthetic", "--workers", "2")
    name = str(st["name"])
    url = str(st["url"]) + str(st["entry_path"])
    root = Path(str(st["state_dir"]))
    conf = root / "conf/php-fpm.conf"
    settings = Path(str(st["code_path"])) / "settings.php"
    settings.write_text("<?php\n$cacheType = 'none';\n")
    original_conf = conf.read_text()
    env = Env(state_root=state_home)
    opts = apply_cmd.ApplyOptions(lab=name, yes=True)
    target = apply_cmd.resolve(env, opts)
    sock = str(root / "run/php-fpm.sock")
    assert "apcu" not in [e.lower() for e in ask_pool(env, sock, 1)[0].extensions or ()]

    # a configuration file that does not parse: refused before anything changes
    settings.write_text("<?php\n$cacheType = ;\n")
    broken = settings.read_text()
    change = [Change("app-data-on-network", POOL_INI, "extension", so, ""),
              Change("app-data-on-network", APP, "$cacheType", "'apcu'", "",
                     where=str(settings))]
    with pytest.raises(UsageError, match="does not parse now.*nothing was changed"):
        execute(env, target, opts, change)
    assert settings.read_text() == broken and conf.read_text() == original_conf
    # a value that makes it not parse: php -l refuses it, both files come back
    settings.write_text("<?php\n$cacheType = 'none';\n")
    bad = [change[0], dataclasses.replace(change[1], value="'a' 'b'")]
    with pytest.raises(ComponentError, match="php -l rejected.*rolled back"):
        execute(env, target, opts, bad)
    assert settings.read_text() == "<?php\n$cacheType = 'none';\n"
    assert conf.read_text() == original_conf

    settings.write_text("<?php\n$cacheType = 'none';\n")
    assert execute(env, target, opts, change).mode == "applied"
    assert settings.read_text().endswith("# statstorm apply\n$cacheType = 'apcu';\n")
    assert f"php_admin_value[extension] = {so}" in conf.read_text()
    answers = ask_pool(env, sock, 2)
    assert answers and all("apcu" in [e.lower() for e in a.extensions or ()] for a in answers)
    assert urllib.request.urlopen(url, timeout=30).status == 200
    # the CLI PHP and other pools are untouched: nothing was enabled system-wide
    assert not Path("/etc/php/8.2/fpm/conf.d/20-apcu.ini").exists() or so.startswith("/usr/lib")
    rb = apply(state_home, "--lab", name, "--rollback")
    assert rb["mode"] == "rolled-back"
    assert conf.read_text() == original_conf
    assert settings.read_text() == "<?php\n$cacheType = 'none';\n"

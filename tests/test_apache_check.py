"""trace, check and apply on real Apache labs: a mod_php and a fcgid request traced call by
call as strace records them; `.htaccess` lookups counted under strace as check predicts them;
apply's Apache edit made with a graceful restart, and a broken one refused by `apache2 -t`
and rolled back while the site keeps serving."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli, wait_cacheable
from test_apply_lab import Load, execute
from test_trace_lab import finish, get, start_trace, wait_attached

from statstorm.commands import apply as apply_cmd
from statstorm.results.trace import read_trace
from statstorm.env import Env
from statstorm.errors import ComponentError
from statstorm.model.applyplan import APACHE, Change

pytestmark = [pytest.mark.root, pytest.mark.slow]

STRACE_SET = ("newfstatat,statx,stat,lstat,fstat,access,faccessat,faccessat2,open,openat,"
              "readlink,readlinkat,getcwd,chdir,fchdir,accept,accept4")


class Strace:
    """strace -f on one process; stopped by SIGINT (it detaches)."""

    def __init__(self, pid: int, log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(["strace", "-f", "-qq", "-tt", "-e", f"trace={STRACE_SET}",
                                      "-o", str(log), "-p", str(pid)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (log.exists() or self.proc.poll() is not None):
            time.sleep(0.1)
        time.sleep(0.5)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=30)
        return self.log.read_text(errors="replace")


def status(home: Path, name: str) -> dict[str, Any]:
    return dict(json.loads(run_cli(["lab", "status", "--name", name, "--json"], home,
                                   check=True).stdout))


def strace_per_request(home: Path, log: Path, out: Path) -> dict[str, float]:
    proc = run_cli(["trace", "import", str(log), "-o", str(out), "--json"], home, check=True)
    return dict(json.loads(proc.stdout)["per_request"])


def traced_and_straced(home: Path, name: str, url: str, pid: int, tmp: Path, n: int = 6
                       ) -> tuple[dict[str, Any], dict[str, float], str]:
    """The same n requests (one connection each) traced by statstorm and by strace."""
    st = Strace(pid, tmp / "strace.log")
    try:
        proc = start_trace(home, ["--lab", name, "-d", "12", "-o", str(tmp / "t.sst.gz"),
                                  "--json"])
        wait_attached(proc)
        for _ in range(n):
            assert get(url) == 200
            time.sleep(0.05)
        summary = finish(proc)
    finally:
        text = st.stop()
    return summary, strace_per_request(home, tmp / "strace.log", tmp / "s.sst.gz"), text


@pytest.mark.parametrize("handler,mpm", [("mod_php", "prefork"), ("fcgid", "event")])
def test_trace_of_php_in_apache_matches_strace(lab, state_home: Path, tmp_path: Path,
                                               handler: str, mpm: str) -> None:
    st = lab("--app", "synthetic", "--server", "apache", "--mpm", mpm, "--handler", handler,
             "--workers", "1", "--allow-override", "All")
    name, url = str(st["name"]), str(st["url"]) + str(st["entry_path"])
    wait_cacheable(st["code_path"], st["docroot"])  # older than file_update_protection
    for _ in range(8):
        assert get(url) == 200
    workers = status(state_home, name)["worker_pids"]
    assert len(workers) == 1, workers
    summary, ref, log = traced_and_straced(state_home, name, url, int(workers[0]), tmp_path)
    assert summary["requests"] >= 5
    # A warm child of this deterministic app makes the same calls for every request: the
    # typical request (the most common call profile among complete ones) must be identical,
    # call by call and result by result. strace's log may add a request cut by its attach
    # or detach; the average over requests would count it, the typical one does not.
    assert typical(tmp_path / "t.sst.gz") == typical(tmp_path / "s.sst.gz")
    assert ref["total"] > 0
    if handler == "mod_php":
        # Apache's directory walk in the same process: one .htaccess lookup per request in
        # the docroot (AllowOverride All there, None above), as check predicts.
        docroot = str(st["docroot"]).rstrip("/")
        opened = re.findall(r'open(?:at)?\([^"]*"([^"]*\.htaccess)"', log)
        # the docroot's .htaccess, and one under the script's own name (ENOTDIR)
        assert set(opened) == {f"{docroot}/.htaccess", f"{docroot}/index.php/.htaccess"}
        per_request = {p: opened.count(p) for p in set(opened)}
        assert set(per_request.values()) == {6}, per_request  # the 6 requests sent
        found = check(state_home, name)
        f = found["apache-htaccess-lookups"]
        assert f["predicted_gain"]["syscalls_per_request"] == -float(len(per_request))


def typical(path: Path) -> list[tuple[str, bool, int]]:
    """The most common per-request profile of a trace's complete requests: (call, failed,
    count), sorted."""
    tr = read_trace(path)
    profiles: Counter[tuple[tuple[str, bool, int], ...]] = Counter()
    for rid, r in tr.requests.items():
        if r.end_ns < 0 and len(tr.requests) > 1:
            continue
        calls = Counter((c.call, c.ret < 0) for c in tr.syscalls
                        if c.req == rid and c.call not in ("getcwd", "chdir"))
        profiles[tuple(sorted((k[0], k[1], n) for k, n in calls.items()))] += 1
    (best, seen), = profiles.most_common(1)
    assert seen >= 3, profiles
    return list(best)


def check(home: Path, name: str) -> dict[str, dict[str, Any]]:
    p = run_cli(["check", "--lab", name, "--json"], home)
    assert p.returncode in (0, 1), p.stderr
    data = json.loads(p.stdout)
    apache = data["pools"][0]["apache"]
    assert apache and apache["mpm"] and apache["handler"], data["pools"][0]
    return {f["id"]: f for f in data["findings"]}


def test_apply_on_apache_graceful_and_rolled_back(lab, state_home: Path) -> None:
    st = lab("--app", "synthetic", "--server", "apache", "--mpm", "prefork",
             "--handler", "mod_php", "--workers", "2", "--allow-override", "All",
             "--php-ini", "realpath_cache_ttl=2")
    name, url = str(st["name"]), str(st["url"]) + str(st["entry_path"])
    conf = Path(str(st["state_dir"])) / "conf/apache2.conf"
    found = check(state_home, name)
    assert found["apache-htaccess-lookups"]["change"][-1] == "AllowOverride None"
    assert "realpath-cache-ttl" in found
    env = Env(state_root=state_home)
    opts = apply_cmd.ApplyOptions(lab=name, yes=True)
    target = apply_cmd.resolve(env, opts)
    original = conf.read_text()

    # a directive Apache refuses: apache2 -t fails, the file comes back, the site serves
    with Load(url) as load:
        with pytest.raises(ComponentError, match="apache2 -t rejected.*rolled back"):
            execute(env, target, opts, [Change("t", APACHE, "AllowOverride", "Nonsense", "",
                                               where=str(st["docroot"]))])
        time.sleep(0.3)
    assert conf.read_text() == original
    assert load.ok > 0 and not load.failed

    # the findings, applied: Apache's config and the lab's PHP ini, one graceful restart
    with Load(url) as load:
        r = run_cli(["apply", "--lab", name, "apache-htaccess-lookups", "realpath-cache-ttl",
                     "--yes", "--json"], state_home)
        time.sleep(0.3)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["mode"] == "applied", res
    assert not load.failed, load.failed[:3]
    assert "AllowOverride None" in conf.read_text().split(f"<Directory {st['docroot']}>")[-1]
    ini = Path(str(st["state_dir"])) / "conf/php/statstorm.ini"  # the lab's own overrides
    assert "realpath_cache_ttl = 600" in ini.read_text() and "=2" not in ini.read_text()
    after = check(state_home, name)
    assert "apache-htaccess-lookups" not in after and "realpath-cache-ttl" not in after
    assert urllib.request.urlopen(url, timeout=30).status == 200

    # --rollback brings both files back
    r = run_cli(["apply", "--lab", name, "--rollback", "--json"], state_home)
    assert r.returncode == 0, r.stderr
    assert conf.read_text() == original and "realpath_cache_ttl=2" in ini.read_text()
    assert "apache-htaccess-lookups" in check(state_home, name)
    assert os.path.exists(str(st["state_dir"]))


@pytest.mark.alone  # another lane's trace of php-fpm8.2 puts its breakpoints in every
# process of that binary; the new master copies its code, int3s and all, to huge pages,
# where no uprobe knows them: its workers die of SIGTRAP (seen once beside the other lane)
def test_huge_code_pages_applied_to_a_lab_master(lab, state_home: Path) -> None:
    """A setting only the master reads goes to the lab's conf/php, php-fpm's reload
    re-executes the master with it, and check then reports whether PHP's code really got
    huge pages at the new load address (the window is read from the worker's maps)."""
    st = lab("--app", "synthetic", "--workers", "2")
    name = str(st["name"])
    p = run_cli(["check", "--lab", name, "--json"], state_home)
    before = json.loads(p.stdout)
    pool = before["pools"][0]
    path, start, end = pool["code_mapping"]
    assert path.endswith("php-fpm8.2") and end > start
    r = run_cli(["apply", "--lab", name, "huge-code-pages", "--yes", "--json"], state_home)
    found = {f["id"]: f for f in before["findings"]}
    if found["huge-code-pages"]["change"][0].startswith("#"):  # nothing to move this time
        assert r.returncode == 0 and json.loads(r.stdout)["mode"] == "nothing", r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["mode"] == "applied"
    ini = Path(str(st["state_dir"])) / "conf/php/99-statstorm.ini"
    assert "opcache.huge_code_pages = 1" in ini.read_text()
    after = json.loads(run_cli(["check", "--lab", name, "--json"], state_home).stdout)
    assert after["pools"][0]["settings"]["opcache.huge_code_pages"] in ("1", "On")
    hcp = [f for f in after["findings"] if f["id"] == "huge-code-pages"]
    used = after["pools"][0]["huge_mapped_kb"]
    # in use (no finding), or the new master's code holds no whole huge page (info), or THP
    # gave none (warning): each says so with the mapping as evidence
    assert (not hcp and any(used)) or (hcp and "whole" in " ".join(hcp[0]["evidence"])), (hcp, used)

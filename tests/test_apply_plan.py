"""`statstorm apply`'s plan: every rule's change lines go to the right place, and the edits of
php-fpm, ini and nginx texts are exact. Pure, no root."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from test_check_rules import facts

from statstorm.model import applyplan
from statstorm.model.applyplan import (MANUAL, MASTER_INI, MOUNT, NGINX, POOL, POOL_INI, VOLUME,
                                       Change)
from statstorm.adapters.storage import gluster
from statstorm.model.checkfacts import MountFact
from statstorm.model.finding import Finding
from statstorm.model.rules import RULES, evaluate
from statstorm.results.facts import HugePageFacts

POOL_CONF = """\
[global]
pid = /run/php/php-fpm.pid

[www]
user = www-data
listen = /run/php/php8.2-fpm.sock
pm = dynamic
pm.max_children = 5
php_value[realpath_cache_size] = 16K
php_admin_value[realpath_cache_size] = 32K

[other]
user = other
php_admin_value[include_path] = /x
"""


def finding(rule: str, *change: str, title: str = "t") -> Finding:
    return Finding(rule, "warning", title, ("e",), change, "none")


def kinds(f: Finding, settings: dict[str, str] | None = None) -> list[tuple[str, str, str]]:
    return [(c.kind, c.key, c.value) for c in applyplan.classify(f, settings)]


def bad_findings() -> dict[str, Finding]:
    """Findings of most rules, from check's own rule fixtures: apply plans from real rule output."""
    gl = MountFact(role="docroot", path="/srv/app/public", mount_point="/srv", fstype="fuse.glusterfs",
                   kind="glusterfs-fuse", cache_options={}, volume="vol")
    hp = HugePageFacts(thp_enabled="always", nr_hugepages=0, free_hugepages=0, page_kb=2048)
    bad = {"realpath_cache_ttl": "2", "opcache.revalidate_freq": "0",
           "opcache.revalidate_path": "On", "opcache.enable_file_override": "Off",
           "user_ini.filename": ".user.ini", "opcache.max_accelerated_files": "200"}
    kw = dict(pm={"pm": "static", "pm.max_children": "4", "pm.max_requests": "10"},
              mounts=(gl,), hugepages=hp, text_bytes=8 << 20, php_files=5000)
    out = {x.id: x for x in evaluate(facts({**bad, "open_basedir": "/srv:/tmp"}, **kw))}
    out.update({x.id: x for x in evaluate(facts(bad, **kw))})  # rules open_basedir silences
    return out


def test_rule_output_is_placed() -> None:
    found = bad_findings()
    want = {
        "realpath-cache-ttl": [(POOL_INI, "realpath_cache_ttl", "600")],
        "open-basedir": [(POOL_INI, "open_basedir", ""),
                         (POOL_INI, "realpath_cache_size", "4096K")],
        "opcache-revalidate": [(POOL_INI, "opcache.revalidate_freq", "60")],
        "opcache-revalidate-path": [(POOL_INI, "opcache.revalidate_path", "0")],
        "opcache-max-files": [(MASTER_INI, "opcache.max_accelerated_files", "7963")],
        "user-ini-lookups": [(POOL_INI, "user_ini.filename", "")],
        "pm-max-requests": [(POOL, "pm.max_requests", "5000")],
    }
    for rule, expected in want.items():
        assert kinds(found[rule], {"realpath_cache_size": "4096K"}) == expected, rule
    # a GlusterFS mount's options, one change each for its mount point, and the volume's
    gl = applyplan.classify(found["glusterfs-mount-caching"])
    assert [(c.kind, c.where, c.key, c.value) for c in gl] == [
        (MOUNT, "/srv", "attribute-timeout", "600"), (MOUNT, "/srv", "entry-timeout", "600"),
        (MOUNT, "/srv", "negative-timeout", "600"),
        (VOLUME, "vol", "features.cache-invalidation", "on"),
        (VOLUME, "vol", "performance.md-cache-timeout", "600"),
        (VOLUME, "vol", "performance.nl-cache", "on")]
    # huge pages: the ini line goes to the master (a sysctl line would be manual)
    assert kinds(found["huge-code-pages"])[0] == (MASTER_INI, "opcache.huge_code_pages", "1")


def test_every_rule_classifies_without_error() -> None:
    """Whatever a rule writes, each line ends up somewhere (never lost, never a crash)."""
    for rule, f in bad_findings().items():
        assert rule in RULES
        out = applyplan.classify(f)
        assert out and all(c.kind in (POOL_INI, MASTER_INI, POOL, NGINX, MOUNT, VOLUME, MANUAL)
                           for c in out)


def test_classify_lines() -> None:
    assert kinds(finding("x", 'include_path = "/a:/b"')) == [(POOL_INI, "include_path", "/a:/b")]
    assert kinds(finding("x", "zend_extension = opcache", "opcache.enable = 1")) == [
        (MASTER_INI, "zend_extension", "opcache"), (MASTER_INI, "opcache.enable", "1")]
    # comments explain a placed change (dropped) or are all there is (manual)
    assert kinds(finding("x", "opcache.revalidate_freq = 60", "; or: opcache.validate_timestamps = 0")) \
        == [(POOL_INI, "opcache.revalidate_freq", "60")]
    assert kinds(finding("x", "# fix the clock")) == [(MANUAL, "", "")]
    # mount options have no spaces around '=' and belong to the mount the comment names;
    # without one they are manual. A sysctl is not PHP's.
    assert kinds(finding("x", "actimeo=60,lookupcache=all,nocto")) == [(MANUAL, "", "")]
    nfs = applyplan.classify(finding("x", "# /etc/fstab options for /srv/nfs:",
                                     "actimeo=60,lookupcache=all,nocto", "# or keep it local"))
    assert [(c.kind, c.where, c.key, c.value) for c in nfs] == [
        (MOUNT, "/srv/nfs", "actimeo", "60"), (MOUNT, "/srv/nfs", "lookupcache", "all"),
        (MOUNT, "/srv/nfs", "nocto", "")]
    assert kinds(finding("x", "# mount options for /m:", "# then:", "a=1")) == [(MANUAL, "", "")] * 3
    assert kinds(finding("x", "gluster volume set v performance.nl-cache on")) == [
        (VOLUME, "performance.nl-cache", "on")]
    assert kinds(finding("x", "vm.nr_hugepages = 8")) == [(MANUAL, "", "")]
    assert kinds(finding("x", "# nginx:", "fastcgi_param SCRIPT_FILENAME $realpath_root$fastcgi_script_name;",
                         "fastcgi_param DOCUMENT_ROOT $realpath_root;")) == [
        (NGINX, "SCRIPT_FILENAME", "$realpath_root$fastcgi_script_name"),
        (NGINX, "DOCUMENT_ROOT", "$realpath_root")]
    assert kinds(finding("x", "composer dump-autoload --optimize")) == [(MANUAL, "", "")]
    assert kinds(finding("x", "opcache.enable_file_override = 1")) == [
        (MASTER_INI, "opcache.enable_file_override", "1")]


def test_open_basedir_restates_cache_size_unless_set() -> None:
    f = finding("open-basedir", "open_basedir =")
    assert kinds(f, {"realpath_cache_size": "16K"})[1] == (POOL_INI, "realpath_cache_size", "16K")
    merged = applyplan.merge(applyplan.classify(f) + applyplan.classify(
        finding("realpath-cache-small", "realpath_cache_size = 4M")))
    assert [(c.key, c.value) for c in merged] == [("open_basedir", ""),
                                                  ("realpath_cache_size", "4096K")]
    both = applyplan.classify(finding("y", "open_basedir =", "realpath_cache_size = 4M"))
    assert [(c.key, c.value) for c in both] == [("open_basedir", ""), ("realpath_cache_size", "4M")]


def test_merge_keeps_the_first_per_key() -> None:
    a = Change("a", POOL_INI, "k", "1", "k = 1")
    b = Change("b", POOL_INI, "k", "2", "k = 2")
    m = Change("b", MANUAL, "", "", "# x")
    assert applyplan.merge([a, b, m, m]) == [a, m, m]


def test_merge_is_per_mount_point() -> None:
    a = Change("f", MOUNT, "attribute-timeout", "600", "", where="/a")
    b = Change("g", MOUNT, "attribute-timeout", "60", "", where="/b")
    assert applyplan.merge([a, b, Change("h", MOUNT, "attribute-timeout", "1", "", where="/a")]) \
        == [a, b]


FSTAB = """\
# <file system> <mount point> <type> <options> <dump> <pass>
UUID=1234 / ext4 errors=remount-ro 0 1
# vm:/old /srv/code glusterfs defaults 0 0
  vm:/code\t/srv/code  glusterfs  defaults,_netdev,attribute-timeout=1  0 0
vm:/other /srv/code2 glusterfs defaults 0 0
"""


def test_edit_fstab_changes_only_the_mount_points_options() -> None:
    ch = [Change("g", MOUNT, "attribute-timeout", "600", "", where="/srv/code"),
          Change("g", MOUNT, "negative-timeout", "600", "", where="/srv/code")]
    out = applyplan.edit_fstab(FSTAB, "/srv/code", ch)
    assert out is not None
    want = FSTAB.replace("defaults,_netdev,attribute-timeout=1 ",
                         "defaults,_netdev,attribute-timeout=600,negative-timeout=600 ")
    assert out == want  # separators, comments, defaults and other lines kept byte for byte
    assert applyplan.edit_fstab(out, "/srv/code", ch) == out
    assert applyplan.edit_fstab(FSTAB, "/srv/nowhere", ch) is None
    flag = applyplan.edit_fstab("s:/e /mnt/a\\040b nfs4 rw 0 0\n", "/mnt/a b",
                                [Change("n", MOUNT, "nocto", "", "", where="/mnt/a b")])
    assert flag == "s:/e /mnt/a\\040b nfs4 rw,nocto 0 0\n"


def test_stacked_client_argv_takes_the_new_options() -> None:
    argv = ["/usr/sbin/glusterfs", "--attribute-timeout=1", "--process-name", "fuse",
            "--volfile-server=vm", "--volfile-id=/code", "/srv/code"]
    assert gluster.client_argv_with(argv, {"attribute-timeout": "600", "entry-timeout": "600"}) \
        == ["/usr/sbin/glusterfs", "--attribute-timeout=600", "--entry-timeout=600",
            "--process-name", "fuse", "--volfile-server=vm", "--volfile-id=/code", "/srv/code"]


def test_edit_pool_replaces_appends_and_stays_in_section() -> None:
    changes = [Change("r", POOL_INI, "realpath_cache_size", "4M", ""),
               Change("i", POOL_INI, "include_path", "/srv/app/lib:.", ""),
               Change("o", POOL_INI, "open_basedir", "", ""),
               Change("p", POOL, "pm.max_children", "8", ""),
               Change("q", POOL, "pm.max_requests", "5000", "")]
    out = applyplan.edit_pool(POOL_CONF, "www", changes)
    www = out.split("[www]")[1].split("[other]")[0]
    assert "php_value[realpath_cache_size]" not in out  # the duplicate goes
    assert "php_admin_value[realpath_cache_size] = 4M" in www
    assert "pm.max_children = 8" in www and "pm.max_children = 5" not in www
    assert www.count(applyplan.MARK) == 1
    # an app may set its include_path itself (set_include_path): php_value, not admin
    assert "php_value[include_path] = /srv/app/lib:." in www
    assert "php_admin_value[include_path]" not in www
    kept = applyplan.edit_pool(POOL_CONF, "other", changes[1:2]).split("[other]")[1]
    assert "php_admin_value[include_path] = /srv/app/lib:." in kept  # the pool's own kind
    assert "php_admin_value[open_basedir] =\n" in www
    assert www.rstrip().endswith("pm.max_requests = 5000")
    assert out.split("[other]")[1] == POOL_CONF.split("[other]")[1]  # untouched
    assert out.split("[www]")[0] == POOL_CONF.split("[www]")[0]
    # applying the same changes again changes nothing
    assert applyplan.edit_pool(out, "www", changes) == out


def test_edit_pool_quotes_and_refuses() -> None:
    out = applyplan.edit_pool(POOL_CONF, "other", [Change("x", POOL_INI, "session.save_path",
                                                          "2;/var/lib/php sessions", "")])
    assert 'php_admin_value[session.save_path] = "2;/var/lib/php sessions"' in out
    with pytest.raises(ValueError):
        applyplan.edit_pool(POOL_CONF, "www", [Change("x", POOL_INI, "k", 'a"b', "")])
    with pytest.raises(ValueError):
        applyplan.edit_pool(POOL_CONF, "missing", [])


def test_edit_ini_new_and_existing() -> None:
    c = [Change("m", MASTER_INI, "opcache.max_accelerated_files", "16229", ""),
         Change("h", MASTER_INI, "opcache.huge_code_pages", "1", ""),
         Change("p", POOL_INI, "ignored", "1", "")]
    new = applyplan.edit_ini("", c)
    assert new.splitlines()[1:] == ["opcache.max_accelerated_files = 16229",
                                    "opcache.huge_code_pages = 1"]
    assert new.startswith("; written by statstorm apply")
    again = applyplan.edit_ini(new, [Change("m", MASTER_INI, "opcache.max_accelerated_files",
                                            "32531", "")])
    assert "opcache.max_accelerated_files = 32531" in again and "16229" not in again
    assert again.count("opcache.huge_code_pages") == 1


def test_edit_global_above_the_pools_include() -> None:
    """Debian 12's php-fpm.conf: the directive goes in [global] above `include=` (after it, it
    would land in the last pool included); a second edit replaces it; the result parses."""
    text = (Path(__file__).parent / "fixtures" / "php-fpm" / "debian12-php-fpm.conf").read_text()
    (c,) = applyplan.classify(Finding("fpm-reload-ends-requests", "warning", "t", (),
                                      ("process_control_timeout = 10s",), ""))
    assert (c.kind, c.key, c.value) == (applyplan.FPM_GLOBAL, "process_control_timeout", "10s")
    new = applyplan.edit_global(text, [c])
    lines = new.splitlines()
    at = lines.index("process_control_timeout = 10s")
    assert at < next(i for i, x in enumerate(lines) if x.startswith("include="))
    assert ";process_control_timeout = 0" in lines  # Debian's comment kept
    again = applyplan.edit_global(new, [replace(c, value="20s")])
    assert again.count("process_control_timeout = ") == 1 + text.count("process_control_timeout")
    assert "process_control_timeout = 20s" in again
    with pytest.raises(ValueError):
        applyplan.edit_global("[www]\nlisten = x\n", [c])


def test_edit_nginx_moves_php_to_realpath_root() -> None:
    conf = """\
server {
    location ~ \\.php$ {
        include /etc/nginx/fastcgi_params;
        fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
        fastcgi_pass unix:/run/php.sock;
    }
    location = /status {
        fastcgi_param SCRIPT_FILENAME $uri;
    }
}
"""
    c = [Change("s", NGINX, "SCRIPT_FILENAME", "$realpath_root$fastcgi_script_name", ""),
         Change("s", NGINX, "DOCUMENT_ROOT", "$realpath_root", "")]
    out = applyplan.edit_nginx(conf, c)
    lines = out.splitlines()
    i = lines.index("        fastcgi_param SCRIPT_FILENAME $realpath_root$fastcgi_script_name;")
    assert lines[i + 1] == "        fastcgi_param DOCUMENT_ROOT $realpath_root;"
    assert "fastcgi_param SCRIPT_FILENAME $uri;" in out  # not built on $document_root
    assert applyplan.edit_nginx(out, c) == out


def test_edit_nginx_debian_site_sets_params_after_the_pools_fastcgi_pass() -> None:
    """Debian's sites take SCRIPT_FILENAME from snippets/fastcgi-php.conf: the site file gets
    both parameters after its fastcgi_pass to the pool, and other pools' locations stay."""
    site = """\
server {
    location ~ \\.php$ {
        include snippets/fastcgi-php.conf;
        fastcgi_pass unix:/run/php/php8.2-fpm.sock;
    }
    location ~ ^/other/.*\\.php$ {
        fastcgi_pass 127.0.0.1:9001;
    }
}
"""
    c = [Change("s", NGINX, "SCRIPT_FILENAME", "$realpath_root$fastcgi_script_name", ""),
         Change("s", NGINX, "DOCUMENT_ROOT", "$realpath_root", "")]
    out = applyplan.edit_nginx(site, c, "/run/php/php8.2-fpm.sock").splitlines()
    i = out.index("        fastcgi_pass unix:/run/php/php8.2-fpm.sock;")
    assert out[i + 1:i + 3] == [
        "        fastcgi_param SCRIPT_FILENAME $realpath_root$fastcgi_script_name;",
        "        fastcgi_param DOCUMENT_ROOT $realpath_root;"]
    assert out[i + 3:] == site.splitlines()[4:]


@pytest.mark.parametrize("opts, message", [
    (dict(), "name the findings"),
    (dict(all=True, findings=("open-basedir",)), "not both"),
    (dict(findings=("no-such-rule",)), "unknown finding id 'no-such-rule'"),
    (dict(all=True, verify=True), "add --yes"),
    (dict(all=True, yes=True, verify=True, pool="www"), "--url"),
    (dict(rollback=True, all=True), "give it alone"),
    (dict(all=True, pool="www", lab="lab"), "--pool, --lab"),
    (dict(all=True, url="http://10.1.2.3/"), "127.0.0.1, ::1 or localhost"),
])
def test_bad_usage_is_one_line(opts: dict[str, object], message: str) -> None:
    from statstorm.commands import apply as apply_cmd
    from statstorm.env import Env
    from statstorm.errors import UsageError
    with pytest.raises(UsageError, match=message.replace("(", r"\(")) as exc:
        apply_cmd.validate(Env(), apply_cmd.ApplyOptions(**opts))  # type: ignore[arg-type]
    assert "\n" not in str(exc.value)


def test_fstab_line_is_checked_with_findmnt(tmp_path: Path) -> None:
    """The fstab check runs the real `findmnt --verify` on the changed mount point's lines
    only: another line's error is not apply's business, its own line's error fails."""
    from statstorm.adapters.storage.fstab import verify
    from statstorm.env import Env
    good = tmp_path / "code"
    good.mkdir()
    text = (f"vm:/code {good} glusterfs defaults,_netdev,attribute-timeout=600 0 0\n"
            f"vm:/gone {tmp_path}/missing glusterfs defaults 0 0\n")
    assert verify(Env(), text, [str(good)]) == ""
    assert "findmnt --verify rejects" in verify(Env(), text, [f"{tmp_path}/missing"])


def test_settled_needs_two_runs_within_five_percent() -> None:
    from statstorm.model.applyplan import settled
    from statstorm.results.apply_verify import Measurement as M
    a = M(syscalls_per_request=100.0, round_trips_per_request=60.0)
    assert settled(a, M(syscalls_per_request=103.0, round_trips_per_request=62.0))
    # a new FUSE client's first seconds: round trips still climbing
    assert not settled(replace(a, round_trips_per_request=46.7), a)
    assert not settled(a, replace(a, syscalls_per_request=90.0))
    # a figure one run lacks (no network mount) is not compared
    assert settled(M(syscalls_per_request=50.0), M(syscalls_per_request=51.0))
    assert settled(M(syscalls_per_request=0.0), M(syscalls_per_request=0.0))


def test_verify_json_round_trips_and_says_worse() -> None:
    """--verify's typed result writes what compare() wrote and reads itself back."""
    from statstorm.results.apply import compare
    from statstorm.results.apply_verify import Measurement, Settling, Verify
    before = Measurement(rps=100.0, p50_ms=2.0, p99_ms=9.0, errors=0,
                         syscalls_per_request=400.0, failed_per_request=20.0,
                         round_trips_per_request=None, requests=500)
    first = replace(before, syscalls_per_request=420.0)
    after = replace(before, rps=80.0, errors=2,
                    settling=Settling(3, True, first))
    v = Verify(before, after)
    j = v.to_json()
    assert list(j) == ["before", "after", "change", "worse"]
    assert j["after"]["runs"] == 3 and j["after"]["settled"] is True
    assert j["after"]["first"] == {"round_trips_per_request": None, "syscalls_per_request": 420.0}
    assert j["change"]["rps"] == -0.2 and j["change"]["round_trips_per_request"] is None
    assert "throughput fell -20.0%" in v.worse and "2 failed requests (before: 0)" in v.worse
    assert Verify.from_json(j).to_json() == j  # the first run keeps only its settle figures
    assert compare(before.to_json(), after.to_json()) == j


def test_backup_manifest_reads_the_format_on_disk() -> None:
    """A manifest as apply has always written it loads, and is written back byte for byte."""
    from statstorm.results.apply import SCHEMA, Manifest
    on_disk = {"schema": SCHEMA, "created": "2026-01-01T00:00:00+00:00",
               "target": {"pool": "www", "lab": "", "pool_file": "/etc/php/www.conf",
                          "master_ini": None, "nginx_files": [], "url": "http://127.0.0.1/"},
               "files": [{"path": "/etc/php/www.conf", "existed": True, "copy": "0-www.conf",
                          "mode": 420, "uid": 0, "gid": 0},
                         {"path": "/etc/php/conf.d/99-statstorm.ini", "existed": False}],
               "storage": [{"kind": "volume", "where": "gv0", "before": {},
                            "after": {"performance.md-cache-timeout": "600"},
                            "client_argv": [], "client_pid": 0, "done": True}],
               "status": "rolled-back", "reason": "--verify: throughput fell"}
    m = Manifest.from_json(on_disk)
    assert m.to_json() == on_disk and list(m.to_json()) == list(on_disk)
    assert m.target.pool == "www" and m.target.lab == "" and m.files[1].existed is False
    assert m.storage[0].done and m.status == "rolled-back"


def test_a_symlinked_configuration_file_stays_a_symlink(tmp_path: Path) -> None:
    """Debian's sites-enabled/NAME is a symlink to sites-available/NAME: apply's write (and
    rollback's) replaces the file it points to and keeps the link."""
    from statstorm.adapters.apply import backups

    avail = tmp_path / "sites-available" / "site"
    avail.parent.mkdir()
    avail.write_text("root /srv/a;\n")
    link = tmp_path / "sites-enabled" / "site"
    link.parent.mkdir()
    link.symlink_to("../sites-available/site")
    backups.write_file(link, "root /srv/b;\n", avail.stat())
    assert link.is_symlink() and avail.read_text() == "root /srv/b;\n"

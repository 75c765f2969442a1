"""code-local-mirror and mirror-stale without root: the rules on facts as data, the plan
(finding → MIRROR change → copy step and nginx root edits) on Debian-style nginx trees
(`fixtures/nginx/<case>/`, golden `mirror-roots.json` beside each case's `expected.json`;
STATSTORM_REGEN=1 rewrites them), the byte-preserving root edit, the refusals, and the
copy, sync and staleness on a mirror root of the test's own."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import namedtuple
from pathlib import Path

import pytest

from statstorm.adapters.apply import apply_target, mirror
from statstorm.adapters.apply.pool_config import Target
from statstorm.adapters.servers import nginx_conf
from statstorm.adapters.storage import code_mirror
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.model import applyplan, rules_mirror
from statstorm.model.applyplan import MIRROR, NGINX_ROOT
from statstorm.model.checkfacts import Facts, MountFact, TraceFacts
from statstorm.model.mirror import (MirrorFacts, mirror_dir, rebased_include_path, served_root,
                                   stale_files)
from statstorm.model.rules import evaluate
from statstorm.results.mirror import MirrorMarker

FIXTURES = Path(__file__).parent / "fixtures" / "nginx"
SOCK = "/run/php/php8.2-fpm.sock"
LISTEN = {"debian-default": SOCK, "two-sites": SOCK, "one-line": SOCK, "variable": SOCK,
          "inherit": "127.0.0.1:9000", "upstream": "127.0.0.1:9000"}
APP = "/srv/gl/dokuwiki"


def _trace(share: float) -> TraceFacts:
    return TraceFacts(requests=20, detail="events", per_request={"total": 300.0},
                      network_time_share=share, network_ms_per_request=41.5)


def _facts(share: float = 0.72, kind: str = "glusterfs-fuse", **kw: object) -> Facts:
    base: dict[str, object] = dict(
        pool="www", settings={}, docroot=APP, app_root=APP, php_files=900,
        mounts=(MountFact("docroot", APP, "/srv/gl", "fuse.glusterfs", kind),
                MountFact("writable:app directory", APP + "/cache", "/srv/gl",
                          "fuse.glusterfs", kind),
                MountFact("writable:session files", "/var/lib/php/sessions", "/", "ext4",
                          "local")),
        trace=_trace(share))
    base.update(kw)
    return Facts(**base)  # type: ignore[arg-type]


# -- the rules -----------------------------------------------------------------------------
def test_fires_on_network_bound_code_with_the_mirror_as_its_change() -> None:
    (f,) = rules_mirror.code_local_mirror(_facts())
    assert f.change[-1] == f"mirror {APP}"
    assert "statstorm mirror sync --pool www" in f.change[0]
    assert "deploy step on every web server" in f.tradeoff
    assert APP + "/cache" in f.tradeoff and "/var/lib/php/sessions" not in f.tradeoff
    (c,) = applyplan.classify(f)
    assert (c.kind, c.key, c.value) == (MIRROR, "mirror", APP)
    ids = [x.id for x in evaluate(_facts())]
    assert ids.index("network-bound") < ids.index("code-local-mirror")  # alongside, after


@pytest.mark.parametrize("facts", [
    _facts(share=0.3),  # not network-bound
    _facts(kind="local"),  # the code is local already
    _facts(trace=None),  # no evidence
    _facts(docroot=""),
])
def test_silent_without_the_evidence(facts: Facts) -> None:
    assert rules_mirror.code_local_mirror(facts) == []


def test_a_measured_gap_to_local_disk_is_evidence_enough() -> None:
    """A pool whose trace puts little time in metadata calls (phpMyAdmin: its time goes to
    reading data files through the FUSE client) is network-bound all the same when the same
    code on local disk, measured side by side (tune's shadow), serves much more."""
    assert rules_mirror.code_local_mirror(_facts(share=0.3)) == []
    (f,) = rules_mirror.code_local_mirror(_facts(share=0.3, local_ratio=0.575))
    assert any("0.575x the throughput of the same code on local disk" in e for e in f.evidence)
    assert f.gain_note.startswith("measured: the same code on local disk served 1.7x")
    ids = [x.id for x in evaluate(_facts(share=0.3, local_ratio=0.575))]
    assert "network-bound" in ids and "code-local-mirror" in ids
    # at or above the goal, or on local disk, it is not
    assert rules_mirror.code_local_mirror(_facts(share=0.3, local_ratio=0.95)) == []
    assert rules_mirror.code_local_mirror(_facts(kind="local", local_ratio=0.5)) == []


def test_no_writable_path_in_the_tree_is_said() -> None:
    (f,) = rules_mirror.code_local_mirror(_facts(mounts=_facts().mounts[:1]))
    assert "No place the app writes to was found inside its tree" in f.tradeoff


def _marker(synced: float) -> MirrorMarker:
    return MirrorMarker(APP, "www", "tree-1", synced, "2026-01-01T00:00:00+00:00", 10, 100)


def test_stale_when_the_network_tree_has_newer_php_files() -> None:
    m = MirrorFacts("/var/local/statstorm/mirror/www/abc", _marker(1000.0),
                    ((APP + "/doku.php", 1500.0), (APP + "/inc/init.php", 999.0)))
    assert stale_files(m) == (APP + "/doku.php",)
    (f,) = rules_mirror.mirror_stale(_facts(mirror=m))
    assert f.change == ("statstorm mirror sync --pool www",)
    assert "doku.php" in f.evidence[1] and "init.php" not in f.evidence[1]
    fresh = MirrorFacts(m.path, _marker(2000.0), m.newest)
    assert rules_mirror.mirror_stale(_facts(mirror=fresh)) == []


def test_named_only_in_apply_all() -> None:
    assert "code-local-mirror" in applyplan.NAMED_ONLY


def test_the_served_root_keeps_the_docroot_place_in_the_tree() -> None:
    d = mirror_dir("/m", "www", "/srv/blog")
    assert d.startswith("/m/www/") and len(d.rsplit("/", 1)[1]) == 12
    assert served_root(d, "/srv/blog", "/srv/blog") == d + "/current"
    assert served_root(d, "/srv/blog", "/srv/blog/public") == d + "/current/public"


# -- the root directives of the fixture trees (golden) ---------------------------------------
@pytest.mark.parametrize("case", sorted(LISTEN))
def test_roots_golden(case: str) -> None:
    roots = nginx_conf.roots_passing_to(nginx_conf.read(FIXTURES / case / "nginx.conf"),
                                        LISTEN[case])
    got = [{"server": r.site.config_line, "value": r.value, "level": r.level, "alias": r.alias,
            "file": r.file.replace(str(FIXTURES / case) + "/", ""), "line": r.line}
           for r in roots]
    expected = FIXTURES / case / "mirror-roots.json"
    if os.environ.get("STATSTORM_REGEN"):
        expected.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(expected.read_text())


@pytest.mark.parametrize("case", ["debian-default", "two-sites", "one-line", "inherit"])
def test_root_edit_changes_only_that_word(case: str) -> None:
    roots = [r for r in nginx_conf.roots_passing_to(
        nginx_conf.read(FIXTURES / case / "nginx.conf"), LISTEN[case]) if r.level != "http"]
    assert roots
    for r in roots:
        text = Path(r.file).read_text()
        new = "/var/local/statstorm/mirror/www/0123456789ab/current"
        after = applyplan.edit_roots(text, [(r.line, new)])
        assert after.replace(new, r.value, 1) == text
        assert after.count(new) == 1


def test_root_edit_keeps_quotes_comments_and_crlf() -> None:
    text = 'server {\r\n  root "/srv/a" ; # the app\r\n  location / { root /srv/b; }\r\n}'
    after = applyplan.edit_roots(text, [(2, "/m/current")])
    assert after == 'server {\r\n  root /m/current ; # the app\r\n  location / { root /srv/b; }\r\n}'
    with pytest.raises(ValueError):
        applyplan.edit_roots(text, [(1, "/m/current")])  # no root starts there
    with pytest.raises(ValueError):
        applyplan.edit_roots(text, [(2, "/m/cur rent")])


# -- the plan on a Debian tree of the test's own ----------------------------------------------
Host = namedtuple("Host", "target app conf")


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Host:
    conf = tmp_path / "nginx"
    shutil.copytree(FIXTURES / "debian-default", conf, symlinks=True)
    app = tmp_path / "gl" / "dokuwiki"
    (app / "inc").mkdir(parents=True)
    (app / "doku.php").write_text("<?php echo 1;\n")
    (app / "inc" / "init.php").write_text("<?php\n")
    site = conf / "sites-enabled" / "default"
    site.write_text(site.read_text().replace("root /var/www/html;", f"root {app};"))
    monkeypatch.setenv("STATSTORM_MIRROR_ROOT", str(tmp_path / "mirror"))
    target = Target("www", "php-fpm8.2", [], tmp_path / "www.conf", 1, SOCK, None, [site],
                    ["/usr/sbin/nginx", "-c", str(conf / "nginx.conf"), "-t", "-q"], 4242)
    return Host(target, app, conf)


def _change(app: Path) -> list[applyplan.Change]:
    return applyplan.classify(rules_mirror.code_local_mirror(_facts(app_root=str(app),
                                                                    docroot=str(app)))[0])


def test_plan_is_a_copy_step_and_the_root_edit(host: Host) -> None:
    changes, steps, _ = mirror.plan(Env(), host.target, _change(host.app))
    (st,) = steps
    assert st.kind == "mirror" and st.before == {"source": str(host.app),
                                                 "under": str(code_mirror.root_dir())}
    assert int(st.after["files"]) == 3 and int(st.after["bytes"]) > 0
    assert "a local copy of 3 files" in st.text()
    (root,) = [c for c in changes if c.kind == NGINX_ROOT]
    assert root.value == st.where + "/current" and root.current == str(host.app)
    _, edits = apply_target.plan_edits(host.target, changes)
    (e,) = edits
    assert e.path == host.conf / "sites-enabled" / "default"
    assert e.after == (e.before or "").replace(f"root {host.app};", f"root {root.value};")
    assert "-\troot " in e.diff() and "+\troot " in e.diff()


def test_refused_in_one_line(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    site = host.target.nginx_files[0]
    original = site.read_text()
    site.write_text(original.replace(f"root {host.app};", "root /srv/$host;"))
    with pytest.raises(UsageError, match=r"built from \$host"):
        mirror.plan(Env(), host.target, _change(host.app))
    site.write_text(original.replace(f"root {host.app};", "root /elsewhere;"))
    with pytest.raises(UsageError, match="has its root in"):
        mirror.plan(Env(), host.target, _change(host.app))
    site.write_text(original)
    Disk = namedtuple("Disk", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Disk(1 << 30, 1 << 30, 1 << 20))
    with pytest.raises(UsageError, match="MiB free, the copy of") as err:
        mirror.plan(Env(), host.target, _change(host.app))
    assert "\n" not in str(err.value)


def test_http_level_root_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "nginx"
    shutil.copytree(FIXTURES / "inherit", conf, symlinks=True)
    target = Target("p", "php-fpm8.2", [], tmp_path / "p.conf", 1, "127.0.0.1:9000", None, [],
                    ["/usr/sbin/nginx", "-c", str(conf / "nginx.conf"), "-t", "-q"], 4242)
    monkeypatch.setattr(Path, "is_dir", lambda self: True)
    with pytest.raises(UsageError, match="set at http level"):
        mirror.plan(Env(), target, [applyplan.Change("code-local-mirror", MIRROR, "mirror",
                                                     "/srv/shared", "mirror /srv/shared")])


def test_apache_in_front_gets_a_manual_step(host: Host) -> None:
    host.target.apache_conf = host.conf / "apache2.conf"
    changes, steps, _ = mirror.plan(Env(), host.target, _change(host.app))
    assert not steps and [c.kind for c in changes] == ["manual"]
    assert "Apache serves this pool" in changes[0].why


def test_a_labs_mirror_lives_in_the_lab_and_goes_with_it(host: Host, tmp_path: Path) -> None:
    """A lab's mirror is made in its own directory (lab down removes it), not under the
    machine's mirror root; made, read back by check's facts and removed there."""
    env = Env(state_root=tmp_path / "state")
    host.target.lab = "l1"
    changes, (st,), _ = mirror.plan(env, host.target, _change(host.app))
    under = tmp_path / "state/labs/l1/mirror"
    assert Path(st.where).parent.parent == under and st.before["under"] == str(under)
    assert [c.kind for c in changes] == [MIRROR, NGINX_ROOT]
    mirror.do(env, st)
    assert (Path(st.where) / "current/doku.php").read_text() == "<?php echo 1;\n"
    assert not (tmp_path / "mirror").exists()
    assert code_mirror.facts(str(Path(st.where) / "current")) is None  # not the machine's
    facts = code_mirror.facts(str(Path(st.where) / "current"), under)
    assert facts is not None and facts.marker.source == str(host.app)
    mirror.undo(env, st)
    assert not Path(st.where).exists()


# -- copy, sync, staleness -------------------------------------------------------------------
def test_copy_sync_and_staleness(host: Host) -> None:
    changes, (st,), _ = mirror.plan(Env(), host.target, _change(host.app))
    mirror.do(Env(), st)
    d = Path(st.where)
    first = os.readlink(d / "current")
    assert (d / "current" / "doku.php").read_text() == "<?php echo 1;\n"
    assert (d / "mirror.json").is_file()
    facts = code_mirror.facts(str(d / "current"))
    assert facts is not None and facts.marker.source == str(host.app)
    assert stale_files(facts) == ()
    with pytest.raises(UsageError, match="exists"):
        mirror.plan(Env(), host.target, _change(host.app))
    time.sleep(0.01)
    (host.app / "doku.php").write_text("<?php echo 2;\n")
    facts = code_mirror.facts(str(d / "current"))
    assert facts is not None and stale_files(facts) == (str(host.app / "doku.php"),)
    (synced,) = code_mirror.sync("www")
    assert synced.previous == first and os.readlink(d / "current") != first
    assert (d / "current" / "doku.php").read_text() == "<?php echo 2;\n"
    assert (d / first).is_dir()  # kept: workers may still resolve into it
    code_mirror.sync("www")
    assert not (d / first).exists()  # two syncs on: gone
    facts = code_mirror.facts(str(d / "current"))
    assert facts is not None and stale_files(facts) == ()
    mirror.undo(Env(), st)
    assert not d.exists()
    with pytest.raises(UsageError, match="no mirror of pool www"):
        code_mirror.sync("www")


def test_sync_cli_without_a_mirror_is_one_line(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import invoke
    monkeypatch.setenv("STATSTORM_MIRROR_ROOT", str(tmp_path / "mirror"))
    res = invoke(["mirror", "sync", "--pool", "www", "--json"], tmp_path)
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1
    assert "code-local-mirror" in res.stderr and json.loads(res.stdout)["exit"] == res.returncode


# -- include_path into the mirrored tree -----------------------------------------------------
def test_include_path_entries_in_the_tree_follow_the_mirror(host: Host) -> None:
    """A pool whose include_path points into the app's tree gets it rebased on the mirror
    (entries elsewhere kept, order kept); else includes through it still cross the network."""
    inc = f".:{host.app}/inc:/usr/share/php:{host.app}"
    (f,) = rules_mirror.code_local_mirror(_facts(app_root=str(host.app), docroot=str(host.app),
                                                 settings={"include_path": inc}))
    assert f.change[-1] == f"mirror-include-path {inc}"
    changes, (st,), _ = mirror.plan(Env(), host.target, applyplan.classify(f))
    (c,) = [c for c in changes if c.key == "include_path"]
    cur = f"{st.where}/current"
    assert (c.kind, c.value, c.current) == (applyplan.POOL_INI,
                                            f".:{cur}/inc:/usr/share/php:{cur}", inc)
    assert c.line == f"php_value[include_path] = {c.value}"
    # include-path-misses' reordered include_path in the same apply: rebased, not doubled
    order = applyplan.Change("include-path-misses", applyplan.POOL_INI, "include_path",
                             f"{host.app}/inc:.", f"php_admin_value[include_path] = "
                             f"{host.app}/inc:.", "", inc)
    (c2,) = [c for c in mirror.plan(Env(), host.target, [order, *applyplan.classify(f)])[0]
             if c.key == "include_path"]
    assert (c2.finding, c2.value) == ("include-path-misses", f"{cur}/inc:.")


def test_include_path_outside_the_tree_is_left_alone() -> None:
    (f,) = rules_mirror.code_local_mirror(_facts(settings={"include_path": ".:/usr/share/php"}))
    assert f.change[-1] == f"mirror {APP}"
    assert rebased_include_path(".:/usr/share/php", APP, "/m") == ""
    assert rebased_include_path(f"{APP}/lib:.", APP, "/m") == "/m/current/lib:."
    assert rebased_include_path(f"{APP}x/lib", APP, "/m") == ""  # a sibling, not inside


def test_realpath_ttl_evidence_names_the_sync_for_a_mirrors_own_symlink() -> None:
    """A pool served through its mirror's `current`: the short-TTL finding says the sync
    reloads the pool, instead of pointing at symlink-deploy-stale (which does not fire)."""
    from statstorm.model import rules_php, rules_stack
    mf = MirrorFacts("/m/www/abc", MirrorMarker(APP, "www", "tree-1", 1.0, "", 1, 1))
    base = _facts(settings={"realpath_cache_ttl": "120"}, mirror=mf,
                  symlinks=(("/m/www/abc/current", "tree-1"),))
    (f,) = rules_php.realpath_cache_ttl(base)
    assert any("`statstorm mirror sync` reloads the pool" in e for e in f.evidence)
    assert rules_stack.symlink_deploy_stale(base) == []
    other = _facts(settings={"realpath_cache_ttl": "120"}, mirror=mf,
                   symlinks=(("/srv/www/current", "/srv/www/r2"),))
    (g,) = rules_php.realpath_cache_ttl(other)
    assert any("see symlink-deploy-stale" in e for e in g.evidence)

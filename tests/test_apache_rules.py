"""Apache's configuration as check reads it (includes, <Directory> merging) and the Apache
rules on it. Pure, no root; the syscall counts the rules state are checked against real
Apache under strace in tests/test_apache_check.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from statstorm.adapters.servers import apache_conf
from statstorm.model.rules import evaluate
from statstorm.results.facts import ApacheFacts
from tests.test_check_rules import facts

FIXTURE = Path(__file__).parent / "fixtures" / "apache_conf"


def _read(tmp_path: Path) -> apache_conf.ApacheConfig:
    main = tmp_path / "apache2.conf"
    (tmp_path / "sites").mkdir()
    main.write_text((FIXTURE / "apache2.conf").read_text().replace("SERVER_ROOT", str(tmp_path)))
    (tmp_path / "sites/wiki.conf").write_text((FIXTURE / "sites/wiki.conf").read_text())
    return apache_conf.read(main)


def test_includes_and_document_roots(tmp_path: Path) -> None:
    cfg = _read(tmp_path)
    assert [Path(f).name for f in cfg.files] == ["apache2.conf", "wiki.conf"]
    assert cfg.document_roots == ["/srv/www/wiki"]
    assert [d.path for d in cfg.directories] == ["/", "/srv", "/srv/www/wiki", "/srv/*/wiki/images"]


def test_walk_merges_shortest_path_first(tmp_path: Path) -> None:
    cfg = _read(tmp_path)
    walk = apache_conf.walk(cfg, "/srv/www/wiki")
    assert [d for d, _, _ in walk] == ["/", "/srv", "/srv/www", "/srv/www/wiki"]
    assert [ov for _, ov, _ in walk] == ["None", "None", "None", "All"]
    assert walk[-1][2] == "Indexes SymLinksIfOwnerMatch"  # -FollowSymLinks +SymLinks…
    images = apache_conf.walk(cfg, "/srv/www/wiki/images")
    assert images[-1][1] == "None"  # the wildcard section, one level deeper
    assert apache_conf.source_for(cfg, "/srv/www/wiki").endswith("wiki.conf:3")


def _apache(walk: tuple[tuple[str, str, str], ...], **kw: object) -> ApacheFacts:
    base: dict[str, object] = dict(config="/etc/apache2/apache2.conf", mpm="prefork",
                                   handler="mod_php", max_request_workers=150, server_limit=150,
                                   threads_per_child=1, docroot="/srv/app/public", walk=walk)
    base.update(kw)
    return ApacheFacts(**base)  # type: ignore[arg-type]


GOOD_WALK = (("/", "None", "FollowSymLinks"), ("/srv", "None", "FollowSymLinks"),
             ("/srv/app", "None", "FollowSymLinks"), ("/srv/app/public", "None", "FollowSymLinks"))


def test_good_apache_has_no_findings() -> None:
    found = {f.id for f in evaluate(facts(apache=_apache(GOOD_WALK)))}
    assert not {i for i in found if i.startswith("apache-")}


def test_htaccess_lookups_counts_directories_and_keeps_rules() -> None:
    walk = GOOD_WALK[:2] + (("/srv/app", "All", "FollowSymLinks"),
                            ("/srv/app/public", "All", "FollowSymLinks"))
    f = {x.id: x for x in evaluate(facts(apache=_apache(walk)))}["apache-htaccess-lookups"]
    assert f.severity == "info"  # local disk
    # /srv/app and the docroot, plus the script's own name under the docroot
    assert f.predicted_gain == {"metric": "syscalls per request", "syscalls_per_request": -3.0}
    assert f.change == ("# apache <Directory /srv/app/public>:", "AllowOverride None")
    with_rules = _apache(walk, htaccess_files=("/srv/app/public/.htaccess",))
    g = {x.id: x for x in evaluate(facts(apache=with_rules))}["apache-htaccess-lookups"]
    assert g.change[0].startswith("# move the rules of /srv/app/public/.htaccess")


def test_symlink_checks() -> None:
    walk = GOOD_WALK[:3] + (("/srv/app/public", "None", "Indexes SymLinksIfOwnerMatch"),)
    f = {x.id: x for x in evaluate(facts(apache=_apache(walk)))}["apache-symlink-checks"]
    assert f.predicted_gain["syscalls_per_request"] == -1.0  # type: ignore[index]
    assert f.change[-1] == "Options FollowSymLinks"


def test_max_request_workers_against_memory() -> None:
    a = _apache(GOOD_WALK, max_request_workers=400, child_pss_kb=(60_000,) * 8)
    f = {x.id: x for x in evaluate(facts(apache=a, mem_available_kb=4_000_000))}
    got = f["apache-max-workers-memory"]
    assert got.severity == "critical" and got.change[-1] == f"MaxRequestWorkers {4_480_000 // 60_000}"
    fits = dataclasses.replace(a, max_request_workers=50)
    assert "apache-max-workers-memory" not in {x.id for x in evaluate(facts(apache=fits, mem_available_kb=4_000_000))}


def test_huge_code_pages_on_but_unused() -> None:
    from statstorm.results.facts import HugePageFacts
    hp = HugePageFacts(thp_enabled="madvise", nr_hugepages=0, free_hugepages=0, page_kb=2048)
    on = {"opcache.huge_code_pages": "On"}
    unused = evaluate(facts(on, hugepages=hp, text_bytes=12 << 20, huge_mapped_kb=(0, 0)))
    assert [f.title for f in unused if f.id == "huge-code-pages"] == [
        "opcache.huge_code_pages is on but PHP got no huge pages"]
    used = evaluate(facts(on, hugepages=hp, text_bytes=12 << 20, huge_mapped_kb=(8192, 8192)))
    assert not [f for f in used if f.id == "huge-code-pages"]


def test_apply_plan_places_apache_lines() -> None:
    from statstorm.model import applyplan
    from statstorm.model.apacheplan import edit_apache
    walk = GOOD_WALK[:3] + (("/srv/app/public", "All", "Indexes SymLinksIfOwnerMatch"),)
    found = evaluate(facts(apache=_apache(walk)))
    changes = applyplan.merge([c for f in found for c in applyplan.classify(f)])
    apache = [c for c in changes if c.kind == applyplan.APACHE]
    assert [(c.key, c.value, c.where) for c in apache] == [
        ("AllowOverride", "None", "/srv/app/public"), ("Options", "FollowSymLinks", "/srv/app/public")]
    text = ('<VirtualHost *:80>\n  <Directory "/srv/app/public/">\n    AllowOverride All\n'
            '  </Directory>\n</VirtualHost>\n')
    out = edit_apache(text, apache)
    assert out == ('<VirtualHost *:80>\n  <Directory "/srv/app/public/">\n    AllowOverride None\n'
                   '      Options FollowSymLinks\n  </Directory>\n</VirtualHost>\n')
    appended = edit_apache("Listen 80\n", apache)
    assert appended.endswith("<Directory /srv/app/public>\n    AllowOverride None\n"
                             "    Options FollowSymLinks\n</Directory>\n")
    server = [applyplan.Change("x", applyplan.APACHE, "MaxRequestWorkers", "12", "", where="")]
    assert edit_apache("<IfModule mpm_prefork_module>\n\tMaxRequestWorkers 150\n</IfModule>\n",
                       server) == "<IfModule mpm_prefork_module>\n\tMaxRequestWorkers 12\n</IfModule>\n"


def test_htaccess_with_rules_is_left_to_the_user() -> None:
    from statstorm.model import applyplan
    walk = GOOD_WALK[:3] + (("/srv/app/public", "All", "FollowSymLinks"),)
    a = _apache(walk, htaccess_files=("/srv/app/public/.htaccess",))
    f = [x for x in evaluate(facts(apache=a)) if x.id == "apache-htaccess-lookups"][0]
    assert {c.kind for c in applyplan.classify(f)} == {applyplan.MANUAL}


def test_huge_code_pages_window_at_the_load_address() -> None:
    """PHP remaps only whole 2 MiB pages of the main binary's code: php-fpm8.2's 3.1 MiB
    segment holds one or none depending on where the master was loaded."""
    from statstorm.results.facts import HugePageFacts
    hp = HugePageFacts(thp_enabled="madvise", nr_hugepages=0, free_hugepages=0, page_kb=2048)
    none = ("/usr/sbin/php-fpm8.2", 0x5604E689D000, 0x5604E6BB3000)  # as seen on this machine
    one = ("/usr/sbin/php-fpm8.2", 0x5604E6800000 - 0x1000, 0x5604E6A00000 + 0x16000)
    f = [x for x in evaluate(facts(hugepages=hp, text_bytes=3 << 20, code_mapping=none))
         if x.id == "huge-code-pages"][0]
    assert f.title == "huge code pages have nothing to move here" and "0 whole" in f.evidence[-1]
    g = [x for x in evaluate(facts(hugepages=hp, text_bytes=3 << 20, code_mapping=one))
         if x.id == "huge-code-pages"][0]
    assert g.change == ("opcache.huge_code_pages = 1",) and "1 whole" in g.evidence[-1]

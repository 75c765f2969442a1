"""nginx's configuration read with crossplane, on whole trees written the way Debian and admins
write them (`fixtures/nginx/<case>/`: Debian's nginx.conf, mime.types, fastcgi.conf,
fastcgi_params and snippets/fastcgi-php.conf as the base, the includes made relative so each
tree parses where it lies). Each case's sites are compared with its `expected.json`;
STATSTORM_REGEN=1 rewrites them after a deliberate change, then review the diff. No root.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from statstorm.adapters.servers import nginx, nginx_conf
from statstorm.errors import ComponentError
from statstorm.results.sites import Site

FIXTURES = Path(__file__).parent / "fixtures" / "nginx"
SOCK = "/run/php/php8.2-fpm.sock"
CASES = ["debian-default", "two-sites", "one-line", "upstream", "inherit", "variable"]


def _read(case: str) -> nginx_conf.Config:
    return nginx_conf.read(FIXTURES / case / "nginx.conf")


def _rel(case: str, sites: tuple[Site, ...]) -> list[object]:
    """The sites as JSON, their files relative to the case's tree."""
    text = json.dumps([s.to_json() for s in sites], indent=1)
    return list(json.loads(text.replace(str(FIXTURES / case) + "/", "")))


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    got = _rel(case, nginx_conf.sites(_read(case)))
    expected = FIXTURES / case / "expected.json"
    if os.environ.get("STATSTORM_REGEN"):
        expected.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(expected.read_text())


def test_debian_default_with_its_php_location() -> None:
    (site,) = nginx_conf.sites_passing_to(_read("debian-default"), SOCK)
    assert site.docroot == "/var/www/html" and site.server_names == ("_",)
    assert site.listen == ("80", "[::]:80")
    # from snippets/fastcgi-php.conf → fastcgi.conf, two includes down
    assert site.script_filename == "$document_root$fastcgi_script_name"
    assert site.pass_file == str(FIXTURES / "debian-default/sites-enabled/default")
    assert nginx_conf.files_passing_to(_read("debian-default"), SOCK) == (site.pass_file,)


def test_every_site_on_one_pool() -> None:
    config = _read("two-sites")
    found = nginx_conf.sites_passing_to(config, SOCK)
    assert [(s.server_names[0], s.docroot) for s in found] == [
        ("blog.example.org", "/srv/blog/current/public"), ("shop.example.org", "/srv/shop/web")]
    # the shop's PHP location, not its status page, and its own SCRIPT_FILENAME
    assert found[1].script_filename == "$realpath_root$fastcgi_script_name"
    assert [Path(f).name for f in nginx_conf.files_passing_to(config, SOCK)] == [
        "blog.example.org", "shop.example.org"]
    (legacy,) = nginx_conf.sites_passing_to(config, "/run/php/php7.4-fpm.sock")
    assert legacy.docroot == "/srv/legacy"


def test_one_line_server_block() -> None:
    (site,) = nginx_conf.sites_passing_to(_read("one-line"), SOCK)
    assert (site.docroot, site.listen, site.config_line, site.pass_line) == (
        "/srv/a", ("8081",), 1, 1)


def test_upstream_resolved_to_its_servers() -> None:
    config = _read("upstream")
    (site,) = nginx_conf.sites_passing_to(config, SOCK)
    assert site.fastcgi_pass == "php" and site.passes_to == (SOCK, "127.0.0.1:9000")
    assert nginx_conf.sites_passing_to(config, "9000") == (site,)
    assert nginx_conf.sites_passing_to(config, "127.0.0.1:9000") == (site,)
    assert nginx_conf.sites_passing_to(config, "9001") == ()


def test_root_inherited_and_overridden() -> None:
    config = _read("inherit")
    inherited, legacy = nginx_conf.sites_passing_to(config, "127.0.0.1:9000")
    assert inherited.docroot == "/srv/shared"  # http level, from conf.d/root.conf
    assert legacy.docroot == "/srv/legacy-app"  # the outer location's, not the server's
    (tools,) = nginx_conf.sites_passing_to(config, "/run/php/tools.sock")
    assert tools.docroot == "/opt/tools/" and tools.docroot_alias


def test_root_with_a_variable_is_named() -> None:
    (site,) = nginx_conf.sites_passing_to(_read("variable"), SOCK)
    assert site.docroot_unknown == "$host" and site.known_docroot == ""


def test_a_config_crossplane_refuses() -> None:
    with pytest.raises(ComponentError) as err:
        _read("broken")
    msg = str(err.value)
    assert "\n" not in msg
    assert f"{FIXTURES}/broken/sites-enabled/default:3 does not parse" in msg
    assert 'directive "root" is not terminated by ";"' in msg and "nginx -t" in msg


def test_a_missing_main_file(tmp_path: Path) -> None:
    with pytest.raises(ComponentError, match=f"cannot read nginx's configuration {tmp_path}"):
        nginx_conf.read(tmp_path / "nginx.conf")


def test_a_pool_no_site_passes_to() -> None:
    config = _read("debian-default")
    assert nginx_conf.sites_passing_to(config, "/run/php/php8.1-fpm.sock") == ()
    assert nginx_conf.sites_passing_to(config, "") == ()
    assert nginx_conf.files_passing_to(config, "/run/php/other.sock") == ()


def test_listen_forms() -> None:
    assert nginx_conf.names_listen("/run/php/a.sock", "/run/php/a.sock")
    assert not nginx_conf.names_listen("/run/php/a.sock", "/run/php/a.sock.old")
    assert nginx_conf.names_listen("127.0.0.1:9000", "9000")
    assert nginx_conf.names_listen("10.0.0.5:9000", "0.0.0.0:9000")
    assert not nginx_conf.names_listen("127.0.0.1:9000", "127.0.0.1:9001")


def test_site_round_trips() -> None:
    for site in nginx_conf.sites(_read("inherit")):
        assert Site.from_json(json.loads(json.dumps(site.to_json()))) == site


def test_master_config_from_its_title() -> None:
    assert nginx.master_config(["/usr/sbin/nginx", "-g", "daemon", "on;"]) == (
        Path(nginx_conf.DEFAULT_CONF), nginx_conf.DEFAULT_PREFIX)
    assert nginx.master_config(["/usr/sbin/nginx", "-p", "/var/tmp/lab", "-e", "x.log",
                                "-c", "conf/nginx.conf"]) == (
        Path("/var/tmp/lab/conf/nginx.conf"), "/var/tmp/lab/")
    assert nginx.master_config(["nginx", "-c/etc/nginx/other.conf"])[0] == Path(
        "/etc/nginx/other.conf")


def test_the_labs_own_configuration(tmp_path: Path) -> None:
    """The lab's nginx.conf as lab_build writes it: the PHP location, not the status page."""
    conf = tmp_path / "nginx.conf"
    conf.write_text(nginx.render_conf(port=8080, docroot="/srv/www", socket="/run/x/fpm.sock",
                                      prefix=tmp_path, front_controller="index.php"))
    conf_path, prefix = nginx.master_config(nginx.lab_argv(conf, tmp_path))
    (site,) = nginx_conf.sites_passing_to(nginx_conf.read(conf_path, prefix), "/run/x/fpm.sock")
    assert (site.docroot, site.script_filename, site.listen) == (
        "/srv/www", "$document_root$fastcgi_script_name", ("127.0.0.1:8080",))
    assert nginx_conf.files_passing_to(nginx_conf.read(conf_path, prefix),
                                       "/run/x/fpm.sock") == (str(conf),)

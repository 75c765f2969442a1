"""The PHP version and root a target runs (adapters/php/php_runtime.py) and the readers that
follow them: a root's binaries run chrooted in it, the host's as they are (8.2 exactly as
before). A root made in tmp_path with its marker; the commands recorded, none run."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pytest

from statstorm.adapters.labs import phpfpm
from statstorm.adapters.php import apcu, fastcgi, php_runtime, php_targets
from statstorm.adapters.php.php_targets import FpmPool
from statstorm.adapters.php.server_php import ModPhpChildren
from statstorm.env import Env, RunResult
from statstorm.errors import DependencyError
from statstorm.results.php_root import MARKER

PHP_I = """phpinfo()
PHP Version => 8.4.11
Loaded Configuration File => /etc/php/8.4/fpm/php.ini
Scan this dir for additional .ini files => /etc/php/8.4/fpm/conf.d
realpath_cache_size => 4096K => 4096K
opcache.jit => disable => disable
"""


class Recording(Env):
    """An Env whose commands are recorded and answered with `php -i`'s text."""

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[list[str]] = []

    def run(self, argv: Sequence[str], **_: object) -> RunResult:  # type: ignore[override]
        self.ran.append(list(argv))
        return RunResult(tuple(argv), 0, PHP_I, "")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "roots/8.4"
    for d in ("usr/sbin", "usr/bin", "run", "tmp", "usr/lib/php/20240924"):
        (r / d).mkdir(parents=True)
    (r / MARKER).write_text("{}")
    for b in ("usr/sbin/php-fpm8.4", "usr/bin/php8.4"):
        (r / b).write_text("")
    return r


def test_a_roots_binary_runs_chrooted_in_it(root: Path) -> None:
    fpm = str(root / "usr/sbin/php-fpm8.4")
    rt = php_runtime.of_binary(fpm)
    assert (rt.version, rt.root) == ("8.4", str(root))
    assert rt.argv("-i") == ["chroot", str(root), "/usr/sbin/php-fpm8.4", "-i"]
    assert rt.etc("fpm") == "/etc/php/8.4/fpm"
    assert rt.host_path("/etc/php/8.4/fpm/conf.d") == root / "etc/php/8.4/fpm/conf.d"
    assert "chrooted in" in rt.label
    # its CLI is the root's own, run the same way
    cli = phpfpm.php_cli_for(fpm)
    assert cli == str(root / "usr/bin/php8.4")
    assert phpfpm.command(cli)[:2] == ["chroot", str(root)]


def test_the_hosts_binary_runs_as_it_is() -> None:
    rt = php_runtime.of_binary("/usr/sbin/php-fpm8.2")
    assert (rt.version, rt.root) == ("8.2", "")
    assert rt.argv("-tt") == ["/usr/sbin/php-fpm8.2", "-tt"]
    assert rt.host_path("/etc/php/8.2/fpm") == Path("/etc/php/8.2/fpm")
    assert php_runtime.of_binary("/usr/sbin/php-fpm").version == "8.2"  # no version: the host's
    assert php_targets.PHP_BINARIES == ("/usr/bin/php8.2", "/usr/sbin/php-fpm8.2",
                                        "/usr/bin/php-cgi8.2")


def test_a_root_without_its_cli_names_the_fix(root: Path) -> None:
    (root / "usr/bin/php8.4").unlink()
    with pytest.raises(DependencyError, match="php-root build 8.4 --rebuild"):
        phpfpm.php_cli_for(str(root / "usr/sbin/php-fpm8.4"))


def test_settings_of_a_root_pool_are_read_in_the_root(root: Path) -> None:
    fpm = str(root / "usr/sbin/php-fpm8.4")
    env = Recording()
    pool = FpmPool("www", [2], [1], fpm, [fpm, "-y", "/lab/conf/php-fpm.conf", "-d", "a=b"])
    settings = pool.settings(env)
    assert settings["opcache.jit"] == "disable" and settings["sapi"] == "fpm-fcgi"
    assert env.ran[0] == ["chroot", str(root), "/usr/sbin/php-fpm8.4", "-i", "-y",
                          "/lab/conf/php-fpm.conf", "-d", "a=b"]
    assert env.ran[1][:4] == ["chroot", str(root), "/usr/sbin/php-fpm8.4", "-tt"]
    env.ran.clear()
    php_targets.cli_settings(env, [phpfpm.php_cli_for(fpm)])
    assert env.ran == [["chroot", str(root), "/usr/bin/php8.4", "-i"]]
    assert pool.runtime.root == str(root)


def test_settings_of_a_host_pool_are_read_as_before() -> None:
    env = Recording()
    pool = FpmPool("www", [2], [1], "/usr/sbin/php-fpm8.2",
                   ["/usr/sbin/php-fpm8.2", "-y", "/etc/php/8.2/fpm/php-fpm.conf"])
    pool.settings(env)
    assert env.ran[0] == ["/usr/sbin/php-fpm8.2", "-i", "-y", "/etc/php/8.2/fpm/php-fpm.conf"]


def test_identity_from_php_i(root: Path) -> None:
    ident = php_runtime.parse_identity(PHP_I)
    assert ident == php_runtime.Identity("8.4.11", "/etc/php/8.4/fpm/php.ini",
                                         "/etc/php/8.4/fpm/conf.d")
    env = Recording()
    rt = php_runtime.of_binary(str(root / "usr/sbin/php-fpm8.4"))
    said = php_runtime.identity(env, rt, ["-y", "/c"]).describe(rt)
    assert said.startswith("PHP 8.4.11 (chrooted in the PHP root") and "/etc/php/8.4/fpm" in said
    assert php_runtime.parse_identity("").php_version == ""


def test_the_query_script_is_written_where_a_chrooted_worker_sees_it(root: Path) -> None:
    with fastcgi.script_file("<?php echo 1;", str(root)) as seen:
        assert seen.startswith(f"/run/{fastcgi.SCRIPT_DIR_PREFIX}")
        assert (root / seen.lstrip("/")).read_text() == "<?php echo 1;"
        assert php_targets.is_query_script(seen.encode())
    assert not (root / seen.lstrip("/")).exists()


def test_apcu_of_a_root_is_its_own(root: Path) -> None:
    assert apcu.extension_path(root=str(root)) == ""
    (root / "usr/lib/php/20240924/apcu.so").write_text("")
    assert apcu.extension_path(root=str(root)) == "/usr/lib/php/20240924/apcu.so"


def test_mod_php_reads_its_versions_ini() -> None:
    php = ModPhpChildren("mod_php", [2], [1], "/usr/lib/apache2/modules/libphp8.2.so")
    assert php.runtime.etc(php.sapi_dir) == "/etc/php/8.2/apache2"
    env = Recording()
    php.settings(env)
    assert env.ran[0][-3:] == ["-c", "/etc/php/8.2/apache2/php.ini", "-i"]


@pytest.mark.parametrize("binary,ini", [
    ("/usr/lib/apache2/modules/libphp8.2.so", "/etc/php/8.2/apache2/conf.d/99-statstorm.ini"),
    ("/usr/lib/apache2/modules/libphp8.4.so", "/etc/php/8.4/apache2/conf.d/99-statstorm.ini"),
    ("/usr/lib/apache2/modules/libphp.so", "/etc/php/8.2/apache2/conf.d/99-statstorm.ini"),
])
def test_apply_writes_the_system_apaches_php_of_its_version(binary: str, ini: str) -> None:
    from statstorm.adapters.apply import apply_target

    php = ModPhpChildren("mod_php", [2], [1], binary, server_pid=1,
                         ctl=("/usr/sbin/apache2ctl",))
    t = apply_target.system_apache(php, "")
    assert t.master_ini == Path(ini) and t.php_in_apache

"""The texts of apply's php-fpm handover (model/fpm_handover.py): the second master's
configuration and nginx's passes pointed at it. The handover itself runs against Debian's
php-fpm and nginx in tests/test_stock_fpm.py."""

from __future__ import annotations

import pytest

from statstorm.model import fpm_handover

POOL = """; Debian's www.conf, shortened
[www]
user = www-data
group = www-data
listen = /run/php/php8.2-fpm.sock
listen.owner = www-data
pm = dynamic
pm.max_children = 5
php_admin_value[realpath_cache_ttl] = 600

[other]
listen = 127.0.0.1:9001
pm = static
"""

SOCK = "/run/php/php8.2-fpm.sock"


def reaches(address: str) -> bool:
    return address == SOCK


def test_the_second_master_runs_the_pools_section_on_its_own_socket() -> None:
    text = fpm_handover.handover_conf(POOL, "www", "/run/php/statstorm-handover-www.sock",
                                      pid="/s/php-fpm.pid", error_log="/s/php-fpm.log")
    lines = text.splitlines()
    assert lines[1:6] == ["[global]", "pid = /s/php-fpm.pid", "error_log = /s/php-fpm.log",
                          "daemonize = no", "process_control_timeout = 10s"]
    pool = lines[lines.index("[www]") + 1:]
    assert pool[0] == "listen = /run/php/statstorm-handover-www.sock"
    assert "listen = /run/php/php8.2-fpm.sock" not in text
    assert "php_admin_value[realpath_cache_ttl] = 600" in pool  # the new settings
    assert "listen.owner = www-data" in pool  # nginx may still connect
    assert "[other]" not in text and "9001" not in text


@pytest.mark.parametrize("text,why", [(POOL, "no \\[nope\\] section"),
                                      ("[www]\ninclude = /etc/x.conf\n", "includes")])
def test_a_pool_that_cannot_run_apart_is_refused(text: str, why: str) -> None:
    pool = "nope" if "nope" in why else "www"
    with pytest.raises(ValueError, match=why):
        fpm_handover.handover_conf(text, pool, "/x.sock", pid="p", error_log="l")


def test_passes_and_upstream_servers_are_pointed_elsewhere_and_nothing_else() -> None:
    conf = ("upstream php {\n    server unix:/run/php/php8.2-fpm.sock weight=2;\n"
            "    server 127.0.0.1:9001;\n}\n"
            "server {\n\tlisten 80;\n\troot /srv/www;  # fastcgi_pass unix:/run/php/php8.2-fpm.sock;\n"
            "\tlocation ~ \\.php$ { include snippets/fastcgi-php.conf; "
            "fastcgi_pass unix:/run/php/php8.2-fpm.sock; }\n"
            "\tlocation /other { fastcgi_pass \"unix:/run/php/php8.2-fpm.sock\"; }\n"
            "\tlocation /var { fastcgi_pass unix:$sock; }\n}\n")
    out, n = fpm_handover.repoint(conf, reaches, "unix:/run/php/statstorm-handover-www.sock")
    assert n == 3
    assert out.count("unix:/run/php/statstorm-handover-www.sock") == 3
    assert "server unix:/run/php/statstorm-handover-www.sock weight=2;" in out
    assert "server 127.0.0.1:9001;" in out  # another pool's
    assert "# fastcgi_pass unix:/run/php/php8.2-fpm.sock;" in out  # a comment stays
    assert "fastcgi_pass unix:$sock;" in out  # a variable: not known to reach the pool
    back, m = fpm_handover.repoint(out, lambda a: a.endswith("handover-www.sock"),
                                   "unix:" + SOCK)
    assert m == 3 and back == conf.replace('"unix:/run/php/php8.2-fpm.sock"',
                                           "unix:/run/php/php8.2-fpm.sock")

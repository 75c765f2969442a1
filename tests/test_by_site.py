"""A site's URL to the PHP target serving it (`--site URL`): the port of nginx's `listen`
forms, the server block nginx would choose, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import invoke
from statstorm.adapters.php import by_site
from statstorm.errors import UsageError
from statstorm.results.sites import Site


@pytest.mark.parametrize("listen,port", [
    ("127.0.0.1:8080", 8080), ("8080", 8080), ("[::]:80", 80), ("80 default_server", 80),
    ("[::]:443 ssl http2", 443), ("localhost", 80), ("unix:/run/nginx.sock", None),
])
def test_port_of_nginx_listen(listen: str, port: int | None) -> None:
    assert by_site._port_of(listen) == port  # noqa: SLF001 - the parser under test


def test_the_server_block_nginx_would_choose() -> None:
    a = Site(server_names=("a.example",), listen=("8080",), passes_to=("/run/a.sock",))
    b = Site(server_names=("b.example",), listen=("8080 default_server",))
    assert by_site._pick([a, b], "a.example") is a  # noqa: SLF001
    assert by_site._pick([a, b], "127.0.0.1") is b  # noqa: SLF001
    assert by_site._pick([a], "127.0.0.1") is a  # noqa: SLF001
    assert by_site._pick([], "x") is None  # noqa: SLF001


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "127.0.0.1:8080", "http://:80/",
                                 "http://127.0.0.1:port/"])
def test_a_url_that_names_no_site_is_refused(url: str) -> None:
    with pytest.raises(UsageError, match="--site"):
        by_site.split_url(url)


def test_site_with_another_target_is_one_line(tmp_path: Path) -> None:
    for verb in (["check"], ["apply", "--all"], ["trace"]):
        res = invoke([*verb, "--pool", "www", "--site", "http://127.0.0.1:8080/"], tmp_path)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert "--site" in lines[0]

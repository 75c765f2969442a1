"""`statstorm matrix --php`: the PHP version as one more axis of the grid. Unit tests of the
grid, the cells' ids and labels and the flags' errors; and a short real matrix of two cells,
PHP 8.2 (the host's) and 8.4 (from its root), on the synthetic app, each cell's lab asked
which PHP it runs."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from statstorm.adapters.labs import php_roots, state as labs
from statstorm.cli import main
from statstorm.commands import matrix as matrix_cmd
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.model.matrix_grid import ARCHS, MatrixOptions, check_php, grid, parse_php
from statstorm.model.matrix_summary import differs_in
from statstorm.results.matrix import Cell as CellResult
from statstorm.results.matrix import MatrixResult
from statstorm.results.php_root import release

from conftest import PHP_ROOTS as ROOTS  # noqa: E402  (the shared roots)


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_several_versions_are_an_axis_named_in_ids_and_labels() -> None:
    opts = MatrixOptions(archs=("nginx-fpm",), opcache=(True,), storages=("glusterfs",),
                         php=parse_php("7.4, php8.4,8.4"))
    assert opts.php == ("7.4", "8.4")
    cells = grid(opts)
    assert [c.id for c in cells] == ["nginx-fpm/opcache-on/glusterfs/php7.4",
                                     "nginx-fpm/opcache-on/glusterfs/php8.4"]
    assert [opts.php_of(c) for c in cells] == ["7.4", "8.4"]
    results = [CellResult(id=c.id, server=c.server, mpm=c.mpm, handler=c.handler,
                          opcache=c.opcache, huge_code_pages=c.huge_code_pages,
                          storage=c.storage, php=c.php) for c in cells]
    assert results[1].label == "nginx / fpm / opcache on / huge code pages off / glusterfs / php8.4"
    assert differs_in(results[0], results[1]) == ["php"]
    # the file keeps the version and reads it back
    back = MatrixResult.from_json(MatrixResult("synthetic", "measured", {}, "",
                                               cells=tuple(results)).to_json())
    assert [c.php for c in back.cells] == ["7.4", "8.4"]
    assert opts.identity()["php"] == ["7.4", "8.4"]


def test_one_version_is_no_axis() -> None:
    opts = MatrixOptions(archs=("nginx-fpm",), opcache=(True,), php=("8.4",))
    [cell] = grid(opts)
    assert cell.id == "nginx-fpm/opcache-on/local" and opts.php_of(cell) == "8.4"
    label = CellResult(id=cell.id, server="nginx", mpm="", handler="fpm", opcache=True,
                       huge_code_pages=False, storage="local").label
    assert "php" not in label
    # a matrix without --php runs the host's PHP, its identity as before --php existed
    plain = MatrixOptions(archs=("nginx-fpm",), opcache=(True,))
    assert plain.php_of(grid(plain)[0]) == release("8.2").version and "php" not in plain.identity()


def test_root_versions_need_fpm_architectures() -> None:
    with pytest.raises(UsageError, match="--arch nginx-fpm"):
        check_php(MatrixOptions(archs=ARCHS, php=("8.2", "8.4")))
    check_php(MatrixOptions(archs=ARCHS, php=("8.2",)))  # the host's runs in every server
    with pytest.raises(UsageError, match="7.4, 8.2, 8.4"):
        parse_php("8.2,9.9")
    with pytest.raises(UsageError, match="empty"):
        parse_php(" , ")


def test_dry_run_lists_the_versions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["matrix", "--opcache", "on", "--storage", "glusterfs",
                               "--php", "7.4,8.2,8.4", "--dry-run",
                               "-o", str(tmp_path / "m.json")], capsys)
    assert code == 0, err
    # --arch not given: the fpm architectures only, as a root runs php-fpm
    assert "matrix of 9 cell(s) on synthetic on PHP 7.4, 8.2, 8.4" in out
    for version in ("7.4", "8.2", "8.4"):
        assert f"nginx-fpm/opcache-on/glusterfs/php{version}" in out
    assert "mod_php" not in out and "fcgid" not in out
    code, _, err = run_main(["matrix", "--arch", "apache-prefork-mod_php", "--php", "8.4",
                             "--dry-run"], capsys)
    assert code == 2 and "--arch nginx-fpm" in err and "Traceback" not in err
    code, _, err = run_main(["matrix", "--php", "5.6", "--dry-run"], capsys)
    assert code == 2 and "--php '5.6'" in err and "Traceback" not in err


@pytest.mark.root
@pytest.mark.slow
def test_two_versions_each_cell_on_its_php(state_home: Path, tmp_path: Path, roots: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STATSTORM_HOME", str(state_home))
    out = tmp_path / "m.json"
    env = Env(state_root=state_home)
    opts = MatrixOptions(app="synthetic", archs=("nginx-fpm",), opcache=(True,),
                         php=("8.2", "8.4"), rounds=1, duration_s=1, warmup_s=0,
                         round_warmup_s=0, concurrency=2, workers=2, output=out)
    plan = matrix_cmd.plan(env, opts)
    # while the labs are up: the PHP each cell's lab runs, and the one a probe page on it
    # says served it
    seen: dict[str, tuple[str, str]] = {}

    def ask(result: MatrixResult) -> None:
        states = {s.name.rsplit("-", 1)[-1]: s for s in labs.list_labs(env)}
        for n, c in enumerate(result.cells):
            st = states[str(n)]
            Path(st.docroot, "probe.php").write_text("<?php echo PHP_VERSION;\n")
            with urllib.request.urlopen(f"{st.url}/probe.php", timeout=10) as answer:
                seen[c.id] = (st.php_version, answer.read().decode())

    result = matrix_cmd.run(env, plan, after_round=ask)
    data = json.loads(out.read_text())
    assert [c["id"] for c in data["cells"]] == ["nginx-fpm/opcache-on/local/php8.2",
                                               "nginx-fpm/opcache-on/local/php8.4"]
    assert [c["php"] for c in data["cells"]] == ["8.2", "8.4"]
    assert all(len(c["rounds"]) == 1 and c["failed"] == 0 for c in data["cells"])
    [cmp] = data["comparisons"]
    assert cmp["differs_in"] == ["php"]
    assert [c.label.endswith(f"php{v}") for c, v in zip(result.cells, ("8.2", "8.4"))] == [True, True]
    for c in data["cells"]:
        version, served = seen[c["id"]]
        assert version == c["php"] and served.startswith(f"{c['php']}."), (version, served)
    labs_dir = state_home / "labs"
    assert not labs_dir.exists() or not any(labs_dir.iterdir()), "labs left after the run"
    assert not php_roots.mounts_under(ROOTS / "8.4" / str(state_home).lstrip("/"))

"""`statstorm matrix --storage-delay`: the delay as one more axis of the grid, each delayed
cell a GlusterFS lab whose brick adds that delay (pure checks, the CLI's plan, and one real
matrix of a delayed and an undelayed GlusterFS cell as root)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statstorm.adapters.labs import state as labs
from statstorm.adapters.storage import gluster
from statstorm.cli import main
from statstorm.commands import matrix as matrix_cmd
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.model import storage_delay
from statstorm.model.matrix_grid import MatrixOptions
from statstorm.results.matrix import MatrixResult


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


@pytest.mark.parametrize("storages,delays,cells", [
    (("glusterfs",), (0,), ("glusterfs",)),
    (("glusterfs",), (0, 200, 1000), ("glusterfs", "glusterfs+200us", "glusterfs+1ms")),
    (("local", "glusterfs"), (0, 1000), ("local", "glusterfs", "glusterfs+1ms")),
    (("glusterfs",), (1000,), ("glusterfs+1ms",)),
    (("local",), (0,), ("local",)),
])
def test_every_storage_with_every_delay_it_can_take(storages: tuple[str, ...],
                                                    delays: tuple[int, ...],
                                                    cells: tuple[str, ...]) -> None:
    assert storage_delay.axis(storages, delays) == cells
    for c in cells:
        assert storage_delay.tag(*storage_delay.split(c)) == c


@pytest.mark.parametrize("storages,delays,says", [
    (("local",), (1000,), "--storage glusterfs only"),
    (("local",), (0, 1000), "--storage glusterfs only"),
    (("local", "glusterfs"), (200, 1000), "add 0 to the list (e.g. --storage-delay 0,1ms)"),
])
def test_a_delay_on_local_storage_is_refused_in_one_line(storages: tuple[str, ...],
                                                         delays: tuple[int, ...],
                                                         says: str) -> None:
    with pytest.raises(UsageError) as e:
        storage_delay.axis(storages, delays)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_delay_lists_parse_once_each() -> None:
    assert storage_delay.parse_list("0,200us,1ms,1000us,0") == (0, 200, 1000)
    for text in ("", " , ", "1ms,5"):
        with pytest.raises(UsageError):
            storage_delay.parse_list(text)
    assert storage_delay.split("local") == ("local", 0)
    with pytest.raises(UsageError, match="STORAGE\\+DURATION"):
        storage_delay.split("glusterfs+far")


def test_dry_run_lists_a_cell_per_delay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["matrix", "--arch", "nginx-fpm", "--opcache", "on",
                               "--storage", "local,glusterfs", "--storage-delay", "0,200us,1ms",
                               "--dry-run", "-o", str(tmp_path / "m.json")], capsys)
    assert code == 0, err
    assert "matrix of 4 cell(s)" in out
    for cell in ("nginx-fpm/opcache-on/local", "nginx-fpm/opcache-on/glusterfs",
                 "nginx-fpm/opcache-on/glusterfs+200us", "nginx-fpm/opcache-on/glusterfs+1ms"):
        assert f" {cell}\n" in out
    assert "local+" not in out
    code, out, err = run_main(["matrix", "--arch", "nginx-fpm", "--opcache", "on",
                               "--storage", "glusterfs", "--storage-delay", "1ms",
                               "--cells", "*/glusterfs+1ms", "--dry-run"], capsys)
    assert code == 0 and "matrix of 1 cell(s)" in out, err


@pytest.mark.parametrize("argv,says", [
    (["--storage", "local", "--storage-delay", "1ms"], "local storage has no delay"),
    (["--storage", "local,glusterfs", "--storage-delay", "1ms"], "add 0 to the list"),
    (["--storage", "glusterfs", "--storage-delay", "5"], "with its unit"),
    (["--storage", "glusterfs", "--storage-delay", "2s"], "at most 1s"),
    (["--storage", "glusterfs+soon"], "STORAGE+DURATION"),
    (["--storage", "local+1ms"], "local storage has no delay"),
])
def test_bad_delays_are_one_line(argv: list[str], says: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["matrix", "--arch", "nginx-fpm", *argv, "--dry-run"], capsys)
    assert code == 2 and says in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and not out


def test_the_delay_is_kept_in_the_options_a_resume_reads(tmp_path: Path) -> None:
    opts = MatrixOptions(archs=("nginx-fpm",), opcache=(True,),
                         storages=storage_delay.axis(("glusterfs",), (0, 1000)),
                         output=tmp_path / "m.json", dry_run=True)
    back = matrix_cmd.options_from_json(matrix_cmd.options_to_json(opts), tmp_path / "m.json")
    assert back.storages == ("glusterfs", "glusterfs+1ms")
    assert back.identity() == opts.identity()
    assert "nginx-fpm/opcache-on/glusterfs+1ms" in back.identity()["cells"]  # type: ignore[operator]


@pytest.mark.root
def test_a_delayed_cell_is_a_lab_with_that_delay(state_home: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STATSTORM_HOME", str(state_home))
    out = tmp_path / "m.json"
    env = Env(state_root=state_home)
    seen: dict[str, int] = {}

    def labs_delays(result: MatrixResult) -> None:
        """While the labs are up: each lab's recorded delay and its brick's, read back."""
        for s in labs.list_labs(env):
            if s.phase == "up" and s.volume:
                brick = gluster.delay_in_effect(gluster.volume_options(env, s.volume))
                assert brick == s.storage_delay_us, s.name
                seen[storage_delay.tag(s.storage, s.storage_delay_us)] = brick

    plan = matrix_cmd.plan(env, MatrixOptions(
        app="synthetic", archs=("nginx-fpm",), opcache=(True,),
        storages=storage_delay.axis(("glusterfs",), (0, 1000)), rounds=1, duration_s=1,
        warmup_s=0, round_warmup_s=0, concurrency=2, workers=1, output=out))
    result = matrix_cmd.run(env, plan, after_round=labs_delays)
    assert seen == {"glusterfs": 0, "glusterfs+1ms": 1000}
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(result.to_json())) and data["interrupted"] is False
    cells = {c["storage"]: c for c in data["cells"]}
    assert set(cells) == {"glusterfs", "glusterfs+1ms"}
    for c in cells.values():
        assert c["id"].endswith("/" + c["storage"]) and c["requests"] > 0 and c["failed"] == 0
    [cmp] = data["comparisons"]
    assert cmp["differs_in"] == ["storage"]
    assert data["options"]["storages"] == ["glusterfs", "glusterfs+1ms"]
    labs_dir = state_home / "labs"
    assert not labs_dir.exists() or not any(labs_dir.iterdir()), "labs left after the run"
    # the table the CLI prints names the delayed cell
    from statstorm.cli.matrix import render

    render(result)
    assert "glusterfs+1ms" in capsys.readouterr().out

"""`statstorm matrix` on two cheap cells (the synthetic app, nginx + php-fpm with OPcache on and
off) against real labs, an interruption resumed, a validation failure injected and counted;
the dry-run plan; `matrix import` golden files from the ab runs of a blog post.

Assertions are about behaviour (rounds done, failures counted, labs gone, JSON shape), never
about throughput figures."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from statstorm.cli import main
from statstorm.commands import matrix as matrix_cmd
from statstorm.commands import matrix_import
from statstorm.model.matrix_grid import Knob, MatrixOptions, grid, remaining, round_order
from statstorm.model.matrix_summary import half_width, precision, refresh, shown
from statstorm.env import Env
from statstorm.results.matrix import Cell as CellResult
from statstorm.results.matrix import MatrixResult, Round, save

FIX = Path(__file__).resolve().parent / "fixtures" / "matrix"
CELLS = ("nginx-fpm/opcache-on/local", "nginx-fpm/opcache-off/local")
FLAGS = ["--app", "synthetic", "--arch", "nginx-fpm", "--rounds", "2", "-d", "1", "--warmup", "1",
         "--round-warmup", "0", "-c", "4", "--workers", "2",
         "--test-break", "nginx-fpm/opcache-off/*=4"]


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def _normalised(data: dict[str, object]) -> dict[str, object]:
    data = dict(data)
    data["started"] = data["finished"] = "(volatile)"
    data["options"] = {**data["options"],  # type: ignore[dict-item]
                       "files": [Path(f).name for f in data["options"]["files"]]}  # type: ignore[index]
    return data


@pytest.mark.parametrize("case,labels", [("003_post", []),
                                         ("003_worker_fcgid", ["apache mpm_worker + php5-cgi + mod_fcgid"])])
def test_ab_import_golden(case: str, labels: list[str]) -> None:
    got = matrix_import.import_ab([FIX / f"{case}.txt"], labels).to_json()
    assert _normalised(got) == json.loads((FIX / f"{case}.json").read_text())


def test_ab_import_reads_the_post(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ab.json"
    code, stdout, err = run_main(["matrix", "import", str(FIX / "003_post.txt"), "-o", str(out),
                                  "--json"], capsys)
    assert code == 0, err
    data = json.loads(stdout)
    assert data == json.loads(out.read_text()) and data["schema"] == "statstorm.matrix/1"
    cells = {c["id"]: c for c in data["cells"]}
    assert set(cells) == {"apache-prefork-mod_php/ab", "apache-worker-fpm/ab", "apache-worker-fcgid/ab",
                          "apache-event-fcgid/ab", "apache-event-fpm/ab"}
    prefork = cells["apache-prefork-mod_php/ab"]
    assert (prefork["failed"], prefork["requests"], prefork["failed_by"]["length"]) == (14, 100, 14)
    assert prefork["primer"]["imported"]["requests_per_second"] == 2.65
    assert all(c["verdict"] == "no significant difference" for c in data["comparisons"])
    assert len(data["comparisons"]) == 10


def test_ab_import_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("no ab here\n")
    code, _, err = run_main(["matrix", "import", str(empty)], capsys)
    assert code == 2 and "no ab report" in err and "Traceback" not in err
    code, _, err = run_main(["matrix", "import", str(FIX / "003_post.txt"), "--label", "x"], capsys)
    assert code == 2 and "--label" in err


def test_dry_run_prints_the_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["matrix", "--app", "mediawiki", "--dry-run",
                               "-o", str(tmp_path / "m.json")], capsys)
    assert code == 0, err
    assert "matrix of 12 cell(s) on mediawiki" in out and "estimated duration:" in out
    for cell in ("nginx-fpm/opcache-on/local", "apache-prefork-mod_php/opcache-off/local",
                 "apache-worker-fcgid/opcache-on/local"):
        assert cell in out
    assert "matrix.lua" in out and not (tmp_path / "m.json").exists()
    code, out, _ = run_main(["matrix", "--arch", "nginx-fpm", "--opcache", "on",
                             "--huge-code-pages", "on,off", "--dry-run"], capsys)
    assert "nginx-fpm/opcache-on+huge-pages/local" in out and "2 cell(s)" in out


def test_bad_flags_name_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, text in ((["--arch", "apache-prefork-fpm"], "--arch"), (["--opcache", "maybe"], "--opcache"),
                       (["--cells", "nope/*"], "no such cell"), (["-d", "0.5"], "--duration")):
        code, _, err = run_main(["matrix", *argv, "--dry-run"], capsys)
        assert code == 2 and text in err and "Traceback" not in err, err


@pytest.mark.root
def test_two_cells_interrupted_resumed_failures_counted(
        state_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STATSTORM_HOME", str(state_home))
    out = tmp_path / "m.json"
    env = Env(state_root=state_home)
    opts = MatrixOptions(app="synthetic", archs=("nginx-fpm",), rounds=2, duration_s=1,
                         warmup_s=1, round_warmup_s=0, concurrency=4, workers=2, output=out,
                         knobs=(("nginx-fpm/opcache-off/*", Knob(break_every=4)),))
    plan = matrix_cmd.plan(env, opts)
    assert [c.id for c in plan.cells] == list(CELLS)
    assert plan.order == ((0, 0), (0, 1), (1, 1), (1, 0))  # interleaved, rotated each round

    def stop_after_first(result: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        matrix_cmd.run(env, plan, after_round=stop_after_first)
    first = json.loads(out.read_text())
    assert first["interrupted"] is True
    assert [len(c["rounds"]) for c in first["cells"]] == [1, 0]
    labs_dir = state_home / "labs"
    assert not labs_dir.exists() or not any(labs_dir.iterdir()), "labs left after Ctrl-C"

    # The same flags and -o continue where it stopped; --precision (not part of what must
    # match) then adds rounds: ±0.001 % is never reached, so it stops at --max-rounds.
    code, stdout, err = run_main(["matrix", *FLAGS, "-o", str(out), "--json",
                                  "--precision", "0.001", "--max-rounds", "3"], capsys)
    assert "measured runs to go: 3" in err and "up to 3 in all" in err
    assert "round 3 of at most 3" in err and "the most allowed (--max-rounds)" in err
    data = json.loads(stdout)
    assert data["stop"]["reason"] == "max rounds reached" and data["stop"]["rounds"] == 3
    assert data["stop"]["widest"] == f"{CELLS[0]} vs {CELLS[1]}" and data["stop"]["widest_pct"] > 0.001
    assert data == json.loads(out.read_text())
    assert code == 1  # validation failures: shown, and the exit status says so
    assert data["schema"] == "statstorm.matrix/1" and data["interrupted"] is False
    assert data["thp_mode"] in ("always", "madvise", "never")
    on, off = data["cells"]
    assert (on["id"], off["id"]) == CELLS
    for c in (on, off):
        assert [r["round"] for r in c["rounds"]] == [0, 1, 2]
        assert {"server", "mpm", "handler", "opcache", "huge_code_pages", "storage"} <= set(c)
        assert (c["server"], c["handler"], c["storage"], c["huge_code_pages"]) == ("nginx", "fpm", "local", False)
        assert c["rps"]["ci_low"] <= c["rps"]["median"] <= c["rps"]["ci_high"] and c["rps"]["median"] > 0
        assert 0 < c["p50_ms"] <= c["p99_ms"] and c["requests"] > 0
        assert c["pss_mb"]["server"] > 0 and c["pss_mb"]["php"] > 0 and c["pss_mb"]["per_worker"] > 0
        assert c["pss_mb"]["php_peak"] >= c["pss_mb"]["php"]
        assert c["huge_pages"]["workers"] >= 2 and isinstance(c["huge_pages"]["in_use"], bool)
    assert (on["opcache"], off["opcache"]) == (True, False)
    assert on["failed"] == 0
    assert off["failed"] > 0 and off["failed_by"]["marker"] == off["failed"]
    assert off["knob"] == {"break_every": 4}
    [cmp] = data["comparisons"]
    assert cmp["a"] == CELLS[0] and cmp["b"] == CELLS[1] and cmp["differs_in"] == ["opcache"]
    assert cmp["verdict"] in ("significant", "no significant difference")
    assert not labs_dir.exists() or not any(labs_dir.iterdir()), "labs left after the run"
    assert not (state_home / "matrix-knobs").exists()

    # Nothing left to do: the file is printed again, no lab starts.
    code, _, err = run_main(["matrix", *FLAGS, "-o", str(out)], capsys)
    assert "nothing to measure" in err
    # Another matrix into the same file is refused.
    code, _, err = run_main(["matrix", "--arch", "nginx-fpm", "--opcache", "on", "-o", str(out)], capsys)
    assert code == 2 and "another matrix" in err


def test_root_needed(capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() == 0:
        pytest.skip("runs as root")
    code, _, err = run_main(["matrix", "--arch", "nginx-fpm"], capsys)
    assert code == 3 and "root" in err


def test_twin_knob_adds_an_identical_cell_with_the_knob() -> None:
    from statstorm.model.matrix_grid import MatrixOptions, grid, parse_knob
    opts = MatrixOptions(archs=("nginx-fpm",), opcache=(True,),
                         knobs=(parse_knob("nginx-fpm/opcache-on/local+=300", "spin"),))
    cells = grid(opts)
    assert [c.id for c in cells] == ["nginx-fpm/opcache-on/local",
                                     "nginx-fpm/opcache-on/local+knob"]
    assert not cells[0].knob and cells[1].knob.spin_us == 300
    assert cells[0].php_ini() == cells[1].php_ini()


def _measured(rps: dict[str, list[float]]) -> MatrixResult:
    cells = tuple(CellResult(id=cid, server="nginx", mpm="", handler="fpm", opcache=True,
                             huge_code_pages=False, storage="local",
                             rounds=tuple(Round(round=i, requests=100, duration_s=1.0, rps=v,
                                                failed=0) for i, v in enumerate(values)))
                  for cid, values in rps.items())
    return refresh(MatrixResult(app="synthetic", source="measured", options={}, started="",
                                cells=cells), 0.05)


def test_spin_knob_burns_cpu_time(tmp_path: Path) -> None:
    """The knob spends its µs as CPU time of the PHP process, not as time on the clock: a
    worker stopped in the middle of its spin (here by SIGSTOP, for longer than the whole
    spin) still spends all of it (real PHP; the kernel's account of the child)."""
    if shutil.which("php") is None:
        pytest.skip("php CLI not installed")
    env = Env(state_root=tmp_path / "home")
    env.state_root.mkdir()
    knob = matrix_cmd._write_knob(env, tmp_path / "home" / "knobs" / "x", "x", Knob(spin_us=400_000))
    script = tmp_path / "page.php"
    script.write_text("<?php echo 'done';\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(["php", "-n", "-d", f"auto_prepend_file={knob}", str(script)],
                            stdout=subprocess.PIPE, text=True)
    time.sleep(0.1)
    proc.send_signal(signal.SIGSTOP)
    time.sleep(0.6)
    proc.send_signal(signal.SIGCONT)
    out, _ = proc.communicate(timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert out == "done" and proc.returncode == 0
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert cpu >= 0.4


def test_rounds_turn_the_order() -> None:
    """Each cell runs first equally often and follows each other cell equally often."""
    assert [round_order(r, 3) for r in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    cells = grid(MatrixOptions(archs=("nginx-fpm",)))
    assert len(cells) == 2
    order = remaining(cells, 4, {cells[1].id: {0}})  # cell 1's round 0 is measured already
    assert order == [(0, 0), (1, 1), (1, 0), (2, 0), (2, 1), (3, 1), (3, 0)]


def test_precision_is_the_widest_interval_shown() -> None:
    twin = CELLS[0] + "+knob"
    # paired rounds whose ratio barely moves: a narrow interval around 0.97
    steady = _measured({CELLS[0]: [100.0, 120.0, 90.0, 110.0],
                        twin: [97.0, 116.5, 87.2, 106.8]})
    [c] = steady.comparisons
    assert c["differs_in"] == [] and shown(c)
    p = precision(steady, 0.01)
    assert p.met and p.what == f"{CELLS[0]} vs {twin}" and 0 < p.widest < 0.01
    assert half_width(c["ratio"], c["ci_low"], c["ci_high"]) == p.widest
    assert not precision(steady, p.widest / 2).met
    # a noisy pair: the widest interval decides, whatever the ratios are
    noisy = _measured({CELLS[0]: [100.0, 120.0, 90.0, 110.0],
                       twin: [80.0, 125.0, 95.0, 100.0]})
    assert not precision(noisy, 0.05).met and precision(noisy, 0.5).met
    # one round: no interval yet; one cell: its median's interval
    assert precision(_measured({CELLS[0]: [100.0], twin: [97.0]}), 0.5).widest == math.inf
    assert precision(_measured({CELLS[0]: [100.0, 101.0, 100.5, 99.5, 100.2]}), 0.02).met
    # pairs that differ in two parameters are not shown, and do not hold the rounds back
    assert not shown({"differs_in": ["opcache", "storage"]})


def test_precision_reached_resumes_to_nothing(tmp_path: Path) -> None:
    """A result file whose intervals already meet --precision: run() measures nothing and
    starts no lab; the stop reason is recorded."""
    out = tmp_path / "m.json"
    twin = CELLS[0] + "+knob"
    opts = MatrixOptions(app="synthetic", archs=("nginx-fpm",), opcache=(True,), rounds=4,
                         knobs=(("nginx-fpm/opcache-on/local", Knob(spin_us=300, twin=True)),),
                         precision=0.01, output=out)
    result = _measured({CELLS[0]: [100.0, 120.0, 90.0, 110.0], twin: [97.0, 116.5, 87.2, 106.8]})
    save(out, dataclasses.replace(result, options=matrix_cmd.options_to_json(opts)))
    env = Env(state_root=tmp_path / "state")
    plan = matrix_cmd.plan(env, dataclasses.replace(opts, dry_run=True))  # no root needed
    assert plan.order == ()
    data = matrix_cmd.run(env, plan).to_json()
    assert data["stop"]["reason"] == "precision reached" and data["stop"]["rounds"] == 4
    assert not (tmp_path / "state" / "labs").exists()

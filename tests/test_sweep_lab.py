"""`statstorm sweep` against a real lab (php-fpm + nginx on loopback). Root only, short runs.

Assertions are about behaviour (every level ran, JSON complete, wrong text caught), never
about timing or throughput figures.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import pytest

from statstorm.adapters.load import http
from statstorm.adapters.load.loadgen import RunSpec, load_lock
from statstorm.adapters.load.wrk import Wrk
from statstorm.cli import main
from statstorm.commands import lab as lab_cmd
from statstorm.commands import sweep as sweep_cmd
from statstorm.env import Env
from statstorm.results.trace import read_trace

pytestmark = pytest.mark.root

LAB = os.environ.get("STATSTORM_TEST_SWEEP_LAB", "swtest")
PORT = int(os.environ.get("STATSTORM_TEST_SWEEP_PORT", "8191"))


@pytest.fixture(scope="module")
def lab() -> Iterator[str]:
    env = Env(verbose=False)
    lab_cmd.down(env, LAB, quiet=True)
    try:
        opts = lab_cmd.LabOptions(name=LAB, app="synthetic", storage="local", port=PORT, workers=2)
        lab_cmd.up(env, opts)
        yield LAB
    finally:
        lab_cmd.down(env, LAB, quiet=True)


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_closed_sweep_every_level(lab: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "s.json"
    code, out, err = run_main(["sweep", "--lab", lab, "-c", "1,2", "-d", "2", "--warmup", "1",
                               "--repeats", "1", "--expect-text", "app=statstorm-synthetic",
                               "-o", str(out_json), "--json"], capsys)
    assert code == 0, err
    data = json.loads(out_json.read_text())
    assert data == json.loads(out)
    assert data["schema"] == "statstorm.sweep/1"
    assert [lv["concurrency"] for lv in data["levels"]] == [1, 2]
    for lv in data["levels"]:
        for key in ("rps", "p50", "p90", "p99", "max", "errors", "server", "repeats"):
            assert key in lv
        assert lv["rps"] > 0 and lv["errors"]["total"] == 0 and lv["validation"] == "ok"
        assert lv["repeats"][0]["run"]["percentiles"]
        assert lv["server"]["fpm_total"] == 2
    assert data["knee"]["sentence"]
    assert out_json.with_suffix(".svg").read_text().startswith("<svg")


def test_open_sweep(lab: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "o.json"
    code, out, err = run_main(["sweep", "--lab", lab, "--rate", "10,20", "-d", "2", "--warmup", "0",
                               "--repeats", "1", "-o", str(out_json)], capsys)
    assert code == 0, err
    data = json.loads(out_json.read_text())
    assert data["tool"] == "vegeta" and [lv["rate"] for lv in data["levels"]] == [10.0, 20.0]
    assert all(lv["repeats"][0]["run"]["requests"] > 0 for lv in data["levels"])


def test_ab_sweep(lab: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "a.json"
    code, out, err = run_main(["sweep", "--lab", lab, "--tool", "ab", "-c", "2", "-d", "1",
                               "--warmup", "0", "--repeats", "1", "-o", str(out_json)], capsys)
    assert code == 0, err
    lv = json.loads(out_json.read_text())["levels"][0]
    assert lv["concurrency"] == 2 and len(lv["repeats"][0]["run"]["percentiles"]) == 101


def test_wrong_expect_text_refused_before_load(lab: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(["sweep", "--lab", lab, "-c", "1", "-d", "1", "--warmup", "0",
                               "--repeats", "1", "--expect-text", "NOT-IN-THE-PAGE",
                               "-o", str(tmp_path / "w.json")], capsys)
    assert code == 1 and "lacks the expected text" in err and "Traceback" not in err


def test_wrk_script_counts_every_wrong_body(lab: str, tmp_path: Path) -> None:
    env = Env()
    url = lab_cmd.status(env, lab).url + "/index.php"
    with load_lock(env):
        run = Wrk().run(env, RunSpec(url, 1, 5, concurrency=1, expect_text="NOT-IN-THE-PAGE"), tmp_path)
    assert run.requests > 0 and run.errors.wrong_content == run.requests


def test_direct_validation() -> None:
    assert "no answer" in http.check_answer("http://127.0.0.1:9/", 200, "", 2)


def test_traced_sweep_records_file_syscalls(lab: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "t.json"
    code, out, err = run_main(["sweep", "--lab", lab, "-c", "1,2", "-d", "2", "--warmup", "1",
                               "--repeats", "1", "--trace", "-o", str(out_json), "--json"], capsys)
    assert code == 0, err
    data = json.loads(out_json.read_text())
    assert data["options"]["trace"] is True
    for lv in data["levels"]:
        srv = lv["server"]
        assert srv["file_syscalls_per_request"] > 0 and srv["file_syscalls_per_s"] > 0
        assert srv["traced_requests"] > 0 and srv["failed_per_request"] is not None
        trace_file = Path(srv["trace_file"])
        assert trace_file.exists() and trace_file.parent == tmp_path
        assert trace_file.name == f"t-c{lv['concurrency']}-r1.sst.gz"
        assert lv["repeats"][0]["server"]["trace_file"] == srv["trace_file"]
        # Counted in the kernel: nothing lost, the load's requests seen (the FPM status
        # requests are traced too; a request still finishing when the trace stops is not).
        assert srv["trace_dropped"] == 0
        assert srv["traced_requests"] >= 0.95 * lv["repeats"][0]["run"]["requests"], lv

        assert read_trace(trace_file).header["detail"] == "counts"
    assert "file syscalls/request" in data["knee"]["sentence"]

"""The result classes of whatif, sweep, fsbench, matrix and lab state: each golden result
file under tests/fixtures reads into its class and writes back byte for byte (`to_json` is
exactly the JSON the verb writes), and what the report reads of a file comes from the class.
Pure: no process, no lab.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from statstorm.report import sweep_svg
from statstorm.results import fsbench, lab, matrix, sweep, whatif
from statstorm.results.fsbench import FsbenchResult
from statstorm.results.lab import LabState
from statstorm.results.matrix import MatrixResult
from statstorm.results.provenance import Provenance
from statstorm.results.sweep import SweepResult
from statstorm.results.whatif import (CacheBytes, FindMin, Limit, NetworkBasis, NetworkSide,
                                      Side, WhatifResult)

FIX = Path(__file__).parent / "fixtures"
# every fixture a verb wrote (the report's matrix.json is hand-made: tested apart)
WRITTEN: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
    ("report/whatif.json", WhatifResult.from_json),
    ("report/sweep.json", SweepResult.from_json),
    ("report/fsbench.json", FsbenchResult.from_json),
    ("matrix/003_post.json", MatrixResult.from_json),
    ("matrix/003_worker_fcgid.json", MatrixResult.from_json),
]


def _text(data: object) -> str:
    return json.dumps(data, indent=2) + "\n"  # as results.common.write_json_atomic writes


@pytest.mark.parametrize("name,read", WRITTEN, ids=[n for n, _ in WRITTEN])
def test_golden_files_round_trip_byte_for_byte(name: str,
                                               read: Callable[[dict[str, Any]], Any]) -> None:
    text = (FIX / name).read_text()
    result = read(json.loads(text))
    assert _text(result.to_json()) == text
    again = read(result.to_json())
    assert again == result


def test_every_kind_names_its_schema() -> None:
    for mod, kind in ((whatif, "whatif"), (sweep, "sweep"), (fsbench, "fsbench"),
                      (matrix, "matrix"), (lab, "lab")):
        assert mod.KIND == kind and mod.SCHEMA == f"statstorm.{kind}/{mod.VERSION}"


def _side(**kw: Any) -> Side:
    return Side(settings={"realpath_cache_size": 4096, "open_basedir": "", "opcache": True},
                requests=3, per_request={"stat": 1.5, "total": 1.5, "failed": 0.0},
                realpath_cache_bytes=CacheBytes(100, 99.5, 4096, 2),
                metadata_time_us_per_request=12.5, **kw)


def test_whatif_with_every_optional_part_round_trips() -> None:
    net = NetworkSide(10.0, 4.0, 1.0, 6.5, {"/mnt": {"kind": "fuse", "attribute-timeout": 1.0}})
    res = WhatifResult(
        current=_side(network=net),
        proposed=_side(network=replace(net, round_trips_per_request=2.0),
                       limits=(Limit("opcache-once", "text"), Limit("unseen-paths", "t", ("/a",)))),
        measured={"stat": 1.5, "total": 1.5, "failed": 0.0}, profile_source="trace",
        changes=(("realpath_cache_size", "16K"), ("mount:attribute-timeout", "600")),
        find_min=FindMin("realpath_cache_size", 100, "1K", per_request_at_min={"total": 1.0},
                         workers=2, max_requests=0),
        notes=("a note",), profile_kind="trace",
        network=NetworkBasis("measured", 7.0, 1.2, 1.0, 0.9, False))
    data = res.to_json()
    assert list(data) == ["schema", "current", "proposed", "measured", "changes", "profile",
                          "profile_kind", "network", "find_min", "notes"]
    assert data["measured"]["round_trips_per_request"] == 7.0
    assert list(data["proposed"])[-2:] == ["network", "limits"]
    assert "paths" not in data["proposed"]["limits"][0]
    assert WhatifResult.from_json(json.loads(json.dumps(data))) == res
    note = FindMin("realpath_cache_size", 0, "0", note="open_basedir is set")
    assert note.to_json() == {"setting": "realpath_cache_size", "bytes": 0, "ini": "0",
                              "note": "open_basedir is set"}


def test_sweep_reads_a_hand_made_file_with_defaults() -> None:
    data = {"schema": "statstorm.sweep/1", "target": "http://127.0.0.1/", "model": "closed",
            "levels": [{"concurrency": 2, "rps": 10.0, "p99": 5.0}], "knee": {"knee": 2}}
    res = SweepResult.from_json(data)
    lv = res.levels[0]
    assert (lv.level, lv.rps, lv.p99, lv.repeats, lv.errors.total) == (2.0, 10.0, 5.0, (), 0)
    assert res.knee is not None and res.knee.knee == 2 and res.knee.sentence == ""
    assert "<circle" in sweep_svg.render(res)


def test_sweep_validation_ok_reads_as_matched() -> None:
    data = json.loads((FIX / "report" / "sweep.json").read_text())
    res = SweepResult.from_json(data)
    assert all(lv.validation == "" for lv in res.levels)
    assert res.options.levels == (1.0, 2.0, 4.0, 8.0, 16.0) and res.options.repeats == 2


def test_fsbench_mount_facts() -> None:
    res = FsbenchResult.from_json(json.loads((FIX / "report" / "fsbench.json").read_text()))
    _, fstype, _, cache = res.mount_facts(1)
    assert fstype == "fuse.glusterfs" and cache["attribute-timeout"] == "1"
    assert res.mount_facts(9) == ("", "", "", {})
    assert fsbench.mount_facts("not a mount") == ("", "", "", {})  # type: ignore[arg-type]


def test_hand_made_matrix_reads_with_defaults() -> None:
    res = MatrixResult.from_json(json.loads((FIX / "report" / "matrix.json").read_text()))
    first = res.cells[0]
    assert first.label == "nginx / fpm / opcache on / huge code pages off / local"
    assert first.summary is not None and first.summary.rps.median == 310.4
    assert first.summary.pss_mb is not None and first.summary.pss_mb.php == 58.3
    assert res.cells[2].summary is not None and res.cells[2].summary.pss_mb is not None
    assert res.cells[2].summary.pss_mb.php is None


def test_matrix_stop_rule_round_trips() -> None:
    data = json.loads((FIX / "matrix" / "003_post.json").read_text())
    data["stop"] = {"rule": "precision", "precision_pct": 5.0, "rounds": 3, "widest_pct": None,
                    "widest": "a vs b", "reason": "max rounds reached"}
    res = MatrixResult.from_json(data)
    assert res.stop is not None and res.stop.reason == "max rounds reached"
    assert res.to_json()["stop"] == data["stop"]


def test_lab_state_round_trips() -> None:
    state = LabState("x", "synthetic", "local", 8080, 2, "/var/lib/statstorm/labs/x",
                     php_ini={"realpath_cache_size": "16K"}, phase="up", worker_pids=(1, 2))
    data = state.to_json()
    assert data["schema"] == lab.SCHEMA and next(iter(data)) == "name"
    assert LabState.from_json(json.loads(json.dumps(data))) == state


def test_matrix_result_and_lab_state_are_values(tmp_path: Path) -> None:
    """Both are frozen: a matrix run makes a new result after each step (`with_cell`), and
    `lab up` records each step as a new state written at once (`LabRecord`)."""
    import dataclasses

    from statstorm.adapters.labs.state import LabRecord

    res = MatrixResult.from_json(json.loads((FIX / "matrix" / "003_post.json").read_text()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.finished = "now"  # type: ignore[misc]
    first = res.cells[0]
    changed = res.with_cell(replace(first, primer={"marker": "m"}))
    assert changed.cells[0].primer == {"marker": "m"} and res.cells[0] is first
    assert [c.id for c in changed.cells] == [c.id for c in res.cells]
    added = res.with_cell(replace(first, id="new"))
    assert added.cells[-1].id == "new" and len(added.cells) == len(res.cells) + 1
    rec = LabRecord(LabState("x", "synthetic", "local", 8080, 2, str(tmp_path)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.state.port = 1  # type: ignore[misc]
    rec.record(nginx_pid=42, worker_pids=(3, 4))
    written = LabState.from_json(json.loads((tmp_path / "lab.json").read_text()))
    assert written == rec.state and written.nginx_pid == 42 and written.worker_pids == (3, 4)


def test_provenance_from_any_result() -> None:
    assert Provenance.from_json({}).command_line() == ""
    p = Provenance.from_json({"command": ["statstorm", "matrix", "-o", "a b.json"],
                              "versions": {"php": "8.2.7"}})
    assert p.command_line() == "statstorm matrix -o 'a b.json'"
    assert p.environment == (("php", "8.2.7"),)
    assert Provenance.from_json({"command": "statstorm sweep"}).command == "statstorm sweep"


def test_sweep_run_returns_the_result_it_writes(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`sweep`'s loop with a fake load generator and server sampler against a loopback page:
    the verb returns a SweepResult whose to_json is the file it wrote last."""
    import contextlib
    import http.server
    import io
    import threading

    from statstorm.adapters.load.loadgen import RunSpec
    from statstorm.commands import sweep as sweep_cmd
    from statstorm.env import Env
    from statstorm.results.sweep import ErrorCounts, LoadRun, ServerSignals

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    class Tool:
        name, model = "wrk", "closed"

        def available(self) -> str | None:
            return "/bin/true"

        def command(self, spec: RunSpec, workdir: Path) -> list[str]:
            return ["wrk"]

        def run(self, env: Env, spec: RunSpec, workdir: Path) -> LoadRun:
            rps = 100.0 * spec.concurrency
            return LoadRun("wrk", int(rps), 1.0, rps, 1.0, 2.0, 3.0, 4.0, ErrorCounts(),
                           ((50.0, 1.0), (99.0, 3.0)))

    class Sampler:
        def start(self) -> None:
            pass

        def stop(self) -> ServerSignals:
            return ServerSignals(seconds=1.0, cpu_busy_pct=50.0)

    server = http.server.HTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(sweep_cmd, "load_lock", lambda env: contextlib.nullcontext())
    try:
        out = tmp_path / "s.json"
        plan = sweep_cmd.Plan(f"http://127.0.0.1:{server.server_port}/", "wrk", "closed",
                              (1.0, 2.0), 1.0, 0.0, 2, 5.0, 200, "", None, None, out, None)
        res = sweep_cmd.run(Env(stderr=io.StringIO()), plan, tool=Tool(),  # type: ignore[arg-type]
                            sampler_factory=lambda url: Sampler())  # type: ignore[arg-type,return-value]
    finally:
        server.shutdown()
    assert isinstance(res, SweepResult) and res.finished and res.knee is not None
    assert [lv.rps for lv in res.levels] == [100.0, 200.0]
    assert out.read_text() == _text(res.to_json())
    assert SweepResult.from_json(json.loads(out.read_text())) == res


def test_a_level_of_traced_repeats_carries_the_trace_medians() -> None:
    from statstorm.model.sweep_levels import aggregate
    from statstorm.results.sweep import ErrorCounts, LoadRun, RepeatResult, ServerSignals

    run = LoadRun("wrk", 100, 1.0, 100.0, 1.0, 2.0, 3.0, 4.0, ErrorCounts())
    traced = [RepeatResult(run, ServerSignals(file_syscalls_per_s=v * 100, file_syscalls_per_request=v,
                                              failed_per_request=v / 10, traced_requests=100,
                                              trace_dropped=1, trace_file=f"t{v:g}.sst.gz"))
              for v in (2.0, 4.0, 3.0)]
    lv = aggregate(1, "closed", traced, "")
    s = lv.server
    assert (s.file_syscalls_per_request, s.failed_per_request, s.file_syscalls_per_s) == (3.0, 0.3, 300.0)
    assert (s.traced_requests, s.trace_dropped, s.trace_file) == (300, 3, "t2.sst.gz")
    plain = aggregate(1, "closed", [RepeatResult(run, ServerSignals())], "")
    assert plain.server.file_syscalls_per_request is None and plain.server.trace_file is None

"""A demo.json's links: its files found relative to the demo.json, never to the current
directory; only files of its own run read (`run_id`), a missing one or one of another run
said in a note; and demo.json read back by its class byte for byte."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from statstorm.commands import report as report_cmd
from statstorm.env import Env
from statstorm.report import verdict
from statstorm.results.demo import DemoResult, with_run_id
from statstorm.results.result_files import KINDS, load, load_all

FIX = Path(__file__).parent / "fixtures"
DEMO = FIX / "report" / "demo"
LINKED = ["before.sst.gz", "check-before.json", "apply.json", "after.sst.gz", "check-after.json"]


def new_demo_dir(where: Path, run_id: str = "run-a") -> Path:
    """The fixture demo as today's demo writes it: links relative to demo.json, the run's
    id in demo.json and in the JSON files it wrote."""
    shutil.copytree(DEMO, where)
    data = json.loads((where / "demo.json").read_text())
    data["files"] = {k: Path(v).name for k, v in data["files"].items()}
    (where / "demo.json").write_text(json.dumps(with_run_id(data, run_id), indent=2) + "\n")
    for name in ("check-before.json", "apply.json", "check-after.json"):
        p = where / name
        p.write_text(json.dumps(with_run_id(json.loads(p.read_text()), run_id), indent=2))
    return where / "demo.json"


def other_run_in(cwd: Path) -> Path:
    """A `statstorm-demo/` of another run, as a newer demo leaves where it ran."""
    (cwd / "statstorm-demo").mkdir(parents=True)
    apply = json.loads((DEMO / "apply.json").read_text())
    apply = with_run_id({**apply, "mode": "rolled-back", "reason": "ANOTHER RUN"}, "run-b")
    other = cwd / "statstorm-demo" / "apply.json"
    other.write_text(json.dumps(apply))
    return other


@pytest.mark.parametrize("fmt", ["old", "new"])
def test_links_are_read_beside_the_demo_json_never_in_the_cwd(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    if fmt == "old":  # links "statstorm-demo/…", as the demo wrote them before the run id
        shutil.copytree(DEMO, tmp_path / "old")
        demo_json = tmp_path / "old" / "demo.json"
    else:
        demo_json = new_demo_dir(tmp_path / "new")
    cwd = tmp_path / "cwd"
    other_run_in(cwd)
    monkeypatch.chdir(cwd)
    files = load_all([demo_json])
    assert [f.path for f in files] == [demo_json] + [demo_json.parent / n for n in LINKED]
    (apply,) = [f for f in files if f.kind == "apply"]
    assert apply.data["mode"] != "rolled-back" and "ANOTHER RUN" not in json.dumps(apply.data)
    assert all(not f.notes for f in files)


def test_a_file_of_another_run_is_left_out_with_a_note(tmp_path: Path) -> None:
    demo_json = new_demo_dir(tmp_path / "d", run_id="run-a")
    p = demo_json.parent / "apply.json"
    p.write_text(json.dumps({**json.loads(p.read_text()), "run_id": "run-b"}))
    (demo_json.parent / "check-after.json").unlink()
    files = load_all([demo_json])
    assert [f.name for f in files] == ["demo.json", "before.sst.gz", "check-before.json",
                                       "after.sst.gz"]
    notes = files[0].notes
    assert len(notes) == 2
    assert "apply.json" in notes[0] and "another run" in notes[0] and "run-b" in notes[0]
    assert "check-after.json" in notes[1] and "missing" in notes[1]
    # on the page: a note of the demo's section
    section = verdict.demo_section("demo.json", files[0].data)
    assert [f"note: {n}" for n in notes] == section.intro[-2:]
    # and a warning line of `statstorm report`
    result = report_cmd.run(Env(), report_cmd.ReportOptions((demo_json,), tmp_path / "r.html"))
    assert result.warnings == notes and "apply" not in result.kinds


def test_a_finished_demo_names_its_page_and_the_report_reads_past_it(tmp_path: Path) -> None:
    demo_json = new_demo_dir(tmp_path / "d")
    data = json.loads(demo_json.read_text())
    data["files"]["report"] = "report.html"
    demo_json.write_text(json.dumps(data))
    (demo_json.parent / "report.html").write_text("<!DOCTYPE html>")
    assert [f.name for f in load_all([demo_json])] == ["demo.json", *LINKED]


def test_demo_json_round_trips_byte_for_byte() -> None:
    """The golden demo.json files were written before the `final` key: read, they write back
    byte for byte with it added, the phase they ended at (`after`: no escalation then)."""
    found = sorted(FIX.glob("**/demo*.json"))
    assert found
    for p in found:
        text = p.read_text()
        data = json.loads(text)
        assert "final" not in data
        out = DemoResult.from_json(data).to_json()
        final = out.pop("final")
        assert json.dumps(out, indent=2) + "\n" == text, p
        after = data["after"]
        assert final == (None if after is None else {
            "ratio_rps": after["ratio_rps"], "ratio_p99": after["ratio_p99"],
            "round_trips_per_request": after["network"]["round_trips_per_request"],
            "label": "after apply --all", "kept": []}), p
        again = json.loads(json.dumps(DemoResult.from_json(data).to_json()))
        assert DemoResult.from_json(again).to_json() == again  # with the key: read past it


def test_a_demo_cut_short_round_trips(tmp_path: Path) -> None:
    demo_json = new_demo_dir(tmp_path / "d")
    data = json.loads(demo_json.read_text())
    assert list(data)[:2] == ["schema", "run_id"]
    for keep in (["after"], ["before", "after"]):
        cut = {**data, "metadata_calls_per_request": {"before": 12}, "predicted": {},
               "predicted_at": None, **{k: None for k in keep}}
        assert DemoResult.from_json(cut).to_json() == {
            **cut, "round_trips_per_request": DemoResult.from_json(cut).round_trips().to_json(),
            "final": None}  # no `after`: no phase the run ended at


def test_a_damaged_demo_json_is_one_usage_error(tmp_path: Path) -> None:
    p = tmp_path / "demo.json"
    data = json.loads((DEMO / "demo.json").read_text())
    data["before"]["local"]["rounds"] = [{"rps": "fast"}]
    p.write_text(json.dumps(data))
    with pytest.raises(Exception, match="not a demo result.*rps"):
        load(p)


def test_every_kind_is_declared_once() -> None:
    kinds = [k.KIND for k in KINDS]
    assert len(kinds) == len(set(kinds)) and DemoResult in KINDS
    assert {"trace", "trace-summary", "check", "whatif", "fsbench", "sweep", "apply", "demo",
            "matrix", "tune"} == set(kinds)


def test_a_trace_carries_its_run_and_one_of_another_run_is_left_out(tmp_path: Path) -> None:
    """The demo's traces carry its run id in their header (`RecordOptions.run_id`, written by
    the backends' `header`); a trace of another run is left out with a note, like a JSON file."""
    from statstorm.adapters.tracing.trace_backends import RecordOptions, header
    from statstorm.adapters.tracing.trace_targets import Target
    from statstorm.commands.trace import TraceOptions
    from statstorm.results.trace import read_trace, write_trace
    from statstorm.results.trace.vocabulary import TracerBackend

    target = Target(mode="lab", description="lab dm-net", pids=[1])
    assert "run_id" not in header(TracerBackend.EBPF, target, RecordOptions())
    recording = TraceOptions(lab="dm-net", run_id="run-b").recording()
    head = header(TracerBackend.EBPF, target, recording)
    assert head["run_id"] == "run-b"
    demo_json = new_demo_dir(tmp_path / "d", run_id="run-a")
    for name, run in (("before.sst.gz", "run-a"), ("after.sst.gz", head["run_id"])):
        tr = read_trace(demo_json.parent / name)
        tr.header = {**tr.header, "run_id": run}
        write_trace(demo_json.parent / name, tr)
        assert read_trace(demo_json.parent / name).head.run_id == run
    files = load_all([demo_json])
    assert [f.name for f in files] == ["demo.json", "before.sst.gz", "check-before.json",
                                       "apply.json", "check-after.json"]
    assert files[1].run_id == "run-a"
    (note,) = files[0].notes
    assert "after.sst.gz" in note and "another run" in note and "run-b" in note

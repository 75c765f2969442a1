"""`statstorm report`: result files recognised by content, the page as a snapshot (volatile
parts normalised), fsbench ratios on time per call, and bad input as one line with nothing
written. The golden result files in tests/fixtures/report/ come from real runs (a synthetic
demo, a sweep, fsbench, whatif and apply --verify on a GlusterFS lab), paths normalised;
matrix.json is written by hand in the shape of `statstorm.matrix/1`.

Update the snapshot after a deliberate change with STATSTORM_UPDATE_SNAPSHOTS=1.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from conftest import invoke, run_cli
from statstorm.commands import report as report_cmd
from statstorm.env import Env
from statstorm.errors import UsageError
from statstorm.report import html, sections
from statstorm.report.page import build
from statstorm.report.sections import fsbench_ratios
from statstorm.results.result_files import load, load_all

FIX = Path(__file__).parent / "fixtures" / "report"
ALL = [FIX / "demo" / "demo.json", FIX / "sweep.json", FIX / "fsbench.json", FIX / "whatif.json",
       FIX / "apply-verify.json", FIX / "matrix.json"]
SNAPSHOT = FIX / "expected.html"


def normalise(text: str) -> str:
    """The page without what changes from run to run or with the plotting library: the time
    it was made, statstorm's version, and each chart's drawing (its title and text
    alternative stay)."""
    text = re.sub(r"(<svg id=\"[^\"]+\"[^>]*?) viewBox=\"[^\"]*\"", r"\1", text)
    text = re.sub(r"(<svg id=\"[^\"]+\"[^>]*>)(<title.*?</desc>).*?</svg>",
                  r"\1\2[drawing]</svg>", text, flags=re.S)
    text = re.sub(r"statstorm \d+\.\d+\.\d+\S*", "statstorm VERSION", text)
    return text


def test_every_result_file_is_recognised_by_content() -> None:
    kinds = {p.name: load(p).kind for p in ALL}
    assert kinds == {"demo.json": "demo", "sweep.json": "sweep", "fsbench.json": "fsbench",
                     "whatif.json": "whatif", "apply-verify.json": "apply",
                     "matrix.json": "matrix"}
    assert load(FIX / "demo" / "before.sst.gz").kind == "trace"
    # a demo.json brings the traces and results it names, found beside it
    names = [f.name for f in load_all([FIX / "demo" / "demo.json"])]
    assert names == ["demo.json", "before.sst.gz", "check-before.json", "apply.json",
                     "after.sst.gz", "check-after.json"]


def test_json_without_schema_key_is_recognised_by_its_keys(tmp_path: Path) -> None:
    old = json.loads((FIX / "whatif.json").read_text())
    del old["schema"]
    p = tmp_path / "old-whatif.json"
    p.write_text(json.dumps(old))
    assert load(p).kind == "whatif"


def test_page_snapshot() -> None:
    page = build(load_all(ALL), generated="GENERATED")
    text = normalise(html.render(page))
    if os.environ.get("STATSTORM_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(text)
    assert text == SNAPSHOT.read_text(), "report changed: re-run with STATSTORM_UPDATE_SNAPSHOTS=1"


def test_page_has_every_part_and_nothing_external() -> None:
    page = build(load_all(ALL), generated="GENERATED")
    text = html.render(page)
    assert page.headline.verdict.startswith(
        "GlusterFS 0.09x local throughput before, 0.58x after apply --all (p99 1.36x local);")
    assert "100% fewer network round trips per request" in page.headline.verdict
    ids = re.findall(r'<svg id="([^"]+)"', text)
    assert len(ids) == page.charts >= 10 and len(set(ids)) == len(ids)
    for chart_id in ("chart-ops", "chart-calls", "chart-hist-before", "chart-demo-rps",
                     "chart-sweep-rps-sweep", "chart-fsbench-fsbench", "chart-matrix-matrix"):
        assert chart_id in ids, chart_id
    every_id = re.findall(r'\bid="([^"]+)"', text)
    assert len(every_id) == len(set(every_id)), "ids repeat across charts"
    # each chart has a text alternative, and findings come most severe first
    assert text.count('role="img"') == page.charts and text.count("<desc id=") == page.charts
    sev = [f.severity for f in page.findings]
    assert sev == sorted(sev, key=("critical", "warning", "info").index)
    assert {"Findings", "Predicted and measured", "Environment",
            "Result files and commands"} <= set(re.findall(r"<h2 id=\"[^\"]+\">([^<]+)<", text))
    assert "statstorm sweep http://127.0.0.1:8082/index.php -c 1,2,4,8,16" in text
    # self-contained: no script, no stylesheet or image from elsewhere
    assert not re.search(r"<script|<link |<img |@import|src=\"http|url\(http", text)


def test_failed_lookups_by_include_path_entry_are_charted() -> None:
    # the demo's traces have none (OPcache and the realpath cache answer the includes), so
    # a summary as `trace show --json` gives one, with the misses of three empty entries
    summary = {"requests": 2, "per_request": {"total": 30.0, "failed": 12.0},
               "failed_by_include_path_entry": [
                   {"entry": "/srv/app/lib/inc1", "failed": 8, "per_request": 4.0},
                   {"entry": "/srv/app/lib/inc2", "failed": 8, "per_request": 4.0},
                   {"entry": "/srv/app/lib/inc3", "failed": 8, "per_request": 4.0}]}
    (sec,) = sections.traces([("before", summary), ("after", {"requests": 2, "per_request": {}})])
    chart = next(c for c in sec.charts if c.id == "chart-include-path")
    assert chart.rows == [("/srv/app/lib/inc1", "4.00", "0.00"), ("/srv/app/lib/inc2", "4.00", "0.00"),
                          ("/srv/app/lib/inc3", "4.00", "0.00")]
    assert "before 4.00" in chart.alt and chart.svg.startswith('<svg id="chart-include-path"')


def test_fsbench_ratios_are_time_per_call_not_p50() -> None:
    data = json.loads((FIX / "fsbench.json").read_text())
    stat = next(r for r in fsbench_ratios(data) if (r["op"], r["state"]) == ("stat", "warm"))
    assert stat["time_ratio"] == pytest.approx(stat["first_ops_per_s"] / stat["ops_per_s"])
    # the tail is the cost: the p50s are close, the time per call is not
    assert stat["p50_ratio"] < 2 and stat["time_ratio"] > 3
    cell = next(c for c in data["results"] if (c["op"], c["state"], c["path_index"]) ==
                ("stat", "warm", 1))
    assert cell["ratio_to_first"] == pytest.approx(stat["time_ratio"], rel=1e-3)


def test_cli_writes_the_page_and_json_names_it(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    p = run_cli(["report", *map(str, ALL), "-o", str(out), "--json"], tmp_path, check=True)
    info = json.loads(p.stdout)
    assert info["schema"] == "statstorm.report/1" and info["output"] == str(out)
    assert info["charts"] >= 10 and "trace" in info["inputs"]
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def _bad_inputs(tmp: Path) -> dict[str, Path]:
    trunc_json = tmp / "cut.json"
    trunc_json.write_text((FIX / "sweep.json").read_text()[:500])
    trunc_trace = tmp / "cut.sst.gz"
    trunc_trace.write_bytes((FIX / "demo" / "before.sst.gz").read_bytes()[:20000])
    no_end = tmp / "noend.sst"
    lines = gzip.decompress((FIX / "demo" / "after.sst.gz").read_bytes()).splitlines(True)
    no_end.write_bytes(b"".join(lines[:-1]))
    wrong = tmp / "wrong.json"
    wrong.write_text(json.dumps({"schema": "statstorm.sweep/9", "levels": []}))
    alien = tmp / "alien.json"
    alien.write_text(json.dumps({"schema": "acme.report/1"}))
    cut_keys = tmp / "nolevels.json"
    cut_keys.write_text(json.dumps({"schema": "statstorm.sweep/1", "target": "x"}))
    return {"missing": tmp / "nope.json", "truncated JSON": trunc_json,
            "truncated trace": trunc_trace, "trace without its end": no_end,
            "newer schema": wrong, "foreign schema": alien, "missing key": cut_keys}


def test_bad_input_is_one_line_naming_the_file_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_text("the previous report\n")
    for what, bad in _bad_inputs(tmp_path).items():  # in-process: the process is not the point
        p = invoke(["report", str(FIX / "sweep.json"), str(bad), "-o", str(out)], tmp_path)
        assert p.returncode == 2, (what, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and str(bad) in p.stderr, (what, p.stderr)
        assert "Traceback" not in p.stderr
        assert out.read_text() == "the previous report\n", what
    assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith(".report")) == []


def test_usage_errors_before_reading(tmp_path: Path) -> None:
    env = Env()
    for opts, text in ((report_cmd.ReportOptions(()), "at least one result file"),
                       (report_cmd.ReportOptions((FIX / "sweep.json",), tmp_path), "directory"),
                       (report_cmd.ReportOptions((FIX / "sweep.json",), tmp_path / "no" / "r.html"),
                        "does not exist"),
                       (report_cmd.ReportOptions((FIX / "sweep.json",), tmp_path / "r.txt"),
                        ".html")):
        with pytest.raises(UsageError, match=text):
            report_cmd.run(env, opts)


def test_a_demo_directory_copied_elsewhere_still_reports(tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere"
    shutil.copytree(FIX / "demo", copy)
    files = load_all([copy / "demo.json"])
    assert [f.kind for f in files].count("trace") == 2

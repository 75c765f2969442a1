"""Golden files: real outputs of wrk, ab and vegeta beside the LoadRun they must parse into."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statstorm.adapters.load import ab, vegeta, wrk
from statstorm.errors import ComponentError

FIX = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("case", sorted(p.stem for p in (FIX / "wrk").glob("*.txt")))
def test_wrk_golden(case: str) -> None:
    got = wrk.parse((FIX / "wrk" / f"{case}.txt").read_text()).to_json()
    assert got == json.loads((FIX / "wrk" / f"{case}.json").read_text())


@pytest.mark.parametrize("case", sorted(p.stem for p in (FIX / "ab").glob("*.txt")))
def test_ab_golden(case: str) -> None:
    csv = FIX / "ab" / f"{case}.csv"
    got = ab.parse((FIX / "ab" / f"{case}.txt").read_text(), csv.read_text() if csv.exists() else "").to_json()
    assert got == json.loads((FIX / "ab" / f"{case}.json").read_text())


@pytest.mark.parametrize("case", sorted(p.stem for p in (FIX / "vegeta").glob("*.jsonl")))
def test_vegeta_golden(case: str) -> None:
    want = json.loads((FIX / "vegeta" / f"{case}.json").read_text())
    got = vegeta.parse((FIX / "vegeta" / f"{case}.jsonl").read_text(), want["rate"], want["expect_text"])
    assert got.to_json() == want["result"]


def test_wrk_numbers_match_its_text() -> None:
    run = wrk.parse((FIX / "wrk" / "plain.txt").read_text())
    assert (run.requests, run.rps, run.p50, run.p90, run.p99) == (2159, 1077.58, 3.35, 6.84, 12.72)


def test_wrk_lua_counts_wrong_content() -> None:
    run = wrk.parse((FIX / "wrk" / "lua_wrong_text.txt").read_text())
    assert run.errors.wrong_content == run.requests == 691


def test_wrk_socket_errors_and_status() -> None:
    run = wrk.parse((FIX / "wrk" / "timeouts.txt").read_text())
    assert (run.errors.timeout, run.errors.non_2xx) == (4, 8)


def test_ab_length_failures_are_wrong_content() -> None:
    run = ab.parse((FIX / "ab" / "length_failures.txt").read_text())
    assert (run.errors.wrong_content, run.errors.non_2xx, run.requests) == (12, 3, 60)


def test_ab_csv_percentiles_win_over_the_coarse_table() -> None:
    text = (FIX / "ab" / "plain.txt").read_text()
    csv = "Percentage served,Time in ms\n0,0.5\n50,1.25\n90,3.5\n99,8.75\n100,14.0\n"
    run = ab.parse(text, csv)
    assert (run.p50, run.p90, run.p99, run.max) == (1.25, 3.5, 8.75, 14.0)


def test_vegeta_splits_errors() -> None:
    run = vegeta.parse((FIX / "vegeta" / "errors.jsonl").read_text(), 40)
    assert (run.errors.timeout, run.errors.non_2xx, run.errors.connect) == (2, 5, 0)
    refused = vegeta.parse((FIX / "vegeta" / "refused.jsonl").read_text(), 5)
    assert refused.errors.connect == 5 and refused.rps == 0


def test_vegeta_checks_bodies() -> None:
    text = (FIX / "vegeta" / "ok.jsonl").read_text()
    assert vegeta.parse(text, 20, "app=statstorm-synthetic").errors.wrong_content == 0
    assert vegeta.parse(text, 20, "NOT-IN-THE-PAGE").errors.wrong_content == 20


def test_vegeta_adds_send_lag_to_latency() -> None:
    # The second request left 1 s late: its latency counts from when it should have left.
    lines = [
        '{"seq":0,"code":200,"timestamp":"2026-01-01T00:00:00Z","latency":1000000,"error":"","body":""}',
        '{"seq":1,"code":200,"timestamp":"2026-01-01T00:00:01.1Z","latency":1000000,"error":"","body":""}',
    ]
    run = vegeta.parse("\n".join(lines), 10)
    assert run.max == pytest.approx(1001.0)


def test_garbage_is_a_component_error() -> None:
    with pytest.raises(ComponentError):
        wrk.parse("hello")
    with pytest.raises(ComponentError):
        ab.parse("hello")
    with pytest.raises(ComponentError):
        vegeta.parse("{not json", 10)

"""Knee / saturation / collapse detection on known series (pure model)."""

from __future__ import annotations

from statstorm.model.knee import LevelPoint as P
from statstorm.model.knee import analyse
from statstorm.results.sweep import ServerSignals as S

LEVELS = (1, 2, 5, 10, 20, 30)


def series(values: list[tuple[float, ...]]) -> list[P]:
    return [P(lv, v) for lv, v in zip(LEVELS, values)]


def test_openafs_collapse() -> None:
    # A PHP site on OpenAFS: 16 → 27 → 32 req/s at 1, 2, 5 users, then 10, 5, 3.
    k = analyse(series([(16,), (27,), (32,), (10,), (5,), (3,)]))
    assert (k.knee, k.peak, k.saturation_rps) == (5, 5, 32)
    assert k.collapse and k.collapse_at == 10 and k.collapse_rps == 10
    assert "collapses after 5 users" in k.sentence


def test_openafs_collapse_with_noisy_repeats() -> None:
    k = analyse(series([(14, 16, 18), (24, 27, 30), (29, 32, 35), (7, 10, 13), (4, 5, 7), (2, 3, 4)]))
    assert k.collapse and k.peak == 5 and k.collapse_at == 10


def test_steady_is_no_collapse() -> None:
    k = analyse(series([(36,), (36.4,), (35.7,), (36.1,), (35.5,), (36.0,)]))
    assert not k.collapse and k.knee == 1
    assert "flat" in k.sentence


def test_noisy_flat_is_no_collapse() -> None:
    # ~36 req/s with ±3 noise in every level's repeats: the spread widens the threshold.
    k = analyse(series([(33, 36, 39), (39, 33, 36), (36, 39, 33), (35, 38, 32), (33, 39, 34), (32, 36, 38)]))
    assert not k.collapse


def test_small_single_run_dip_is_not_a_collapse() -> None:
    k = analyse(series([(36,), (36,), (36,), (33,), (34,), (33,)]))  # -8 %: within 20 %
    assert not k.collapse


def test_knee_where_growth_stops() -> None:
    k = analyse(series([(100,), (190,), (300,), (310,), (305,), (300,)]))
    assert k.knee == 5 and not k.collapse and "stops growing at 5 users" in k.sentence


def test_still_growing_has_no_knee() -> None:
    k = analyse([P(1, (10,)), P(2, (20,)), P(5, (45,))])
    assert k.knee is None and "no knee yet" in k.sentence


def test_signals_named_in_the_sentence() -> None:
    calm = S(ctx_switches_per_s=1000, cpu_busy_pct=40, fpm_listen_queue_max=0, fpm_idle_min=1, fpm_total=5)
    busy = S(ctx_switches_per_s=8000, cpu_busy_pct=45, fpm_listen_queue_max=12, fpm_idle_min=0, fpm_total=5)
    pts = [P(1, (16,)), P(2, (27,)), P(5, (32,), calm), P(10, (10,), busy)]
    k = analyse(pts)
    assert "context switches ×8" in k.sentence and "listen queue grows" in k.sentence
    assert k.diagnosis == "storage" and "storage" in k.sentence


def test_cpu_bound() -> None:
    calm = S(ctx_switches_per_s=1000, cpu_busy_pct=50)
    hot = S(ctx_switches_per_s=1200, cpu_busy_pct=97)
    k = analyse([P(1, (500,)), P(2, (700,)), P(4, (1000,), calm), P(8, (990,), hot)])
    assert k.diagnosis == "cpu" and "out of CPU" in k.sentence


def test_empty() -> None:
    assert analyse([]).knee is None


def test_single_level() -> None:
    k = analyse([P(1, (500,))])
    assert not k.collapse and "only one level" in k.sentence


def test_very_noisy_repeats_are_flagged() -> None:
    k = analyse([P(1, (69, 51, 20)), P(2, (23, 27, 29)), P(5, (54, 54, 34)), P(10, (18, 24, 34)),
                 P(20, (52, 75, 91))])
    assert not k.collapse and "noisy" in k.sentence


def test_knee_despite_a_late_small_gain() -> None:
    # Measured on the local lab: +13 % from 5 to 20 users is not "still growing".
    k = analyse([P(1, (478,)), P(2, (866,)), P(5, (1489,)), P(10, (1442,)), P(20, (1681,))])
    assert k.knee == 5 and k.peak == 20 and not k.collapse


def test_traced_file_syscalls_named_in_the_sentence() -> None:
    calm = S(ctx_switches_per_s=1000, cpu_busy_pct=40, file_syscalls_per_request=20)
    same = S(ctx_switches_per_s=8000, cpu_busy_pct=45, file_syscalls_per_request=21)
    more = S(ctx_switches_per_s=8000, cpu_busy_pct=45, file_syscalls_per_request=60)
    base = [P(1, (16,)), P(2, (27,)), P(5, (32,), calm)]
    assert "file syscalls/request unchanged (21)" in analyse(base + [P(10, (10,), same)]).sentence
    assert "file syscalls/request ×3.0 (20 → 60)" in analyse(base + [P(10, (10,), more)]).sentence
    # Untraced sweeps say nothing about file syscalls.
    assert "file syscalls/request" not in analyse(base + [P(10, (10,), S(ctx_switches_per_s=8000))]).sentence

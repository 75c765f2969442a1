"""The closing table's verdict on each predicted figure: within 15 % of the one measured after,
or said to be not predicted and why (model/prediction_fit.py), and the changes each figure's
model leaves out as the demo's and tune's prediction records them."""

from __future__ import annotations

from statstorm.model.prediction_fit import closing_notes, fits, verdict
from statstorm.results.demo import PerRequest, Prediction

# the demo's MediaWiki figures of the last session: 393 predicted, 158 measured after, the
# app's object cache (an APP change) outside the PHP model
PREDICTED = Prediction(("realpath_cache_ttl=600",), 393.0, 540.0, 300.0, 20.0, 40.0,
                       ("realpath_cache_ttl = 600", "$wgMainCacheType = CACHE_ACCEL;"),
                       not_modelled_calls=("$wgMainCacheType = CACHE_ACCEL;",),
                       not_modelled_round_trips=())


def test_within_fifteen_percent_of_the_measured_figure() -> None:
    assert fits(100.0, 100.0) and fits(115.0, 100.0) and fits(85.0, 100.0)
    assert not fits(116.0, 100.0) and not fits(84.0, 100.0)
    assert fits(0.0, 0.0) and not fits(1.0, 0.0)


def test_a_figure_off_with_a_change_outside_the_model_is_not_predicted() -> None:
    v = verdict("metadata calls per request", 393.0, 158.0, ("$wgMainCacheType = CACHE_ACCEL;",))
    assert v.startswith("metadata calls per request: not predicted")
    assert "measured 158 after, 393 predicted (-60%)" in v
    assert "$wgMainCacheType = CACHE_ACCEL; act outside the model" in v


def test_a_figure_off_with_every_change_modelled_says_so() -> None:
    v = verdict("network round trips per request", 40.0, 20.0, ())
    assert "off the prediction by more than 15%" in v and "the measured figure stands" in v


def test_nothing_said_when_the_figure_came_true_or_was_not_measured() -> None:
    assert verdict("x", 100.0, 110.0, ("a",)) == ""
    assert verdict("x", 100.0, None, ()) == ""
    assert "no prediction was made" in verdict("x", None, 5.0, ())


def test_closing_notes_one_per_figure_that_did_not_come_true() -> None:
    calls = PerRequest(540.0, 158.0, 393.0)
    rt = PerRequest(300.0, 38.0, 40.0)  # within 15 %: nothing said
    notes = closing_notes(calls, rt, PREDICTED)
    assert len(notes) == 1 and notes[0].startswith("metadata calls per request: not predicted")
    # near the prediction, but with the app's object cache made: a coincidence, not predicted
    (near,) = closing_notes(PerRequest(540.0, 380.0, 393.0), rt, PREDICTED)
    assert near.startswith("metadata calls per request: not predicted") and "object cache" in near
    php_only = Prediction(("realpath_cache_ttl=600",), 393.0, 540.0, 300.0, 20.0, 40.0,
                          ("realpath_cache_ttl = 600",), not_modelled_calls=(),
                          not_modelled_round_trips=())
    assert closing_notes(PerRequest(540.0, 380.0, 393.0), rt, php_only) == []
    assert Prediction.from_json(PREDICTED.to_json()) == PREDICTED  # the lists round-trip


def test_a_result_that_does_not_record_the_left_out_changes() -> None:
    old = Prediction.from_json({"php_settings": [], "metadata_calls_per_request": 55.8,
                                "round_trips_per_request": 4.0, "changes": ["x = 1"]})
    assert old.not_modelled_calls is None
    (note,) = closing_notes(PerRequest(300.0, 135.0, 55.8), PerRequest(), old)
    assert "does not record which changes the models left out" in note

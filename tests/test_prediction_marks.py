"""The closing table's `predicted` cells: a figure is shown as a prediction only when it came
within 15 % of the one measured after and no change the models cannot see was made (an app's
object cache, a local mirror of the code, GlusterFS's content caches); else it is marked
"not predicted", and the note under the table says why in words (model/prediction_fit.py)."""

from __future__ import annotations

from statstorm.model.prediction_fit import (NOT_PREDICTED, cell, closing_notes, predicted_cells,
                                            unseen, verdict)
from statstorm.results.demo import PerRequest, Prediction


def pred(calls: tuple[str, ...] = (), trips: tuple[str, ...] = ()) -> Prediction:
    return Prediction(("realpath_cache_ttl=600",), 393.0, 540.0, 300.0, 20.0, 40.0, (),
                      not_modelled_calls=calls, not_modelled_round_trips=trips)


def test_the_changes_no_model_sees_are_named_in_words() -> None:
    assert unseen(("$wgMainCacheType = CACHE_ACCEL;",))[0].startswith("the app's own object")
    assert unseen(("$settings['cache']['default'] = 'cache.backend.apcu';", "CACHE_STORE=apc",
                   "framework.cache.app: cache.adapter.apcu")) == [unseen(("CACHE_STORE=apc",))[0]]
    assert "mirror" in unseen(("mirror /srv/www/wiki",))[0]
    assert "content caches" in unseen(("gluster volume set gv performance.quick-read on",))[0]
    assert unseen(("realpath_cache_ttl = 600", "pm.max_children = 8",
                   "gluster volume set gv performance.md-cache-timeout 600",
                   "fastcgi_param SCRIPT_FILENAME $realpath_root$fastcgi_script_name;")) == []
    assert unseen(None) == []


def test_the_demos_393_against_158_is_marked_with_the_reason() -> None:
    p = pred(calls=("$wgMainCacheType = CACHE_ACCEL;",))
    calls, trips = PerRequest(540.0, 158.0, 393.0), PerRequest(300.0, 38.0, 40.0)
    assert predicted_cells(calls, trips, p) == (f"393.00 ({NOT_PREDICTED})", "40.00")
    (note,) = closing_notes(calls, trips, p)
    assert "measured 158 after, 393 predicted (-60%)" in note
    assert "the PHP model does not see" in note


def test_a_figure_off_by_more_than_fifteen_percent_is_marked() -> None:
    assert cell(40.0, 20.0, ()) == f"40.00 ({NOT_PREDICTED})"
    assert cell(40.0, 38.0, ()) == "40.00"
    assert cell(40.0, None, ()) == "40.00"  # not measured after: nothing to compare
    assert cell(None, 38.0, ()) == "-"
    assert "off the prediction" in verdict("round trips", 40.0, 20.0, ())


def test_a_mirror_or_content_cache_makes_a_close_figure_not_predicted() -> None:
    for line in ("mirror /srv/www/wiki", "gluster volume set gv performance.quick-read on"):
        assert cell(40.0, 39.0, (line,)).endswith(f"({NOT_PREDICTED})")
        assert verdict("network round trips per request", 40.0, 39.0, (line,)).startswith(
            "network round trips per request: not predicted")

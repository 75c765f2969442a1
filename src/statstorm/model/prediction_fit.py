"""Whether a figure the demo or tune predicted before a change came true after it: within
`TOLERANCE` of the one measured, or the sentence their closing table prints instead, saying
that it was not predicted and why. Pure code.

A prediction covers what its models see: whatif replays PHP's caches under the PHP settings
that change (metadata calls per request); the network forecast replays the mount's attribute,
entry and negative caches and an app cache of data files (round trips per request). Any
other change (an app's own object cache, an nginx parameter, a GlusterFS volume option, a
PHP setting in the round-trip forecast) acts outside them: the prediction is then of the
modelled changes alone, and a measured figure far from it is said to be not predicted."""

from __future__ import annotations

from statstorm.results.demo import PerRequest, Prediction

TOLERANCE = 0.15  # of the figure measured after


def fits(predicted: float, measured: float, tolerance: float = TOLERANCE) -> bool:
    """Whether `predicted` is within `tolerance` of `measured`."""
    if measured == predicted:
        return True
    return measured != 0 and abs(predicted - measured) / abs(measured) <= tolerance


def verdict(figure: str, predicted: float | None, measured: float | None,
            not_modelled: tuple[str, ...] | None) -> str:
    """'' when the figure came true (or was not measured after); else one sentence: not
    predicted (no prediction, or a change the models leave out), or off with no such change
    (`not_modelled` None: the result does not say which changes its models left out)."""
    if measured is None:
        return ""
    if predicted is None:
        return f"{figure}: not predicted (no prediction was made before the change)"
    if fits(predicted, measured):
        return ""
    off = (f"measured {measured:g} after, {predicted:g} predicted "
           f"({(measured - predicted) / predicted:+.0%})" if predicted else
           f"measured {measured:g} after, {predicted:g} predicted")
    if not_modelled is None:
        return (f"{figure}: not predicted — {off}; this result does not record which changes "
                "the models left out (written by an older statstorm)")
    if not_modelled:
        shown = ", ".join(not_modelled[:4]) + (f" and {len(not_modelled) - 4} more"
                                               if len(not_modelled) > 4 else "")
        return (f"{figure}: not predicted — {off}: the prediction covers the modelled changes "
                f"only, and {shown} act outside the model")
    return (f"{figure}: off the prediction by more than {TOLERANCE:.0%} — {off}, with every "
            "change inside the model: the measured figure stands")


def closing_notes(calls: PerRequest, round_trips: PerRequest,
                  predicted: Prediction | None) -> list[str]:
    """The sentences under a demo's or tune's per-request table: one for each figure that did
    not come true, saying whether it was predicted and why not."""
    out = [verdict("metadata calls per request", calls.predicted, calls.after,
                   predicted.not_modelled_calls if predicted else None),
           verdict("network round trips per request", round_trips.predicted, round_trips.after,
                   predicted.not_modelled_round_trips if predicted else ())]
    return [x for x in out if x]

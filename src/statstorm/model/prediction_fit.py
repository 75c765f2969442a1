"""Whether a figure the demo or tune predicted before a change came true after it: within
`TOLERANCE` of the one measured, or the sentence their closing table prints instead, saying
that it was not predicted and why. Pure code.

A prediction covers what its models see: whatif replays PHP's caches under the PHP settings
that change (metadata calls per request); the network forecast replays the mount's attribute,
entry and negative caches and an app cache of data files (round trips per request). Any
other change (an app's own object cache, an nginx parameter, a GlusterFS volume option, a
PHP setting in the round-trip forecast) acts outside them: the prediction is then of the
modelled changes alone, and a measured figure far from it is said to be not predicted. Some
of those changes remove work no model sees at all (`unseen`: an app's object cache, a local
mirror of the code, GlusterFS's content caches): once one is made, the figure is said to be not
predicted even where it lands near the prediction, since the match is then a coincidence.

One cause is named rather than listed as a change: walks through symlinks on a FUSE mount
(`symlink_line`), whose READLINKs reach the storage whatever the mount's timeouts. A
forecast that knew of them counts them; one that did not (a trace without the symlinks)
carries the line among the changes its round trips leave out, and a round-trip figure off
its prediction then says that this is why."""

from __future__ import annotations

import re

from statstorm.results.demo import PerRequest, Prediction

TOLERANCE = 0.15  # of the figure measured after
NOT_PREDICTED = "not predicted"  # what the closing table's cell says
# The changes no model sees, by their change line, and what each is in words.
UNSEEN: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^\$\w+(?:\[[^]]*\])*\s*=|^[A-Z][A-Z0-9_]*=|^[a-z_]+(?:\.[a-z_]+)+:\s"),
     "the app's own object cache removes work inside the app, which the PHP model does not see"),
    (re.compile(r"^mirror /"),
     "the local mirror of the code moves its files off the network storage, which the models "
     "do not replay"),
    (re.compile(r"^gluster volume set \S+ performance\.(?:quick-read|qr-|io-cache|open-behind|"
                r"readdir-ahead|read-ahead|quick-read-cache)|fopen-keep-cache"),
     "GlusterFS's content caches answer opens and reads on the client, which the forecast "
     "of the metadata caches does not replay"),
)


# A walk through a symlink on a FUSE mount, as a forecast names it among what it left out.
SYMLINK_LINE = re.compile(r"^symlinks on a FUSE mount\b")
SYMLINK_CAUSE = ("walks through symlinks on a FUSE mount read each symlink from the storage "
                 "(a READLINK round trip) whatever the mount's timeouts, since the FUSE "
                 "client does not ask the kernel to cache symlinks (FUSE_CACHE_SYMLINKS)")


def symlink_line(where: str) -> str:
    """The line a forecast puts among the changes it left out when its round trips could not
    count the READLINKs of walks through symlinks on a FUSE mount (`where`: the mount)."""
    return f"symlinks on a FUSE mount ({where}): their READLINKs were not counted"


def unseen(changes: tuple[str, ...] | None) -> list[str]:
    """Why the changes among `changes` that no model sees make a figure unpredictable: one
    reason per kind, in words."""
    out: list[str] = []
    for line in changes or ():
        for pat, why in UNSEEN:
            if pat.search(line.strip()) and why not in out:
                out.append(why)
    return out


def is_prediction(pred: float | None, measured: float | None,
              not_modelled: tuple[str, ...] | None) -> bool:
    """Whether the closing table may show `pred` as a prediction of `measured`: False (the cell
    says NOT_PREDICTED) when it is more than TOLERANCE off, or a change no model sees was made."""
    if pred is None:
        return False
    if measured is None:
        return True
    return fits(pred, measured) and not unseen(not_modelled)


def cell(pred: float | None, measured: float | None, not_modelled: tuple[str, ...] | None,
         fmt: str = "{:,.2f}") -> str:
    """The closing table's `predicted` cell: the figure, marked when it is not a prediction."""
    if pred is None:
        return "-"
    shown = fmt.format(pred)
    return shown if is_prediction(pred, measured, not_modelled) else f"{shown} ({NOT_PREDICTED})"


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
    off = (f"measured {measured:g} after, {predicted:g} predicted "
           f"({(measured - predicted) / predicted:+.0%})" if predicted else
           f"measured {measured:g} after, {predicted:g} predicted")
    blind = unseen(not_modelled)
    if fits(predicted, measured) and not blind:
        return ""
    if not_modelled and any(SYMLINK_LINE.search(x) for x in not_modelled):
        rest = tuple(x for x in not_modelled if not SYMLINK_LINE.search(x))
        also = (f"; {', '.join(rest[:4])}{' and more' if len(rest) > 4 else ''} also act "
                "outside the model" if rest else "")
        return (f"{figure}: not predicted — {off}: {SYMLINK_CAUSE}{also}"
                + "".join(f"; {why}" for why in blind))
    if not_modelled is None:
        return (f"{figure}: not predicted — {off}; this result does not record which changes "
                "the models left out (written by an older statstorm)")
    if not_modelled:
        shown = ", ".join(not_modelled[:4]) + (f" and {len(not_modelled) - 4} more"
                                               if len(not_modelled) > 4 else "")
        return (f"{figure}: not predicted — {off}: the prediction covers the modelled changes "
                f"only, and {shown} act outside the model"
                + "".join(f"; {why}" for why in blind))
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


def predicted_cells(calls: PerRequest, round_trips: PerRequest,
                    predicted: Prediction | None) -> tuple[str, str]:
    """The closing table's `predicted` cells of metadata calls and round trips per request."""
    return (cell(calls.predicted, calls.after, predicted.not_modelled_calls if predicted else None),
            cell(round_trips.predicted, round_trips.after,
                 predicted.not_modelled_round_trips if predicted else ()))

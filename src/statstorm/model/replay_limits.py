"""What a trace cannot show, for a prediction under other settings.

A replay is exact when everything PHP does under the proposed settings left a mark in the
trace. Some things never do, and a prediction that depends on them is not determined by the
trace: `limits` names each one that applies, from the settings and what the trace holds,
never from the prediction's outcome. whatif prints them beside the prediction; the
fidelity bench (bench/whatif_fidelity.py) counts a prediction with none as determined.
"""

from __future__ import annotations

from typing import Any, Iterable

from statstorm.model.phpsettings import PhpSettings
from statstorm.model.replay_input import Prepared

EXAMPLES = 5  # paths named per limit


def limits(prep: Prepared, recorded: PhpSettings, proposed: PhpSettings,
           guessed: Iterable[str] = ()) -> list[dict[str, Any]]:
    """[{id, text, (paths)}] for the limits that apply to predicting `proposed` from a
    trace recorded under `recorded`; `guessed`: the paths the replay took (ReplayResult)."""
    out: list[dict[str, Any]] = []
    if recorded.opcache and not recorded.opcache_revalidate_path:  # keys by name
        change = ("OPcache off" if not proposed.opcache else
                  "opcache.revalidate_path=1" if proposed.opcache_revalidate_path else
                  "another include_path" if proposed.include_path != recorded.include_path
                  else "")
        if change:
            out.append({"id": "opcache-once", "text": (
                "recorded with OPcache on and opcache.revalidate_path=0: an include_once or "
                "require_once of a file OPcache already holds is answered from its key with no "
                f"call, so the trace cannot show it; with {change} each one resolves its path "
                "again (the prediction may miss those calls)")})
    if recorded.opcache and recorded.opcache_enable_file_override and (
            not proposed.opcache or not proposed.opcache_enable_file_override or (
                proposed.opcache_validate_timestamps and (
                    not recorded.opcache_validate_timestamps or
                    proposed.opcache_revalidate_freq < recorded.opcache_revalidate_freq))):
        change = ("OPcache off" if not proposed.opcache else "opcache.enable_file_override=0"
                  if not proposed.opcache_enable_file_override else
                  "timestamps validated more often")
        out.append({"id": "opcache-override", "text": (
            "recorded with opcache.enable_file_override=1: file_exists(), is_file() and "
            "is_readable() of a script OPcache holds make no call (but a revalidation), so "
            f"the trace cannot show them; with {change} they stat again (the prediction may "
            "miss those calls)")})
    if proposed.opcache and proposed.opcache_file_update_protection and prep.wipes and (
            not recorded.opcache or (recorded.opcache_revalidate_path
                                     and not proposed.opcache_revalidate_path)):
        how = ("recorded without OPcache" if not recorded.opcache else
               "recorded with opcache.revalidate_path=1 (every include opens its script)")
        out.append({"id": "opcache-new-files", "text": (
            f"{how}, and {prep.wipes} realpath-cache wipe(s) in the trace are what unlink(), "
            "rename() or rmdir() leave: OPcache compiles a script changed within "
            "opcache.file_update_protection seconds again at every include, and a file "
            "renamed into place is not seen being made in such a trace (the prediction may "
            "miss those compiles' calls)")})
    if proposed.open_basedir and not recorded.open_basedir and prep.wipes:
        out.append({"id": "open-basedir-unseen", "text": (
            f"recorded without open_basedir, and {prep.wipes} realpath-cache wipe(s) in the "
            "trace are what unlink(), rename(), rmdir() or clearstatcache(true) leave: the "
            "first three check their paths against open_basedir, which a trace without it "
            "cannot show (the prediction may miss those checks' calls)")})
    paths = sorted(guessed)
    if paths:
        out.append({"id": "unseen-paths", "text": (
            f"{len(paths)} path(s) the trace never looked at were needed and taken as they "
            "seemed (missing under a directory that exists; a directory, though it may be a "
            "symlink): " + ", ".join(paths[:EXAMPLES]) + (", …" if len(paths) > EXAMPLES
                                                          else "")),
            "paths": paths[:100]})
    return out


__all__ = ["limits"]

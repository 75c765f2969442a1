"""GlusterFS volume profiling: how many calls (FOPs) reached each brick.

`gluster volume profile VOL start` switches on the io-stats counters of every brick;
`gluster volume profile VOL info cumulative` prints, per brick, a table of FOPs with their
call counts since the brick process started counting. The counters are never reset by
`stop`/`start`, so a measurement is always the difference of two snapshots (`delta`).

What counts as a network round trip (`round_trips`)
---------------------------------------------------
Every FOP in a brick's table arrived there as an RPC from a client (the lab's FUSE mount),
so each call is one request/reply exchange on the network, and a volume with several bricks
counts one per brick that was asked (a replicated LOOKUP asks every replica). FOPs that
client-side caches (md-cache, quick-read, open-behind, the kernel's FUSE caches) answered
never reach a brick and are not counted: that is the point of measuring here.

- `FORGET` is left out: a brick records it when its own inode table drops an inode. No
  client sends it, so it is no round trip (`NOT_RPC`).
- `RELEASE` and `RELEASEDIR` are counted: the client sends them to the brick when the last
  file or directory handle closes. They print as "no latency" rows because io-stats does not
  time them, and no system call waits for their reply (the kernel sends FUSE RELEASE
  asynchronously), so `round_trips(delta, waited_only=True)` leaves them out (`NOT_WAITED`)
  to count only the exchanges a PHP request sat through.
- `FLUSH` (sent on every close()) and the lock FOPs (`INODELK`, `ENTRYLK`, ...) that the
  cluster translators send around writes are counted: a caller waits for them.
- Upcalls (server-to-client notifications) are in a separate table, not parsed.

Only "Cumulative Stats" sections are read; "Interval N Stats" sections (printed by plain
`info` and `info incremental`) are skipped, as are the block-size histograms above each FOP
table (those count all the time, even with profiling off).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from statstorm.env import Env, RunResult
from statstorm.errors import ComponentError, UsageError

# FOPs that are no message from a client: not a round trip.
NOT_RPC = frozenset({"FORGET"})
# FOPs sent asynchronously on the last close: a round trip nobody waits for.
NOT_WAITED = frozenset({"RELEASE", "RELEASEDIR"})

_BRICK = re.compile(r"^Brick:\s+(\S.*?)\s*$")
_SECTION = re.compile(r"^\s*(Cumulative|Interval\s+\d+)\s+Stats:\s*$")
_FOP = re.compile(r"^[A-Z][A-Z0-9_]*$")
_CALLS = re.compile(r"[0-9]{1,20}")  # a 64-bit counter
_BUSY = ("Another transaction is in progress", "Locking failed")


@dataclass(frozen=True)
class ProfileSnapshot:
    """Per-brick FOP call counts of one `profile info cumulative` (brick → FOP → calls)."""

    bricks: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def total(self) -> dict[str, int]:
        """Calls per FOP summed over all bricks."""
        out: dict[str, int] = {}
        for fops in self.bricks.values():
            for fop, calls in fops.items():
                out[fop] = out.get(fop, 0) + calls
        return dict(sorted(out.items()))

    @property
    def calls(self) -> int:
        """All calls of all FOPs on all bricks (FORGET included: this is the raw sum)."""
        return sum(self.total.values())

    def to_json(self) -> dict[str, object]:
        return {
            "bricks": {b: dict(sorted(f.items())) for b, f in sorted(self.bricks.items())},
            "total": self.total,
            "calls": self.calls,
        }


# ---------------------------------------------------------------- parsing


def parse_info(text: str) -> ProfileSnapshot:
    """The cumulative FOP counts of each brick in `gluster volume profile VOL info` output.

    Works on `info cumulative` and on plain `info` (its interval sections are skipped).
    Raises UsageError on text that holds no brick, or bricks without a cumulative section.
    """
    if not text.strip():
        raise UsageError("empty GlusterFS profile output: take it with "
                         "`gluster volume profile VOLUME info cumulative`")
    _raise_for_message(text, "")
    bricks: dict[str, dict[str, int]] = {}
    brick: str | None = None
    section: str | None = None
    in_table = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _BRICK.match(raw)
        if m:
            brick, section, in_table = m.group(1), None, False
            if brick in bricks:
                raise UsageError(f"line {number}: brick {brick} appears twice: give the output "
                                 "of one `gluster volume profile VOLUME info cumulative`")
            continue
        m = _SECTION.match(raw)
        if m:
            section, in_table = m.group(1), False
            if brick is not None and section == "Cumulative":
                bricks[brick] = {}
            continue
        if brick is None or section != "Cumulative":
            continue
        if line.startswith("%-latency"):
            in_table = True
            continue
        if not in_table:
            continue
        if not line:
            in_table = False
            continue
        if set(line) <= {"-", " "}:
            continue  # the dashes under the header
        parts = line.split()
        if len(parts) < 2 or not _FOP.match(parts[-1]) or not _CALLS.fullmatch(parts[-2]):
            raise UsageError(f"line {number}: not a FOP row of a profile table: {line[:60]!r} "
                             "(give the unedited output of `gluster volume profile VOLUME "
                             "info cumulative`)")
        fops = bricks[brick]
        fops[parts[-1]] = fops.get(parts[-1], 0) + int(parts[-2])
    if not bricks:
        if brick is None:
            raise UsageError("no `Brick:` section in the GlusterFS profile output: take it "
                             "with `gluster volume profile VOLUME info cumulative`")
        raise UsageError("no `Cumulative Stats:` section in the GlusterFS profile output: take "
                         "it with `gluster volume profile VOLUME info cumulative`")
    return ProfileSnapshot(bricks)


# ---------------------------------------------------------------- arithmetic


def delta(before: ProfileSnapshot, after: ProfileSnapshot) -> dict[str, int]:
    """Calls per FOP between two snapshots of one volume, summed over bricks.

    FOPs whose count did not change are left out. A brick missing from `after`, or a counter
    that went down (the brick process restarted), raises ComponentError.
    """
    out: dict[str, int] = {}
    for brick, fops_before in before.bricks.items():
        if brick not in after.bricks:
            raise ComponentError(f"brick {brick} is missing from the second profile snapshot: "
                                 "is it down? check `gluster volume status`")
    for brick, fops_after in after.bricks.items():
        fops_before = before.bricks.get(brick, {})
        for fop in set(fops_before) | set(fops_after):
            diff = fops_after.get(fop, 0) - fops_before.get(fop, 0)
            if diff < 0:
                raise ComponentError(
                    f"{fop} calls on brick {brick} went down between the snapshots (the brick "
                    "restarted): take both snapshots while the volume stays up"
                )
            if diff:
                out[fop] = out.get(fop, 0) + diff
    return dict(sorted(out.items()))


def round_trips(calls: Mapping[str, int], *, waited_only: bool = False) -> int:
    """Network round trips in a `delta`: every FOP but FORGET (see the module docstring);
    with `waited_only`, RELEASE and RELEASEDIR are left out as well."""
    skip = NOT_RPC | NOT_WAITED if waited_only else NOT_RPC
    return sum(n for fop, n in calls.items() if fop not in skip)


# ---------------------------------------------------------------- the gluster CLI


def start(env: Env, volume: str) -> None:
    """Switch profiling on for `volume`; already on is fine."""
    res = _profile(env, volume, "start")
    if res.returncode != 0 and "is already started" not in _output(res):
        _raise_for_message(_output(res), volume)
        raise ComponentError(f"starting the profile of {volume} failed: "
                             f"{res.first_error_line()}")


def stop(env: Env, volume: str) -> None:
    """Switch profiling off for `volume`; already off is fine."""
    res = _profile(env, volume, "stop")
    already_off = re.search(r"Profile on Volume \S+ is not started", _output(res))
    if res.returncode != 0 and not already_off:
        _raise_for_message(_output(res), volume)
        raise ComponentError(f"stopping the profile of {volume} failed: "
                             f"{res.first_error_line()}")


def info(env: Env, volume: str) -> ProfileSnapshot:
    """The per-brick cumulative FOP counts of `volume` now."""
    res = _profile(env, volume, "info", "cumulative")
    out = _output(res)
    if res.returncode != 0:
        _raise_for_message(out, volume)
        raise ComponentError(f"reading the profile of {volume} failed: "
                             f"{res.first_error_line()}")
    if not out.strip():
        raise ComponentError(f"`gluster volume profile {volume} info cumulative` printed "
                             "nothing: check the bricks with `gluster volume status "
                             f"{volume}`")
    return parse_info(res.stdout)


def _profile(env: Env, volume: str, *args: str, timeout: float = 60) -> RunResult:
    """Run `gluster volume profile VOLUME ARGS`, retrying while the cluster lock is held."""
    argv = ["gluster", "--mode=script", "volume", "profile", volume, *args]
    deadline = env.clock() + timeout
    while True:
        res = env.run(argv, check=False, timeout=timeout,
                      what=f"gluster volume profile {volume} {' '.join(args)}")
        if res.returncode == 0 or not any(b in _output(res) for b in _BUSY):
            return res
        if env.clock() >= deadline:
            raise ComponentError(f"gluster volume profile {volume} {' '.join(args)}: the "
                                 "cluster lock stayed taken: retry when other gluster "
                                 "commands have finished")
        env.sleep(0.5)


def _output(res: RunResult) -> str:
    return res.stdout + res.stderr


def _raise_for_message(text: str, volume: str) -> None:
    """Turn gluster's known refusals into one-line errors that name the fix."""
    vol = volume or "VOLUME"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if "Connection failed" in text and "gluster daemon" in text:
        raise ComponentError("glusterd is not answering: start it (`statstorm lab up "
                             "--storage glusterfs` starts it) and retry")
    m = re.match(r"Volume (\S+) does not exist", first)
    if m:
        raise UsageError(f"GlusterFS volume {m.group(1)} does not exist: see "
                         "`gluster volume list`")
    m = re.match(r"Volume (\S+) is not started", first)
    if m:
        raise ComponentError(f"GlusterFS volume {m.group(1)} is not started: run "
                             f"`gluster volume start {m.group(1)}`")
    m = re.match(r"Profile on Volume (\S+) is not started", first)
    if m:
        raise ComponentError(f"profiling is off on GlusterFS volume {m.group(1)}: run "
                             f"`gluster volume profile {m.group(1)} start`")
    if first and not first.startswith("Brick:") and "Stats:" not in text:
        raise UsageError(f"not GlusterFS profile output: {first[:60]!r}: take it with "
                         f"`gluster volume profile {vol} info cumulative`")

"""whatif's network round trips per request: the storage operations per call that reaches the
storage, calibrated on what the trace measured (GlusterFS profile or NFS mountstats), and
each side's figures from its reaching calls (model.network_forecast). Pure.

On a FUSE mount a walk through a symlink reads it from the client whatever the timeouts (one
READLINK each: model.network_forecast). When the what-if input says how many symlinks each
kind of call reads (`symlink_walks` beside the measured figures), those READLINKs are priced
apart: each side's calls of a kind read as many as the trace's did, one READLINK each (none
when the trace measured the storage's operations and no READLINK among them: a client that
caches symlinks), and the other path calls are calibrated on the measured operations
without READLINK. The READLINKs are not scaled to the measured count: the law is exact,
and a measured window holding more requests than the trace counted (load that went on
while the tracer attached) would scale them by its error."""

from __future__ import annotations

from dataclasses import dataclass, field

from statstorm.model.network_forecast import OPEN, MountCaches

MountDescription = dict[str, float | str | bool]  # MountCaches.describe()

# The storage operations an open brings (its handle, data, close), in GlusterFS's FOP names
# and NFS's operation names; every other operation is a path call's (LOOKUP, STAT, ACCESS…).
OPEN_OPS = frozenset(("OPEN", "FLUSH", "RELEASE", "READ", "READV", "FSTAT", "CLOSE",
                      "OPEN_NOATTR", "OPEN_DOWNGRADE", "LOCK", "LOCKU", "INODELK", "FINODELK",
                      "ENTRYLK", "FENTRYLK", "FGETXATTR", "FXATTROP", "IPC"))


@dataclass(frozen=True)
class Factors:
    """Storage operations per call that reaches it: for opens and for the other path calls,
    from the round trips the trace measured over the current side's reaching calls; 1 each
    when the trace measured none ("reaching calls": one round trip per call)."""

    open_ops: float = 1.0
    path_ops: float = 1.0
    measured_per_request: float | None = None
    basis: str = "reaching calls (the trace measured no round trips)"
    # GlusterFS: the share of reaching opens the brick saw as OPEN. The client's quick-read
    # answers the others from a file's content that a recent LOOKUP brought; with fewer
    # lookups reaching (longer timeouts) that share goes to 1 (on the MediaWiki lab: 81 %
    # before 600 s timeouts, every open after).
    open_share: float = 1.0
    paths_now: float = 0.0  # the current side's reaching path calls per request
    # symlinks read per call of each (mount, call index, failed) (FUSE: a READLINK each),
    # and the READLINKs per symlink read (0: the trace measured operations, none READLINK)
    walks: dict[tuple[int, int, bool], float] = field(default_factory=dict)
    readlink_ops: float = 1.0

    def readlinks(self, by_mount: dict[tuple[int, int, bool], int], requests: int) -> float:
        """The symlinks a side's calls read per request (READLINKs before `readlink_ops`)."""
        return sum(by_mount.get(k, 0) * w for k, w in self.walks.items()) / max(requests, 1)

    def describe(self) -> dict[str, float | str | None]:
        return {"basis": self.basis, "measured_per_request": self.measured_per_request,
                "ops_per_reaching_open": round(self.open_ops, 3),
                "ops_per_reaching_path_call": round(self.path_ops, 3),
                "opens_at_the_storage": round(self.open_share, 3),
                **({"readlinks_per_symlink_walk": round(self.readlink_ops, 3)}
                   if self.walks else {})}

    def open_round_trips(self, opens: float, paths: float) -> float:
        """Round trips of `opens` reaching opens on a side whose reaching path calls are
        `paths`: the opens answered without an OPEN shrink with the lookups that reach."""
        if self.open_share >= 1.0 or not self.open_share:
            return opens * self.open_ops
        fed = min(1.0, paths / self.paths_now) if self.paths_now > 0 else 1.0
        share = 1.0 - (1.0 - self.open_share) * fed
        return opens * self.open_ops / self.open_share * share


def reaching_per_request(by_mount: dict[tuple[int, int, bool], int], requests: int,
                         reach: dict[tuple[int, int, bool], float]) -> tuple[float, float, float]:
    """(network calls, reaching opens, reaching other path calls) per request."""
    n = max(requests, 1)
    calls = sum(by_mount.get(k, 0) for k in reach)
    opens = sum(by_mount.get(k, 0) * f for k, f in reach.items() if k[1] == OPEN)
    paths = sum(by_mount.get(k, 0) * f for k, f in reach.items() if k[1] != OPEN)
    return calls / n, opens / n, paths / n


@dataclass(frozen=True)
class MeasuredRoundTrips:
    """What a trace measured of its storage's round trips: its trailer's "network", as
    adapters/storage/round_trips.py's window writes it (a GlusterFS volume's FOPs by
    "by_fop", NFS's operations by "by_op")."""

    per_request: float
    round_trips: float  # in all; 0 when not given
    by_op: dict[str, int]  # round trips per storage operation
    brick_opens: int = 0  # GlusterFS: the OPEN FOPs the bricks served

    @classmethod
    def from_json(cls, data: object) -> MeasuredRoundTrips | None:
        """None when the trace measured no round trips per request."""
        match data:
            case {"per_request": int() | float() as per_req} if isinstance(data, dict):
                pass
            case _:
                return None
        match data:  # GlusterFS's FOPs, else NFS's operations
            case {"by_fop": ops} if ops:
                pass
            case {"by_op": ops}:
                pass
            case _:
                ops = None
        match data:
            case {"round_trips": int() | float() as total}:
                pass
            case _:
                total = 0
        match data:
            case {"by_fop": {"OPEN": opens}}:
                brick_opens = int(opens)
            case _:
                brick_opens = 0
        return cls(per_req, total, dict(ops) if isinstance(ops, dict) else {}, brick_opens)


def round_trip_factors(measured: object,
                       by_mount: dict[tuple[int, int, bool], int], requests: int,
                       reach: dict[tuple[int, int, bool], float]) -> Factors:
    """The storage operations per reaching call, calibrated on what the trace measured
    (its trailer's "network": round trips per request and their breakdown by operation)."""
    walks = symlink_walks(measured)
    m = MeasuredRoundTrips.from_json(measured)
    if m is None:
        return Factors(walks=walks)
    per_req, ops, total = m.per_request, m.by_op, m.round_trips
    _, opens, paths = reaching_per_request(by_mount, requests, reach)
    share_open = (sum(n for op, n in ops.items() if op.upper() in OPEN_OPS) / total
                  if total and ops else 0.0)
    walked = Factors(walks=walks).readlinks(by_mount, requests)
    share_link = (sum(n for op, n in ops.items() if op.upper() == "READLINK") / total
                  if total and ops and walked else 0.0)
    link_rt = per_req * share_link
    open_rt, path_rt = per_req * share_open, per_req * (1 - share_open - share_link)
    all_f = (per_req - link_rt) / (opens + paths) if opens + paths else 1.0
    brick_opens = per_req * m.brick_opens / total if total else 0.0
    open_share = min(1.0, brick_opens / opens) if opens and brick_opens and open_rt else 1.0
    return Factors(open_rt / opens if opens and open_rt else all_f,
                   path_rt / paths if paths and path_rt else all_f, float(per_req),
                   "the round trips the trace measured, per call that reaches the storage "
                   "(opens and other path calls apart"
                   + (", and a READLINK per walk through a symlink on a FUSE mount)"
                      if walked else ")"), open_share, paths, walks,
                   0.0 if walked and total and ops and not share_link else 1.0)


def symlink_walks(data: object) -> dict[tuple[int, int, bool], float]:
    """The symlinks read per call of each kind, as the what-if input keeps them beside the
    measured figures (`symlink_walks`: [mount, call index, failed, per call] rows)."""
    out: dict[tuple[int, int, bool], float] = {}
    rows = data.get("symlink_walks") if isinstance(data, dict) else None
    for row in rows if isinstance(rows, (list, tuple)) else ():
        match row:
            case [int() as m, int() as ci, bool() | int() as failed, int() | float() as w]:
                out[(m, ci, bool(failed))] = float(w)
    return out


def network_side(by_mount: dict[tuple[int, int, bool], int], requests: int,
                 reach: dict[tuple[int, int, bool], float], factors: Factors,
                 caches: dict[int, MountCaches],
                 mounts: list[tuple[str, str]]) -> dict[str, float | dict[str, MountDescription]]:
    """One side's network figures per request."""
    calls, opens, paths = reaching_per_request(by_mount, requests, reach)
    links = factors.readlinks(by_mount, requests)
    return {"calls_per_request": round(calls, 2),
            "reaching_per_request": round(opens + paths + links, 2),
            "reaching_opens_per_request": round(opens, 2),
            "round_trips_per_request": round(factors.open_round_trips(opens, paths)
                                             + paths * factors.path_ops
                                             + links * factors.readlink_ops, 2),
            **({"symlink_walks_per_request": round(links, 2)} if factors.walks else {}),
            "mounts": {mounts[m][0] if 0 <= m < len(mounts) else str(m): c.describe()
                       for m, c in sorted(caches.items())}}


__all__ = ["Factors", "MeasuredRoundTrips", "round_trip_factors", "network_side",
           "symlink_walks"]

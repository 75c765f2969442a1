"""The compiled tracer's spool attributed while the trace records (`statstorm trace`: its file
written soon after its end) gives the trace that attributing it after the stop gives, piece
by piece as the loader flushes its buffer, cut records and OPcache's interned paths across
the pieces included: no event lost at the end, the last request's whole in the file."""

from __future__ import annotations

import struct
from pathlib import Path

from statstorm.adapters.tracing import libbpf_trace as lt
from statstorm.adapters.tracing.libbpf_run import SpoolAttribution
from statstorm.adapters.tracing.trace_backends import RecordOptions
from statstorm.adapters.tracing.trace_targets import Target
from statstorm.env import Env
from statstorm.results.trace import Trace, new_header, read_trace

PID = 4242


def small(tag: str, ts: int, kind: int = 0) -> bytes:
    return struct.pack("<HBBIQQ", 24, ord(tag), kind, PID, ts, 0)


def text(tag: str, ts: int, s: bytes) -> bytes:
    return lt.BODY.pack(lt.BODY.size + len(s), ord(tag), 0, PID, ts, 0, 0, 0, 0) + s


def syscall(ts: int, call: str, path: bytes, ret: int = 0) -> bytes:
    return lt.BODY.pack(lt.BODY.size + len(path), ord("S"), lt.CALLS.index(call), PID, ts,
                        1000, 0, -100, ret) + path


def entry(tag: str, ts: int, key: tuple[int, int, int], path: bytes = b"") -> bytes:
    return lt.BODY.pack(lt.BODY.size + len(path), ord(tag), lt.FUNCS.index("sopen"), PID,
                        ts, 1, *key) + path


def request(n: int, ts: int) -> bytes:
    """One whole request of worker PID: accept, startup, its script's walk, an include's
    table entry (interned: in full the first time, by its numbers after), shutdown."""
    key = (0x7F0000001000, 77, 10)
    first = entry("T", ts + 6, key, b"/srv/lib.php") if n == 0 else entry("I", ts + 6, key)
    return (small("A", ts) + text("U", ts + 1, b"/srv/index.php") + small("X", ts + 2)
            + syscall(ts + 3, "newfstatat", b"/srv/index.php")
            + syscall(ts + 4, "openat", b"/srv/index.php", 5)
            + syscall(ts + 5, "newfstatat", f"/srv/missing-{n}.php".encode(), -2)
            + first + small("Q", ts + 9))


def spool_attribution(out: Path, live: bool) -> SpoolAttribution:
    target = Target(mode="pids", description="test", pids=[PID])
    head = new_header("ebpf", created="2026-12-07T00:00:00+00:00", host="test",
                      targets={"mode": "pids", "description": "test", "pids": [PID]},
                      settings={}, mounts=[("/", "ext4")], detail="events")
    return SpoolAttribution(RecordOptions(live=live), target, head, out, 0)


def attributed(tmp: Path, name: str, pieces: list[bytes], live: bool, requests: int) -> Trace:
    spool, out = tmp / f"{name}.bin", tmp / f"{name}.sst.gz"
    spooled = spool_attribution(out, live)
    spool.write_bytes(b"")
    written = b""
    for piece in pieces:
        with spool.open("ab") as fh:
            fh.write(piece)
        written += piece
        if live:  # every whole record written so far, attributed now (no share limit):
            # in as many calls as it takes, each at most CALL_S long (a busy machine's calls
            # stop sooner), each going on where the last one stopped
            while True:
                before = spooled.offset
                spooled.feed(spool, budget=1e9)
                if spooled.offset == before:
                    break
            assert spooled.offset == lt.complete(written)
    spooled.feed(spool)
    assert spooled.offset == len(written)
    summary = spooled.finish(Env(), None, [], "duration", 0.0, lt.Status(), None)
    assert summary.requests == requests
    return read_trace(out)


def whole_requests(trace: Trace, n: int) -> None:
    assert len(trace.requests) == n and all(r.end_ns >= 0 for r in trace.requests.values())
    last = max(trace.requests)  # the last request whole: its three calls and its include
    assert [s.call for s in trace.syscalls if s.req == last][-3:] == ["stat", "open", "stat"]
    assert [o.args.get("name") for o in trace.operations.values() if o.req == last] == \
        ["/srv/lib.php"]


def test_live_attribution_gives_the_trace_attributing_after_the_stop_gives(tmp_path: Path
                                                                           ) -> None:
    data = b"".join(request(n, 1_000_000 + n * 100) for n in range(40))
    # the loader's buffer flushed at any byte: records cut in two, the interned entry and
    # the records naming it in different pieces
    cuts = [0, 7, 100, 101, len(data) // 3, len(data) // 2 + 3, len(data) - 5, len(data)]
    pieces = [data[a:b] for a, b in zip(cuts, cuts[1:])]
    after_stop = attributed(tmp_path, "after", [data], False, 40)
    live = attributed(tmp_path, "live", pieces, True, 40)
    assert (live.syscalls, live.requests, live.operations) == \
        (after_stop.syscalls, after_stop.requests, after_stop.operations)
    whole_requests(live, 40)


def test_a_flush_larger_than_a_piece_is_attributed_a_piece_at_a_time(tmp_path: Path) -> None:
    """One of the loader's 1 MiB flushes holds many pieces (PIECE bytes each, cut at whole
    records): all of them attributed, none twice."""
    import statstorm.adapters.tracing.libbpf_run as lr
    data = b"".join(request(n, 1_000_000 + n * 100) for n in range(1000))
    assert len(data) > 3 * lr.PIECE
    half = len(data) // 2 + 11
    live = attributed(tmp_path, "live", [data[:half], data[half:]], True, 1000)
    after_stop = attributed(tmp_path, "after", [data], False, 1000)
    assert (live.syscalls, live.requests, live.operations) == \
        (after_stop.syscalls, after_stop.requests, after_stop.operations)
    whole_requests(live, 1000)


def test_no_share_of_a_core_while_recording_leaves_it_all_to_the_stop(tmp_path: Path) -> None:
    """A budget spent (a saturated pool's records outrun it): nothing attributed while the
    trace records, everything after the stop, the same trace."""
    data = b"".join(request(n, 1_000_000 + n * 100) for n in range(40))
    spool = tmp_path / "spool.bin"
    spool.write_bytes(data)
    spooled = spool_attribution(tmp_path / "t.sst.gz", True)
    spooled.feed(spool, budget=0.0)
    assert spooled.offset == 0
    spooled.feed(spool)
    assert spooled.offset == len(data)
    spooled.finish(Env(), None, [], "duration", 0.0, lt.Status(), None)
    assert read_trace(tmp_path / "t.sst.gz").requests == \
        attributed(tmp_path, "after", [data], False, 40).requests

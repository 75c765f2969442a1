"""The trace file: a streamable, versioned record of PHP's file-metadata syscalls.

Format `statstorm-trace` version 1 (documented in docs/trace.md): JSON Lines, optionally gzip
compressed (detected by its magic bytes, chosen by a `.gz` suffix when writing).

- Line 1 is a header object: {"format": "statstorm-trace", "version": 1, "source", "created",
  "host", "targets", "settings", "mounts": [[mount_point, fstype], ...]}.
- Every other line is a JSON array whose first element names the record:
  - ["p", id, path]                     a path, interned once before its first use
  - ["r", id, pid, start_ns, end_ns, script, uri]  a request, written once it has ended
    (after its syscalls); script/uri may be ""
  - ["o", id, req, pid, start_ns, end_ns, kind, parent, args]  a logical PHP operation;
    path-valued args (INTERNED_ARGS, and the list "candidates") hold path ids
  - ["s", ts_ns, pid, req, op, call, syscall, path_id, ret, lat_ns, mount, kind]  one syscall;
    `kind` is the PHP operation it belongs to (one of OP_KINDS)
  - ["k", req, pid, {call: [calls, failed, latency_ns]}]  a request's counts, counted in the
    kernel (`statstorm trace --counts`: no "s" records then); req -1: calls outside requests
  - ["c", syscall, calls, errors, seconds]  aggregated counts (an imported `strace -c` table)
  - ["e", trailer]                      the end: events, dropped, stop reason, duration_ns
  - ["z", lines, sha256]                the seal, the last line: the lines before it and their
                                        digest (`seal`); the header then says "seal": "sha256"
- Times are nanoseconds since the trace started. `ret` is the syscall's return value;
  negative values are -errno. `req`, `op`, `mount` and `path_id` are -1 when unknown.

Paths are bytes on Linux; they are stored as str decoded with `surrogateescape`, which JSON
writes as `\\udcXX` escapes, so non-UTF-8 names survive a round trip.

The package's modules: `vocabulary` (call types, operation kinds, the records as dataclasses),
`writer` (TraceWriter: all or nothing, sealed), `jsonl` (reading the JSON-lines file:
read_trace, iter_batches), `seal` (how a trace proves itself whole, and the errors when it is
not), `sidecar` (the record sidecar `TRACE.records`, a quicker form of the same records) and
`raw` (the records as the lists the file holds, for the what-if model). The names most code
needs are here too.
"""

from statstorm.results.trace.jsonl import (TraceWriter, iter_batches, iter_records, read_trace,
                                           write_trace)
from statstorm.results.trace.vocabulary import (AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW, CALLS,
                                                EXTRA_CALLS, FLAGGED_STAT, FORMAT,
                                                INTERNED_ARGS, OP_KINDS, SUMMARY_KEYS,
                                                SYSCALL_CALL, VERSION, CountRow, Operation,
                                                RecordSink, Request, RequestCounts, Syscall,
                                                Trace, call_type, decode_path, new_header)

__all__ = ["AT_EMPTY_PATH", "AT_SYMLINK_NOFOLLOW", "CALLS", "EXTRA_CALLS", "FLAGGED_STAT",
           "FORMAT", "INTERNED_ARGS", "OP_KINDS", "SUMMARY_KEYS", "SYSCALL_CALL", "VERSION",
           "CountRow", "Operation", "RecordSink", "Request", "RequestCounts", "Syscall", "Trace",
           "TraceWriter", "call_type", "decode_path", "iter_batches", "iter_records", "new_header",
           "read_trace", "write_trace"]

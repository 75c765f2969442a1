"""Tracer backends and what they attach to: the compiled eBPF tracer, bpftrace and strace
(sessions, runs, log parsers), the trace targets, the counting stream and the background
tracer thread."""

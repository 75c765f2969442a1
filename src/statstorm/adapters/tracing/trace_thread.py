"""A tracer on a pool in a background thread for one measured run: the load starts once it
has attached, and it stops when the load ends (sweep's --trace, apply's --verify) or when the
tracer reaches its own bound (the demo's traced page views: `ended`)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Protocol

from statstorm.env import Env
from statstorm.errors import ComponentError
from statstorm.model.sweep_levels import Traced


class Tracer(Protocol):
    """Traces `pool` (or `lab`'s pool) into `output` from when it sets `ready` until `stop`
    is set (or `duration_s` passes). The CLI passes `statstorm trace`'s counting tracer."""

    def __call__(self, env: Env, *, lab: str | None, pool: str | None, duration_s: float,
                 output: Path, ready: threading.Event, stop: threading.Event) -> Traced: ...


class TraceThread:
    """A tracer on the plan's pool in a background thread, for one measured run."""

    ATTACH_TIMEOUT_S = 150.0
    DETACH_TIMEOUT_S = 120.0

    def __init__(self, env: Env, tracer: Tracer, *, lab: str | None, pool: str | None,
                 duration_s: float, output: Path, name: str = "statstorm-sweep-trace") -> None:
        self.env, self.tracer = env, tracer
        self.lab, self.pool, self.duration_s, self.output = lab, pool, duration_s, output
        self.ready = threading.Event()
        self.stop_event = threading.Event()
        self.finished = threading.Event()  # set by the thread: a join cut short by Ctrl-C
        # may leave the thread marked stopped while it still runs (CPython 3.11)
        self.result: Traced | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._go, name=name, daemon=True)

    def _go(self) -> None:
        try:
            self.result = self.tracer(self.env, lab=self.lab, pool=self.pool,
                                      duration_s=self.duration_s, output=self.output,
                                      ready=self.ready, stop=self.stop_event)
        except BaseException as exc:  # handed to the main thread
            self.error = exc
        finally:
            self.ready.set()
            self.finished.set()

    def start(self) -> None:
        """Start tracing; return once the tracer is attached (or raise why it could not)."""
        self.thread.start()
        try:
            attached = self.ready.wait(self.ATTACH_TIMEOUT_S)
        except BaseException:  # Ctrl-C, SIGTERM: the tracer detaches before we go
            self.abandon()
            raise
        if not attached:
            self.abandon()
            raise ComponentError(f"the tracer did not attach within {self.ATTACH_TIMEOUT_S:.0f} s")
        if self.error is not None:
            self.thread.join()
            raise self.error

    def ended(self, timeout: float = 0.0) -> bool:
        """Whether the tracer has ended by itself (its bound, or an error), waiting up to
        `timeout` seconds for it; `finish` then returns its trace."""
        return self.finished.wait(timeout)

    def finish(self) -> Traced:
        """Stop tracing (the run is over) and return the trace."""
        self.stop_event.set()
        try:
            self.finished.wait(self.DETACH_TIMEOUT_S)
        except BaseException:  # interrupted while it detaches: let it finish, then go
            self.abandon()
            raise
        if not self.finished.is_set():
            raise ComponentError(f"the tracer did not stop within {self.DETACH_TIMEOUT_S:.0f} s")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result

    def abandon(self) -> None:
        """Stop tracing after a failed or interrupted run; never raises."""
        self.stop_event.set()
        self.finished.wait(self.DETACH_TIMEOUT_S)

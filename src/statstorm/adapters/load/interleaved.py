"""Two sides under the same closed-model load, rounds interleaved (reference, network,
reference, network, …), so their ratio is taken under the same machine conditions: the demo's
two labs and tune's shadow against the user's pool. Each network round also counts the round
trips its storage served (adapters/storage/round_trips.py), when it can be read."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from statstorm.adapters.load.loadgen import RunSpec, load_lock
from statstorm.adapters.load.wrk import Wrk
from statstorm.adapters.storage.round_trips import Window
from statstorm.env import Env
from statstorm.results.demo import Phase, Round, Side


@dataclass(frozen=True)
class Load:
    """How each side is loaded: `rounds` runs of `duration_s` at `concurrency` users per URL,
    after a warm-up of `warmup_s` per URL."""

    rounds: int = 3
    duration_s: float = 8.0
    warmup_s: float = 3.0
    concurrency: int = 4


@dataclass(frozen=True)
class Target:
    """One side: its role (`local`: the reference, `network`), the URLs loaded in turn, and
    the round-trip counter of its storage (None: not counted)."""

    role: str
    urls: tuple[str, ...]
    window: Callable[[], Window | None] = lambda: None


def measure(env: Env, local: Target, network: Target, load: Load, label: str,
            say: Callable[[str], None]) -> Phase:
    """Both sides under `load`, rounds interleaved; one round per URL, round and side."""
    rounds: dict[str, list[Round]] = {"local": [], "network": []}
    wrk = Wrk()
    sides = (local, network)
    with tempfile.TemporaryDirectory(prefix="statstorm-load-") as tmp:
        work = Path(tmp)
        for side in sides:
            for url in side.urls:
                with load_lock(env):
                    wrk.run(env, RunSpec(url, load.warmup_s, 10.0, concurrency=load.concurrency,
                                         max_requests=100_000), work)
        for i in range(load.rounds):
            for n, _ in enumerate(local.urls):
                for side in sides:
                    url = side.urls[n]
                    say(f"{label}: round {i + 1}/{load.rounds}, {side.role} "
                        f"{'lab' if len(side.urls) == 1 else url}, {load.duration_s:g} s at "
                        f"{load.concurrency} users…")
                    rounds[side.role].append(_round(env, wrk, side, url, load, work, label, say))
    return Phase(Side(tuple(rounds["local"])), Side(tuple(rounds["network"])))


def _round(env: Env, wrk: Wrk, side: Target, url: str, load: Load, work: Path, label: str,
           say: Callable[[str], None]) -> Round:
    window = side.window()
    if window is not None:
        window.open()
    with load_lock(env):
        run = wrk.run(env, RunSpec(url, load.duration_s, 10.0, concurrency=load.concurrency,
                                   max_requests=int(load.duration_s * 50_000)), work)
    rt = None
    if window is not None:
        window.close(run.requests)
        rt = window.round_trips
        if window.note:
            say(f"{label}: {window.note}")
    return Round(round(run.rps, 2), round(run.p50, 2), round(run.p99, 2), run.errors.total,
                 run.requests, rt)

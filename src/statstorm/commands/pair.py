"""The two sides the demo and tune compare: the reference on local disk and the target on
network storage, each a lab or a running pool.

- the demo's pair: two labs, `NAME-local` (the reference) and `NAME-net` (the target);
- tune's pair: the shadow lab `tune-POOL` (adapters/labs/shadow.py, the reference) and the
  user's pool, named by `--pool`, reached through its URLs (the target).

Each side knows its URLs, how `trace`, `check` and `apply` name it (`lab=` or `pool=`), the
round-trip counter of its storage, and where its code lives (so the app's changes made on the
target can be made on the reference's own copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from statstorm.adapters.load import interleaved
from statstorm.adapters.storage import round_trips
from statstorm.env import Env
from statstorm.results.lab import LabState
from statstorm.results.page import Page

Window = Callable[[], "round_trips.Window | None"]


def _none() -> round_trips.Window | None:
    return None


@dataclass(frozen=True)
class Member:
    """One side of the pair: a lab (`lab` set) or a running pool (`pool` set)."""

    role: str  # "local" (the reference) or "network" (the target)
    urls: tuple[str, ...]
    lab: str | None = None
    pool: str | None = None
    code: str = ""  # the directory holding its code (for carrying the app's changes over)
    window: Window = _none  # its storage's round-trip counter (None: not counted)

    @property
    def label(self) -> str:
        """How the progress lines name it: `the glusterfs lab`, `pool www`."""
        return f"lab {self.lab}" if self.lab else f"pool {self.pool}"

    @property
    def args(self) -> str:
        """How the verbs' options name it: `--lab NAME` or `--pool NAME`."""
        return f"--lab {self.lab}" if self.lab else f"--pool {self.pool}"

    def names(self) -> dict[str, str | None]:
        """How trace and apply name it: `lab=` or `pool=`."""
        return {"lab": self.lab, "pool": None if self.lab else self.pool}

    def target(self, pages: tuple[Page, ...] = ()) -> interleaved.Target:
        """The side as the interleaved measurement loads it (each URL checked to answer its
        page of `pages`)."""
        return interleaved.Target(self.role, self.urls, self.window, pages, self.label)


@dataclass(frozen=True)
class Pair:
    """The reference on local disk and the target on network storage."""

    reference: Member
    target: Member


def lab_member(env: Env, state: LabState, role: str, urls: tuple[str, ...] = (),
               code: str = "") -> Member:
    """A lab as one side: its entry page (or `urls`); on network storage, its round trips from
    its GlusterFS volume's profile or from the counter of the storage under its mount."""
    window: Window = _none
    if role == "network" and state.volume:
        volume = state.volume
        window = lambda: round_trips.gluster(env, volume)  # noqa: E731
    elif role == "network":
        mount = state.mount_point
        window = lambda: round_trips.window_for(env, mount)  # noqa: E731
    return Member(role, urls or (state.url + state.entry_path,), lab=state.name,
                  code=code or state.code_path or state.docroot, window=window)


def pool_member(pool: str, urls: tuple[str, ...], docroot: str, window: Window) -> Member:
    """A running pool as the target: its URLs, its docroot, the counter of its storage."""
    return Member("network", urls, pool=pool, code=docroot, window=window)


def carried_path(where: str, source: Member, dest: Member) -> str | None:
    """`where`, a path under `source`'s code, as the same path under `dest`'s (None: not
    under it)."""
    root = source.code.rstrip("/")
    if not root or not dest.code or not (where == root or where.startswith(root + "/")):
        return None
    return dest.code.rstrip("/") + where[len(root):]

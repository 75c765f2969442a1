"""`statstorm lab`: stand up, inspect and tear down a real PHP stack on this machine.

The work is `adapters.lab_build` (matrix and demo make labs too); the lab's state is read
through `adapters.labs`.
"""

from __future__ import annotations

from pathlib import Path

from statstorm.adapters.labs import state as labs
from statstorm.adapters.labs.lab_build import (APPS, SERVERS, STORAGES, LabOptions, down, up,
                                          validate)
from statstorm.adapters.labs.lab_servers import check_pages
from statstorm.apps import synthetic
from statstorm.env import Env
from statstorm.results.lab import LabState


def status(env: Env, name: str) -> LabState:
    """The lab's state with its live workers (`statstorm lab status`)."""
    return labs.status(env, name)


def list_labs(env: Env) -> list[LabState]:
    """Every lab of the state root, with its live workers (`statstorm lab list`)."""
    return labs.list_labs(env)


def gen_app(env: Env, directory: Path, spec: synthetic.AppSpec, *,
            force: bool = False) -> tuple[synthetic.GeneratedApp, str]:
    """The synthetic app generated into `directory` (`statstorm lab gen-app`) and its
    manifest (JSON text)."""
    app = synthetic.generate(env, directory, spec, force=force)
    return app, (app.root / synthetic.MANIFEST).read_text().strip()


__all__ = ["APPS", "SERVERS", "STORAGES", "LabOptions", "LabState", "check_pages", "down",
           "gen_app", "list_labs", "status", "up", "validate"]

"""apply's change of a pool as one transaction: the storage steps, the files, their tests, the
graceful reload and the health check (`install`); or everything put back from the backup set
(`roll_back`), which runs whole even when Ctrl-C or SIGTERM arrives meanwhile, so the files on
disk are either all the old ones or all the new ones.

Each step passes a fault point (statstorm.faults: `apply/…`, `rollback/…`) where the tests
interrupt it."""

from __future__ import annotations

from pathlib import Path

from statstorm import faults
from statstorm.adapters.apply import backups, pool_config, storage_steps
from statstorm.adapters.apply.pool_config import ApplyFailed, Target
from statstorm.env import Env
from statstorm.errors import ComponentError, RollbackFailed
from statstorm.model.applyplan import MOUNT, Change
from statstorm.results.apply import MIRROR, FileEdit, StorageStep
from statstorm.results.common import signals_deferred


def install(env: Env, target: Target, edits: list[FileEdit], changes: list[Change],
            steps: list[StorageStep]) -> list[str]:
    """Change the storage, write, test, reload and check; ApplyFailed on any failure (steps
    and files may be half-way: the caller rolls back). Returns the health check's notes."""
    for st in steps:
        try:
            storage_steps.do(env, st, target.lab)
        except storage_steps.StepFailed as exc:
            raise ApplyFailed(str(exc)) from None
        faults.phase("apply/storage")
    for e in edits:
        try:
            backups.write_file(e.path, e.after, e.path.stat() if e.before is not None else None,
                               new_mode=0o644)
        except OSError as exc:
            raise ApplyFailed(f"cannot write {e.path} ({exc.strerror or exc})") from None
        faults.phase("apply/edit")
    paths = [e.path for e in edits]
    pool_config.test_config(env, target, paths, [st.where for st in steps if st.kind == MOUNT])
    faults.phase("apply/tested")
    lost = pool_config.reload(env, target, paths, fpm=bool(steps))
    faults.phase("apply/reloaded")
    notes = pool_config.health(env, target, changes, lost=lost)
    faults.phase("apply/checked")
    return notes


def record(backup: Path, steps: list[StorageStep], status: str) -> None:
    """The backup set's manifest: the storage steps as done, and its new status."""
    if steps:
        backups.save_steps(backup, steps)
    backups.mark(backup, status)


def roll_back(env: Env, target: Target, backup: Path, reason: str,
              steps: list[StorageStep] | None = None) -> None:
    """Restore the backup set and undo the storage steps, reload, check; mark the set
    rolled back. Ctrl-C and SIGTERM are held until it is done."""
    with signals_deferred():
        env.log(f"rolling back: {reason}")
        paths = backups.restore(backup)
        faults.phase("rollback/restored")
        undone = [st for st in steps or [] if st.done]
        try:
            for st in reversed([st for st in undone if st.kind != MIRROR]):
                storage_steps.undo(env, st, target.lab)
                faults.phase("rollback/undone")
            pool_config.test_config(env, target, paths, apps=False)  # as they were
            lost = pool_config.reload(env, target, paths, fpm=bool(undone))
            faults.phase("rollback/reloaded")
            pool_config.health(env, target, [], lost=lost)
            for st in (st for st in undone if st.kind == MIRROR):  # served no more: removed
                storage_steps.undo(env, st, target.lab)
        except (ApplyFailed, ComponentError) as exc:
            _record_or_say(backup, steps, "rollback-failed", f"{reason}; then {exc}")
            raise RollbackFailed(f"{reason}; the previous files are back but {exc}: see "
                                 f"{backup}/manifest.json") from None
        _record_or_say(backup, steps, "rolled-back", reason)
        faults.phase("rollback/marked")


def _record_or_say(backup: Path, steps: list[StorageStep] | None, status: str,
                   reason: str) -> None:
    try:
        if steps:
            backups.save_steps(backup, steps)
        backups.mark(backup, status, reason)
    except OSError as exc:
        raise ComponentError(f"the previous files are back, but {backup}/manifest.json could "
                             f"not be updated ({exc.strerror or exc}): free space, then run "
                             "`statstorm apply --rollback` again (it puts the same files back)"
                             ) from None

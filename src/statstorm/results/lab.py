"""The state of one lab, as written to `<state dir>/lab.json` by `statstorm lab up`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA = "statstorm.lab/1"


@dataclass
class LabState:
    """Everything `lab up` started, recorded as it starts it, so `lab down` can undo it.

    Fields are filled step by step; a field still empty means that step never ran.
    """

    name: str
    app: str
    storage: str
    port: int
    workers: int
    state_dir: str
    php_ini: dict[str, str] = field(default_factory=dict)  # the overrides given to the master
    effective_ini: dict[str, str] = field(default_factory=dict)  # read back with `php-fpm -i`
    mount_options: dict[str, str] = field(default_factory=dict)
    phase: str = "starting"  # starting | up | failed
    url: str = ""
    pool: str = ""
    code_path: str = ""
    docroot: str = ""
    entry_path: str = ""  # the page `lab up` checks, e.g. /index.php?title=Main_Page
    fpm_binary: str = ""
    fpm_master_pid: int = 0
    fpm_socket: str = ""
    nginx_pid: int = 0
    # GlusterFS
    volume: str = ""
    brick: str = ""
    mount_point: str = ""
    fuse_client_pid: int = 0
    started_glusterd: bool = False
    # Live fields (filled by `status`, not stored): worker PIDs change when workers recycle.
    worker_pids: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["schema"] = SCHEMA
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "LabState":
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})
